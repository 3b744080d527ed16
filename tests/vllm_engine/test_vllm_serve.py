"""`vllm serve` with the connector as people run it: many clients at once, a second server process after the
first, on the 3x3 with the connector's default settings (issue 38).

The first server takes 8 users' prompts at once and stores their blocks; a second server, a new process with
nothing in its memory, takes 16 requests at once (the same prompts and the same prompts grown by a turn): every
one hits its stored blocks, and every text is what vLLM without the connector generates.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from skymemory.bench.openai_server import BLOCK_TOKENS as BLOCK
from skymemory.bench.openai_server import START_TIMEOUT_S, OpenAIServer
from skymemory.kv.models import save_model_dir
from skymemory.kv.radix import RadixIndex

from kv_support import random_prompt
from live import launched

USERS = 8
FIRST = [random_prompt(2 * BLOCK + 30, seed=100 + u) for u in range(USERS)]  # 2 full blocks each
GROWN = [p + random_prompt(40, seed=200 + u)[1:] for u, p in enumerate(FIRST)]  # the next turn: the same blocks


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_model_dir("embedded-small", tmp_path_factory.mktemp("model") / "embedded-small")


@pytest.fixture(scope="module")
def sky(node_path, tmp_path_factory):
    with launched(tmp_path_factory.mktemp("sky"), 3, 3) as manifest:
        yield manifest


def all_at_once(server: OpenAIServer, prompts: list[list[int]]) -> list:
    """Every prompt from a client of its own, all at the same time (16 greedy tokens each)."""
    with ThreadPoolExecutor(len(prompts)) as clients:
        return list(clients.map(server.complete, prompts))


def wait_for_blocks(index: Path, count: int) -> None:
    """The engine saves in the background: wait (bounded) until the ground index holds `count` blocks."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(RadixIndex(index)) < count:
        assert time.monotonic() < deadline, f"the index holds {len(RadixIndex(index))} blocks, not {count}"
        time.sleep(0.2)


def test_a_second_server_serves_concurrent_clients_from_what_the_first_stored(model_dir, sky, tmp_path):
    with OpenAIServer(model_dir, tmp_path / "plain.log") as plain:  # vLLM without the connector
        want = all_at_once(plain, FIRST + GROWN)
    index = tmp_path / "index"
    settings = {"manifest": str(sky), "model": "embedded-small", "index_dir": str(index)}  # default servers: 10
    with OpenAIServer(model_dir, tmp_path / "first.log", connector=settings) as first:
        stored = all_at_once(first, FIRST)
        assert [r.tokens for r in stored] == [w.tokens for w in want[:USERS]]
        wait_for_blocks(index, 2 * USERS)
    with OpenAIServer(model_dir, tmp_path / "second.log", connector=settings) as second:
        served = all_at_once(second, FIRST + GROWN)
    for i, (got, expected) in enumerate(zip(served, want)):
        assert got.cached_tokens == 2 * BLOCK and got.said["fetched_blocks"] == 2, (i, got)
        assert got.tokens == expected.tokens, i
