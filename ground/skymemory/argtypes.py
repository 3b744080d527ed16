"""argparse types shared by every command line (cli, launcher, bench): a bad value is one clear line.

bounded_int / int_range / positive_int / nonnegative_int / positive_float / float_range,
kv_format_list ('fp16,int8' -> ['fp16', 'int8']), output_file / output_dir / input_file (paths
checked when the command line is read, before any transfer starts), and OneLineParser (an
ArgumentParser whose errors are one line on stderr). No other part of skymemory is imported:
any layer may use it.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

KV_FORMATS = ("fp16", "bf16", "fp32", "int8")  # as skymemory.kv.format.codec.KV_FORMATS (not imported: stays light)


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


def float_range(minimum: float, maximum: float, *, open_minimum: bool = False):
    """argparse type: a finite number in [minimum, maximum] ((minimum, maximum] with open_minimum)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        below = value <= minimum if open_minimum else value < minimum
        if not math.isfinite(value) or below or value > maximum:
            bound = f"{'(' if open_minimum else '['}{minimum:g}, {maximum:g}]"
            raise argparse.ArgumentTypeError(f"must be in {bound}, got {text}")
        return value

    return parse


def output_file(text: str) -> Path:
    """argparse type: a file we can create or overwrite (its directory exists and is writable).

    Checked when the command line is read, so a bad path fails before a transfer, not after it.
    """
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file")
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: no directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {text}: permission denied")
    return path


def output_dir(text: str) -> Path:
    """argparse type: a directory that exists, or that can be created (its nearest existing parent is writable)."""
    path = Path(text)
    if path.exists():
        if not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"cannot write into {text}: permission denied")
        return path
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create {text}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot create {text}: {ancestor} is not writable")
    return path


def input_file(text: str) -> Path:
    """argparse type: an existing, readable regular file."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}" if not path.exists() else f"{text} is not a file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text}: permission denied")
    return path


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2): the message and where help is.

    Subparsers made with add_subparsers() are of this class too (argparse uses the parent's class).
    """

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def kv_format_list(text: str) -> list[str]:
    """'fp16,int8' -> ['fp16', 'int8']."""
    formats = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in formats if f not in KV_FORMATS]
    if not formats or unknown:
        raise argparse.ArgumentTypeError(f"KV formats must be a comma-separated subset of {','.join(KV_FORMATS)}")
    return formats
