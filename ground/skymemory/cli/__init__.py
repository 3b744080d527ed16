"""The `skymemory` command line.

Each subcommand lives in its own module in this package and exposes
`register(subparsers)`, which adds its parser and sets `func` (called with the
parsed arguments, returns the exit code). Modules are discovered, so adding a
subcommand never touches this file.

Bad input is a sentence, never a traceback: a bad argument is one line from
the parser (exit 2), and an error a command lets through because of what the
user gave it (a manifest, a path, an unreachable constellation) is one line
here (exit 1). A command that needs an optional dependency the install lacks
(the KV layer's torch, plots' matplotlib, the dashboard's aiohttp) says which
extra to install, in one line (exit 2). SKYMEM_TRACEBACK=1 shows the traceback
instead. Command modules import those dependencies only when they run, so the
parser (and `--help`) works on the base install.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from skymemory.argtypes import OneLineParser
from skymemory.extras import missing_extra, missing_extra_message
from skymemory.protocol.errors import SkyMemoryError
from skymemory.store.contract import BlockMiss

# what bad input (a manifest, a path, a number, the constellation's state) raises; anything else is a bug
USER_ERRORS = (ValueError, OSError, SkyMemoryError, BlockMiss)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="skymemory",
        description="SkyMemory: a LEO satellite constellation as a KV cache for transformers.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        module.register(subparsers)
    return parser


def one_line(exc: BaseException) -> str:
    """An exception as one line: its message's first line, or its type when it has none."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    name = " ".join(filter(None, ["skymemory", args.command, getattr(args, "bench_command", None),
                                  getattr(args, "telemetry_command", None),
                                  getattr(args, "model_command", None), getattr(args, "keys_command", None)]))
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc)
        if extra is None or os.environ.get("SKYMEM_TRACEBACK"):
            raise
        print(missing_extra_message(name, exc, extra), file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        if os.environ.get("SKYMEM_TRACEBACK"):
            raise
        print(f"{name}: {one_line(exc)}", file=sys.stderr)
        return 1
