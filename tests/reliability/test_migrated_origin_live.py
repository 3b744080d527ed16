"""A migrated chunk keeps its origin ground station (issue 15): when LRU later evicts it on the
satellite it migrated to, the EVICTED notice still reaches the ground station that set it.

Real skymem_node processes: the ground sets a chunk on (0,0), MIGRATEs it to (0,1), then fills
(0,1) until its store evicts the migrated block; the notice comes back down through (0,0), the
satellite that carried the original SET_CHUNK up.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient

CHUNK = 1024
BUDGET = 32 * 1024  # a few dozen slots: filling evicts by LRU


def test_lru_eviction_of_a_migrated_chunk_reaches_its_ground_station(node_built):
    moved = hashlib.sha256(b"migrated-then-evicted").digest()
    with Cluster(1, 2, ["--memory-budget", str(BUDGET), "--chunk-size", str(CHUNK)]) as cl:

        async def go():
            async with SkyMemoryClient(cl.ground_addresses(), via=(0, 0), station_id=5, timeout=0.5,
                                       retries=6) as c:
                await c.set_chunk((0, 0), moved, 0, 1, b"m" * CHUNK)
                assert await c.migrate((0, 0), moved, 0, 1, (0, 1)) == 1
                assert await c.get_chunk((0, 1), moved, 0) == b"m" * CHUNK
                before = (await c.stats((0, 1))).lru_evictions
                k = 0
                deadline = time.monotonic() + 60  # generous: the notice normally follows within milliseconds
                while not any(h == moved for _, h in c.evicted):
                    assert time.monotonic() < deadline, f"no EVICTED notice after {k} fillers: {c.evicted}"
                    await c.set_chunk((0, 1), hashlib.sha256(b"filler-%d" % k).digest(), 0, 1, bytes(CHUNK))
                    k += 1
                assert (await c.stats((0, 1))).lru_evictions > before
                return [src for src, h in c.evicted if h == moved]

        sources = asyncio.run(go())
        assert sources == [(0, 1)], sources  # announced by the satellite that evicted it
