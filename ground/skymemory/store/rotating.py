"""`RotatingBlockStore`: the block-store contract (docs/CONTRACTS.md) over a turning constellation.

One object the KV layer can use in place of `ConstellationBlockStore` when the
constellation rotates.  On a private event-loop thread it runs, over one
client:

* `PlacedStore` — sets with a placement strategy around the overhead
  satellite, gets from where the chunks are *now* (and where a lagging
  migration may have left them);
* `MigrationDriver` — MIGRATEs every block's leaving column at each rotation
  step boundary;
* `Evictions` — drains REPLY_EVICTED notices, evicts blocks a get or a
  MIGRATE found incomplete, and (if `cleaner_period_s`) probes for incomplete
  blocks; every eviction ends in `on_evicted(block_hash)` and in every callback
  given to `subscribe_evictions`: there the KV layer (KVCManager subscribes
  itself) drops the block and its descendants from its radix index.

Only blocks set through this store are migrated (they are in its index).

It keeps records too (store.record_copies: the KV index in orbit, kv.index.orbit_records), on the home satellites the
manifest gives each record key. Records do not migrate: a home is found from the key alone by any ground host,
wherever that host is, and each request goes up to the satellite overhead now and over the ISLs to the home.

Content is sealed by default (skymemory.protocol.seal: every chunk under the tenant's key, from the
manifest's content keys; `seal=False` for benchmarks that compare), as ConstellationBlockStore seals it;
`for_tenant(salt)` is this store sealing for another tenant.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from dataclasses import replace
from typing import Callable

from skymemory.link.loop_thread import LoopThread
from skymemory.orbit import placement
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest
from skymemory.protocol.seal import OVERHEAD, content_keys_for_manifest
from skymemory.protocol.errors import ChunkNotFound, RequestTimeout
from skymemory.store.contract import (AsyncBlockStore, BlockMiss, BlockRecord, BlockStore, EvictionNotices, Sat,
                                      TenantSealing)
from skymemory.store.eviction import Evictions
from skymemory.store.constellation import check_parity
from skymemory.store.object_homes import home_satellites
from skymemory.store.placed import BlockIndex, HopCountingClient, PlacedStore
from skymemory.store.record_copies import RecordCopies
from skymemory.store.rotation import MigrationDriver

log = logging.getLogger(__name__)


class RotatingBlockStore(BlockStore, EvictionNotices, AsyncBlockStore, TenantSealing, RecordCopies):
    def __init__(self, manifest: Manifest, *, strategy: str = "rotation-hop", n_servers: int = 9,
                 on_evicted: Callable[[bytes], object] | None = None, cleaner_period_s: float = 0.0,
                 client_options: dict | None = None, request_timeout_s: float = 120.0, seal: bool = True,
                 tenant: str | None = None, parity: int = 0) -> None:
        """`parity` > 0: blocks in coded stripes of n_servers - parity data chunks and `parity` parity chunks
        (skymemory.protocol.stripes): migration moves them as any chunks, and a get rebuilds what up to
        `parity` satellites of a stripe no longer give."""
        if cleaner_period_s < 0:
            raise ValueError(f"cleaner period must be >= 0 (0 = no cleaner), got {cleaner_period_s}")
        if seal:
            content_keys_for_manifest(manifest)  # a manifest without content keys fails here, in one line
        self._seal = seal
        self.tenant = tenant
        self._owner = True  # False for a for_tenant view: closing it closes nothing shared
        self.manifest = manifest
        self.constellation = manifest.constellation()
        self._homes = lambda key: home_satellites(key, manifest)  # a record's (store.record_copies)
        placement.check_fits(strategy, n_servers, self.constellation.planes, self.constellation.sats)
        self.strategy = strategy
        self.n_servers = n_servers
        self.parity = check_parity(parity, n_servers)
        self.on_evicted = on_evicted
        # everyone told of an eviction: on_evicted first, then subscribe_evictions callbacks
        self._eviction_listeners: list[Callable[[bytes], object]] = [on_evicted] if on_evicted is not None else []
        self._listeners_lock = threading.Lock()
        self.cleaner_period_s = cleaner_period_s
        self.client_options = dict(client_options or {})
        self.request_timeout_s = request_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: LoopThread | None = None
        self._stop: asyncio.Event | None = None
        self._background: list[asyncio.Future] = []
        self._start_lock = threading.Lock()

    # ---- eviction listeners --------------------------------------------------------------------------
    def subscribe_evictions(self, callback: Callable[[bytes], object]) -> None:
        """Call `callback(block_hash)` for every block this store drops: LRU notices from the
        satellites, lazy evictions after a failed get or MIGRATE, the cleaner, evict_block.

        Callbacks run on the store's loop thread; one that raises is logged, the others still run.
        """
        if not callable(callback):
            raise TypeError("subscribe_evictions needs a callable taking the block hash")
        with self._listeners_lock:
            self._eviction_listeners.append(callback)

    def _evicted(self, block_hash: bytes) -> None:
        with self._listeners_lock:
            listeners = list(self._eviction_listeners)
        for callback in listeners:
            try:
                callback(block_hash)
            except Exception:  # noqa: BLE001 - one bad listener must not starve the others
                log.exception("eviction listener %r failed for block %s", callback, block_hash.hex()[:16])

    # ---- sealing -------------------------------------------------------------------------------------
    @property
    def sealed(self) -> bool:
        return self._seal

    def sealer(self):
        """This store's tenant's Sealer under the content keys as they are now (None: unsealed)."""
        return content_keys_for_manifest(self.manifest).sealer(self.tenant) if self._seal else None

    def for_tenant(self, tenant: str | None) -> "RotatingBlockStore":
        """The same store (its loop, client, migrations) sealing under `tenant`'s key; closing it closes
        nothing (close the store it came from)."""
        if not self._seal or tenant == self.tenant:
            return self
        self._ensure_started()  # the view shares the loop: it must exist before the copy
        view = copy.copy(self)
        view.tenant, view._owner = tenant, False
        return view

    def _record_via(self) -> Sat:
        """Records go up to the satellite overhead now, as every request of this store does."""
        return self.constellation.overhead(self.constellation.mission_ms())

    # ---- private loop with the client, driver and eviction tasks --------------------------------
    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        # the KV layer's first get may come from several fetch threads at once: one of them starts the loop
        with self._start_lock:
            if self._loop is not None:
                return self._loop
            loop_thread = LoopThread("skymemory-rotating-store")
            loop_thread.run(self._start(), 10)
            self._loop_thread, self._loop = loop_thread, loop_thread.loop  # published once started
            return self._loop

    async def _start(self) -> None:
        m, c = self.manifest, self.constellation
        self.client = HopCountingClient(m.ground_addresses(), station_id=m.ground_station, mission_ms=c.mission_ms,
                                        bind=(m.ground_host, 0),
                                        **{"signer": signer_for_manifest(m), **self.client_options})
        await self.client.open()
        self.index = BlockIndex()
        self.evictions = Evictions(self.client, c, self.index, on_evicted=self._evicted)
        self.driver = MigrationDriver(self.client, c, self.index, on_broken=self.evictions.evict_everywhere)
        self.evictions.layout_step = self.driver.layout_step
        self.store = PlacedStore(self.client, c, strategy=self.strategy, n_servers=self.n_servers,
                                 chunk_bytes=m.chunk_size, index=self.index, on_miss=self.evictions.evict_everywhere,
                                 layout_step=self.driver.layout_step)
        self._stop = asyncio.Event()
        self._background = [asyncio.ensure_future(self.driver.run(self._stop)),
                            asyncio.ensure_future(self.evictions.listen(self._stop))]
        if self.cleaner_period_s > 0:
            self._background.append(asyncio.ensure_future(self.evictions.run_cleaner(self._stop,
                                                                                     self.cleaner_period_s)))

    async def _shutdown(self) -> None:
        assert self._stop is not None
        self._stop.set()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.client.close()

    def close(self) -> None:
        if not self._owner:  # a for_tenant view shares its store's loop
            return
        with self._start_lock:
            if self._loop is None:
                return
            assert self._loop_thread is not None
            self._loop_thread.run(self._shutdown(), 60)
            self._loop_thread.stop()
            self._loop = None

    def __enter__(self) -> "RotatingBlockStore":
        self._ensure_started()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Every public call goes through these two with a coroutine of this class's own: the client, store and
    # evictions exist only once the loop has started, so a coroutine must not be built from them before
    # (`self.store.get(...)` as an argument would be read before `_ensure_started` runs: a fresh store could
    # not read what another process stored).
    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_started()).result(self.request_timeout_s)

    async def _on_loop(self, coro):
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._ensure_started()))

    # ---- the BlockStore contract ------------------------------------------------------------------------
    def put_block(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        return self._run(self._put(block_hash, payload))

    def get_block(self, record: BlockRecord) -> bytes:
        return self._run(self._get(record))

    def probe_block(self, block_hash: bytes) -> BlockRecord | None:
        return self._run(self._probe(block_hash))

    def evict_block(self, record: BlockRecord) -> None:
        self._run(self._evict(record))

    async def aput_block(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        return await self._on_loop(self._put(block_hash, payload))

    async def aget_block(self, record: BlockRecord) -> bytes:
        return await self._on_loop(self._get(record))

    async def _get(self, record: BlockRecord) -> bytes:
        return await self.store.get(record, sealer=self.sealer())

    async def _evict(self, record: BlockRecord) -> None:
        await self.evictions.evict_everywhere(record, "requested")

    async def _put(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        try:
            return await self.store.put(block_hash, payload, sealer=self.sealer(), parity=self.parity)
        except (RequestTimeout, ChunkNotFound) as exc:
            raise BlockMiss("timeout", f"put failed: {exc}") from None

    def records(self) -> list[BlockRecord]:
        return self._run(self._records())

    async def _records(self) -> list[BlockRecord]:
        return self.index.records()

    async def _probe(self, block_hash: bytes) -> BlockRecord | None:
        """Chunk 0 (server 1) of a block set with this store's layout, wherever the rotation has put it.

        Server 1's current satellite depends on the step the block was set in
        (mod the box width), so every possible phase is asked; the descriptor
        found gives the real creation time and chunk count.
        """
        known = self.index.get(block_hash)
        if known is not None:
            return known
        c, rot = self.constellation, self.store.rotation
        now = c.mission_ms()
        now_step = placement.rotation_step_index(now, rot.step_ms)
        width = placement.box_width(self.n_servers) if self.strategy in placement.MIGRATING_STRATEGIES else 1
        guesses = {}
        for back in range(min(width, now_step + 1)):
            created = int(now - back * rot.step_ms)
            guess = BlockRecord(block_hash, -1, self.store.chunk_bytes, 1, created, self.strategy, self.n_servers,
                                c.overhead(created), self.parity)
            guesses.setdefault(self.store.servers_at(guess, now)[0], guess)

        async def ask(sat):
            try:
                return await self.client.get_chunk_desc(sat, block_hash, 0, via=c.overhead(now))
            except (ChunkNotFound, RequestTimeout):
                return None

        for found in await asyncio.gather(*(ask(s) for s in guesses)):
            if found is None:
                continue
            desc, data = found
            seal = OVERHEAD if self._seal else 0  # a sealed chunk carries that much besides its content
            single = desc.chunk_count == 1 + self.parity  # one data chunk (and its stripe's parity, if coded)
            record = replace(next(iter(guesses.values())), chunk_count=desc.chunk_count, created_ms=desc.created_ms,
                             centre=c.overhead(desc.created_ms),
                             n_bytes=len(data) - seal if single else -1,
                             chunk_bytes=max(len(data), 1) if not single else self.store.chunk_bytes)
            return record
        return None
