"""A placement-aware block store: chunks are found where the rotation has put them *now*.

`ConstellationBlockStore` (skymemory.store) stripes chunks over a fixed
server list or a `locate` callable; it does not know that a migrating layout
is in two places around a rotation step boundary, nor which satellite is
overhead.  This module adds exactly that, on top of the same client:

* **set**: centre = the satellite overhead now, servers from
  `placement.locate_servers`, the chunk descriptor carries the layout's
  `gossip_radius` (so an LRU eviction on board reaches every holder), and the
  request goes through the overhead satellite (`via`), as a ground host would.
* **get**: one GET_CHUNKS per server at the chunk's *current* satellite, sent
  via the current overhead satellite.  Chunks not found there are asked at
  the *previous step's* satellite, via the previous step's overhead satellite
  (around a boundary the migration may not have run yet) — and, when a
  migration driver runs, at the layout of the step it last confirmed (it may
  lag behind while it re-plans failed MIGRATEs) — then once more at the
  current one (the chunk may have moved in between).  Each place is asked
  through that step's overhead satellite, so a get never needs more hops
  than `placement.max_hops` from the satellite it goes up through.
* a get that still misses a chunk hands the block to `on_miss` (the lazy
  eviction of skymemory.store.eviction) before raising `BlockMiss`.

`HopCountingClient` is a `SkyMemoryClient` that remembers, per block, the
most ISL hops any DATA reply took (the reply route header's hop count, which
the satellites increment on every ISL hop back to the ground-link satellite).

`BlockIndex` is the ground's record of the blocks it set (a dict; the KV
layer's radix index plays this role in the full system).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import struct
from collections import Counter
from typing import Awaitable, Callable, Iterable

from skymemory.link.client import SkyMemoryClient
from skymemory.orbit import placement
from skymemory.orbit.constellation import Constellation
from skymemory.protocol import stripes, wire
from skymemory.protocol.seal_layout import SealLayout
from skymemory.protocol.errors import NakError, RequestTimeout
from skymemory.store.contract import BlockMiss, BlockRecord, split_chunks

Sat = tuple[int, int]

log = logging.getLogger(__name__)

# Byte offsets inside a reply packet (telemetry header, route header, reply header, descriptor).
_ROUTE = wire.SKYMEM_TLM_HDR_LEN
_REPLY = _ROUTE + wire.SKYMEM_ROUTE_HDR_LEN
_BODY = _REPLY + wire.SKYMEM_REPLY_HDR_LEN


class HopCountingClient(SkyMemoryClient):
    """SkyMemoryClient that records the ISL hop count of every DATA reply, per block."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.max_hops_by_block: dict[bytes, int] = {}
        self.hop_histogram: Counter[int] = Counter()

    def _on_datagram(self, data: bytes) -> None:
        super()._on_datagram(data)
        # Peek after the client handled it; only well-formed DATA replies are counted.
        if len(data) < _BODY + wire.SKYMEM_BLOCK_HASH_LEN:
            return
        if struct.unpack_from(">H", data, 0)[0] != wire.SKYMEM_REPLY_TLM_MID or data[_REPLY] != wire.SKYMEM_REPLY_DATA:
            return
        hops = data[_ROUTE + 17]  # SKYMEM_ROUTE_HOPS
        block = bytes(data[_BODY:_BODY + wire.SKYMEM_BLOCK_HASH_LEN])
        self.hop_histogram[hops] += 1
        if hops > self.max_hops_by_block.get(block, -1):
            self.max_hops_by_block[block] = hops


class BlockIndex:
    """The ground's block records by hash (insertion ordered)."""

    def __init__(self) -> None:
        self._records: dict[bytes, BlockRecord] = {}

    def add(self, record: BlockRecord) -> None:
        self._records[record.block_hash] = record

    def remove(self, block_hash: bytes) -> BlockRecord | None:
        return self._records.pop(block_hash, None)

    def get(self, block_hash: bytes) -> BlockRecord | None:
        return self._records.get(block_hash)

    def records(self) -> list[BlockRecord]:
        return list(self._records.values())

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._records

    def __len__(self) -> int:
        return len(self._records)


def rotation_of(constellation: Constellation) -> placement.Rotation:
    return placement.Rotation(constellation.planes, constellation.sats, constellation.step_ms)


def previous_step_time(record: BlockRecord, now_ms: int, step_ms: float) -> int | None:
    """A mission time in the step before `now_ms`, or None if the block did not exist then."""
    t = math.ceil(placement.rotation_step_index(now_ms, step_ms) * step_ms) - 1  # last ms before this step
    return t if t >= record.created_ms else None


