"""`SkyMemoryClient`: the asyncio ground client (one UDP socket, many requests in flight).

A request is a data-plane command addressed to any satellite (plane, sat). It is
sent to the ground port of a line-of-sight satellite (`via`), which forwards it
over ISL; the reply comes back the same way to this socket. UDP loses,
duplicates and reorders, so:

* every request carries a fresh 32-bit request id, random per request (unique
  among those waiting); retries reuse it (requests are idempotent), and a late
  reply to an earlier attempt is accepted;
* a reply answers only the request waiting under its id, and only when it names
  as its source the satellite that request was sent to: others are dropped and
  counted (`counters["duplicates"]`: no request waits for its id;
  `counters["wrong_source"]`). A NAK about the route itself (NO_ROUTE,
  TTL_EXPIRED, AUTH_FAILED) comes from the satellite where the request stopped
  and is taken from any;
* a window (semaphore) bounds the requests in flight;
* each attempt waits `rto * backoff**attempt` seconds, at most `retries` more
  times; rto adapts to the measured round-trip time (RFC 6298: srtt + 4 rttvar,
  Karn's rule: only first-attempt replies are sampled), between `min_timeout`
  and `timeout`, so a lost packet is resent after a few RTTs, not a fixed wait;
* replies for finished requests, and repeated chunks of a GET_CHUNKS, are
  dropped and counted (`counters["duplicates"]`);
* a DATA reply whose CRC32C does not match is never returned: it is counted
  (`counters["crc_failures"]`) and treated as not received, so it is retried;
* with a signer (a keyed constellation: skymemory.protocol.auth) every request is
  signed, each attempt afresh, and a reply not signed with the signer's key is
  dropped and counted (`counters["auth_failures"]`), so it cannot answer anything;
  nor can one whose sequence its satellite has used before, or older than the
  replay window below the newest from it (`counters["replayed"]`): a captured
  reply replayed when a later request drew the same id. Nor, from the satellite
  asked, one at or below the newest sequence taken from it when the request first
  left (`auth.Signer.reply_top`; `counters["replayed"]`): a satellite's sequences
  only grow, so that reply was signed before the request was sent -- a captured
  one, even within the satellites' clock allowance of a new client's start.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from skymemory.protocol import auth, wire
from skymemory.protocol.errors import BadReply, ChunkNotFound, NakError, RequestTimeout, WireError

Sat = tuple[int, int]
Address = tuple[str, int]

MAX_EVICTED_NOTICES = 100_000

# NAK reasons worth retrying (transient); every other NAK is final.
_RETRYABLE_NAKS = {wire.SKYMEM_NAK_BUSY}
# NAKs about the route itself: sent by the satellite where the request stopped (a relay, or the entry
# satellite that refused its tag), not by the one asked
_ROUTE_NAKS = {wire.SKYMEM_NAK_NO_ROUTE, wire.SKYMEM_NAK_TTL_EXPIRED, wire.SKYMEM_NAK_AUTH_FAILED}


@dataclass
class _Pending:
    cc: int
    dst: Sat  # the satellite asked: the only one whose reply answers (but a route NAK)
    future: asyncio.Future
    block_hash: bytes = b""
    # GET_CHUNKS: chunk ids still expected -> collected results
    expected: set[int] = field(default_factory=set)
    chunks: dict[int, bytes] = field(default_factory=dict)
    not_found: set[int] = field(default_factory=set)
    crc_failures: int = 0
    fatal_nak: int = 0  # GET_CHUNKS refused as a whole (reason code)
    progress: asyncio.Event | None = None
    # signed: dst's newest sequence the signer had taken when the request first left (Signer.reply_top); a reply
    # from dst at or below it was signed before the request was sent
    floor: int = 0


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, client: "SkyMemoryClient") -> None:
        self.client = client

    def datagram_received(self, data: bytes, addr) -> None:
        self.client._on_datagram(data)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable etc.: the retry handles it
        self.client.counters["socket_errors"] += 1


class SkyMemoryClient:
    """Ground client for the constellation.

    `addresses` maps (plane, sat) to the (host, ground_port) of that satellite's
    ground link; only satellites used as `via` need to be reachable. `via` picks
    the ground-link satellite for a destination: a fixed (plane, sat), a callable
    dst -> via, or None (send straight to the destination's own ground port).
    """

    def __init__(
        self,
        addresses: Mapping[Sat, Address],
        *,
        via: Sat | Callable[[Sat], Sat] | None = None,
        station_id: int = 0,
        window: int = 64,
        timeout: float = 0.5,
        min_timeout: float = 0.1,
        adaptive: bool = True,
        retries: int = 6,
        backoff: float = 2.0,
        mission_ms: Callable[[], int] | None = None,
        bind: Address = ("127.0.0.1", 0),
        signer: auth.Signer | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if timeout <= 0 or retries < 0 or backoff < 1:
            raise ValueError("timeout must be > 0, retries >= 0, backoff >= 1")
        self.addresses = dict(addresses)
        self.via = via
        self.station_id = station_id
        self.window = window
        self.timeout = timeout
        self.min_timeout = min(min_timeout, timeout)
        self.adaptive = adaptive
        self._srtt: float | None = None
        self._rttvar = 0.0
        self.retries = retries
        self.backoff = backoff
        self.mission_ms = mission_ms or (lambda: int(time.time() * 1000))
        self.bind = bind
        # signs every request and checks every reply (auth.py); default from SKYMEM_AUTH_KEY_FILE
        self.signer = signer if signer is not None else auth.signer_from_env()
        self.counters: Counter[str] = Counter()
        self.evicted: list[tuple[Sat, bytes]] = []  # unsolicited EVICTED notices (src, block hash)
        self.capture: list[bytes] | None = None  # set to a list to record every packet sent and received
        self._hk_waiters: dict[Sat, asyncio.Future] = {}
        self._pending: dict[int, _Pending] = {}
        self._transport: asyncio.DatagramTransport | None = None
        self._slots: asyncio.Semaphore | None = None

    # ---- lifecycle -------------------------------------------------------------
    async def open(self) -> "SkyMemoryClient":
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # a GET_CHUNKS burst of thousands of 6 KB replies must not overflow the socket
        try:  # SO_RCVBUFFORCE (33, Linux): root may exceed net.core.rmem_max
            sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 32 * 1024 * 1024)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024 * 1024)
        sock.bind(self.bind)
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), sock=sock)
        self._slots = asyncio.Semaphore(self.window)
        return self

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        for p in self._pending.values():
            if not p.future.done():
                p.future.cancel()  # waiters see CancelledError; nobody is left holding an unread exception
        self._pending.clear()

    async def __aenter__(self) -> "SkyMemoryClient":
        return await self.open()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def local_address(self) -> Address:
        assert self._transport is not None, "client not open"
        return self._transport.get_extra_info("sockname")[:2]

    # ---- public requests ---------------------------------------------------------
    async def noop(self, dst: Sat, *, via: Sat | None = None, timeout: float | None = None,
                   retries: int | None = None) -> float:
        """Data-plane NOOP; returns the round-trip time in seconds."""
        start = time.perf_counter()
        await self._request(wire.SKYMEM_NOOP_CC, dst, b"", via=via, timeout=timeout, retries=retries)
        return time.perf_counter() - start

    async def stats(self, dst: Sat, *, via: Sat | None = None) -> wire.Stats:
        reply = await self._request(wire.SKYMEM_STATS_CC, dst, b"", via=via)
        if reply.stats is None:
            raise BadReply(f"STATS request answered with {reply.kind_name}")
        return reply.stats

    async def set_chunk(self, dst: Sat, block_hash: bytes, chunk_id: int, chunk_count: int, data: bytes, *,
                        created_ms: int | None = None, gossip_radius: int = 0, via: Sat | None = None) -> None:
        created = self.mission_ms() if created_ms is None else created_ms
        desc = wire.make_desc(block_hash, chunk_id, chunk_count, created, data, gossip_radius)
        reply = await self._request(wire.SKYMEM_SET_CHUNK_CC, dst, wire.set_chunk_body(desc, data), via=via,
                                    block_hash=block_hash, chunk_id=chunk_id)
        if reply.kind != wire.SKYMEM_REPLY_ACK:
            raise BadReply(f"SET_CHUNK answered with {reply.kind_name}")

    async def get_chunk(self, dst: Sat, block_hash: bytes, chunk_id: int, *, via: Sat | None = None) -> bytes:
        """The chunk's data (CRC checked); ChunkNotFound when the satellite does not hold it."""
        return (await self.get_chunk_desc(dst, block_hash, chunk_id, via=via))[1]

    async def get_chunk_desc(self, dst: Sat, block_hash: bytes, chunk_id: int, *,
                             via: Sat | None = None) -> tuple[wire.ChunkDesc, bytes]:
        """Like get_chunk, with the chunk descriptor (chunk count, creation time...)."""
        reply = await self._request(wire.SKYMEM_GET_CHUNK_CC, dst, wire.chunk_ref(block_hash, chunk_id), via=via,
                                    block_hash=block_hash, chunk_id=chunk_id)
        if reply.kind != wire.SKYMEM_REPLY_DATA or reply.desc is None:
            raise BadReply(f"GET_CHUNK answered with {reply.kind_name}")
        return reply.desc, reply.data

    async def probe(self, dst: Sat, block_hash: bytes, chunk_id: int = 0, *, via: Sat | None = None) -> int | None:
        """The block's chunk count if `dst` holds this chunk, else None."""
        try:
            reply = await self._request(wire.SKYMEM_PROBE_CC, dst, wire.chunk_ref(block_hash, chunk_id), via=via,
                                        block_hash=block_hash, chunk_id=chunk_id)
        except ChunkNotFound:
            return None
        if reply.kind != wire.SKYMEM_REPLY_ACK:
            raise BadReply(f"PROBE answered with {reply.kind_name}")
        return reply.value

    async def evict_block(self, dst: Sat, block_hash: bytes, *, radius: int = 0, evict_id: int | None = None,
                          via: Sat | None = None) -> int:
        """Purge the block at `dst` (and gossip `radius` hops); returns the chunks purged at dst."""
        eid = random.randrange(2**32) if evict_id is None else evict_id
        reply = await self._request(wire.SKYMEM_EVICT_BLOCK_CC, dst, wire.evict_body(block_hash, eid, radius),
                                    via=via, block_hash=block_hash)
        return reply.value

    async def migrate(self, dst: Sat, block_hash: bytes, first: int, count: int, target: Sat, *, stride: int = 1,
                      via: Sat | None = None, timeout: float | None = None) -> int:
        """Ask `dst` to move chunks to `target` over ISL; returns the chunks moved."""
        body = wire.migrate_body(block_hash, first, count, stride, target)
        reply = await self._request(wire.SKYMEM_MIGRATE_CC, dst, body, via=via, block_hash=block_hash,
                                    timeout=timeout or max(self.timeout, 0.05 * count))
        return reply.value

    async def get_chunks(self, dst: Sat, block_hash: bytes, first: int, count: int, stride: int = 1, *,
                         via: Sat | None = None) -> dict[int, bytes]:
        """Chunks first, first+stride, ... (count of them) from one satellite, one request.

        Returns {chunk_id: data} for the chunks found; chunks the satellite
        reported missing are absent. Chunks lost on the way are asked again one
        by one with GET_CHUNK.
        """
        ids = [first + k * stride for k in range(count)]
        if any(i > 0xFFFFFFFF for i in ids):
            raise WireError("chunk id range overflows 32 bits")
        pending = await self._get_chunks_once(dst, block_hash, first, count, stride, set(ids), via)
        result = dict(pending.chunks)
        missing = [i for i in ids if i not in result and i not in pending.not_found]
        if missing:  # lost or corrupted on the way: retry individually (each has its own retries)
            self.counters["get_chunks_refetch"] += len(missing)

            async def one(cid: int) -> None:
                try:
                    result[cid] = await self.get_chunk(dst, block_hash, cid, via=via)
                except ChunkNotFound:
                    pass

            results = await asyncio.gather(*(one(c) for c in missing), return_exceptions=True)
            errors = [r for r in results if isinstance(r, BaseException)]
            if errors:
                raise errors[0]
        return result

    async def set_param(self, dst: Sat, param_id: int, value: int, *, via: Sat | None = None) -> None:
        """Data-plane SET_PARAM (SKYMEM_PARAM_*), acknowledged."""
        await self._request(wire.SKYMEM_SET_PARAM_CC, dst, wire.encode_set_param(param_id, value), via=via)

    async def housekeeping(self, sat: Sat, *, timeout: float | None = None) -> tuple[bytes, wire.Stats]:
        """Send SKYMEM_SEND_HK to a satellite's own ground port; returns (raw HK packet, stats).

        HK is a cFS-style telemetry packet with no request id, so it is matched by
        the satellite's identity in the stats body; one request per satellite at a time.
        """
        if self._transport is None:
            raise RuntimeError("client not open")
        if sat in self._hk_waiters:
            raise RuntimeError(f"an HK request to {sat} is already waiting")
        fut = asyncio.get_running_loop().create_future()
        self._hk_waiters[sat] = fut
        packet = wire.encode_hk_request(wire.SKYMEM_SEND_HK_MID)  # padded: a node answers no shorter request
        try:
            for attempt in range(self.retries + 1):
                self._send(packet, self._address(sat))
                try:
                    return await asyncio.wait_for(asyncio.shield(fut), (timeout or self.timeout) * self.backoff**attempt)
                except asyncio.TimeoutError:
                    continue
            raise RequestTimeout(f"no HK telemetry from {sat}")
        finally:
            self._hk_waiters.pop(sat, None)

    def _send(self, packet: bytes, addr: Address) -> None:
        assert self._transport is not None
        self._transport.sendto(packet, addr)
        self.counters["sent"] += 1
        if self.capture is not None:
            self.capture.append(packet)

    # ---- machinery ------------------------------------------------------------------
    @property
    def rto(self) -> float:
        """Current first-attempt timeout, seconds."""
        if not self.adaptive or self._srtt is None:
            return self.timeout
        return min(self.timeout, max(self.min_timeout, self._srtt + 4 * self._rttvar))

    def _sample_rtt(self, rtt: float) -> None:
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt

    def _route(self, dst: Sat, via: Sat, request_id: int) -> wire.RouteHeader:
        return wire.RouteHeader(dst_plane=dst[0], dst_sat=dst[1], src_plane=wire.SKYMEM_GROUND_PLANE,
                                src_sat=self.station_id, via_plane=via[0], via_sat=via[1], request_id=request_id)

    def _pick_via(self, dst: Sat, via: Sat | None) -> Sat:
        if via is not None:
            return via
        if self.via is None:
            return dst
        return self.via(dst) if callable(self.via) else self.via

    def _address(self, via: Sat) -> Address:
        try:
            return self.addresses[via]
        except KeyError:
            raise ValueError(f"no ground address for satellite {via}") from None

    def _next_id(self) -> int:
        """A random request id, not 0 (an unsolicited reply's) and not one a waiting request holds."""
        while True:
            rid = secrets.randbits(32)
            if rid and rid not in self._pending:
                return rid

    def _floor(self, dst: Sat) -> int:
        """The sequence a reply from dst must exceed to answer a request sent now (0: unsigned)."""
        return self.signer.reply_top(tuple(dst)) if self.signer is not None else 0

    async def _request(self, cc: int, dst: Sat, body: bytes, *, via: Sat | None, block_hash: bytes = b"",
                       chunk_id: int = 0, timeout: float | None = None, retries: int | None = None) -> wire.Reply:
        if self._transport is None or self._slots is None:
            raise RuntimeError("client not open (use `async with SkyMemoryClient(...)` or await open())")
        via_sat = self._pick_via(dst, via)
        addr = self._address(via_sat)
        rid = self._next_id()
        packet = wire.encode_data_command(cc, self._route(dst, via_sat, rid), body)
        loop = asyncio.get_running_loop()
        pending = _Pending(cc=cc, dst=tuple(dst), future=loop.create_future(), block_hash=block_hash,
                           floor=self._floor(dst))
        base = self.rto if timeout is None else timeout
        tries = self.retries if retries is None else retries
        async with self._slots:
            self._pending[rid] = pending
            try:
                for attempt in range(tries + 1):
                    if attempt:
                        self.counters["retries"] += 1
                    # each attempt signed afresh: resending the same sequence would be a replay
                    self._send(self.signer.maybe_sign(cc, packet) if self.signer else packet, addr)
                    sent_at = time.perf_counter()
                    try:
                        reply = await asyncio.wait_for(asyncio.shield(pending.future),
                                                       min(base * self.backoff**attempt, 60.0))
                    except asyncio.TimeoutError:
                        continue
                    if attempt == 0 and timeout is None:
                        self._sample_rtt(time.perf_counter() - sent_at)
                    if reply.kind == wire.SKYMEM_REPLY_NAK and reply.status in _RETRYABLE_NAKS and attempt < tries:
                        pending.future = loop.create_future()
                        continue
                    return self._check(reply, cc, dst, chunk_id)
                self.counters["timeouts"] += 1
                why = f" ({pending.crc_failures} replies failed CRC32C)" if pending.crc_failures else ""
                raise RequestTimeout(f"{wire.CC_NAMES[cc]} to {dst} via {via_sat}: no valid reply after "
                                     f"{tries + 1} attempts{why}")
            finally:
                self._pending.pop(rid, None)
                if not pending.future.done():
                    pending.future.cancel()

    def _check(self, reply: wire.Reply, cc: int, dst: Sat, chunk_id: int) -> wire.Reply:
        if reply.kind == wire.SKYMEM_REPLY_NAK:
            if reply.status == wire.SKYMEM_NAK_NOT_FOUND:
                raise ChunkNotFound(f"{wire.CC_NAMES[cc]}: chunk {reply.chunk_id} not found at {dst}")
            name = wire.nak_name(reply.status)
            raise NakError(reply.status, name, f"{wire.CC_NAMES[cc]} to {dst}: NAK {name}")
        if reply.kind == wire.SKYMEM_REPLY_DATA and reply.chunk_id != chunk_id:
            raise BadReply(f"asked for chunk {chunk_id}, got chunk {reply.chunk_id}")
        return reply

    async def _get_chunks_once(self, dst: Sat, block_hash: bytes, first: int, count: int, stride: int,
                               ids: set[int], via: Sat | None) -> _Pending:
        """One GET_CHUNKS request; waits until every chunk answered or the replies stop coming."""
        assert self._transport is not None and self._slots is not None, "client not open"
        via_sat = self._pick_via(dst, via)
        addr = self._address(via_sat)
        rid = self._next_id()
        packet = wire.encode_data_command(wire.SKYMEM_GET_CHUNKS_CC, self._route(dst, via_sat, rid),
                                          wire.chunk_range(block_hash, first, count, stride))
        loop = asyncio.get_running_loop()
        pending = _Pending(cc=wire.SKYMEM_GET_CHUNKS_CC, dst=tuple(dst), future=loop.create_future(),
                           block_hash=block_hash, expected=set(ids), progress=asyncio.Event(), floor=self._floor(dst))
        async with self._slots:
            self._pending[rid] = pending
            try:
                for attempt in range(self.retries + 1):
                    if attempt:
                        self.counters["retries"] += 1
                    self._send(self.signer.sign(packet) if self.signer else packet, addr)  # each attempt afresh
                    # Wait while replies keep arriving; give up this attempt after a quiet period.
                    while pending.expected:
                        pending.progress.clear()
                        try:
                            # quiet period: no chunk for this long ends the attempt
                            await asyncio.wait_for(pending.progress.wait(), 2 * self.rto * self.backoff**attempt)
                        except asyncio.TimeoutError:
                            break
                    if pending.fatal_nak:
                        name = wire.nak_name(pending.fatal_nak)
                        raise NakError(pending.fatal_nak, name, f"GET_CHUNKS to {dst}: NAK {name}")
                    if not pending.expected:
                        return pending
                    if pending.chunks or pending.not_found:
                        return pending  # partial answer: the caller refetches the rest one by one
                if not pending.future.done():
                    pending.future.cancel()
                self.counters["timeouts"] += 1
                raise RequestTimeout(f"GET_CHUNKS to {dst}: no reply after {self.retries + 1} attempts")
            finally:
                self._pending.pop(rid, None)

    def _on_datagram(self, data: bytes) -> None:
        self.counters["received"] += 1
        if self.capture is not None:
            self.capture.append(data)
        if data[:2] == wire.SKYMEM_HK_TLM_MID.to_bytes(2, "big"):
            self._on_hk(data)  # housekeeping carries no trailer (no route header): see docs/RELIABILITY.md
            return
        if self.signer is not None:
            verdict = self.signer.check_reply(data)
            if verdict == auth.REPLY_REPLAYED:
                self.counters["replayed"] += 1  # its satellite signed this sequence before: answers nothing
                return
            if verdict != auth.REPLY_OK:
                self.counters["auth_failures"] += 1  # unsigned, another key or altered: answers nothing
                return
        try:
            reply = wire.decode_reply(data)
        except WireError:
            self.counters["malformed"] += 1
            return
        if reply.kind == wire.SKYMEM_REPLY_EVICTED:
            if len(self.evicted) >= MAX_EVICTED_NOTICES:  # nobody drains them: keep the newest
                del self.evicted[0]
                self.counters["evicted_dropped"] += 1
            self.evicted.append(((reply.route.src_plane, reply.route.src_sat), reply.block_hash))
            return
        pending = self._pending.get(reply.route.request_id)
        if pending is None:
            self.counters["duplicates"] += 1  # late or repeated reply of a finished request
            return
        if (reply.route.src_plane, reply.route.src_sat) != pending.dst and not (
                reply.kind == wire.SKYMEM_REPLY_NAK and reply.status in _ROUTE_NAKS):
            self.counters["wrong_source"] += 1  # another satellite's reply, with this id: answers nothing
            return
        if pending.floor and (reply.route.src_plane, reply.route.src_sat) == pending.dst and \
                int.from_bytes(data[-auth.TRAILER_LEN + 4:-auth.TAG_LEN], "big") <= pending.floor:
            self.counters["replayed"] += 1  # signed before this request left: a captured reply, whatever its id
            return
        if reply.cc != pending.cc:
            self.counters["mismatched"] += 1
            return
        if reply.kind == wire.SKYMEM_REPLY_DATA:
            if reply.desc is None or reply.desc.block_hash != pending.block_hash:
                self.counters["mismatched"] += 1
                return
            if not wire.chunk_crc_ok(reply):
                self.counters["crc_failures"] += 1
                pending.crc_failures += 1
                return
        if pending.cc == wire.SKYMEM_GET_CHUNKS_CC:
            self._collect_chunk(pending, reply)
            return
        if pending.future.done():
            self.counters["duplicates"] += 1
            return
        pending.future.set_result(reply)

    def _on_hk(self, data: bytes) -> None:
        try:
            _, _, stats = wire.decode_hk(data)
        except WireError:
            self.counters["malformed"] += 1
            return
        fut = self._hk_waiters.get((stats.plane, stats.sat))
        if fut is None or fut.done():
            self.counters["duplicates"] += 1
            return
        fut.set_result((data, stats))

    def _collect_chunk(self, pending: _Pending, reply: wire.Reply) -> None:
        assert pending.progress is not None
        if reply.kind == wire.SKYMEM_REPLY_NAK and reply.status != wire.SKYMEM_NAK_NOT_FOUND:
            pending.fatal_nak = reply.status  # the request as a whole was refused
            pending.expected.clear()
            pending.progress.set()
            return
        cid = reply.chunk_id
        if cid not in pending.expected:
            self.counters["duplicates"] += 1
            return
        if reply.kind == wire.SKYMEM_REPLY_DATA:
            pending.chunks[cid] = reply.data
        elif reply.kind == wire.SKYMEM_REPLY_NAK:
            pending.not_found.add(cid)
        else:
            self.counters["mismatched"] += 1
            return
        pending.expected.discard(cid)
        pending.progress.set()


async def gather_limited(coros: Iterable, limit: int) -> list:
    """Run coroutines with at most `limit` at once, results in order."""
    sem = asyncio.Semaphore(limit)

    async def run(c):
        async with sem:
            return await c

    return await asyncio.gather(*(run(c) for c in coros))
