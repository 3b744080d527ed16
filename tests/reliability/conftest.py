"""Fixtures for the reliability tests: real skymem_node processes through skymemory.launcher.cluster."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def node_built(node_path):
    """Skips (via the shared node_path fixture) when skymem_node is not built."""
    return node_path
