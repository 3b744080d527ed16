"""Fixtures for the reliability tests: real skymem_node processes through tools/cluster.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))


@pytest.fixture(scope="session")
def node_built(node_path):
    """Skips (via the shared node_path fixture) when skymem_node is not built."""
    return node_path
