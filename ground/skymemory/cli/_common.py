"""Helpers shared by the subcommands (not a subcommand: the name starts with _)."""

from __future__ import annotations

import argparse
from pathlib import Path

from skymemory.manifest import Manifest, default_manifest_path


def add_manifest_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manifest", type=Path, default=None,
                        help="launch manifest (default $SKYMEM_MANIFEST or run/manifest.json)")


def load_manifest(args: argparse.Namespace) -> Manifest:
    return Manifest.load(args.manifest or default_manifest_path())


def bounded_int(text: str, minimum: int, maximum: int | None = None) -> int:
    """argparse type helper: a base-10 integer in minimum..maximum, with a clear message otherwise."""
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


def client_bind(manifest: Manifest) -> tuple[str, int]:
    return (manifest.ground_host, 0)


def table(rows: list[tuple]) -> str:
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)
