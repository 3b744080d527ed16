"""Helpers for tests against real launched constellations (imported by conftest and tests).

The node binary is found like the launcher finds it ($SKYMEM_NODE, else
build/skymem_node). Port bases are picked so every port is free right now, so
runs side by side do not collide.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO / "ground", Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from skymemory.launcher.nodes import find_node  # noqa: E402
from skymemory.launcher.processes import free_port_bases  # noqa: E402,F401

LAUNCHER = REPO / "tools" / "launch_constellation.py"


def node_binary() -> Path | None:
    try:
        return find_node()
    except FileNotFoundError:
        return None


def launch(tmp: Path, planes: int, sats: int, *extra: str) -> Path:
    """Start a detached constellation; returns its manifest path."""
    isl, ground = free_port_bases(planes * sats)
    manifest = tmp / "manifest.json"
    cmd = [sys.executable, str(LAUNCHER), "--planes", str(planes), "--sats", str(sats), "--detach", "--quiet",
           "--manifest", str(manifest), "--isl-port-base", str(isl), "--ground-port-base", str(ground),
           "--health-timeout", "30", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"launcher failed ({r.returncode}):\n{r.stderr}")
    return manifest


def launch_netns(tmp: Path, planes: int, sats: int, hosts: int) -> Path:
    """`launch(... --netns hosts)`, or skip the test where network namespaces cannot be made or the
    launcher's subnet is taken by another run right now."""
    import pytest

    from skymemory.launcher import netns

    why = netns.probe()
    if why:
        pytest.skip(why)
    try:
        return launch(tmp, planes, sats, "--netns", str(hosts))
    except RuntimeError as exc:
        if "already in use on this host" in str(exc):
            pytest.skip("the --netns subnet is taken by another run right now")
        raise


def free_first_cpuid(n: int) -> str:
    """A --cfs-first-cpuid whose n CI_LAB ports (1234 + cpuid - 1) are free on every address right now."""
    from skymemory.launcher.processes import busy_udp_port

    for first in range(3, 60000, 97):
        if busy_udp_port("0.0.0.0", list(range(1233 + first, 1233 + first + n))) is None:
            return str(first)
    raise RuntimeError(f"no free range of {n} CI_LAB ports")


def free_tlm_addresses(n: int, port: int = 1235) -> str:
    """A first loopback address (for --tlm-address) whose n successors can all take `port` right now."""
    for third in range(20, 250):
        base = ipaddress.IPv4Address(f"127.{third}.0.1")
        socks = []
        try:
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((str(base + i), port))
            return str(base)
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free loopback telemetry addresses")


FAKE_SSH = """#!/bin/sh
# stand-in for ssh: the "hosts" of the tests are loopback addresses of this machine
while [ "$1" = "-o" ]; do shift 2; done
shift
exec "$@"
"""


def fake_ssh_env(tmp: Path) -> dict:
    """An environment whose `ssh` runs the launcher's remote scripts here (for --hosts 127.0.0.x,...)."""
    import os

    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def stop(manifest: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAUNCHER), "stop", "--manifest", str(manifest)],
                          capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def launched(tmp: Path, planes: int, sats: int, *extra: str):
    """A detached constellation for the with-block (its manifest path); stopped after, the stop must succeed."""
    manifest = launch(tmp, planes, sats, *extra)
    try:
        yield manifest
    finally:
        r = stop(manifest)
        assert r.returncode == 0, r.stderr


def time_scale_for(step_wall_s: float, sats: int, altitude_km: float = 550.0) -> float:
    """--time-scale that makes one rotation step (1/sats of an orbit) last step_wall_s of wall time."""
    from skymemory.orbit import geometry

    return geometry.orbital_period_s(altitude_km * 1000.0) / sats / step_wall_s
