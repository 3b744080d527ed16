"""The vLLM tests run in vLLM's own virtualenv (`make vllm` makes .venv-vllm; `make test` runs them there).

Elsewhere they are skipped, unless SKYMEM_REQUIRE_VLLM=1 (set by `make test`): then a missing vLLM is an error,
so the suite cannot pass by skipping them.

Every test module gets its own model folder (`model_dir`: embedded-small as vLLM serves it) and its own keyed
3x3 constellation (`sky`: the manifest's path), made once for the module.
"""

import importlib.util
import os
from pathlib import Path

import pytest

from live import launched

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("SKYMEM_REQUIRE_VLLM") == "1":
        raise pytest.UsageError("SKYMEM_REQUIRE_VLLM=1 but vLLM is not installed in this Python "
                                "(`make vllm` makes .venv-vllm with it)")
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from skymemory.kv.model.models import save_model_dir

    return save_model_dir("embedded-small", tmp_path_factory.mktemp("model") / "embedded-small")


@pytest.fixture(scope="module")
def sky(node_path, tmp_path_factory):
    with launched(tmp_path_factory.mktemp("sky"), 3, 3) as manifest:
        yield manifest
