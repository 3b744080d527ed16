"""Shared helpers of the launcher: errors, logging, liveness of a manifest's processes, RSS."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from skymemory.launcher import processes
from skymemory.orbit.manifest import Manifest


class LaunchError(RuntimeError):
    pass


def log(args, msg: str) -> None:
    if not args.quiet:
        print(msg, file=sys.stderr, flush=True)


def live_pids(m: Manifest) -> list[int]:
    marker = m.backend.get("marker", "skymem_node")
    pids = [e.pid for e in m.satellites if e.pid and not e.remote and processes.alive(e.pid, marker)]
    if m.launcher_pid and m.launcher_pid != self_pid() and processes.alive(m.launcher_pid, "launch"):
        pids.append(m.launcher_pid)
    return pids


def self_pid() -> int:
    return os.getpid()


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def pss_kib(pids: list[int]) -> int:
    """Proportional set size: shared pages (libc, the binary) split among the processes sharing them,
    so the sum over many nodes is the memory they really take (RSS counts shared pages once per process)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return total


def log_tail(run_dir: Path, name: str, lines: int = 5) -> str:
    try:
        return "\n".join((run_dir / "logs" / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
