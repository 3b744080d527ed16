#!/usr/bin/env bash
# The CUDA-host figures of BENCHMARKS.md ("CUDA host"), in one go, on a machine with an NVIDIA GPU.
#
#   tools/cuda_bench.sh [OUT_DIR [STEP...]]   (default out/cuda, where it runs; every step; from any directory)
#
# Steps, in order: rebuild, tinyllama, llama3-8b, hybrid (dense Llama-3-8B against the hybrid Bamba-9B and
# the sliding-window Mistral-7B shapes at 16K and 32K tokens: no cache, laser, auto), qint8, hqq, split (HQQ
# TinyLlama: one forward against prefix-then-suffix, tools/split_forward_check.py), jetson (TinyLlama again
# under CUDA MPS at 5 % of the SMs: a Jetson-class compute budget, not a Jetson: memory bandwidth is not
# capped). Name some to run only those, e.g. `tools/cuda_bench.sh out/cuda jetson llama3-8b` (in the order above either way).
#
# Needs the package installed with its C module (`make venv build`, or `pip install .` with
# cmake-built build/skymem_node) and SKYMEM_NODE pointing at the node binary if it is not in
# build/. OUT_DIR gets few files: cuda_bench.md (every step's tables under a heading with the command
# that ran it and nvidia-smi's line for the GPU) and <step>.json per step (its figures); the plots and
# per-step markdown are made in a temporary folder and removed. A step that fails is marked so in
# cuda_bench.md, the others still run, and the exit status is 1.
set -euo pipefail

out=${1:-out/cuda}
tools=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # this script's folder: its helper runs from any directory
py=${PYTHON:-python3}
all_steps=(rebuild tinyllama llama3-8b hybrid qint8 hqq split jetson)
wanted=("${@:2}")
for s in "${wanted[@]}"; do
    [[ " ${all_steps[*]} " == *" $s "* ]] || { echo "cuda_bench: unknown step '$s'; steps: ${all_steps[*]}" >&2; exit 2; }
done

if ! command -v nvidia-smi >/dev/null || ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
    echo "cuda_bench: no CUDA device visible to torch; these figures need one" >&2
    exit 2
fi
mkdir -p "$out"
gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)
echo "GPU: $gpu"

scratch=$(mktemp -d)
mps_pipe=""  # set while the MPS daemon of the jetson step runs
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    if [[ -n $mps_pipe ]]; then
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_pipe nvidia-cuda-mps-control || true
    fi
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # a killed run still stops the daemon and keeps what the finished steps wrote

combine=()  # --step TITLE COMMAND STATUS MARKDOWN per step so far, for the combined file
failed=0

