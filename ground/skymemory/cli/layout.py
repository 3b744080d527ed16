"""`skymemory layout`: draw a placement on the torus grid as a PNG.

    skymemory layout --strategy rotation-hop --servers 9 --planes 7 --sats 9 --centre 3,4 -o layout.png
"""

from __future__ import annotations

import argparse
import sys

from skymemory.argtypes import output_file, positive_int
from skymemory.cli.sim import _servers
from skymemory.orbit import placement


def _centre(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected PLANE,SAT (0-based), got {text!r}")
    try:
        plane, sat = (int(p, 10) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two integers PLANE,SAT, got {text!r}") from None
    if plane < 0 or sat < 0:
        raise argparse.ArgumentTypeError(f"plane and sat are 0-based and must be >= 0, got {text!r}")
    return plane, sat


def _steps(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"must be in 0..1000000, got {value}")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "layout",
        help="draw a placement (servers, LOS box, next migration) as a PNG",
        description=(
            "Draw the torus grid with the line-of-sight box, the server number on each satellite "
            "and the migration arrows of the next rotation step (paper Figures 4-8, 13-15)."
        ),
    )
    parser.add_argument("--strategy", choices=placement.STRATEGIES, default="rotation-hop",
                        help="placement strategy (default rotation-hop)")
    parser.add_argument("--servers", type=_servers, default=9, help="number of servers n (default 9)")
    parser.add_argument("--planes", type=positive_int, default=7, help="orbital planes (rows, default 7)")
    parser.add_argument("--sats", type=positive_int, default=9, help="satellites per plane (columns, default 9)")
    parser.add_argument("--centre", type=_centre, default=None,
                        help="overhead satellite when the block was set, PLANE,SAT 0-based (default: grid middle)")
    parser.add_argument("--step", type=_steps, default=0,
                        help="rotation steps since the block was set (default 0)")
    parser.add_argument("-o", "--output", type=output_file, required=True, help="PNG file to write")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    centre = args.centre if args.centre is not None else (args.planes // 2, args.sats // 2)
    if args.output.suffix.lower() != ".png":
        print(f"skymemory layout: error: output must be a .png file, got {args.output}", file=sys.stderr)
        return 2
    try:
        from skymemory.orbit.layout_plot import draw_layout

        draw_layout(args.output, args.strategy, args.servers, args.planes, args.sats, centre, args.step)
    except ValueError as exc:
        print(f"skymemory layout: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}")
    return 0
