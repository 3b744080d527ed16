"""Fast path and layerwise streaming against real nodes (requests routed over ISL via the overhead satellite)."""

from __future__ import annotations

import hashlib
import json
import os

import torch

from skymemory.kv.model.cache_arg import cache_arg
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.transfer.streaming import generate_streaming
from skymemory.store.constellation import ConstellationBlockStore

from kv_support import random_prompt, tiny


def test_fast_path_multi_block_get_through_isl(constellation):
    m = constellation
    servers = m.constellation().nearest(6)
    blocks = [os.urandom(50_000 + 1000 * i) for i in range(3)]
    with ConstellationBlockStore.from_manifest(m, servers) as store:
        records = [store.put_block(hashlib.sha256(b).digest(), b) for b in blocks]
        assert [bytes(x) for x in store.get_blocks(records)] == blocks
        assert store.last_transfer.outcome == "done"
        for r in records:
            store.evict_block(r)


def test_streamed_generation_equals_uncached(constellation, tmp_path):
    model, tokenizer = tiny("fp32")
    servers = constellation.constellation().nearest(5)
    with ConstellationBlockStore.from_manifest(constellation, servers) as store:
        manager = KVCManager(model, tokenizer, store, block_tokens=16, kv_dtype="fp32", index_dir=tmp_path,
                         policy="fetch")
        prompt = random_prompt(3 * 16 + 7, seed=21)
        assert manager.add_blocks(prompt[:48]).blocks_stored == 3
        tokens, result, stats, failure = generate_streaming(manager, prompt, max_new_tokens=6)
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 max_new_tokens=6, do_sample=False)[0, len(prompt):].tolist()
        assert failure is None and result.prefix_tokens == 48 and tokens == ref
        assert stats.transfer_s > 0


def test_get_cache_streaming_flag_gives_the_same_tokens(constellation, tmp_path):
    """KVCManager.get_cache(prompt, streaming=True) (a StreamingCache) and the default
    (a fetched DynamicCache) generate the same tokens, both equal to no cache at all."""
    from skymemory.kv.transfer.streaming import StreamingCache

    model, tokenizer = tiny("fp32")
    servers = constellation.constellation().nearest(5)
    with ConstellationBlockStore.from_manifest(constellation, servers) as store:
        manager = KVCManager(model, tokenizer, store, block_tokens=16, kv_dtype="fp32", index_dir=tmp_path,
                         policy="fetch")
        prompt = random_prompt(2 * 16 + 5, seed=33)
        assert manager.add_blocks(prompt[:32]).blocks_stored == 2

        def generate(result):
            with torch.no_grad():
                out = model.generate(result.input_ids, attention_mask=result.attention_mask,
                                     **cache_arg(model, result.cache), max_new_tokens=6, do_sample=False)
            return out[0, result.input_ids.shape[1]:].tolist()

        fetched = manager.get_cache(prompt)
        streamed = manager.get_cache(prompt, streaming=True)
        assert not isinstance(fetched.cache, StreamingCache) and isinstance(streamed.cache, StreamingCache)
        assert fetched.prefix_tokens == streamed.prefix_tokens == 32
        assert fetched.blocks == streamed.blocks and fetched.miss_reason is None and streamed.miss_reason is None
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 max_new_tokens=6, do_sample=False)[0, len(prompt):].tolist()
        assert generate(fetched) == generate(streamed) == ref
        streamed.cache.stream.join(10)
        assert streamed.cache.stream.stats.transfer_s > 0


def test_bench_transfer_runs_python_and_c_with_the_same_windows(node_path, tmp_path):
    """`skymemory bench transfer` end to end on a small constellation: every row checked, windows recorded."""
    import argparse

    from skymemory.bench import transfer
    from skymemory.link.fastpath import SET_WINDOW

    binary = transfer.bench_binary(None)
    if binary is None:
        import pytest

        pytest.skip("build/bench_transfer is not built")
    parser = argparse.ArgumentParser()
    transfer.register(parser.add_subparsers())
    args = parser.parse_args(["transfer", "--profiles", "none", "--sizes-mb", "1", "--chunk-sizes", "6144",
                              "--auth", "on,off", "--seal", "on,off", "--no-kv", "--repeats", "2", "--planes", "3",
                              "--sats", "3", "--servers", "3",
                              "--node", str(node_path), "--out", str(tmp_path)])
    assert args.func(args) == 0
    rows = json.loads((tmp_path / "transfer.json").read_text())
    assert {(r["op"], r["path"]) for r in rows} == {("set", "python+C"), ("get", "python+C"),
                                                     ("get-into", "python+C"), ("set", "C only"), ("get", "C only")}
    assert {r["auth"] for r in rows} == {"on", "off"}  # the same run with and without authentication
    assert {r["seal"] for r in rows} == {"on", "off"}  # and with content sealed and in the clear
    assert {r["seal"] for r in rows if r["path"] == "C only"} == {"off"}  # the C ceiling moves chunks unsealed
    assert "Authentication on, as a share" in (tmp_path / "transfer.md").read_text()
    windows = {(r["op"], r["path"]): r["window_bytes"] for r in rows}
    assert windows[("set", "python+C")] == windows[("set", "C only")] == SET_WINDOW
    assert windows[("get", "python+C")] == windows[("get", "C only")] >= SET_WINDOW // 8
    assert all(r["goodput_MBps"] > 0 and r["retransmits"] >= 0 for r in rows)
