"""Shared fixtures: `constellation` launches real skymem_node processes on loopback.

The node binary is found like the launcher finds it ($SKYMEM_NODE, else
build/skymem_node); tests that need it are skipped, with that reason, when it
is not built. Port bases are picked so every port is free right now, so runs
side by side do not collide; the constellation is always stopped afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
for p in (REPO / "ground", Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from skymemory.orbit.manifest import Manifest  # noqa: E402

from live import launched, node_binary  # noqa: E402


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
    with launched(tmp, 4, 4, "--memory-budget", str(8 * 1024 * 1024)) as manifest:
        yield Manifest.load(manifest)
