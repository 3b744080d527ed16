"""A small native constellation under the caller's control, for fault tests.

Unlike the launcher, it can kill one satellite (SIGKILL, no goodbye) and start
it again with the same command line, which is what the reliability tests and
benchmarks need. Every node is a real skymem_node process on 127.0.0.1; every
one is stopped by `close()` (also on error, as a context manager).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from skymemory.launcher.nodes import find_node
from skymemory.launcher.processes import free_port_bases
from skymemory.orbit.manifest import Manifest, SatelliteEntry
from skymemory.protocol import wire
from skymemory.protocol.auth import satellite_key_file

Sat = tuple[int, int]


class Cluster:
    """planes x sats skymem_node processes; `node_args` go to every node, `node_args_for[sat]` to one more (a slow
    satellite: its own --bandwidth-mbps). `keys`: a folder that
    skymemory.protocol.auth.write_key_files filled; each node gets its own key file from it."""

    def __init__(self, planes: int, sats: int, node_args: list[str] | None = None, *,
                 env: dict[str, str] | None = None, log_dir: Path | None = None, keys: Path | None = None,
                 node_args_for: dict[Sat, list[str]] | None = None) -> None:
        if planes < 1 or sats < 1:
            raise ValueError("planes and sats must be >= 1")
        self.planes, self.sats = planes, sats
        self.node = str(find_node())
        self.isl_base, self.ground_base = free_port_bases(planes * sats)
        self.epoch_ms = int(time.time() * 1000)
        self.node_args = list(node_args or [])
        self.node_args_for = {tuple(k): list(v) for k, v in (node_args_for or {}).items()}  # after node_args: win
        self.env = {**os.environ, **(env or {})}
        self.log_dir = log_dir
        self.keys = keys
        self.procs: dict[Sat, subprocess.Popen] = {}

    # ---- addresses ---------------------------------------------------------------
    @property
    def satellites(self) -> list[Sat]:
        return [(p, s) for p in range(self.planes) for s in range(self.sats)]

    def ground_addresses(self) -> dict[Sat, tuple[str, int]]:
        return {(p, s): ("127.0.0.1", self.ground_base + p * self.sats + s) for p, s in self.satellites}

    def manifest(self) -> Manifest:
        """A launch manifest describing this cluster, for ground code that takes one (ObjectStore, the stores)."""
        entries = [SatelliteEntry(p, s, "127.0.0.1", self.isl_base + p * self.sats + s,
                                  self.ground_base + p * self.sats + s) for p, s in self.satellites]
        return Manifest(planes=self.planes, sats=self.sats, epoch_ms=self.epoch_ms, satellites=entries)

    def argv(self, sat: Sat) -> list[str]:
        p, s = sat
        return [self.node, "--plane", str(p), "--sat", str(s), "--planes", str(self.planes), "--sats",
                str(self.sats), "--isl-port-base", str(self.isl_base), "--ground-port-base", str(self.ground_base),
                "--epoch-ms", str(self.epoch_ms), "--seed", str(p * self.sats + s + 1), "--log-level", "error",
                *(["--auth-keys", str(satellite_key_file(self.keys, p, s))] if self.keys is not None else []),
                *self.node_args, *self.node_args_for.get(sat, [])]

    # ---- processes -----------------------------------------------------------------
    def start(self, sat: Sat) -> None:
        """Start the node of `sat`, unless it is running already (`with Cluster(...).start_all()` is safe)."""
        running = self.procs.get(sat)
        if running is not None and running.poll() is None:
            return
        log = subprocess.DEVNULL
        if self.log_dir is not None:
            log = open(self.log_dir / f"node_{sat[0]}_{sat[1]}.log", "ab")
        self.procs[sat] = subprocess.Popen(self.argv(sat), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                           env=self.env)
        if log is not subprocess.DEVNULL:
            log.close()

    def start_all(self, health_timeout: float = 30.0) -> "Cluster":
        for sat in self.satellites:
            self.start(sat)
        self.wait_healthy(self.satellites, health_timeout)
        return self

    def wait_healthy(self, sats: list[Sat], timeout: float) -> None:
        """Waits until every listed node answers a control NOOP... via SEND_HK on its ground port."""
        hk = wire.encode_hk_request(wire.SKYMEM_SEND_HK_MID)  # padded to its answer: a node answers no shorter one
        addrs = self.ground_addresses()
        deadline = time.monotonic() + timeout
        todo = set(sats)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            s.settimeout(0.05)
            while todo:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nodes not answering after {timeout} s: {sorted(todo)}")
                for sat in list(todo):
                    proc = self.procs.get(sat)
                    if proc is not None and proc.poll() is not None:
                        raise RuntimeError(f"node {sat} exited with {proc.returncode}")
                    s.sendto(hk, addrs[sat])
                try:
                    while True:
                        data, addr = s.recvfrom(65536)
                        for sat in list(todo):
                            if addrs[sat][1] == addr[1]:
                                todo.discard(sat)
                except (socket.timeout, BlockingIOError):
                    pass

    def kill(self, sat: Sat) -> None:
        """SIGKILL: the satellite vanishes with everything it stored."""
        proc = self.procs.pop(sat, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)

    def restart(self, sat: Sat, health_timeout: float = 30.0) -> None:
        self.kill(sat)
        self.start(sat)
        self.wait_healthy([sat], health_timeout)

    def alive(self) -> dict[Sat, bool]:
        return {sat: p.poll() is None for sat, p in self.procs.items()}

    def rss_kib(self) -> dict[Sat, int]:
        """Resident set size of every running node, from /proc (KiB)."""
        out = {}
        for sat, p in self.procs.items():
            try:
                for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[sat] = int(line.split()[1])
            except OSError:
                pass
        return out

    def close(self) -> dict[Sat, int | None]:
        """SIGTERM every node (exit 0 expected), SIGKILL stragglers; returns exit codes."""
        codes = {}
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for sat, p in self.procs.items():
            try:
                codes[sat] = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                codes[sat] = p.wait()
        self.procs.clear()
        return codes

    def __enter__(self) -> "Cluster":
        return self.start_all()

    def __exit__(self, *exc) -> None:
        self.close()
