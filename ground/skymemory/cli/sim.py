"""`skymemory sim`: the paper's worst-case latency simulator (§4).

    skymemory sim --strategy rotation-hop --servers 25 --altitude 550 \\
        --kvc-bytes 10000000 --chunk-bytes 6144 --processing-time 0.01 --json
    skymemory sim sweep --out docs/results/sim
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from skymemory.argtypes import output_dir, positive_int
from skymemory.orbit import placement, sim


def _servers(text: str) -> int:
    value = positive_int(text)
    if value > placement.MAX_SERVERS:
        raise argparse.ArgumentTypeError(f"must be at most {placement.MAX_SERVERS}, got {value}")
    return value


def _altitude_km(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= 100_000):
        raise argparse.ArgumentTypeError(f"altitude must be in (0, 100000] km, got {text}")
    return value


def _processing_s(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= 3600):
        raise argparse.ArgumentTypeError(f"processing time must be in [0, 3600] s, got {text}")
    return value


def register(subparsers) -> None:
    defaults = sim.SimConfig()
    parser = subparsers.add_parser(
        "sim",
        help="worst-case get/set latency per placement strategy (paper §4)",
        description=(
            "Worst-case get/set latency of one KV-cache block striped over n servers (paper §4, "
            "Table 2). Prints max/min/avg latency over the servers in seconds. "
            "'skymemory sim sweep --out DIR' writes the Figure 16 sweeps as CSV and PNG."
        ),
    )
    parser.add_argument("mode", nargs="?", choices=("run", "sweep"), default="run",
                        help="run: one configuration (default); sweep: all Table 2 sweeps to --out")
    parser.add_argument("--strategy", choices=placement.STRATEGIES, default=defaults.strategy,
                        help=f"placement strategy (default {defaults.strategy})")
    parser.add_argument("--servers", type=_servers, default=defaults.n_servers,
                        help=f"number of servers n, 1..{placement.MAX_SERVERS} (default {defaults.n_servers})")
    parser.add_argument("--altitude", type=_altitude_km, default=defaults.altitude_km,
                        help=f"orbit altitude in KILOMETRES (default {defaults.altitude_km:g})")
    parser.add_argument("--kvc-bytes", type=positive_int, default=defaults.kvc_bytes,
                        help=f"KV-cache block size in BYTES (default {defaults.kvc_bytes})")
    parser.add_argument("--chunk-bytes", type=positive_int, default=defaults.chunk_bytes,
                        help=f"chunk size in BYTES (default {defaults.chunk_bytes})")
    parser.add_argument("--processing-time", type=_processing_s, default=defaults.processing_time_s,
                        help=f"processing time per chunk in SECONDS (default {defaults.processing_time_s})")
    parser.add_argument("--planes", type=positive_int, default=defaults.planes,
                        help=f"orbital planes in the grid (default {defaults.planes})")
    parser.add_argument("--sats", type=positive_int, default=defaults.sats,
                        help=f"satellites per plane (default {defaults.sats})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", type=output_dir, help="sweep: output directory for CSV and PNG files")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        base = sim.SimConfig(
            strategy=args.strategy, n_servers=args.servers, altitude_km=args.altitude,
            kvc_bytes=args.kvc_bytes, chunk_bytes=args.chunk_bytes,
            processing_time_s=args.processing_time, planes=args.planes, sats=args.sats,
        )
    except ValueError as exc:
        print(f"skymemory sim: error: {exc}", file=sys.stderr)
        return 2
    if args.mode == "sweep":
        return _sweep(args, base)
    if args.out is not None:
        print("skymemory sim: error: --out is only used with 'sweep'", file=sys.stderr)
        return 2
    lat = sim.simulate(base)
    if args.json:
        print(json.dumps({
            "strategy": base.strategy, "servers": base.n_servers, "altitude_km": base.altitude_km,
            "kvc_bytes": base.kvc_bytes, "chunk_bytes": base.chunk_bytes, "chunk_count": base.chunk_count,
            "processing_time_s": base.processing_time_s, "planes": base.planes, "sats": base.sats,
            "max": lat.max, "min": lat.min, "avg": lat.avg,
        }))
    else:
        print(f"{base.strategy}, {base.n_servers} servers, {base.chunk_count} chunks, {base.altitude_km:g} km: "
              f"max {lat.max:.6f} s, min {lat.min:.6f} s, avg {lat.avg:.6f} s")
    return 0


def _sweep(args: argparse.Namespace, base: sim.SimConfig) -> int:
    if args.out is None:
        print("skymemory sim: error: sweep needs --out DIR", file=sys.stderr)
        return 2
    # The sweeps vary one parameter at a time around the given defaults.
    try:
        results = sim.run_all_sweeps(args.out, base)
    except ValueError as exc:
        print(f"skymemory sim: error: {exc}", file=sys.stderr)
        return 2
    for name, rows in results.items():
        print(f"{args.out / ('sweep_' + name + '.csv')}: {len(rows)} rows")
    print(f"{args.out / 'figure16.png'}, {args.out / 'altitude_light_time.png'}")
    print(sim.summary(results, base))
    return 0
