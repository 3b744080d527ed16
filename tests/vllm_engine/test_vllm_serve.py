"""`vllm serve` with the connector as people run it: many clients at once, a second server process after the
first, on the 3x3 with the connector's default settings (issue 38).

The first server takes 8 users' prompts at once and stores their blocks; a second server, a new process with
nothing in its memory and a ground index of its own (as on another host: it finds the blocks through their
records in orbit, kv.index.orbit_records), takes 16 requests at once (the same prompts and the same prompts grown by a
turn): every one hits its stored blocks, and every text is what vLLM without the connector generates.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from skymemory.bench.openai_server import BLOCK_TOKENS as BLOCK
from skymemory.bench.openai_server import START_TIMEOUT_S, OpenAIServer
from skymemory.kv.index.radix import RadixIndex

from kv_support import random_prompt

USERS = 8
FIRST = [random_prompt(2 * BLOCK + 30, seed=100 + u) for u in range(USERS)]  # 2 full blocks each
GROWN = [p + random_prompt(40, seed=200 + u)[1:] for u, p in enumerate(FIRST)]  # the next turn: the same blocks


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
    own_index = {**settings, "index_dir": str(tmp_path / "index-second")}
    with OpenAIServer(model_dir, tmp_path / "second.log", connector=own_index) as second:
        served = all_at_once(second, FIRST + GROWN)
    assert len(RadixIndex(tmp_path / "index-second")) == 2 * USERS  # every block learnt from its record in orbit
    for i, (got, expected) in enumerate(zip(served, want)):
        assert got.cached_tokens == 2 * BLOCK and got.said["fetched_blocks"] == 2, (i, got)
        assert got.tokens == expected.tokens, i


# ---- the engine's paths under load -----------------------------------------------------------------------------

STORED = random_prompt(2 * BLOCK + 20, seed=300)  # its two full blocks are stored first


def exact(sky: Path, tmp_path: Path) -> dict:
    """Connector settings whose loaded KV is the engine's own, bit for bit (fp32): any text that differs from
    plain vLLM's is then the path's fault. (In fp16 one of these prompts parts from plain vLLM at its 29th token,
    preempted or not: the rounding of its stored KV, as a cache in fp16 may.)"""
    return {"manifest": str(sky), "model": "embedded-small", "index_dir": str(tmp_path / "index"),
            "kv_format": "fp32"}


def store_prefix(model_dir: Path, tmp_path: Path, settings: dict) -> None:
    with OpenAIServer(model_dir, tmp_path / "store.log", connector=settings) as server:
        server.complete(STORED)
        wait_for_blocks(Path(settings["index_dir"]), 2)


def test_a_prefill_chunked_over_several_steps_loads_the_stored_blocks_and_computes_the_rest(model_dir, sky,
                                                                                            tmp_path):
    # 2 stored blocks, then 230 tokens of its own computed 128 tokens a step: three steps of one request
    prompt = STORED + random_prompt(211, seed=301)[1:]
    chunked = ("--max-num-batched-tokens", "128", "--max-num-seqs", "1")
    with OpenAIServer(model_dir, tmp_path / "plain.log", extra_args=chunked) as plain:
        want = plain.complete(prompt)
    settings = exact(sky, tmp_path)
    store_prefix(model_dir, tmp_path, settings)
    with OpenAIServer(model_dir, tmp_path / "chunked.log", connector=settings, extra_args=chunked) as server:
        got = server.complete(prompt)
    assert got.cached_tokens == 2 * BLOCK and got.said["fetched_blocks"] == 2, got
    assert got.tokens == want.tokens


def test_requests_preempted_while_they_load_and_save_give_plain_vllms_texts(model_dir, sky, tmp_path):
    # Each prompt (366 tokens) fills 3 blocks and its 40 new tokens need a 4th: with 7 blocks in all, two run at
    # once and one of them is preempted when both grow (vLLM recomputes it later, through the connector again).
    prompts = [STORED + random_prompt(91, seed=310 + k)[1:] for k in range(6)]
    assert {len(p) for p in prompts} == {3 * BLOCK - 18}
    small = ("--num-gpu-blocks-override", "7")
    with OpenAIServer(model_dir, tmp_path / "plain.log") as plain:
        want = [plain.complete(p, 40) for p in prompts]
    settings = exact(sky, tmp_path)
    store_prefix(model_dir, tmp_path, settings)
    with OpenAIServer(model_dir, tmp_path / "small.log", connector=settings, max_model_len=768,
                      extra_args=small) as server:
        with ThreadPoolExecutor(len(prompts)) as clients:
            got = list(clients.map(lambda p: server.complete(p, 40), prompts))
        preempted = server.metric("vllm:num_preemptions_total")
    assert preempted > 0, "no request was preempted: the test did not test preemption"
    assert [g.tokens for g in got] == [w.tokens for w in want]
    assert all(g.cached_tokens >= 2 * BLOCK for g in got), [g.cached_tokens for g in got]


def test_the_host_tier_serves_what_the_server_saved_with_every_satellite_gone(model_dir, node_path, tmp_path):
    from live import launch, stop

    prompt = STORED + random_prompt(30, seed=320)[1:]
    with OpenAIServer(model_dir, tmp_path / "plain.log") as plain:
        want = plain.complete(prompt)
    (tmp_path / "sky").mkdir()
    manifest = launch(tmp_path / "sky", 3, 3)
    try:
        settings = {**exact(manifest, tmp_path), "host_tier_bytes": 64 << 20}
        with OpenAIServer(model_dir, tmp_path / "tier.log", connector=settings) as server:
            server.complete(STORED)  # its two blocks saved: to the satellites and the host tier
            wait_for_blocks(tmp_path / "index", 2)
            assert stop(manifest).returncode == 0  # every satellite gone: only the tier can serve them now
            got = server.complete(prompt)
    finally:
        stop(manifest)
    assert got.cached_tokens == 2 * BLOCK and got.said["fetched_blocks"] == 2, got
    assert "the load failed" not in got.said["decision"]
    assert got.tokens == want.tokens
