"""Where the model runs and in which precision, and how to time work there.

Default: CUDA with fp16 when a GPU is visible, otherwise CPU with fp32 (fp16
matmuls on CPU are slow and fp32 is what CPUs do well). Both are overridable,
by argument or by the environment (SKYMEMORY_DEVICE, SKYMEMORY_DTYPE).

`timings(run, repeats, device)` times calls the way every benchmark here does:
synchronised on a GPU (its work is asynchronous), after a warm-up call when
asked (the first call of a shape can cost 10-50x a warm one on CUDA).
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import torch

# Names accepted on the command line and in the environment.
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
}


def parse_dtype(value: str | torch.dtype) -> torch.dtype:
    """'fp16' / 'float16' / torch.float16 -> torch.float16; anything else is a ValueError."""
    if isinstance(value, torch.dtype):
        if value not in DTYPES.values():
            raise ValueError(f"unsupported model dtype {value}")
        return value
    try:
        return DTYPES[value.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {value!r}; choose one of {sorted(set(DTYPES))}") from None


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


def pick_device(device: str | torch.device | None = None) -> torch.device:
    """The device to run on: the argument, else $SKYMEMORY_DEVICE, else cuda if available, else cpu."""
    chosen = device if device is not None else os.environ.get("SKYMEMORY_DEVICE") or None
    if chosen is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        result = torch.device(chosen)
    except RuntimeError:  # torch's message lists twenty device types: name the ones meant here
        raise ValueError(f"unknown device {chosen!r}: want cpu, cuda or cuda:N") from None
    if result.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {chosen!r} requested but CUDA is not available")
    if result.type == "cuda" and result.index is not None and result.index >= torch.cuda.device_count():
        raise ValueError(f"device {chosen!r} requested but this host has {torch.cuda.device_count()} CUDA device(s)")
    return result


def pick_dtype(device: torch.device, dtype: str | torch.dtype | None = None) -> torch.dtype:
    """The model dtype: the argument, else $SKYMEMORY_DTYPE, else fp16 on CUDA and fp32 on CPU."""
    chosen = dtype if dtype is not None else os.environ.get("SKYMEMORY_DTYPE") or None
    if chosen is not None:
        return parse_dtype(chosen)
    return torch.float16 if device.type == "cuda" else torch.float32


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timings(run, repeats: int, device: torch.device, *, warm_up: bool = True) -> list[float]:
    """Seconds of `repeats` calls of `run`, each synchronised on the device, after one untimed call if warm_up."""
    if warm_up:
        run()
    out = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        run()
        synchronize(device)
        out.append(time.perf_counter() - started)
    return out
