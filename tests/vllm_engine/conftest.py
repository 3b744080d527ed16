"""The vLLM tests run in vLLM's own virtualenv (`make vllm` makes .venv-vllm; `make test` runs them there).

Elsewhere they are skipped, unless SKYMEM_REQUIRE_VLLM=1 (set by `make test`): then a missing vLLM is an error,
so the suite cannot pass by skipping them.
"""

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("SKYMEM_REQUIRE_VLLM") == "1":
        raise pytest.UsageError("SKYMEM_REQUIRE_VLLM=1 but vLLM is not installed in this Python "
                                "(`make vllm` makes .venv-vllm with it)")
    collect_ignore_glob = ["test_*.py"]
