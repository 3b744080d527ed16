"""argparse types shared by every command line (cli, launcher, bench): a bad value is one clear line.

bounded_int / int_range / positive_int / nonnegative_int / positive_float, and kv_format_list
('fp16,int8' -> ['fp16', 'int8']). No other part of skymemory is imported: any layer may use it.
"""

from __future__ import annotations

import argparse

KV_FORMATS = ("fp16", "bf16", "fp32", "int8")  # as skymemory.kv.codec.KV_FORMATS (not imported: stays light)


def bounded_int(text: str, minimum: int, maximum: int | None = None) -> int:
    """A base-10 integer in minimum..maximum, with a clear message otherwise."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"in {minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
    return value


def int_range(minimum: int, maximum: int):
    """argparse type: a base-10 integer in minimum..maximum."""
    return lambda text: bounded_int(text, minimum, maximum)


def positive_int(text: str) -> int:
    return bounded_int(text, 1)


def nonnegative_int(text: str) -> int:
    return bounded_int(text, 0)


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {v}")
    return v


def kv_format_list(text: str) -> list[str]:
    """'fp16,int8' -> ['fp16', 'int8']."""
    formats = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in formats if f not in KV_FORMATS]
    if not formats or unknown:
        raise argparse.ArgumentTypeError(f"KV formats must be a comma-separated subset of {','.join(KV_FORMATS)}")
    return formats
