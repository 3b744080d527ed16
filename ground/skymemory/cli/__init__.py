"""The `skymemory` command line.

Each subcommand lives in its own module in this package and exposes
`register(subparsers)`, which adds its parser and sets `func` (called with the
parsed arguments, returns the exit code). Modules are discovered, so adding a
subcommand never touches this file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
