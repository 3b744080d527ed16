"""`ConstellationBlockStore`: blocks striped over satellites (the contract: skymemory.store.contract).

A block (one KV-cache block, or any byte string) is cut into chunks of
`chunk_bytes`; chunk i goes to server i mod n, i.e. `servers[i % n]`. The
server list comes either from an explicit list of satellites or from a
placement callable `locate(record, now_ms) -> [satellite of server 1, ...]`
(skymemory.orbit.placement provides strategies; this module has none of its own).

`nearest_when_set(constellation)` is the placement that needs no shared state: a
block's servers are the satellites nearest the ground host when it was set, so
every process finds every block from its record alone.

`get_blocks_into(records, buffers)` puts blocks straight into the caller's
buffers; each block's CRC32C is folded from the chunks' CRCs the C path
verified, so nobody reads the bytes again to check them.

Sealed content (skymemory.protocol.seal): a store given the ground's content keys
(`content_keys=`, which `from_manifest` reads from the manifest unless `seal=False`)
seals every chunk under its tenant's key before it leaves and opens it as it lands
(in C on the fast path, through `cryptography` on the asyncio path); a record's
`chunk_bytes` is then the size on the wire and its `chunk_count` the sealed layout's.
A chunk that arrives intact but does not open is a `BlockMiss("seal")` naming the
satellite that served it (counted in `seal_failures`), never other bytes.
`for_tenant(salt)` is the same store sealing under another tenant's key (a cache
salt names a tenant; none is the default tenant).

`ConstellationBlockStore` stores blocks on satellites: put_block / get_block go
through the C fast path (`skymemory.link.fastpath`: one GET_CHUNKS per server,
datagrams moved in batches straight into the block's buffer; SET_CHUNK with a
window). It needs the compiled `skymemory._native` and says so loudly when it
is missing (fast=False selects the pure-Python asyncio client instead, for
comparison). `from_manifest(route=...)` picks the ground links (skymemory.store.routes;
default auto); `pace_Bps` paces put and get to the link. Probe and evict use
`SkyMemoryClient` on a private event-loop thread; `aput_block` / `aget_block` / ...
can be awaited from any event loop. Small one-chunk records (the KV index in orbit, kv.index.orbit_records) are kept
in copies on home satellites (store.record_copies; from_manifest gives the homes).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from skymemory.link.client import SkyMemoryClient
from skymemory.link.fastpath import (NOT_FOUND, OK, REBUILT, SEAL_FAILED, SEAL_OVERHEAD, BlockJob, BulkTransfer,
                                     TransferStats)
from skymemory.link.loop_thread import LoopThread
from skymemory.protocol import auth, native, wire
from skymemory.protocol.seal_layout import SealLayout
from skymemory.protocol.errors import ChunkNotFound, NakError, RequestTimeout, SkyMemoryError
from skymemory.protocol.stripes import DEFAULT_DATA, DEFAULT_PARITY, MAX_STRIPE_CHUNKS, StripeError, Stripes
from skymemory.store.contract import (AsyncBlockStore, BlockMiss, BlockRecord, BlockStore, BulkBlockReads,
                                      BulkBlockWrites, Landed, Sat, StreamedBlockReads, TenantSealing, check_hash,
                                      land_one_by_one, split_chunks)
from skymemory.store.object_homes import home_satellites
from skymemory.store.record_copies import RecordCopies
from skymemory.store.routes import DEFAULT_ROUTE, via_for_route

if TYPE_CHECKING:  # seal.py needs `cryptography`, which only a sealed store uses
    from skymemory.link.bell import ProgressBell
    from skymemory.protocol.seal import ContentKeys

Locate = Callable[[BlockRecord, int], Sequence[Sat]]
ContentKeySource = Callable[[], "ContentKeys"]  # the ground's content keys as they are now (a file may change)

log = logging.getLogger(__name__)


def sealed_chunk_count(n_bytes: int, chunk_bytes: int) -> int:
    """Chunks of a sealed block of n_bytes content, chunk_bytes each on the wire (seal.OVERHEAD of them the seal's)."""
    return max(1, -(-n_bytes // (chunk_bytes - SEAL_OVERHEAD)))


def stripe_width(asked: int, n_satellites: int, say: Callable[[str], None] | None = None) -> int:
    """How many satellites a block is striped over: `asked`, or every satellite of a constellation that has fewer
    (said once through `say`, never an error: a 3x3 serves as well as it can). The one rule for every store, so
    the CLI, the KV layer and the vLLM connector stripe alike over a small constellation."""
    if asked < 1:
        raise ValueError(f"servers must be at least 1, got {asked}")
    if asked <= n_satellites:
        return asked
    if say is not None:
        say(f"{asked} servers asked, the constellation has {n_satellites} satellites: striping over {n_satellites}")
    return n_satellites


def default_parity(n_servers: int) -> int:
    """Parity chunks a stripe over n_servers satellites gets unless asked: DEFAULT_PARITY, or fewer when there are
    too few satellites for one data chunk beside them (a constellation of one: none)."""
    return max(0, min(DEFAULT_PARITY, n_servers - 1))


def check_parity(parity: int, n_servers: int, say: Callable[[str], None] | None = log.info) -> int:
    """`parity` (m) for blocks striped over n_servers satellites: stripes of k = n_servers - m data chunks, each of
    its k + m chunks on a satellite of its own. Fewer satellites than the default stripe wants give a smaller k
    (said once through `say`); too few for one data chunk beside the parity is an error."""
    if not 0 <= parity < MAX_STRIPE_CHUNKS:
        raise ValueError(f"parity must be 0..{MAX_STRIPE_CHUNKS - 1}, got {parity}")
    if parity and n_servers > MAX_STRIPE_CHUNKS:
        raise ValueError(f"a coded stripe spans at most {MAX_STRIPE_CHUNKS} satellites, {n_servers} asked: "
                         f"ask fewer servers")
    if parity and n_servers <= parity:
        raise ValueError(f"parity {parity} needs at least {parity + 1} satellites (one data chunk a stripe), "
                         f"blocks are striped over {n_servers}")
    if parity and say is not None and n_servers - parity < DEFAULT_DATA:
        say(f"stripes of {n_servers - parity} data + {parity} parity chunks over {n_servers} satellites "
            f"({DEFAULT_DATA} + {parity} needs {DEFAULT_DATA + parity})")
    return parity


def nearest_when_set(constellation) -> Locate:
    """A placement: a block's servers are the n_servers satellites nearest the ground host when it was set.

    The record alone (its n_servers, created_ms and centre: the satellite overhead the host that set it) says
    where its chunks are, so any store in any process built with this placement finds a block another one set,
    wherever that one's ground site is (the convention of "explicit" records everywhere:
    skymemory.dashboard.blocks.holders).
    """
    return lambda record, _now_ms: constellation.nearest(record.n_servers, record.created_ms, tuple(record.centre))


class ConstellationBlockStore(BlockStore, BulkBlockReads, BulkBlockWrites, StreamedBlockReads, AsyncBlockStore,
                              TenantSealing, RecordCopies):
    """Blocks striped over satellites: chunk i -> servers[i % n]."""

    def __init__(
        self,
        addresses: Mapping[Sat, tuple[str, int]],
        servers: Sequence[Sat] | None = None,
        *,
        locate: Locate | None = None,
        strategy: str = "explicit",
        n_servers: int | None = None,
        centre: Callable[[int], Sat] | None = None,
        mission_ms: Callable[[], int] | None = None,
        chunk_bytes: int = wire.SKYMEM_DEFAULT_CHUNK_DATA,
        via: Sat | Callable[[Sat], Sat] | None = None,
        bind_host: str = "127.0.0.1",
        client_options: dict | None = None,
        request_timeout_s: float = 120.0,
        fast: bool = True,
        fast_options: dict | None = None,
        pace_Bps: float = 0.0,
        content_keys: "ContentKeys | ContentKeySource | None" = None,
        tenant: str | None = None,
        parity: int = 0,
        homes: Callable[[bytes], list[Sat]] | None = None,
    ) -> None:
        if (servers is None) == (locate is None):
            raise ValueError("give exactly one of `servers` (a list of satellites) or `locate` (a placement)")
        if servers is not None:
            if not servers:
                raise ValueError("servers must not be empty")
            fixed = [tuple(s) for s in servers]
            if len(set(fixed)) != len(fixed):
                raise ValueError("a satellite appears twice in servers")
            locate = lambda _record, _now: fixed  # noqa: E731
            n_servers = len(fixed)
        if not n_servers or n_servers < 1:
            raise ValueError("n_servers is needed with a placement callable")
        if servers is None:  # a placement picks among the satellites the store can reach
            n_servers = stripe_width(n_servers, len(addresses), log.info)
        if not 1 <= chunk_bytes <= wire.SKYMEM_MAX_CHUNK_DATA:
            raise ValueError(f"chunk_bytes must be 1..{wire.SKYMEM_MAX_CHUNK_DATA}")
        self.parity = check_parity(parity, n_servers)
        if content_keys is not None and chunk_bytes <= SEAL_OVERHEAD:
            raise ValueError(f"a sealed chunk needs more than {SEAL_OVERHEAD} bytes, got chunk_bytes {chunk_bytes}")
        # sealing: the content keys (or where to read them now) and the tenant this store seals for
        self._content_keys = content_keys if content_keys is None or callable(content_keys) else (lambda: content_keys)
        self.tenant = tenant
        self._sealers: dict = {}  # ContentKeys object -> this tenant's Sealer (a changed file is a new object)
        self.seal_failures: Counter[Sat] = Counter()  # chunks that came intact and did not open, per satellite
        self._owner = True  # False for a for_tenant view: closing it closes nothing shared
        self.locate = locate
        self._homes = homes  # a record's home satellites (store.record_copies); None: no records kept
        self.strategy = strategy
        self.n_servers = n_servers
        self.centre = centre or (lambda _now: (0, 0))
        self.mission_ms = mission_ms or (lambda: int(time.time() * 1000))
        self.chunk_bytes = chunk_bytes
        self.request_timeout_s = request_timeout_s
        self.client = SkyMemoryClient(addresses, via=via, mission_ms=self.mission_ms, bind=(bind_host, 0),
                                      **(client_options or {}))
        # the C fast path for whole blocks (raises ImportError when skymemory._native is not built)
        self.fast: BulkTransfer | None = None
        if fast:
            # the client's signer (SKYMEM_AUTH_KEY_FILE or client_options) signs the fast path's SETs too
            self.fast = BulkTransfer(addresses, via=via, bind_host=bind_host, station_id=self.client.station_id,
                                     signer=self.client.signer,
                                     **{"deadline_s": request_timeout_s, **(fast_options or {})})
        self.last_transfer: TransferStats | None = None  # counters of the latest fast-path call
        # put_block(s) and get_block(s) move chunk bytes no faster than this (0: as fast as the window
        # allows); a caller sets it to what the link carries (skymemory.store.objects does)
        if pace_Bps < 0:
            raise ValueError("pace_Bps must be >= 0")
        self.pace_Bps = pace_Bps
        # the jobs of the fast-path call running now (the latest started, when threads share the store),
        # so another thread can watch their status fill in (store.progress)
        self.in_flight: Sequence[BlockJob] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: LoopThread | None = None
        self._loop_lock = threading.Lock()  # the KV layer calls get_block from several threads

    @classmethod
    def from_manifest(cls, manifest, servers: Sequence[Sat] | None = None, *, route: str | None = None,
                      seal: bool = True, **kw) -> "ConstellationBlockStore":
        """Addresses, clock, centre, route, key (auth) and content keys (sealing) from a launch manifest.

        `route` (skymemory.store.routes: direct, relay, auto; default auto) decides which ground
        link each request goes up; `via=` instead gives the low-level choice itself (not both).
        `seal=False` keeps content in the clear (for benchmarks that compare); `tenant=` names
        the tenant the store seals for (for_tenant gives the others).
        """
        if route is not None and "via" in kw:
            raise ValueError("give route= or via=, not both")
        if seal and "content_keys" not in kw:
            from skymemory.protocol.seal import content_keys_for_manifest

            content_keys_for_manifest(manifest)  # a manifest without content keys fails here, in one line
            kw["content_keys"] = lambda: content_keys_for_manifest(manifest)
        c = manifest.constellation()
        # the manifest's station id (a ground site's own: launcher --sites) unless the caller names one: the
        # satellites answer each station at the address it last spoke from, so two sites must not share one
        kw["client_options"] = {"signer": auth.signer_for_manifest(manifest), "station_id": manifest.ground_station,
                                **(kw.get("client_options") or {})}
        kw.setdefault("chunk_bytes", manifest.chunk_size)
        if "via" not in kw:
            kw["via"] = via_for_route(route or DEFAULT_ROUTE, manifest)
        kw.setdefault("homes", lambda key: home_satellites(key, manifest))
        return cls(manifest.ground_addresses(), servers, mission_ms=c.mission_ms, centre=c.overhead,
                   bind_host=manifest.ground_host, **kw)

    @classmethod
    def nearest_from_manifest(cls, manifest, n_servers: int = 10, **kw) -> "ConstellationBlockStore":
        """from_manifest with the placement every process agrees on (nearest_when_set): the store to share
        blocks through, e.g. between a KVCManager and a vLLM engine (skymemory.integrations.vllm)."""
        return cls.from_manifest(manifest, locate=nearest_when_set(manifest.constellation()), n_servers=n_servers,
                                 **kw)

    # ---- sealing ---------------------------------------------------------------------------
    @property
    def sealed(self) -> bool:
        return self._content_keys is not None

    def sealer(self):
        """This store's tenant's Sealer under the content keys as they are now; None for an unsealed store."""
        if self._content_keys is None:
            return None
        keys = self._content_keys()
        sealer = self._sealers.get(id(keys))
        if sealer is None or sealer[0] is not keys:
            sealer = self._sealers[id(keys)] = (keys, keys.sealer(self.tenant))
        return sealer[1]

    def for_tenant(self, tenant: str | None) -> "ConstellationBlockStore":
        """The same store (its client, fast path and loop) sealing under `tenant`'s key; closing it closes nothing
        (close the store it came from). An unsealed store returns itself: a tenant then changes no byte."""
        if not self.sealed or tenant == self.tenant:
            return self
        view = copy.copy(self)
        view.tenant, view._sealers, view._owner = tenant, {}, False
        return view

    def chunk_count_of(self, n_bytes: int) -> int:
        """How many chunks this store cuts a block of n_bytes into (with parity: the wire's, data and parity)."""
        data = sealed_chunk_count(n_bytes, self.chunk_bytes) if self.sealed else max(1, -(-n_bytes // self.chunk_bytes))
        return Stripes(self.n_servers - self.parity, self.parity, data).wire_chunks if self.parity else data

    def _check_layout(self, record: BlockRecord) -> None:
        """A record this store cannot read (sealed when it is not, or the other way): a miss that says so."""
        if record.n_bytes < 0:
            return

        def on_wire(data: int) -> int:
            return Stripes(record.stripe_data, record.parity, data).wire_chunks if record.parity else data

        sealed = (on_wire(sealed_chunk_count(record.n_bytes, record.chunk_bytes)) if record.chunk_bytes > SEAL_OVERHEAD
                  else -1)
        plain = on_wire(max(1, -(-record.n_bytes // record.chunk_bytes)))
        fits = record.chunk_count == (sealed if self.sealed else plain)
        if not fits and sealed != plain:
            raise BlockMiss("format", f"block {record.block_hash.hex()[:16]} was stored "
                            f"{'unsealed' if self.sealed else 'sealed'}; this store reads "
                            f"{'sealed' if self.sealed else 'unsealed'} blocks only", block=record.block_hash)

    def _seal_miss(self, job: BlockJob) -> BlockMiss | None:
        """A BlockMiss naming the satellites whose chunks of `job` did not open (counted), or None."""
        bad = np.flatnonzero(job.status & 0x7F == SEAL_FAILED)  # rebuilt around (REBUILT) or not: its satellite lied
        if not len(bad):
            return None
        n = len(job.servers)
        by_sat = Counter(tuple(job.servers[int(i) % n]) for i in bad)
        self.seal_failures.update(by_sat)
        named = ", ".join(f"({p}, {s})" for p, s in by_sat)
        log.warning("SkyMemory: %d chunks of block %s from satellite %s do not open: altered on the satellite, or "
                    "not this block's", len(bad), job.block_hash.hex()[:16], named)
        return BlockMiss("seal", f"{len(bad)} of {job.chunk_count} chunks of block {job.block_hash.hex()[:16]} from "
                         f"satellite {named} do not open (altered, or not this block's): nothing of them is used",
                         satellites=tuple(by_sat), block=job.block_hash)

    # ---- private event loop thread ------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            return self._start_loop_locked()

    def _start_loop_locked(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop_thread = LoopThread("skymemory-blockstore")
            self._loop_thread.run(self.client.open(), 10)
            self._loop = self._loop_thread.loop
        return self._loop

    def _run(self, coro):
        loop = self._ensure_loop()
        return asyncio.run_coroutine_threadsafe(coro, loop).result(self.request_timeout_s)

    async def _on_loop(self, coro):
        """Await `coro` on the store's loop from any other running loop."""
        loop = self._ensure_loop()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    def close(self) -> None:
        if not self._owner:  # a for_tenant view shares its store's loop and client
            return
        with self._loop_lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._loop is not None:
            assert self._loop_thread is not None
            self._loop_thread.run(self.client.close(), 10)
            self._loop_thread.stop()
            self._loop = None

    def __enter__(self) -> "ConstellationBlockStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- sync API ----------------------------------------------------------------------------
    def put_block(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        if self.fast is not None:
            return self._fast_put(block_hash, payload)
        return self._run(self._put(block_hash, payload))

    def put_blocks(self, items: Sequence[tuple[bytes, bytes]]) -> list[BlockRecord]:
        """Several (block hash, payload) in one fast-path call, their chunks in flight together.

        Raises like put_block if any chunk is refused or unacknowledged (some blocks may
        then be stored all the same; they are unindexed and age out by LRU).
        """
        if not items:
            return []
        if self.fast is None:
            return [self.put_block(h, p) for h, p in items]
        return self._fast_put_many(items)

    def get_block(self, record: BlockRecord) -> bytes:
        if self.fast is not None and record.n_bytes >= 0:
            return self.get_blocks([record])[0]
        return self._run(self._get(record))

    def get_blocks(self, records: Sequence[BlockRecord], buffers: Sequence | None = None) -> list:
        """Several blocks in one fast-path call (their requests interleaved); BlockMiss if any is missing.

        `buffers` (optional, one writable buffer of at least n_bytes per record) are filled
        in place and returned; reusing them saves the page faults of fresh memory, which
        on loopback cost about as much as the transfer itself.
        """
        jobs = self.block_jobs(records, buffers)
        self.fetch_jobs(jobs, **self.get_pacing())
        return [job.buf for job in jobs]

    def get_pacing(self) -> dict:
        """fetch_jobs options for this store's pace: chunks asked a wave at a time, one chunk per server
        per wave (so the unpaced first wave is no more than a link's burst), the waves at pace_Bps."""
        return {"wave_chunks": self.n_servers, "pace_Bps": self.pace_Bps} if self.pace_Bps else {}

    def get_blocks_into(self, records: Sequence[BlockRecord], buffers: Sequence) -> Landed:
        """Fill `buffers` (one per record, n_bytes each at least) in one fast-path call.

        Each complete block's CRC32C is folded from its chunks' CRCs, which the C path
        verified on receipt; the first incomplete block ends the prefix (its miss says why).
        """
        if self.fast is None:  # the asyncio client: block by block, one CRC pass each

            def read(record: BlockRecord) -> tuple[bytes, int]:
                payload = self._run(self._get(record))
                return payload, native.crc32c(payload)

            return land_one_by_one(records, buffers, read, sealed=self.sealed)
        try:
            jobs = self.block_jobs(records, buffers)
        except BlockMiss as miss:
            return Landed(0, [], miss, sealed=self.sealed)
        for job in jobs:
            job.chunk_crcs = np.zeros(job.chunk_count, dtype=np.uint32)
        stats = self.fast.get(jobs, sealer=self.sealer())
        self.last_transfer = stats
        crcs = []
        for job in jobs:
            if not job.complete():
                return Landed(len(crcs), crcs, self._job_miss(job, stats), stats.first_reply_s or None, self.sealed)
            self._seal_miss(job)  # coded: a chunk that did not open was rebuilt around, and its satellite named
            crcs.append(job.block_crc32c())
        return Landed(len(crcs), crcs, None, stats.first_reply_s or None, self.sealed)

    def _job_miss(self, job: BlockJob, stats: TransferStats) -> BlockMiss:
        """Why a fast-path job did not complete."""
        sealed_miss = self._seal_miss(job)
        if sealed_miss is not None:
            return sealed_miss
        gone = int(np.count_nonzero(job.status == NOT_FOUND))
        coded = f" (stripes of {job.stripe_data} + {job.parity}: more than {job.parity} of a stripe lost)" \
            if job.parity else ""
        if gone:
            return BlockMiss("not-found", f"{gone} of {job.chunk_count} chunks of block "
                             f"{job.block_hash.hex()[:16]} missing{coded}", block=job.block_hash)
        if stats.outcome == "refused":
            return BlockMiss("nak", "a satellite refused GET_CHUNKS")
        data = job.data_status()
        missing = int(np.count_nonzero((data != OK) & (data & REBUILT == 0)))
        if stats.auth_failures and stats.auth_failures >= stats.packets_rx:
            return BlockMiss("auth", f"{missing} chunks of block {job.block_hash.hex()[:16]} did not arrive: every "
                             f"reply failed authentication ({stats.auth_failures}): is this the constellation's key?",
                             block=job.block_hash)
        reason = "crc" if stats.crc_failures and not stats.packets_rx - stats.crc_failures else "timeout"
        return BlockMiss(reason, f"{missing} chunks of block {job.block_hash.hex()[:16]} did not arrive "
                         f"({stats.crc_failures} failed CRC32C, {stats.retransmits} re-requests)", block=job.block_hash)

    # ---- fast path --------------------------------------------------------------------------
    @property
    def stream_deadline_s(self) -> float | None:
        """How long one fetch_jobs call may run; None with the fast path off (this store cannot stream then)."""
        return None if self.fast is None else self.fast.deadline_s

    def block_jobs(self, records: Sequence[BlockRecord], buffers: Sequence | None = None) -> list[BlockJob]:
        """Buffers (new ones unless given) and server lists for `records` (for callers that watch the transfer)."""
        if self.fast is None:
            raise RuntimeError("the fast path is off (fast=False)")
        if buffers is not None and len(buffers) != len(records):
            raise ValueError("one buffer per record")
        now = self.mission_ms()
        jobs = []
        for i, r in enumerate(records):
            if r.n_bytes < 0:
                raise ValueError("the record does not know the block size (n_bytes = -1)")
            self._check_layout(r)
            buf = bytearray(r.n_bytes) if buffers is None else buffers[i]
            jobs.append(self._job(r, buf, self._servers(r, now)))
        return jobs

    def _job(self, record: BlockRecord, buf, servers: Sequence[Sat], created_ms: int = 0) -> BlockJob:
        """The fast path's job for `record`'s block, in the record's layout (its parity, not this store's)."""
        return BlockJob(record.block_hash, buf, record.n_bytes, record.chunk_bytes, servers, created_ms=created_ms,
                        sealed=self.sealed, parity=record.parity, stripe_data=record.stripe_data)

    def fetch_jobs(self, jobs: Sequence[BlockJob], *, prefix: np.ndarray | None = None,
                   wave_chunks: int = 0, wave_doubling: bool = False, pace_Bps: float = 0.0,
                   window_bytes: int | None = None, bell: ProgressBell | None = None) -> TransferStats:
        """Run the C get for `jobs`; raises BlockMiss unless every chunk of every block arrived intact."""
        assert self.fast is not None
        self.in_flight = jobs
        try:
            stats = self.fast.get(jobs, prefix=prefix, wave_chunks=wave_chunks, wave_doubling=wave_doubling,
                                  pace_Bps=pace_Bps, window_bytes=window_bytes, sealer=self.sealer(), bell=bell)
        finally:
            self.in_flight = ()
        self.last_transfer = stats
        for job in jobs:
            if not job.complete():
                raise self._job_miss(job, stats)
            self._seal_miss(job)  # coded: a chunk that did not open was rebuilt around, and its satellite named
        if stats.outcome == "refused":
            raise BlockMiss("nak", "a satellite refused GET_CHUNKS")
        return stats

    def _fast_put(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        return self._fast_put_many([(block_hash, payload)])[0]

    def _fast_put_many(self, items: Sequence[tuple[bytes, bytes]]) -> list[BlockRecord]:
        """One C set call for all `items` (block hash, payload); raises unless every chunk was acknowledged."""
        now = self.mission_ms()
        records, jobs = [], []
        for block_hash, payload in items:
            check_hash(block_hash)
            payload = bytes(payload)
            record = BlockRecord(block_hash, len(payload), self.chunk_bytes, self.chunk_count_of(len(payload)), now,
                                 self.strategy, self.n_servers, tuple(self.centre(now)), self.parity)
            records.append(record)
            jobs.append(self._job(record, payload, self._servers(record, now), created_ms=now))
        assert self.fast is not None
        self.in_flight = jobs
        t0 = time.monotonic()
        try:
            stats = self.fast.set(jobs, pace_Bps=self.pace_Bps, sealer=self.sealer())
        finally:
            self.in_flight = ()
        elapsed = time.monotonic() - t0
        self.last_transfer = stats
        names = ", ".join(h.hex()[:16] for h, _ in items)
        if stats.outcome == "refused":
            status = stats.nak_status or wire.SKYMEM_NAK_NO_SPACE
            hint = (" (command authentication: the satellites need SET_CHUNK signed with a ground key they hold; "
                    "set SKYMEM_AUTH_KEY_FILE)" if status == wire.SKYMEM_NAK_AUTH_FAILED else "")
            name = wire.nak_name(status)
            raise NakError(status, name, f"SET_CHUNK of block {names} refused: NAK {name}{hint}")
        if stats.outcome != "done":
            missing = sum(int(np.count_nonzero(job.status != OK)) for job in jobs)
            deadline = self.fast.deadline_s
            why = (f"by the deadline ({deadline:.1f} s)" if elapsed >= deadline * 0.99
                   else f"after {self.fast.retries} resends each")
            raise RequestTimeout(f"SET_CHUNK: {missing} of {sum(j.chunk_count for j in jobs)} chunks "
                                 f"of block {names} not acknowledged {why} ({stats.retransmits} resends in all)")
        return records

    def restore_chunks(self, record: BlockRecord, payload, chunk_ids) -> TransferStats:
        """Store again the chunks `chunk_ids` (on the wire: data or parity) of `record`'s block, whose content is
        `payload`, on this store's servers now: what a repair sends to satellites that lost their share (the
        parity is computed again from the content; nothing else is sent). Raises like put_block."""
        if self.fast is None:
            raise RuntimeError("the fast path is off (fast=False)")
        job = self._job(record, payload, self._servers(record, self.mission_ms()), created_ms=record.created_ms)
        wanted = np.zeros(job.chunk_count, dtype=bool)
        wanted[list(chunk_ids)] = True
        job.status[~wanted] = OK  # the C set sends only what is not OK
        self.in_flight = [job]
        try:
            stats = self.fast.set([job], pace_Bps=self.pace_Bps, sealer=self.sealer())
        finally:
            self.in_flight = ()
        self.last_transfer = stats
        if stats.outcome != "done":
            raise RequestTimeout(f"SET_CHUNK: {int(np.count_nonzero(job.status != OK))} of {int(wanted.sum())} "
                                 f"chunks of block {record.block_hash.hex()[:16]} not stored again ({stats.outcome})")
        return stats

    def probe_block(self, block_hash: bytes) -> BlockRecord | None:
        return self._run(self._probe(block_hash))

    def evict_block(self, record: BlockRecord) -> None:
        self._run(self._evict(record))

    # ---- async API ---------------------------------------------------------------------------
    async def aput_block(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        if self.fast is not None:  # the C call releases the GIL: run it on a worker thread
            return await asyncio.to_thread(self._fast_put, block_hash, payload)
        return await self._on_loop(self._put(block_hash, payload))

    async def aget_block(self, record: BlockRecord) -> bytes:
        if self.fast is not None and record.n_bytes >= 0:
            return await asyncio.to_thread(self.get_block, record)
        return await self._on_loop(self._get(record))

    async def aprobe_block(self, block_hash: bytes) -> BlockRecord | None:
        return await self._on_loop(self._probe(block_hash))

    async def aevict_block(self, record: BlockRecord) -> None:
        await self._on_loop(self._evict(record))

    # ---- implementation (runs on the store's loop) ------------------------------------------------
    def _servers(self, record: BlockRecord, now: int) -> list[Sat]:
        servers = [tuple(s) for s in self.locate(record, now)]
        if len(servers) < record.n_servers:
            raise ValueError(f"placement gave {len(servers)} satellites for {record.n_servers} servers")
        return servers[:record.n_servers]

    def _no_stripes_here(self, parity: int) -> None:
        """The asyncio path moves chunks one by one, and neither codes nor decodes a stripe."""
        if parity:
            raise ValueError("coded stripes (parity > 0) move only on the C fast path: build skymemory._native "
                             "(`make native`), or store with parity=0")

    async def _put(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        check_hash(block_hash)
        self._no_stripes_here(self.parity)
        sealer = self.sealer()
        chunks = (split_chunks(bytes(payload), self.chunk_bytes) if sealer is None
                  else sealer.seal_block(block_hash, bytes(payload), self.chunk_bytes))
        now = self.mission_ms()
        record = BlockRecord(block_hash, len(payload), self.chunk_bytes, len(chunks), now, self.strategy,
                             self.n_servers, tuple(self.centre(now)))
        servers = self._servers(record, now)
        n = len(servers)
        results = await asyncio.gather(*(
            self.client.set_chunk(servers[i % n], block_hash, i, len(chunks), c, created_ms=now)
            for i, c in enumerate(chunks)), return_exceptions=True)  # let every request finish first
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        return record

    async def _get(self, record: BlockRecord) -> bytes:
        self._check_layout(record)
        self._no_stripes_here(record.parity)
        servers = self._servers(record, self.mission_ms())
        n = len(servers)
        count = record.chunk_count

        async def from_server(k: int) -> dict[int, bytes]:
            ids_left = math.ceil((count - k) / n) if k < count else 0
            got: dict[int, bytes] = {}
            first = k
            while ids_left > 0:  # GET_CHUNKS asks for at most SKYMEM_MAX_GET_CHUNKS at once
                batch = min(ids_left, wire.SKYMEM_MAX_GET_CHUNKS)
                got.update(await self.client.get_chunks(servers[k], record.block_hash, first, batch, n))
                first += batch * n
                ids_left -= batch
            return got

        parts = await asyncio.gather(*(from_server(k) for k in range(min(n, count))), return_exceptions=True)
        for p in parts:  # every server's requests have finished; report the first failure
            if isinstance(p, RequestTimeout):
                raise BlockMiss("crc" if "CRC32C" in str(p) else "timeout", str(p)) from None
            if isinstance(p, NakError):
                raise BlockMiss(f"nak-{p.reason_name.lower()}", str(p)) from None
            if isinstance(p, BaseException):
                raise p
        chunks: dict[int, bytes] = {}
        for p in parts:
            chunks.update(p)
        missing = [i for i in range(count) if i not in chunks]
        if missing:
            raise BlockMiss("not-found", f"{len(missing)} of {count} chunks missing, e.g. chunk {missing[0]}")
        sealer = self.sealer()
        if sealer is not None:
            chunks = self._open_chunks(sealer, record, chunks, servers)
        data = b"".join(chunks[i] for i in range(count))
        if record.n_bytes >= 0 and len(data) != record.n_bytes:
            raise BlockMiss("incomplete", f"read {len(data)} bytes, the record says {record.n_bytes}")
        return data

    def _open_chunks(self, sealer, record: BlockRecord, chunks: dict[int, bytes], servers) -> dict[int, bytes]:
        """The asyncio path's chunks opened (as the C path opens them); a seal miss names the satellites."""
        from skymemory.protocol.seal import SealError

        opened, bad, layout = {}, Counter(), SealLayout.of_record(record)
        for i, sealed in chunks.items():
            try:
                opened[i] = sealer.open_chunk(record.block_hash, i, record.chunk_count, record.n_bytes, sealed,
                                              layout=layout)
            except SealError:
                bad[tuple(servers[i % len(servers)])] += 1
        if bad:
            self.seal_failures.update(bad)
            named = ", ".join(f"({p}, {s})" for p, s in bad)
            log.warning("SkyMemory: %d chunks of block %s from satellite %s do not open", sum(bad.values()),
                        record.block_hash.hex()[:16], named)
            raise BlockMiss("seal", f"{sum(bad.values())} of {record.chunk_count} chunks of block "
                            f"{record.block_hash.hex()[:16]} from satellite {named} do not open (altered, or not this "
                            "block's): nothing of them is used", satellites=tuple(bad))
        return opened

    async def _probe(self, block_hash: bytes) -> BlockRecord | None:
        """Chunk 0 at the first server of the placement now (the nearest for ground strategies).

        Its descriptor gives the chunk count and creation time; for a block of several
        chunks the last data chunk is read too, which gives the exact size (and a block
        whose last chunk is gone is reported absent, as it could not be read anyway).
        The descriptor does not say whether the block was coded: the layouts it may have
        (this store's parity, none, the default) are tried in turn, and sealed, the first
        under which chunk 0 opens is the block's (the seal binds the chunk count and size).
        """
        now = self.mission_ms()
        guess = BlockRecord(block_hash, -1, self.chunk_bytes, 1, now, self.strategy, self.n_servers,
                            tuple(self.centre(now)), self.parity)
        servers = self._servers(guess, now)
        sealer = self.sealer()
        seal = SEAL_OVERHEAD if sealer is not None else 0  # of every chunk (the content is the rest)
        try:
            desc, data = await self.client.get_chunk_desc(servers[0], block_hash, 0)
            count = desc.chunk_count
            if count < 1:
                return None
            lengths = {0: len(data)}
            for parity in dict.fromkeys([self.parity, 0, default_parity(self.n_servers)]):
                try:
                    layout = Stripes.from_wire(count, self.n_servers - parity, parity) if parity else None
                except StripeError:
                    continue
                data_chunks = layout.data_chunks if layout else count
                last = layout.wire_id(data_chunks - 1) if layout else count - 1
                if last not in lengths:
                    lengths[last] = len(await self.client.get_chunk(servers[last % len(servers)], block_hash, last))
                chunk_bytes = len(data) if data_chunks > 1 else self.chunk_bytes
                if lengths[last] < seal:
                    continue
                n_bytes = (data_chunks - 1) * (chunk_bytes - seal) + lengths[last] - seal
                if sealer is None or self._opens(sealer, block_hash, count, n_bytes, data,
                                                 SealLayout(chunk_bytes, self.n_servers - parity, parity)):
                    return replace(guess, chunk_count=count, created_ms=desc.created_ms, chunk_bytes=chunk_bytes,
                                   n_bytes=n_bytes, parity=parity)
        except (ChunkNotFound, RequestTimeout, NakError):
            return None
        return None

    @staticmethod
    def _opens(sealer, block_hash: bytes, chunk_count: int, n_bytes: int, chunk0: bytes, layout) -> bool:
        from skymemory.protocol.seal import SealError

        try:
            sealer.open_chunk(block_hash, 0, chunk_count, n_bytes, chunk0, layout=layout)
            return True
        except SealError:
            return False

    async def _evict(self, record: BlockRecord) -> None:
        servers = self._servers(record, self.mission_ms())

        async def one(s: Sat) -> None:
            try:
                await self.client.evict_block(s, record.block_hash)
            except (ChunkNotFound, SkyMemoryError):
                pass  # already gone or unreachable: eviction is best effort

        await asyncio.gather(*(one(s) for s in servers[:min(len(servers), record.chunk_count)]))