selected() { [[ ${#wanted[@]} -eq 0 || " ${wanted[*]} " == *" $1 "* ]]; }

# cuda_bench.md again after every step, so that a run stopped half-way keeps the steps it finished
write_combined() {
    "$py" -m skymemory.bench.report combine --gpu "$gpu" --out "$out/cuda_bench.md" "${combine[@]}"
}

# step NAME TITLE COMMAND...: run COMMAND with its outputs in $scratch/NAME, keep its JSON as OUT_DIR/NAME.json
step() {
    local name=$1 title=$2 status=0
    shift 2
    echo
    echo "== $title: $*"
    "$@" --out "$scratch/$name" || status=$?
    [[ $status -eq 0 ]] || failed=1
    cp "$scratch/$name"/*.json "$out/$name.json" 2>/dev/null || true
    local md=("$scratch/$name"/*.md)
    combine+=(--step "$title" "$(printf '%q ' "$@")" "$status" "${md[0]}")
    write_combined
}

# not_run TITLE WHY: a step that could not start, marked failed in the combined file
not_run() {
    echo "cuda_bench: $1: $2" >&2
    failed=1
    combine+=(--step "$1" "($2)" 127 "")
    write_combined
}

if selected rebuild; then
    step rebuild "KV rebuild on the device beside the pinned host->device copy (the DMA floor)" \
        "$py" -m skymemory bench rebuild --device cuda --prefix-tokens 512,1024,2048,4096 --kv fp16,int8
fi
if selected tinyllama; then
    step tinyllama "TinyLlama: no cache, device-ram, local, sky fetched / streamed / auto on three links" \
        "$py" -m skymemory bench ttft --device cuda --prefix-tokens 512,1024,2048 --profiles none,laser,rf \
        --streaming both --repeats 5
fi
if selected llama3-8b; then
    # the long-prefix regime: Llama-3-8B shapes, weights made on the GPU; the -auto rows are its split
    step llama3-8b "Llama-3-8B shapes at 4K and 16K tokens: local, device-ram, sky and auto (split) rows" \
        "$py" -m skymemory bench ttft --device cuda --model embedded-llama3-8b --prefix-tokens 4096,16384 \
        --profiles none,laser --streaming both --repeats 3 --gen-repeats 0
fi
if selected hybrid; then
    # what decides fetch or recompute on a datacenter GPU is Φkv = KV bytes / prefill time (skymemory model
    # info): a hybrid or sliding-window model fetches a fraction of a dense one's bytes for a prefill as long
    for model in embedded-llama3-8b embedded-bamba-9b embedded-mistral-7b; do
        step "hybrid-${model#embedded-}" "$model at 16K and 32K tokens: no cache, laser, auto" \
            "$py" -m skymemory bench ttft --device cuda --model "$model" --prefix-tokens 16384,32768 \
            --profiles laser --repeats 3 --gen-repeats 0
    done
fi
for q in qint8 hqq; do  # the paper's two weight quantisers
    if selected "$q"; then
        step "$q" "TinyLlama with $q weights" \
            "$py" -m skymemory bench ttft --device cuda --quantize "$q" --prefix-tokens 1024 --profiles laser \
            --repeats 3
    fi
done
if selected split; then  # whether HQQ's tokens differ with a cache because of the two-forward arithmetic
    step split "HQQ TinyLlama: one forward against prefix-then-suffix (no SkyMemory)" \
        "$py" "$tools/split_forward_check.py" --device cuda --quantize hqq --prefix-tokens 1024
fi
if selected jetson; then
    # A private MPS daemon (its own pipe and log folders, stopped by the trap whatever happens) caps the
    # SMs this process gets. The calibration is kept per device name, which MPS does not change, so the
    # step gets a fresh SKYMEMORY_CACHE (the embedded models' folder linked in: they need not be rebuilt).
    title="Jetson-class compute: TinyLlama under CUDA MPS at 5 % of the SMs"
    mps_dir=$(mktemp -d -p "$scratch") mps_log=$(mktemp -d -p "$scratch")
    cache=$(mktemp -d -p "$scratch")
    models="${SKYMEMORY_CACHE:-$HOME/.cache/skymemory}/models"
    if [[ -d $models ]]; then ln -s "$(cd "$models" && pwd)" "$cache/models"; fi
    if ! command -v nvidia-cuda-mps-control >/dev/null; then
        not_run "$title" "no nvidia-cuda-mps-control on PATH: this step needs CUDA MPS"
    elif ! CUDA_MPS_PIPE_DIRECTORY=$mps_dir CUDA_MPS_LOG_DIRECTORY=$mps_log nvidia-cuda-mps-control -d; then
        not_run "$title" "the CUDA MPS control daemon did not start"
    else
        mps_pipe=$mps_dir
        step jetson "$title" \
            env CUDA_MPS_PIPE_DIRECTORY="$mps_dir" CUDA_MPS_LOG_DIRECTORY="$mps_log" \
            CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=5 SKYMEMORY_CACHE="$cache" \
            "$py" -m skymemory bench ttft --device cuda --prefix-tokens 512,1024,2048 \
            --profiles none,laser,rf --streaming both --repeats 5
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_dir nvidia-cuda-mps-control || true
        mps_pipe=""
    fi
fi

echo
echo "cuda_bench: $out/cuda_bench.md and $(find "$out" -maxdepth 1 -name '*.json' | wc -l) JSON file(s) in $out"
exit "$failed"
