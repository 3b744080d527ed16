"""Eviction propagation against real nodes (paper §3.9).

* LRU path: a satellite with a small memory budget evicts a block's chunk to make
  room -> it gossips EVICT_BLOCK over the block's gossip radius, purging the block's
  other chunks on their holders -> the ground hears REPLY_EVICTED and drops the block
  from its index (the owner's callback runs).
* Lazy path: a get that finds a chunk missing evicts the block on all its holders.
* Cleaner: a periodic probe finds an incomplete block and evicts it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import time

import pytest

from skymemory.protocol.auth import signer_for_manifest
from skymemory.orbit import migration, placement
from skymemory.orbit.manifest import Manifest
from skymemory.store.contract import BlockMiss
from skymemory.store.eviction import Evictions
from skymemory.store.placed import BlockIndex, HopCountingClient, PlacedStore, block_hash_of
from skymemory.store.rotation import MigrationDriver

from live import launched

CHUNK = 1024
BUDGET = 16 * 1024  # a dozen 1 KiB chunks per satellite
STRATEGY, SERVERS = "rotation-hop", 9
WAIT_S = 10.0  # bound on every wait for a notice to arrive


@pytest.fixture(scope="module")
def small_memory(node_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eviction")
    # mission time nearly stands still (no rotation step boundary during these tests)
    with launched(tmp, 5, 5, "--memory-budget", str(BUDGET), "--chunk-size", str(CHUNK), "--time-scale", "0.001") as m:
        yield Manifest.load(m)


class Ground:
    """Client + index + store + eviction propagation, as a ground host wires them."""

    def __init__(self, m: Manifest, constellation=None) -> None:
        self.c = constellation or m.constellation()
        self.client = HopCountingClient(m.ground_addresses(), station_id=m.ground_station, mission_ms=self.c.mission_ms,
                                        bind=(m.ground_host, 0), signer=signer_for_manifest(m))
        self.index = BlockIndex()
        self.dropped: list[bytes] = []  # what the owner was told (the KV layer drops descendants here)
        self.evictions = Evictions(self.client, self.c, self.index, on_evicted=self.dropped.append)
        self.store = PlacedStore(self.client, self.c, strategy=STRATEGY, n_servers=SERVERS, chunk_bytes=CHUNK,
                                 index=self.index, on_miss=self.evictions.evict_everywhere)

    async def __aenter__(self) -> "Ground":
        await self.client.open()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.client.close()

    async def chunks_left(self, rec) -> int:
        """Chunks of the block still held anywhere it may be (PROBE every chunk at every possible holder)."""
        holders = self.evictions.holders(rec, self.c.mission_ms())
        via = self.c.overhead()
        found = await asyncio.gather(*(self.client.probe(s, rec.block_hash, cid, via=via)
                                       for s in holders for cid in range(rec.chunk_count)))
        return sum(f is not None for f in found)


def test_lru_eviction_gossips_the_block_away_and_the_ground_hears_of_it(small_memory):
    async def scenario():
        async with Ground(small_memory) as g:
            payload = os.urandom(SERVERS * CHUNK)  # one chunk per server
            rec = await g.store.put(block_hash_of("victim"), payload)
            assert await g.store.get(rec) == payload
            assert await g.chunks_left(rec) == SERVERS
            stop_listening = asyncio.Event()
            listener = asyncio.ensure_future(g.evictions.listen(stop_listening))
            # fill one server's satellite with other blocks until its LRU evicts the victim's chunk
            target = g.store.servers_at(rec, g.c.mission_ms())[1]
            before = await g.client.stats(target)
            filler = 0
            while (await g.client.stats(target)).lru_evictions == before.lru_evictions:
                assert filler < 4 * BUDGET // CHUNK, "the satellite never evicted"
                await g.client.set_chunk(target, block_hash_of(f"filler-{filler}"), 0, 1, os.urandom(CHUNK),
                                         via=g.c.overhead())
                filler += 1
            # the ground hears of it: the block leaves the index and the owner is told
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while rec.block_hash in g.index and loop.time() < deadline:
                await asyncio.sleep(0.05)
            stop_listening.set()
            await listener
            assert rec.block_hash not in g.index
            assert g.dropped == [rec.block_hash]
            assert (target, rec.block_hash) in g.evictions.notices
            # gossip purged the other eight chunks on their holders
            assert await g.chunks_left(rec) == 0
            holders = placement.block_satellites(rec, g.c.mission_ms(), g.evictions.rotation)
            purged = [(await g.client.stats(s)).blocks_purged for s in holders if s != target]
            assert len(purged) == SERVERS - 1 and all(p >= 1 for p in purged)

    asyncio.run(scenario())


def test_an_eviction_notice_counts_only_from_a_satellite_the_block_was_placed_on(small_memory):
    """D1 (issue 53): a notice is signed by its sender, which proves who sent it, not that it held the block. One
    from a satellite the ground never placed the block on (as a captured satellite would send) is not believed;
    the same notice from a holder is."""
    async def scenario():
        async with Ground(small_memory) as g:
            rec = await g.store.put(block_hash_of("noticed"), os.urandom(SERVERS * CHUNK))
            holders = g.evictions.holders(rec, g.c.mission_ms())
            stranger = next((p, s) for p in range(5) for s in range(5) if (p, s) not in holders)
            g.client.evicted.append((stranger, rec.block_hash))  # as the client queues a verified notice
            assert g.evictions.drain_notices() == []
            assert rec.block_hash in g.index and g.dropped == [] and g.evictions.counters["notices_refused"] == 1
            g.client.evicted.append((holders[0], rec.block_hash))
            assert g.evictions.drain_notices() == [rec.block_hash]
            assert rec.block_hash not in g.index and g.dropped == [rec.block_hash]

    asyncio.run(scenario())


def test_lazy_eviction_when_a_get_finds_a_chunk_missing(small_memory):
    async def scenario():
        async with Ground(small_memory) as g:
            payload = os.urandom(2 * SERVERS * CHUNK - 100)
            rec = await g.store.put(block_hash_of("lazy"), payload)
            assert await g.store.get(rec) == payload
            # one satellite loses its chunks of the block, and nobody is told (radius 0: no gossip)
            lost_at = g.store.servers_at(rec, g.c.mission_ms())[4]
            assert await g.client.evict_block(lost_at, rec.block_hash, radius=0) == 2
            assert await g.chunks_left(rec) == rec.chunk_count - 2
            with pytest.raises(BlockMiss) as miss:
                await g.store.get(rec)
            assert miss.value.reason == "not-found"
            # the get evicted the block everywhere and dropped it from the index
            assert await g.chunks_left(rec) == 0
            assert rec.block_hash not in g.index and g.dropped == [rec.block_hash]
            assert g.evictions.counters["evicted_lazy"] == 1

    asyncio.run(scenario())


def test_cleaner_evicts_incomplete_blocks_and_keeps_complete_ones(small_memory):
    async def scenario():
        async with Ground(small_memory) as g:
            broken = await g.store.put(block_hash_of("broken"), os.urandom(SERVERS * CHUNK))
            whole_payload = os.urandom(SERVERS * CHUNK)
            whole = await g.store.put(block_hash_of("whole"), whole_payload)
            assert await g.evictions.clean_once() == []  # both complete: nothing to do
            lost_at = g.store.servers_at(broken, g.c.mission_ms())[7]
            assert await g.client.evict_block(lost_at, broken.block_hash, radius=0) == 1
            assert await g.evictions.clean_once() == [broken.block_hash]
            assert await g.chunks_left(broken) == 0
            assert broken.block_hash not in g.index and g.dropped == [broken.block_hash]
            assert whole.block_hash in g.index
            assert await g.store.get(whole) == whole_payload

    asyncio.run(scenario())


def turning_soon(c, lead_s: float, time_scale: float):
    """The same constellation seen by a ground clock running `time_scale` times faster, with a
    rotation step boundary `lead_s` wall seconds from now (migration is driven from the ground,
    so the satellites' own clocks do not matter)."""
    now = time.time() * 1000.0
    boundary = (math.floor(c.mission_ms() / c.step_ms) + 10) * c.step_ms
    target = boundary - lead_s * 1000.0 * time_scale
    epoch = (target - time_scale * now) / (1.0 - time_scale)  # mission(now) = epoch + scale*(now-epoch) = target
    return dataclasses.replace(c, epoch_ms=epoch, time_scale=time_scale)


def test_migration_finding_a_chunk_gone_evicts_the_block(small_memory):
    async def scenario():
        c = turning_soon(small_memory.constellation(), lead_s=1.0, time_scale=100.0)  # a step is 11.5 s wall
        async with Ground(small_memory, c) as g:
            driver = MigrationDriver(g.client, c, g.index, on_broken=g.evictions.evict_everywhere)
            whole_payload = os.urandom(SERVERS * CHUNK)
            whole = await g.store.put(block_hash_of("migrates"), whole_payload)
            broken = await g.store.put(block_hash_of("loses a chunk"), os.urandom(SERVERS * CHUNK))
            step = driver.current_step()
            ops = {op.server: op for op in migration.plan_block(broken, step, g.store.rotation)}
            assert len(ops) == 3  # the east column of the 3x3 box leaves line of sight
            server, op = sorted(ops.items())[0]
            assert await g.client.evict_block(op.source, broken.block_hash, radius=0) == 1
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while driver.current_step() == step:
                assert loop.time() < deadline, "the ground clock did not reach the step boundary"
                await asyncio.sleep(0.05)
            driver.tick()
            await driver.drain()
            st = driver.steps[step]
            assert st.broken == 1 and st.blocks == 1 and st.ops == 6
            # the whole block moved and reads back; the broken one is gone everywhere and from the index
            assert driver.layout_step(whole.block_hash) == step + 1
            assert await g.store.get(whole) == whole_payload
            assert broken.block_hash not in g.index and g.dropped == [broken.block_hash]
            assert await g.chunks_left(broken) == 0

    asyncio.run(scenario())
