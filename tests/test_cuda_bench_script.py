"""tools/cuda_bench.sh, what runs without a GPU: its refusals, and the combined markdown it writes (made from
a real benchmark run on this CPU by the same `python -m skymemory.bench.report combine` the script calls)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skymemory.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "cuda_bench.sh"


def test_the_script_parses_and_passes_shellcheck():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    done = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_the_script_refuses_an_unknown_step_and_a_host_without_cuda(tmp_path):
    bad = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "jetson", "moon"], capture_output=True,
                         text=True, cwd=ROOT)
    assert bad.returncode == 2 and "unknown step 'moon'" in bad.stderr
    if shutil.which("nvidia-smi") is None:  # this machine: refused before anything is written
        done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                              env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
        assert done.returncode == 2 and "no CUDA device visible to torch" in done.stderr
        assert not (tmp_path / "out").exists()


def test_combined_markdown_of_a_real_run_and_a_failed_step(tmp_path, capsys):
    from skymemory.bench import report

    args = build_parser().parse_args(["bench", "rebuild", "--device", "cpu", "--model", "embedded-tiny",
                                      "--prefix-tokens", "128", "--kv", "fp16", "--repeats", "2",
                                      "--out", str(tmp_path / "rebuild")])
    assert args.func(args) == 0
    table = (tmp_path / "rebuild" / "rebuild.md").read_text()
    assert table.startswith("Regenerate: `")
    gpu = "NVIDIA H100 80GB HBM3, 81559 MiB, 580.65.06"
    out = tmp_path / "cuda" / "cuda_bench.md"
    assert report.combine_main([
        "--gpu", gpu, "--out", str(out),
        "--step", "KV rebuild", "python3 -m skymemory bench rebuild --device cpu", "0",
        str(tmp_path / "rebuild" / "rebuild.md"),
        "--step", "Jetson-class compute", "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=5 python3 -m skymemory bench ttft",
        "1", str(tmp_path / "jetson" / "ttft.md"),
    ]) == 0
    text = out.read_text()
    rebuild, jetson = text.split("\n## ")[1:]
    assert rebuild.startswith("KV rebuild\n\n`python3 -m skymemory bench rebuild --device cpu`\n\n"
                              f"GPU (nvidia-smi): {gpu}\n\n")
    assert table.split("\n", 2)[2].strip() in rebuild and "Regenerate:" not in text  # the run's table, whole
    assert "`env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=5 python3 -m skymemory bench ttft`" in jetson
    assert jetson.rstrip().endswith("FAILED (exit status 1; no markdown written)")
    with pytest.raises(SystemExit):
        report.combine_main(["--gpu", gpu, "--out", str(out), "--step", "x", "cmd", "zero", ""])
    assert "exit status 'zero' is not an integer" in capsys.readouterr().err
