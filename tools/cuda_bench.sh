#!/usr/bin/env bash
# The CUDA-host figures of BENCHMARKS.md ("CUDA host"), in one go, on a machine with an NVIDIA GPU.
#
#   tools/cuda_bench.sh [OUT_DIR]        (default out/cuda; run from the repository root)
#
# Needs the package installed with its C module (`make venv build`, or `pip install .` with
# cmake-built build/skymem_node) and SKYMEM_NODE pointing at the node binary if it is not in
# build/. Every benchmark prints its table and writes JSON + markdown under OUT_DIR.
set -euo pipefail

out=${1:-out/cuda}
py=${PYTHON:-python3}
mkdir -p "$out"

if ! command -v nvidia-smi >/dev/null || ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
    echo "cuda_bench: no CUDA device visible to torch; these figures need one" >&2
    exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"

step() { echo; echo "== $*"; "$@"; }

# landed bytes -> cache on the device, beside the pinned host->device copy (the DMA floor)
step "$py" -m skymemory bench rebuild --device cuda --prefix-tokens 512,1024,2048,4096 --kv fp16,int8 \
    --out "$out/rebuild"
# TinyLlama: no cache / device-ram / local / sky (fetched, streamed, auto) on three links
step "$py" -m skymemory bench ttft --device cuda --prefix-tokens 512,1024,2048 --profiles none,laser,rf \
    --streaming both --repeats 5 --out "$out/ttft-tinyllama"
# the long-prefix regime: Llama-3-8B shapes, weights made on the GPU
step "$py" -m skymemory bench ttft --device cuda --model embedded-llama3-8b --prefix-tokens 4096,16384 \
    --profiles laser --repeats 3 --gen-repeats 0 --out "$out/ttft-llama3-8b"
# the paper's two weight quantisers
for q in qint8 hqq; do
    step "$py" -m skymemory bench ttft --device cuda --quantize "$q" --prefix-tokens 1024 --profiles laser \
        --repeats 3 --out "$out/ttft-$q"
done
echo
echo "cuda_bench: outputs under $out"
