"""`skymemory demo` (what `make demo` runs): SkyMemory end to end in a few minutes.

Boots a local 19x5 constellation of satellite processes with the laser LEO
link profile (3 ms ground link + ISL light time), builds or loads the model
(embedded-tinyllama: the TinyLlama-1.1B architecture, no download), then for
512- and 1,024-token shared prefixes + a 32-token suffix compares the time to
first token and the 30-token generation time with no cache, with the KV cache
served by the constellation, with the same KV from local RAM, with the KV
already in the model's own memory (device-ram: the limit of any cache), and as
KVCManager does by default (auto: fetch, fetch part, or recompute, decided
from this host's rates, measured once and kept on disk). Prints progress, then
the table; tears the constellation down at the end, on errors and on Ctrl-C.

The paper's configuration on a GPU:
    skymemory demo --model TinyLlama/TinyLlama-1.1B-Chat-v1.0 --device cuda --quantize qint8

Watch it live: `skymemory demo --dashboard` serves the dashboard (skymemory
dashboard) on http://127.0.0.1:8050/ for as long as the demo runs, fed by
the run's event file (--events, default OUT/events.jsonl).

--route (direct, relay, auto: skymemory.store.routes; default auto) is how the
ground reaches the satellites holding the cache; it is handed to bench ttft.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skymemory.argtypes import int_range, output_dir
from skymemory.bench import options, ttft_command
from skymemory.store.routes import DEFAULT_ROUTE, ROUTES, check_route


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="boot a 19x5 constellation and compare time to first token with and without SkyMemory",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_workload_args(parser, prefixes=(512, 1024), repeats=3, gen_repeats=1, profiles="laser")
    options.add_model_args(parser, "embedded-tinyllama")
    options.add_constellation_args(parser, 19, 5)
    parser.add_argument("--out", type=output_dir, default=Path("out/demo"), help="output directory (default out/demo)")
    options.add_events_arg(parser)
    parser.add_argument("--route", type=_one_route, default=(DEFAULT_ROUTE,), metavar="{" + ",".join(ROUTES) + "}",
                        help="how the ground reaches the satellites: direct (each satellite's own ground link), "
                             "relay (up through the overhead satellite, then ISL), auto (direct where the manifest "
                             f"gives a satellite a ground link, relay for the rest; default {DEFAULT_ROUTE})")
    parser.add_argument("--dashboard", action="store_true",
                        help="serve the live dashboard on 127.0.0.1 while the demo runs, and print its URL")
    parser.add_argument("--dashboard-port", type=int_range(0, 65535), default=8050,
                        help="the dashboard's port (default 8050; 0: any free port)")
    parser.set_defaults(func=_main)


def _one_route(text: str) -> tuple[str]:
    """The route, as the one-element list bench ttft takes (it can compare several)."""
    try:
        return (check_route(text),)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _main(args) -> int:
    if not args.dashboard:
        return ttft_command.main(args, title="skymemory demo")
    from skymemory.cli.dashboard import PORT_IN_USE
    from skymemory.dashboard.alongside import DashboardFailed, DashboardProcess

    if args.events is None:  # a fresh event file for this run, beside its other outputs
        args.events = args.out / "events.jsonl"
        args.out.mkdir(parents=True, exist_ok=True)
        args.events.write_text("")
    try:
        with DashboardProcess("--events", args.events, "--port", args.dashboard_port) as url:
            print(f"skymemory demo: dashboard at {url} (following {args.events})", file=sys.stderr, flush=True)
            return ttft_command.main(args, title="skymemory demo")
    except DashboardFailed as exc:
        if exc.returncode == PORT_IN_USE:  # its message names `skymemory dashboard`'s --port: say ours
            print(f"skymemory demo: cannot serve the dashboard on 127.0.0.1:{args.dashboard_port}: the port is in "
                  "use (another dashboard?); choose another with --dashboard-port N (0: any free port)",
                  file=sys.stderr)
        else:
            print(f"skymemory demo: {exc}", file=sys.stderr)
        return 2
