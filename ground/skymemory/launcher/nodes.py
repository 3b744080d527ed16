"""How a satellite process is started: the node binary, its command line, the peers file."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from skymemory.orbit.manifest import SatelliteEntry

REPO = Path(__file__).resolve().parents[3]


def find_node(explicit: Path | None = None) -> Path:
    """--node, else $SKYMEM_NODE, else <repo>/build/skymem_node (docs/CONTRACTS.md)."""
    candidates = [explicit] if explicit else []
    if os.environ.get("SKYMEM_NODE"):
        candidates.append(Path(os.environ["SKYMEM_NODE"]))
    candidates.append(REPO / "build" / "skymem_node")
    for c in candidates:
        if c and c.is_file() and os.access(c, os.X_OK):
            return c.resolve()
    raise FileNotFoundError(
        "skymem_node not found (tried " + ", ".join(str(c) for c in candidates if c) + "); build it with "
        "`cmake -S . -B build && cmake --build build -j2` or set SKYMEM_NODE")


def node_options(args: argparse.Namespace, epoch_ms: int) -> list[str]:
    """The options every satellite gets, whatever runs it."""
    return [
        "--planes", str(args.planes), "--sats", str(args.sats),
        "--altitude-km", repr(args.altitude_km), "--inclination-deg", repr(args.inclination_deg),
        "--walker-phase", str(args.walker_phase),
        "--memory-budget", str(args.memory_budget), "--chunk-size", str(args.chunk_size),
        "--epoch-ms", str(epoch_ms), "--time-scale", repr(args.time_scale),
        "--delay-scale", repr(args.delay_scale), "--ground-delay-ms", repr(args.ground_delay_ms),
        "--bandwidth-mbps", repr(args.bandwidth_mbps),
        "--loss", repr(args.loss), "--dup", repr(args.dup), "--reorder", repr(args.reorder),
        "--corrupt", repr(args.corrupt), "--log-level", args.log_level,
    ]


def node_argv(node: str, entry: SatelliteEntry, common: list[str], args: argparse.Namespace,
              peers: str | None) -> list[str]:
    layout = args.layout
    argv = [node, "--plane", str(entry.plane), "--sat", str(entry.sat), *common,
            "--bind", layout.bind if layout.per_satellite else entry.host,
            "--seed", str(args.seed + entry.plane * args.sats + entry.sat)]
    if peers:
        argv += ["--peers", peers]
    else:
        argv += ["--isl-port-base", str(layout.isl_base), "--ground-port-base", str(layout.ground_base)]
        if layout.per_satellite:  # the node computes every satellite's address from the first one (--bind)
            argv += ["--addresses", "per-satellite"]
    if entry.tlm_host:  # housekeeping to the ground's telemetry address, as TO_LAB sends it on cFS
        argv += ["--tlm-dest", f"{entry.tlm_host}:{entry.tlm_port}"]
    return argv


def link_profile(args: argparse.Namespace) -> dict:
    return {k: getattr(args, k) for k in ("delay_scale", "ground_delay_ms", "bandwidth_mbps", "loss", "dup",
                                          "reorder", "corrupt", "seed")}


def peers_text(entries: list[SatelliteEntry]) -> str:
    """docs/CONTRACTS.md: lines "plane sat host isl_port ground_port"."""
    return "".join(f"{e.plane} {e.sat} {e.host} {e.isl_port} {e.ground_port}\n" for e in entries)


def write_peers(path: Path, entries: list[SatelliteEntry]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(peers_text(entries))
    return path


def sat_name(plane: int, sat: int) -> str:
    return f"{plane}-{sat}"
