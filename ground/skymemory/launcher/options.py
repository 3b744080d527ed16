"""Command line of tools/launch_constellation.py, with every argument validated."""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
from pathlib import Path

from skymemory.cli._common import int_range
from skymemory.manifest import DEFAULT_PATH

MAX_SATELLITES = 4096
RUNTIMES = ("native", "cfs", "docker")


def _float_range(lo: float, hi: float, lo_open: bool = False):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
            raise argparse.ArgumentTypeError(f"{v} is outside {'(' if lo_open else '['}{lo}, {hi}]")
        return v

    return parse


def _ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IPv4 address: {text!r}") from None


def _hosts(text: str) -> list[str]:
    hosts = [h.strip() for h in text.split(",")]
    if not hosts or any(not h or any(c.isspace() for c in h) or h.startswith("-") for h in hosts):
        raise argparse.ArgumentTypeError(f"--hosts wants a comma-separated list of ssh destinations, got {text!r}")
    if len(set(hosts)) != len(hosts):
        raise argparse.ArgumentTypeError("--hosts lists a host twice")
    for h in hosts:  # nodes bind the host's address, so it must be an IPv4 literal ([user@]a.b.c.d)
        try:
            ipaddress.IPv4Address(h.rsplit("@", 1)[-1])
        except ValueError:
            raise argparse.ArgumentTypeError(f"--hosts entry {h!r}: want [user@]IPv4-address") from None
    return hosts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launch_constellation.py",
        description="Boot a SkyMemory constellation (one process per satellite), health-check it, "
                    "write the manifest the ground reads. `stop` tears a detached one down.",
    )
    p.add_argument("action", nargs="?", choices=("start", "stop", "status"), default="start",
                   help="start (default), stop a detached constellation, or status of its processes")
    p.add_argument("--manifest", type=Path, default=DEFAULT_PATH, help=f"manifest path (default {DEFAULT_PATH})")
    g = p.add_argument_group("constellation")
    g.add_argument("--planes", type=int_range(1, 1024), default=19, help="orbital planes (rows), default 19")
    g.add_argument("--sats", type=int_range(1, 1024), default=5, help="satellites per plane (columns), default 5")
    g.add_argument("--altitude-km", type=_float_range(100, 40000), default=550.0)
    g.add_argument("--inclination-deg", type=_float_range(0, 180), default=53.0)
    g.add_argument("--walker-phase", type=int_range(0, 1023), default=0)
    g.add_argument("--ground-station", type=int_range(0, 0xFFFE), default=0, help="ground station id")
    g.add_argument("--overhead", type=str, default=None,
                   help="PLANE,SAT overhead the ground host at launch (default: the grid centre)")
    g = p.add_argument_group("node options (passed to every satellite)")
    g.add_argument("--memory-budget", type=int_range(4096, 1 << 40), default=64 * 1024 * 1024,
                   help="bytes of chunk memory per satellite (default 64 MiB)")
    g.add_argument("--chunk-size", type=int_range(1, 60000), default=6144, help="max chunk data bytes")
    g.add_argument("--time-scale", type=_float_range(0, 1e6, lo_open=True), default=1.0,
                   help="mission seconds per wall second")
    g.add_argument("--delay-scale", type=_float_range(0, 1e6), default=1.0,
                   help="ISL light-time delay multiplier (0 = off)")
    g.add_argument("--ground-delay-ms", type=_float_range(0, 60000), default=0.0)
    g.add_argument("--bandwidth-mbps", type=_float_range(0, 1e6), default=0.0, help="per-link cap, 0 = unlimited")
    for name in ("loss", "dup", "reorder", "corrupt"):
        g.add_argument(f"--{name}", type=_float_range(0, 1), default=0.0, help=f"emulated {name} rate 0..1")
    g.add_argument("--seed", type=int_range(0, 2**32 - 1), default=1)
    g.add_argument("--log-level", choices=("error", "warn", "info", "debug"), default="warn")
    g = p.add_argument_group("where the satellites run")
    g.add_argument("--runtime", choices=RUNTIMES, default="native")
    g.add_argument("--node", type=Path, default=None, help="skymem_node binary (default $SKYMEM_NODE or build/skymem_node)")
    g.add_argument("--bind", type=_ipv4, default="127.0.0.1", help="address the local nodes bind (native)")
    g.add_argument("--isl-port-base", type=int_range(1024, 65535), default=20000)
    g.add_argument("--ground-port-base", type=int_range(1024, 65535), default=40000)
    g.add_argument("--netns", type=int_range(1, 250), default=0, metavar="H",
                   help="spread satellites over H network namespaces (emulated hosts, needs root)")
    g.add_argument("--hosts", type=_hosts, default=None, help="comma-separated ssh hosts to run satellites on")
    g.add_argument("--remote-node", default="skymem_node", help="node binary path on --hosts machines")
    g.add_argument("--remote-dir", default="/tmp/skymemory", help="working directory on --hosts machines")
    g.add_argument("--cfs-exe", type=Path, default=None, help="cFS exe directory (with core-cpu1), --runtime cfs")
    g.add_argument("--cfs-binary", default="core-cpu1", help="name of the cFS core executable in --cfs-exe")
    g = p.add_argument_group("launcher behaviour")
    g.add_argument("--detach", action="store_true", help="leave the constellation running and exit; `stop` ends it")
    g.add_argument("--health-timeout", type=_float_range(0.5, 3600), default=60.0,
                   help="seconds to wait for every satellite to answer a NOOP")
    g.add_argument("--run-dir", type=Path, default=None, help="pid files and logs (default: next to the manifest)")
    g.add_argument("--quiet", action="store_true", help="no progress line")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    n = args.planes * args.sats
    if n > MAX_SATELLITES:
        parser.error(f"{n} satellites is more than the launcher's limit of {MAX_SATELLITES}")
    for base, name in ((args.isl_port_base, "--isl-port-base"), (args.ground_port_base, "--ground-port-base")):
        if base + n - 1 > 65535:
            parser.error(f"{name} {base} + {n} satellites runs past port 65535")
    a0, a1 = args.isl_port_base, args.isl_port_base + n
    b0, b1 = args.ground_port_base, args.ground_port_base + n
    if a0 < b1 and b0 < a1:
        parser.error("ISL and ground port ranges overlap; move one base")
    if args.overhead is not None:
        try:
            p_, s_ = (int(x) for x in args.overhead.split(","))
        except ValueError:
            parser.error(f"--overhead wants PLANE,SAT, got {args.overhead!r}")
        if not (0 <= p_ < args.planes and 0 <= s_ < args.sats):
            parser.error(f"--overhead {args.overhead} is outside the {args.planes}x{args.sats} grid")
        args.overhead = (p_, s_)
    else:
        args.overhead = (args.planes // 2, args.sats // 2)
    if sum(bool(x) for x in (args.netns, args.hosts, args.runtime != "native")) > 1:
        parser.error("choose one of --netns, --hosts, --runtime cfs/docker")
    if args.netns and args.netns > n:
        parser.error(f"--netns {args.netns} is more hosts than the {n} satellites")
    if args.runtime == "cfs" and args.action == "start":
        if args.cfs_exe is None:
            parser.error("--runtime cfs needs --cfs-exe DIR (a cFS build's exe/cpu1 directory)")
        if not (args.cfs_exe / args.cfs_binary).is_file():
            parser.error(f"{args.cfs_exe / args.cfs_binary} does not exist")
    if args.node is not None and not os.access(args.node, os.X_OK):
        parser.error(f"--node {args.node} is not an executable file")
    if args.run_dir is None:
        args.run_dir = args.manifest.parent
    return args
