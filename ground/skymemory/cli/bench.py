"""`skymemory bench ...`: the benchmarks.

Each module `skymemory.bench.<name>` that defines `register(subparsers)` adds
its own sub-subcommand (`ttft.py` -> `skymemory bench ttft`); a new benchmark
module is picked up without touching this file. Modules are imported when the
parser is built, so benchmark modules keep heavy imports (torch) inside their
functions.
"""

from __future__ import annotations

import importlib
import pkgutil

import skymemory.bench


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks (time to first token, ...)",
                                   description="SkyMemory benchmarks; each prints its figures and writes them "
                                               "under --out.")
    commands = parser.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    for info in sorted(pkgutil.iter_modules(skymemory.bench.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"skymemory.bench.{info.name}")
        if callable(getattr(module, "register", None)):
            module.register(commands)
