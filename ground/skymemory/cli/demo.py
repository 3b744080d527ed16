"""`skymemory demo` (what `make demo` runs): SkyMemory end to end in a few minutes.

Boots a local 19x5 constellation of satellite processes with the laser LEO
link profile (3 ms ground link + ISL light time), builds or loads the model
(embedded-tinyllama: the TinyLlama-1.1B architecture, no download), then for
512- and 1,024-token shared prefixes + a 32-token suffix compares the time to
first token and the 30-token generation time with no cache, with the KV cache
served by the constellation, with the same KV from local RAM, with the KV
already in the model's memory (gpu-ram: the limit of any cache), and as
KVCManager does by default (auto: fetch, fetch part, or recompute, decided
from this host's rates, measured once and kept on disk). Prints progress, then
the table; tears the constellation down at the end, on errors and on Ctrl-C.

The paper's configuration on a GPU:
    skymemory demo --model TinyLlama/TinyLlama-1.1B-Chat-v1.0 --device cuda --quantize qint8
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skymemory.bench import options


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="boot a 19x5 constellation and compare time to first token with and without SkyMemory",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_workload_args(parser, prefixes=(512, 1024), repeats=3, gen_repeats=1, profiles="laser")
    options.add_model_args(parser, "embedded-tinyllama")
    options.add_constellation_args(parser, 19, 5)
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="output directory (default out/demo)")
    options.add_events_arg(parser)
    parser.set_defaults(func=_main)


def _main(args) -> int:
    return options.main(args, title="skymemory demo")
