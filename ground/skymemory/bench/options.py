"""Command-line options shared by the benchmarks (`skymemory bench ...`) and `skymemory demo`.

Argument types and argument groups only; every value is validated by argparse
with a clear message. Running the TTFT benchmark from them is bench.ttft_command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skymemory.argtypes import nonnegative_int, output_file, positive_int  # noqa: F401 (re-exported)

from .profiles import PROFILES, parse_profiles


def grid_size(text: str) -> int:
    value = positive_int(text)
    if value > 1024:
        raise argparse.ArgumentTypeError(f"must be at most 1024, got {value}")
    return value


def chunk_size(text: str) -> int:
    value = positive_int(text)
    if value > 60000:
        raise argparse.ArgumentTypeError(f"must be at most 60000 (skymem_wire.h), got {value}")
    return value


def token_list(text: str) -> tuple[int, ...]:
    """'512,1024' -> (512, 1024): positive, distinct, at most 1,000,000 each."""
    try:
        values = tuple(int(v, 10) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated token counts like 512,1024, got {text!r}") from None
    if any(not 1 <= v <= 1_000_000 for v in values):
        raise argparse.ArgumentTypeError(f"token counts must be 1..1000000, got {text}")
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"a token count is listed twice: {text}")
    return values


def route_list(text: str) -> tuple[str, ...]:
    """'direct,relay' -> ('direct', 'relay'): routes of skymemory.store.routes, each once."""
    from skymemory.store.routes import check_route

    routes = tuple(r.strip() for r in text.split(","))
    try:
        if not all(routes):
            raise ValueError(f"an empty route in {text!r}")
        for r in routes:
            check_route(r)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if len(set(routes)) != len(routes):
        raise argparse.ArgumentTypeError(f"a route is listed twice: {text}")
    return routes


def seal_list(text: str) -> tuple[str, ...]:
    """'on', 'off' or 'on,off' (either order: the first is measured first in even rounds) -> a tuple of them."""
    values = tuple(v.strip() for v in text.split(","))
    if not all(v in ("on", "off") for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"want on, off or on,off, got {text!r}")
    return values


def add_seal_arg(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--seal", type=seal_list, default=("on",), metavar="on|off|on,off",
                        help="on (the default: content sealed, AES-128-GCM per chunk under the ground's key, as "
                             "every store seals it), off (in the clear, only to compare) or on,off: " + what)


def profile_list(text: str):
    try:
        return tuple(parse_profiles(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


def add_model_args(parser: argparse.ArgumentParser, default_model: str) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--model", default=default_model,
                   help=f"embedded-tinyllama (TinyLlama architecture, built locally), embedded-tiny, a local "
                        f"directory or a hub id such as TinyLlama/TinyLlama-1.1B-Chat-v1.0 (default {default_model})")
    g.add_argument("--device", default=None, help="cpu, cuda, cuda:0 (default: cuda if available, else cpu)")
    g.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16"],
                   help="model dtype (default: fp16 on cuda, fp32 on cpu)")
    g.add_argument("--quantize", default=None, choices=["qint8", "qint4", "hqq"],
                   help="weight quantisation (the paper used optimum-quanto 8-bit and HQQ)")
    g.add_argument("--kv-dtype", default="fp16", choices=["fp16", "bf16", "fp32", "int8"],
                   help="KV format on the wire (default fp16)")


def add_constellation_args(parser: argparse.ArgumentParser, default_planes: int, default_sats: int) -> None:
    g = parser.add_argument_group("constellation")
    g.add_argument("--planes", type=grid_size, default=default_planes, help=f"planes to boot (default {default_planes})")
    g.add_argument("--sats", type=grid_size, default=default_sats,
                   help=f"satellites per plane to boot (default {default_sats})")
    g.add_argument("--servers", type=positive_int, default=10,
                   help="satellites a block is striped over, nearest first (default 10, as in the paper)")
    g.add_argument("--chunk-size", type=chunk_size, default=6144,
                   help="chunk data bytes (default 6144, the paper's 6 KB; at most 60000)")
    g.add_argument("--node", type=existing_file, default=None,
                   help="skymem_node binary (default $SKYMEM_NODE or build/skymem_node)")
    g.add_argument("--work-dir", type=Path, default=None,
                   help="where constellation logs go (default: a temporary directory, removed afterwards)")


def add_events_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=output_file, default=None, metavar="FILE",
                        help="append the run's progress to FILE as JSON lines (start, constellations, log lines, "
                             "every measurement, summary) for a live view")


def add_workload_args(parser: argparse.ArgumentParser, *, prefixes: tuple[int, ...], repeats: int,
                      gen_repeats: int, profiles: str) -> None:
    g = parser.add_argument_group("workload")
    g.add_argument("--prefix-tokens", type=token_list, default=prefixes,
                   help=f"shared prefix lengths, comma-separated (default {','.join(map(str, prefixes))})")
    g.add_argument("--suffix-tokens", type=positive_int, default=32, help="suffix length (default 32)")
    g.add_argument("--suffixes", type=positive_int, default=2, choices=range(1, 5), metavar="1..4",
                   help="different suffixes; round r uses suffix r mod this (default 2)")
    g.add_argument("--repeats", type=positive_int, default=repeats,
                   help=f"measured rounds per prefix length, after the warm-up (default {repeats})")
    g.add_argument("--gen-tokens", type=positive_int, default=30,
                   help="tokens of the timed generation (the paper's metric: 30)")
    g.add_argument("--gen-repeats", type=nonnegative_int, default=gen_repeats,
                   help=f"rounds (from the first) that also time the whole generation (default {gen_repeats})")
    g.add_argument("--profiles", type=profile_list, default=profile_list(profiles),
                   help=f"link profiles, comma-separated from {', '.join(PROFILES)} (default {profiles}); "
                        "each boots its own constellation")