def time_in_step(record: BlockRecord, step: int, step_ms: float) -> int | None:
    """A mission time inside `step` at which the block existed, or None."""
    t = max(record.created_ms, math.ceil(step * step_ms))
    return t if placement.rotation_step_index(t, step_ms) == step else None


LayoutStep = Callable[[bytes], "int | None"]  # block hash -> step whose layout its chunks are in (the driver knows)


def candidate_times(record: BlockRecord, now_ms: int, step_ms: float,
                    layout_step: LayoutStep | None = None) -> list[int]:
    """Mission times whose layouts may hold the block's chunks now, most likely first.

    Now, then the previous step (the MIGRATE of this boundary may not have run
    yet), then — when a migration driver tells where the block's layout is —
    the driver's confirmed step and the one after it (a driver that lags
    behind, e.g. re-planning failed MIGRATEs, leaves the chunks there).
    """
    times = [now_ms]
    prev = previous_step_time(record, now_ms, step_ms)
    if prev is not None:
        times.append(prev)
    confirmed = layout_step(record.block_hash) if layout_step is not None else None
    if confirmed is not None:
        seen = {placement.rotation_step_index(t, step_ms) for t in times}
        for step in (confirmed, confirmed + 1):
            t = time_in_step(record, step, step_ms)
            if t is not None and t <= now_ms and step not in seen:
                times.append(t)
                seen.add(step)
    return times


def block_hash_of(name: str | bytes) -> bytes:
    return hashlib.sha256(name.encode() if isinstance(name, str) else name).digest()


