"""Where the model runs and in which precision.

Default: CUDA with fp16 when a GPU is visible, otherwise CPU with fp32 (fp16
matmuls on CPU are slow and fp32 is what CPUs do well). Both are overridable,
by argument or by the environment (SKYMEMORY_DEVICE, SKYMEMORY_DTYPE).
"""

from __future__ import annotations

import os

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
    result = torch.device(chosen)
    if result.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {chosen!r} requested but CUDA is not available")
    return result


def pick_dtype(device: torch.device, dtype: str | torch.dtype | None = None) -> torch.dtype:
    """The model dtype: the argument, else $SKYMEMORY_DTYPE, else fp16 on CUDA and fp32 on CPU."""
    chosen = dtype if dtype is not None else os.environ.get("SKYMEMORY_DTYPE") or None
    if chosen is not None:
        return parse_dtype(chosen)
    return torch.float16 if device.type == "cuda" else torch.float32
