"""`RotatingBlockStore`: the synchronous block-store contract while the constellation turns."""

from __future__ import annotations

import os
import time

import pytest

from skymemory.orbit.manifest import Manifest
from skymemory.store.contract import BlockMiss
from skymemory.store.placed import block_hash_of
from skymemory.store.rotating import RotatingBlockStore

from live import launched, time_scale_for

SATS = 5
STEP_WALL_S = 2.0


@pytest.fixture(scope="module")
def turning(node_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rotating-store")
    with launched(tmp, 5, SATS, "--time-scale", repr(time_scale_for(STEP_WALL_S, SATS))) as manifest:
        yield Manifest.load(manifest)


def test_blocks_follow_the_rotation_through_the_block_store_contract(turning):
    dropped: list[bytes] = []
    with RotatingBlockStore(turning, strategy="rotation-hop", n_servers=9, on_evicted=dropped.append) as store:
        payloads = {block_hash_of(f"kv-{k}"): os.urandom(40_000 + 1000 * k) for k in range(4)}
        records = {h: store.put_block(h, p) for h, p in payloads.items()}
        first_step = store.driver.current_step()
        deadline = time.monotonic() + 4 * STEP_WALL_S + 5
        while store.driver.current_step() < first_step + 3:  # three step boundaries, reading all along
            assert time.monotonic() < deadline
            for h, rec in records.items():
                assert store.get_block(rec) == payloads[h]
        assert store.driver.totals().chunks > 0
        assert all(store.driver.layout_step(h) is not None for h in records)
        # probe finds a block without its record, wherever the rotation put server 1
        h0 = next(iter(records))
        store.index.remove(h0)  # forget the record: probe must find the block on the satellites
        probed = store.probe_block(h0)
        assert probed is not None
        assert (probed.chunk_count, probed.created_ms, probed.centre) == (
            records[h0].chunk_count, records[h0].created_ms, records[h0].centre)
        assert store.probe_block(block_hash_of("never stored")) is None
        # eviction through the contract: gone everywhere, and the owner is told
        h1, rec1 = list(records.items())[1]
        store.evict_block(rec1)
        assert dropped == [h1]
        with pytest.raises(BlockMiss) as miss:
            store.get_block(rec1)
        assert miss.value.reason == "not-found"
        assert [r.block_hash for r in store.records()] == list(records)[2:]


def test_coded_blocks_move_their_parity_with_their_data(turning):
    """Stripes of 7 + 2 over the 9 rotation-hop servers: after three step boundaries (every chunk migrated, parity
    and data alike), two of a block's satellites lose its chunks, and the block is rebuilt from the rest."""
    with RotatingBlockStore(turning, strategy="rotation-hop", n_servers=9, parity=2) as store:
        payloads = {block_hash_of(f"coded-{k}"): os.urandom(30_000 + 7_000 * k) for k in range(3)}
        records = {h: store.put_block(h, p) for h, p in payloads.items()}
        assert all(r.parity == 2 and r.stripe_data == 7 for r in records.values())
        first_step = store.driver.current_step()
        deadline = time.monotonic() + 4 * STEP_WALL_S + 5
        while store.driver.current_step() < first_step + 3 or any(
                store.driver.layout_step(h) != store.driver.current_step() for h in records):
            assert time.monotonic() < deadline
            for h, rec in records.items():
                assert store.get_block(rec) == payloads[h]
        for h, rec in records.items():  # two holders (the first data chunks' servers) lose the block
            holders = store.store.servers_at(rec, turning.constellation().mission_ms())[:2]
            for sat in holders:
                store._run(store.client.evict_block(sat, h))
            assert store.get_block(rec) == payloads[h]
        assert store.store.counters["parity_fetches"] >= len(records)


def test_another_ground_host_finds_kv_blocks_through_their_records_after_the_sky_turned(turning, tmp_path):
    """Records in orbit through the rotating store (issue 37): host A stores a prompt's blocks and their records;
    after two step boundaries (A's chunks migrated, the record homes carried along their orbits), host B, a fresh
    store with an empty index, finds every block through its record (asked up the satellite overhead now), loads
    the blocks where the rotation has put them, and generates the tokens of no cache. A block evicted through the
    store takes its record out of orbit with it."""
    from skymemory.kv.hf.manager import KVCManager
    from skymemory.kv.index.orbit_records import OrbitRecords
    from skymemory.kv.hf.report import compare_generation

    from kv_support import random_prompt, tiny

    model, tokenizer = tiny("fp32")
    prompt = random_prompt(3 * 16 + 5, seed=211)

    def host(store, name):
        return KVCManager(model, tokenizer, store, block_tokens=16, kv_dtype="fp32", index_dir=tmp_path / name,
                          policy="fetch")

    with RotatingBlockStore(turning, strategy="rotation-hop", n_servers=9) as store_a:
        a = host(store_a, "host-a")
        stored = a.add_blocks(prompt)
        assert stored.blocks_stored == 3 and a.orbit.counters["published"] == 3
        first_step = store_a.driver.current_step()
        deadline = time.monotonic() + 4 * STEP_WALL_S + 5
        while store_a.driver.current_step() < first_step + 2 or any(
                store_a.driver.layout_step(h) != store_a.driver.current_step() for h in stored.hashes):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with RotatingBlockStore(turning, strategy="rotation-hop", n_servers=9) as store_b:
            b = host(store_b, "host-b")
            assert b.find_prefix(prompt).source == "orbit"
            c = compare_generation(b, prompt, new_tokens=6)
            assert c.prefix_tokens == 3 * 16 and c.cached == c.reference
            assert b.find_prefix(prompt).source == "index"  # learnt into B's own index
        # evicted (through the store, as an LRU notice or a failed get ends): its record leaves its homes too
        first = next(r for r in store_a.records() if r.block_hash == stored.hashes[0])
        store_a.evict_block(first)
        fresh = OrbitRecords(store_a, negative_s=0)
        deadline = time.monotonic() + 30
        while fresh.find(a.root, stored.hashes[:1]):
            assert time.monotonic() < deadline, "the evicted block's record is still in orbit"
            time.sleep(0.05)
