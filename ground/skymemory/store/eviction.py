"""Eviction propagation on the ground (paper §3.9): a block missing one chunk is useless,
so it must leave the satellites and the ground index together.

Three paths, all ending in `Evictions.forget(block_hash)`, which removes the
record from the index and tells the owner (`on_evicted(block_hash)`; the KV
layer drops the block and its descendants in its radix tree there):

1. **Notices** (`listen`): a satellite that LRU-evicts a chunk purges the
   block locally, gossips EVICT_BLOCK over the block's `gossip_radius` to the
   other holders, and sends REPLY_EVICTED to the ground station that set the
   chunk.  The client queues those notices in `client.evicted`; `listen`
   drains the queue and forgets each block a satellite that may hold it reported.
2. **Lazy** (`evict_everywhere`, used as `PlacedStore(on_miss=...)` and by the
   migration driver): a get or a MIGRATE that finds a chunk missing sends a
   radius-0 EVICT_BLOCK to every satellite that may hold a chunk of the block
   (this step's, the previous step's and the driver's layout) and forgets it.
3. **Cleaner** (`clean_once` / `run_cleaner`): probes one chunk per server of
   every indexed block; a block with a server missing its chunk in both
   places is evicted as in 2.  It catches evictions whose notice was lost.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from typing import Callable

from skymemory.link.client import SkyMemoryClient
from skymemory.orbit import placement
from skymemory.orbit.constellation import Constellation
from skymemory.protocol.errors import SkyMemoryError
from skymemory.store.contract import BlockRecord
from skymemory.store.placed import BlockIndex, LayoutStep, candidate_times, rotation_of

Sat = tuple[int, int]


class Evictions:
    def __init__(self, client: SkyMemoryClient, constellation: Constellation, index: BlockIndex,
                 on_evicted: Callable[[bytes], object] | None = None, layout_step: LayoutStep | None = None) -> None:
        self.client = client
        self.constellation = constellation
        self.rotation = rotation_of(constellation)
        self.index = index
        self.on_evicted = on_evicted
        self.layout_step = layout_step  # MigrationDriver.layout_step, when a driver runs
        self.counters: Counter[str] = Counter()
        self.notices: deque[tuple[Sat, bytes]] = deque(maxlen=1024)  # the latest REPLY_EVICTED: (satellite, block)

    # ---- the common end -------------------------------------------------------------
    def forget(self, block_hash: bytes, reason: str) -> bool:
        """Drop the block from the index and tell the owner; False if it was not indexed."""
        if self.index.remove(block_hash) is None:
            return False
        self.counters[f"forgotten_{reason}"] += 1
        if self.on_evicted is not None:
            self.on_evicted(block_hash)
        return True

    def holders(self, record: BlockRecord, mission_ms: int) -> list[Sat]:
        """Satellites that may hold a chunk now: this step's layout, the previous step's, the driver's."""
        sats: set[Sat] = set()
        for t in candidate_times(record, mission_ms, self.rotation.step_ms, self.layout_step):
            sats.update(placement.block_satellites(record, t, self.rotation))
        return sorted(sats)

    # ---- 2. lazy / directed ---------------------------------------------------------------
    async def evict_everywhere(self, record: BlockRecord, reason: str = "lazy") -> int:
        """Radius-0 EVICT_BLOCK to every possible holder, then forget the block; returns chunks purged."""
        now = self.constellation.mission_ms()
        via = self.constellation.overhead(now)

        async def one(s: Sat) -> int:
            try:
                return await self.client.evict_block(s, record.block_hash, radius=0, via=via)
            except SkyMemoryError:
                self.counters["evict_errors"] += 1  # unreachable: the cleaner will come back to it
                return 0

        purged = sum(await asyncio.gather(*(one(s) for s in self.holders(record, now))))
        self.counters[f"evicted_{reason}"] += 1
        self.forget(record.block_hash, reason)
        return purged

    # ---- 1. notices ---------------------------------------------------------------------------
    def drain_notices(self) -> list[bytes]:
        """Forget every block a satellite that may hold it reported as LRU-evicted since the last call.

        A notice is signed by the satellite that sends it, which proves who sent it, not that it held the
        block: one from a satellite the block was never placed on (now, a step ago, or in the migration
        driver's layout) is not believed (D1 of issue 53: a captured satellite could otherwise make the
        ground forget any block). Such a block stays indexed; if it is gone after all, the next get evicts it.
        """
        forgotten = []
        while self.client.evicted:
            src, block_hash = self.client.evicted.pop(0)
            self.notices.append((src, block_hash))
            self.counters["notices"] += 1
            record = self.index.get(block_hash)
            if record is not None and tuple(src) not in self.holders(record, self.constellation.mission_ms()):
                self.counters["notices_refused"] += 1
                continue
            if self.forget(block_hash, "notice"):
                forgotten.append(block_hash)
        return forgotten

    async def listen(self, stop: asyncio.Event, period_s: float = 0.05) -> None:
        """Drain notices until `stop` is set (the client queues them as they arrive)."""
        while not stop.is_set():
            self.drain_notices()
            try:
                await asyncio.wait_for(stop.wait(), period_s)
            except asyncio.TimeoutError:
                pass
        self.drain_notices()

    # ---- 3. cleaner -------------------------------------------------------------------------------
    async def is_incomplete(self, record: BlockRecord) -> bool:
        """True when some server's first chunk is in none of the places it may be (candidate_times)."""
        now = self.constellation.mission_ms()
        # the places it may be, then the current one again (the chunk may move while we look)
        times = candidate_times(record, now, self.rotation.step_ms, self.layout_step) + [now]
        places = [(placement.locate_servers(record, t, self.rotation), self.constellation.overhead(t)) for t in times]

        async def server_present(k: int) -> bool:
            for servers, via in places:
                if await self.client.probe(servers[k], record.block_hash, k, via=via) is not None:
                    return True
            return False

        n = min(record.n_servers, record.chunk_count)
        try:
            present = await asyncio.gather(*(server_present(k) for k in range(n)))
        except SkyMemoryError:
            self.counters["probe_errors"] += 1
            return False  # cannot tell now; try again next round
        return not all(present)

    async def clean_once(self) -> list[bytes]:
        """Evict every indexed block found incomplete; returns their hashes."""
        evicted = []
        for record in self.index.records():
            if await self.is_incomplete(record):
                await self.evict_everywhere(record, "cleaner")
                evicted.append(record.block_hash)
        self.counters["cleaner_rounds"] += 1
        return evicted

    async def run_cleaner(self, stop: asyncio.Event, period_s: float) -> None:
        if not period_s > 0:
            raise ValueError(f"cleaner period must be > 0, got {period_s}")
        while not stop.is_set():
            await self.clean_once()
            try:
                await asyncio.wait_for(stop.wait(), period_s)
            except asyncio.TimeoutError:
                pass