class PlacedStore:
    """Set and get blocks with a placement strategy, locating chunks at the current mission time.

    Runs on the caller's event loop (the client must be open on it).
    """

    def __init__(
        self,
        client: SkyMemoryClient,
        constellation: Constellation,
        *,
        strategy: str = "rotation-hop",
        n_servers: int = 9,
        chunk_bytes: int = wire.SKYMEM_DEFAULT_CHUNK_DATA,
        index: BlockIndex | None = None,
        on_miss: Callable[[BlockRecord], Awaitable[object]] | None = None,
        layout_step: LayoutStep | None = None,
    ) -> None:
        placement.check_strategy(strategy)
        placement.check_n_servers(n_servers)
        placement.check_fits(strategy, n_servers, constellation.planes, constellation.sats)
        if not 1 <= chunk_bytes <= wire.SKYMEM_MAX_CHUNK_DATA:
            raise ValueError(f"chunk_bytes must be 1..{wire.SKYMEM_MAX_CHUNK_DATA}, got {chunk_bytes}")
        self.client = client
        self.constellation = constellation
        self.rotation = rotation_of(constellation)
        self.strategy = strategy
        self.n_servers = n_servers
        self.chunk_bytes = chunk_bytes
        self.index = index if index is not None else BlockIndex()
        self.on_miss = on_miss
        self.layout_step = layout_step  # MigrationDriver.layout_step, when a driver runs
        self.counters: Counter[str] = Counter()
        self.seal_failures: Counter[Sat] = Counter()  # sealed gets: chunks that came intact and did not open

    # ---- locating ----------------------------------------------------------------------
    def servers_at(self, record: BlockRecord, mission_ms: int) -> list[Sat]:
        return placement.locate_servers(record, mission_ms, self.rotation)

    # ---- set -----------------------------------------------------------------------------
    async def put(self, block_hash: bytes, payload: bytes, *, strategy: str | None = None,
                  n_servers: int | None = None, sealer=None, parity: int = 0) -> BlockRecord:
        """Store the block and add its record to the index (only once every chunk is acknowledged).

        `sealer` (a skymemory.protocol.seal.Sealer): every chunk sealed under its tenant's key first.
        `parity` > 0: in coded stripes of n_servers - parity data chunks and `parity` parity chunks
        (skymemory.protocol.stripes), every chunk of a stripe on a server of its own."""
        strategy = strategy or self.strategy
        n = n_servers or self.n_servers
        placement.check_fits(strategy, n, self.rotation.planes, self.rotation.sats)
        if len(block_hash) != wire.SKYMEM_BLOCK_HASH_LEN:
            raise ValueError(f"block hash must be {wire.SKYMEM_BLOCK_HASH_LEN} bytes, got {len(block_hash)}")
        payload = bytes(payload)
        if parity:
            contents = stripes.cut(payload, n - parity, parity, self._plain(sealer))
            layout = SealLayout(self.chunk_bytes, n - parity, parity)
            chunks = contents if sealer is None else [
                sealer.seal_chunk(block_hash, i, len(contents), len(payload), c, layout=layout)
                for i, c in enumerate(contents)]
        else:
            chunks = (split_chunks(payload, self.chunk_bytes) if sealer is None
                      else sealer.seal_block(block_hash, payload, self.chunk_bytes))
        now = self.constellation.mission_ms()
        via = self.constellation.overhead(now)
        record = BlockRecord(block_hash, len(payload), self.chunk_bytes, len(chunks), now, strategy, n, via, parity)
        servers = self.servers_at(record, now)
        radius = min(placement.gossip_radius(strategy, n), 255)
        await asyncio.gather(*(
            self.client.set_chunk(servers[i % n], block_hash, i, len(chunks), c, created_ms=now,
                                  gossip_radius=radius, via=via)
            for i, c in enumerate(chunks)))
        self.index.add(record)
        self.counters["puts"] += 1
        return record

    # ---- get -----------------------------------------------------------------------------
    async def _fetch(self, record: BlockRecord, mission_ms: int, ids: Iterable[int],
                     sources: dict[int, Sat] | None = None) -> dict[int, bytes]:
        """Ask each server's satellite at `mission_ms` for the wanted chunk ids, via that time's overhead
        (`sources`, when given, learns which satellite sent each chunk)."""
        servers = self.servers_at(record, mission_ms)
        via = self.constellation.overhead(mission_ms)
        n = record.n_servers
        by_server: dict[int, list[int]] = {}
        for cid in sorted(ids):
            by_server.setdefault(cid % n, []).append(cid)

        async def one(k: int, wanted: list[int]) -> dict[int, bytes]:
            got: dict[int, bytes] = {}
            # consecutive ids of one server are n apart: ask in GET_CHUNKS ranges
            start = 0
            while start < len(wanted):
                end = start + 1
                while (end < len(wanted) and end - start < wire.SKYMEM_MAX_GET_CHUNKS
                       and wanted[end] - wanted[end - 1] == n):
                    end += 1
                got.update(await self.client.get_chunks(servers[k], record.block_hash, wanted[start],
                                                        end - start, n, via=via))
                start = end
            return got

        parts = await asyncio.gather(*(one(k, w) for k, w in by_server.items()))
        result: dict[int, bytes] = {}
        for k, p in zip(by_server, parts):
            result.update(p)
            if sources is not None:
                sources.update((cid, servers[k]) for cid in p)
        return result

    def _open(self, sealer, record: BlockRecord, chunks: dict[int, bytes], sources: dict[int, Sat]) -> dict[int, bytes]:
        """Sealed chunks opened; a chunk that does not open is a seal miss naming the satellite it came from."""
        from skymemory.protocol.seal import OVERHEAD, SealError

        # the size the chunks were sealed with (a probed record does not know it: the chunks say it)
        n_bytes = record.n_bytes if record.n_bytes >= 0 else sum(len(c) - OVERHEAD for c in chunks.values())
        opened, bad, layout = {}, Counter(), SealLayout.of_record(record)
        for cid, sealed in chunks.items():
            try:
                opened[cid] = sealer.open_chunk(record.block_hash, cid, record.chunk_count, n_bytes, sealed,
                                                layout=layout)
            except SealError:
                bad[sources.get(cid)] += 1
        if bad:
            self.counters["seal_failures"] += sum(bad.values())
            self.seal_failures.update(bad)
            named = ", ".join(str(s) for s in bad)
            log.warning("SkyMemory: %d chunks of block %s from satellite %s do not open", sum(bad.values()),
                        record.block_hash.hex()[:16], named)
            raise BlockMiss("seal", f"{sum(bad.values())} of {record.chunk_count} chunks of block "
                            f"{record.block_hash.hex()[:16]} from satellite {named} do not open (altered, or not this "
                            "block's): nothing of them is used", satellites=tuple(s for s in bad if s is not None))
        return opened

    def _plain(self, sealer) -> int:
        """Content bytes a chunk carries (sealed: the seal's overhead less)."""
        from skymemory.protocol.seal import OVERHEAD

        return self.chunk_bytes - (OVERHEAD if sealer is not None else 0)

    async def _fetch_wherever(self, record: BlockRecord, wanted: set[int], sources: dict[int, Sat]) -> dict[int, bytes]:
        """The wanted chunks from every place they may be now (candidate_times), the likeliest first."""
        now = self.constellation.mission_ms()
        times = candidate_times(record, now, self.rotation.step_ms, self.layout_step)
        try:
            chunks = await self._fetch(record, now, wanted, sources)
            missing = wanted - chunks.keys()
            for t in times[1:]:
                if not missing:
                    break
                self.counters["older_layout_fetches"] += 1
                chunks.update(await self._fetch(record, t, missing, sources))
                missing = wanted - chunks.keys()
            if missing:  # it may have moved while we looked elsewhere
                self.counters["refetches"] += 1
                chunks.update(await self._fetch(record, self.constellation.mission_ms(), missing, sources))
        except RequestTimeout as exc:
            raise BlockMiss("timeout", str(exc)) from None
        except NakError as exc:
            raise BlockMiss(f"nak-{exc.reason_name.lower()}", str(exc)) from None
        return chunks

    async def _get_coded(self, record: BlockRecord, sealer) -> bytes:
        """A coded block: its data chunks; the parity of the stripes missing some (not found, or not opening);
        every stripe rebuilt from what came. A chunk that does not open is not used, and its satellite counted."""
        layout = stripes.Stripes.from_wire(record.chunk_count, record.stripe_data, record.parity)
        sources: dict[int, Sat] = {}
        data_ids = {layout.wire_id(d) for d in range(layout.data_chunks)}
        chunks = await self._fetch_wherever(record, data_ids, sources)
        n_bytes = record.n_bytes if record.n_bytes >= 0 else None
        opened = self._open_coded(sealer, record, chunks, sources, layout, n_bytes)
        short = [s for s in range(layout.count) if any(i not in opened for i in layout.members(s)[:layout.data_in(s)])]
        if short:
            self.counters["parity_fetches"] += 1
            parity_ids = {i for s in short for i in layout.members(s)[layout.data_in(s):]}
            more = await self._fetch_wherever(record, parity_ids, sources)
            opened.update(self._open_coded(sealer, record, more, sources, layout, n_bytes))
        try:
            return stripes.join(layout, opened, self._plain(sealer), n_bytes)
        except stripes.StripeError as exc:
            self.counters["misses"] += 1
            if self.on_miss is not None:
                await self.on_miss(record)
            raise BlockMiss("not-found", f"block {record.block_hash.hex()[:16]}: {exc}") from None

    def _open_coded(self, sealer, record: BlockRecord, chunks: dict[int, bytes], sources: dict[int, Sat],
                    layout, n_bytes: int | None) -> dict[int, bytes]:
        """The chunks that open (all of them unsealed); the others counted against their satellites."""
        if sealer is None:
            return dict(chunks)
        from skymemory.protocol.seal import OVERHEAD, SealError

        if n_bytes is None:  # a probed record: the size the chunks were sealed with, from the last data chunk
            last = chunks.get(layout.wire_id(layout.data_chunks - 1))
            n_bytes = -1 if last is None else (layout.data_chunks - 1) * self._plain(sealer) + len(last) - OVERHEAD
        opened, seal_layout = {}, SealLayout.of_record(record)
        for cid, sealed in chunks.items():
            try:
                opened[cid] = sealer.open_chunk(record.block_hash, cid, record.chunk_count, n_bytes, sealed,
                                                layout=seal_layout)
            except SealError:
                self.counters["seal_failures"] += 1
                self.seal_failures[sources.get(cid)] += 1
                log.warning("SkyMemory: chunk %d of block %s from satellite %s does not open: rebuilt around", cid,
                            record.block_hash.hex()[:16], sources.get(cid))
        return opened

    async def get(self, record: BlockRecord, *, sealer=None) -> bytes:
        """The block's bytes; BlockMiss if a chunk is in none of the places it may be (candidate_times), or
        (with `sealer`) one that came does not open: `BlockMiss("seal")` naming where it came from. A coded
        block (record.parity) needs only as many chunks of each stripe as it has data chunks."""
        if record.parity:
            data = await self._get_coded(record, sealer)
            self.counters["gets"] += 1
            return data
        wanted = set(range(record.chunk_count))
        sources: dict[int, Sat] = {}
        chunks = await self._fetch_wherever(record, wanted, sources)
        missing = wanted - chunks.keys()
        if missing:
            self.counters["misses"] += 1
            if self.on_miss is not None:
                await self.on_miss(record)
            raise BlockMiss("not-found", f"{len(missing)} of {record.chunk_count} chunks of block "
                                         f"{record.block_hash.hex()[:16]} missing, e.g. chunk {min(missing)}")
        if sealer is not None:
            chunks = self._open(sealer, record, chunks, sources)
        data = b"".join(chunks[i] for i in range(record.chunk_count))
        if record.n_bytes >= 0 and len(data) != record.n_bytes:  # -1: size unknown (a probed record)
            raise BlockMiss("incomplete", f"read {len(data)} bytes, the record says {record.n_bytes}")
        self.counters["gets"] += 1
        return data
