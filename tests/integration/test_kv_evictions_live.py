"""Evictions reach the KV layer's index: a KVCManager over a RotatingBlockStore
subscribes to the store's evictions, so when a satellite LRU-evicts a chunk of a
stored block the manager's radix index drops that block and its descendants."""

from __future__ import annotations

import os
import time

import pytest

from skymemory.kv.hf.manager import KVCManager
from skymemory.orbit.manifest import Manifest
from skymemory.store.placed import block_hash_of
from skymemory.store.rotating import RotatingBlockStore

from kv_support import random_prompt, tiny
from live import launched

CHUNK = 1024
BUDGET = 16 * 1024  # a dozen 1 KiB chunks per satellite
WAIT_S = 10.0  # bound on the wait for the notice to reach the index


@pytest.fixture(scope="module")
def small_memory(node_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kv-evictions")
    # mission time nearly stands still: no rotation step (and no migration) during the test
    with launched(tmp, 5, 5, "--memory-budget", str(BUDGET), "--chunk-size", str(CHUNK), "--time-scale", "0.001") as m:
        yield Manifest.load(m)


def test_lru_eviction_drops_the_block_and_its_descendants_from_the_manager_index(small_memory, tmp_path):
    model, tokenizer = tiny("fp32")
    told: list[bytes] = []
    with RotatingBlockStore(small_memory, strategy="rotation-hop", n_servers=9, on_evicted=told.append) as store:
        manager = KVCManager(model, tokenizer, store, block_tokens=16, kv_dtype="fp16", index_dir=tmp_path,
                         policy="fetch")
        prompt = random_prompt(2 * 16, seed=5)
        added = manager.add_blocks(prompt)
        assert added.blocks_stored == 2, added.error
        h0, h1 = added.hashes
        assert manager.index.get(h0) is not None and manager.index.get(h1) is not None
        record0 = manager.index.get(h0).record

        # fill a satellite holding a chunk of block 0 until its LRU evicts something: block 0's
        # chunk, the oldest there (fresh constellation, block 0 stored first)
        target = store.store.servers_at(record0, store.constellation.mission_ms())[0]
        via = store.constellation.overhead()
        before = store._run(store.client.stats(target)).lru_evictions
        filler = 0
        while store._run(store.client.stats(target)).lru_evictions == before:
            assert filler < 4 * BUDGET // CHUNK, "the satellite never evicted"
            store._run(store.client.set_chunk(target, block_hash_of(f"filler-{filler}"), 0, 1, os.urandom(CHUNK),
                                              via=via))
            filler += 1

        # the notice reaches the store, the store tells the manager (bounded wait, no timing claim)
        deadline = time.monotonic() + WAIT_S
        while manager.index.get(h0) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert manager.index.get(h0) is None
        assert manager.index.get(h1) is None  # the descendant went with it
        assert told[0] == h0  # the constructor's on_evicted is still told too
        # the manager no longer offers the evicted prefix
        assert manager.get_cache(prompt + [1, 2, 3]).prefix_tokens == 0


def test_subscribe_evictions_calls_every_listener_even_if_one_fails(small_memory):
    store = RotatingBlockStore(small_memory, strategy="rotation-hop", n_servers=9)
    seen: list[bytes] = []

    def broken(_h: bytes) -> None:
        raise RuntimeError("listener bug")

    store.subscribe_evictions(broken)
    store.subscribe_evictions(seen.append)
    with pytest.raises(TypeError):
        store.subscribe_evictions("not callable")
    with store:
        payload = os.urandom(3 * CHUNK)
        record = store.put_block(block_hash_of("requested"), payload)
        store.evict_block(record)
    assert seen == [record.block_hash]
