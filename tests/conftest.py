"""Shared fixtures: `constellation` launches real skymem_node processes on loopback.

The node binary is found like the launcher finds it ($SKYMEM_NODE, else
build/skymem_node); tests that need it are skipped, with that reason, when it
is not built. Port bases are picked so every port is free right now, so runs
side by side do not collide; the constellation is always stopped afterwards.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
for p in (REPO / "ground", Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from skymemory.launcher.nodes import find_node  # noqa: E402
from skymemory.manifest import Manifest  # noqa: E402

LAUNCHER = REPO / "tools" / "launch_constellation.py"


def node_binary() -> Path | None:
    try:
        return find_node()
    except FileNotFoundError:
        return None


def ports_free(base: int, n: int) -> bool:
    socks = []
    try:
        for port in range(base, base + n):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(s)
            s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def free_port_bases(n: int) -> tuple[int, int]:
    rng = random.Random(os.getpid())
    for _ in range(50):
        isl = rng.randrange(22000, 30000 - n)
        ground = rng.randrange(42000, 50000 - n)
        if ports_free(isl, n) and ports_free(ground, n):
            return isl, ground
    raise RuntimeError("no free UDP port range found on 127.0.0.1")


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


def stop(manifest: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAUNCHER), "stop", "--manifest", str(manifest)],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="session")
def node_path() -> Path:
    path = node_binary()
    if path is None:
        pytest.skip("skymem_node is not built (set SKYMEM_NODE or build build/skymem_node)")
    return path


@pytest.fixture(scope="module")
def constellation(node_path, tmp_path_factory) -> Manifest:
    """A 4x4 constellation, ISL light-time delays on (scale 1), mission clock at real time."""
    tmp = tmp_path_factory.mktemp("constellation")
    manifest = launch(tmp, 4, 4, "--memory-budget", str(8 * 1024 * 1024))
    try:
        yield Manifest.load(manifest)
    finally:
        r = stop(manifest)
        assert r.returncode == 0, r.stderr
