"""SkyMemoryClient against a scripted Python satellite over real UDP (faults on demand)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import wire
from skymemory.protocol.errors import ChunkNotFound, RequestTimeout

from fakesat import FakeSatellite

H = hashlib.sha256(b"block").digest()


def run(coro):
    return asyncio.run(coro)


def client_for(sat: FakeSatellite, **kw) -> SkyMemoryClient:
    kw.setdefault("timeout", 0.1)
    kw.setdefault("retries", 3)
    return SkyMemoryClient({sat.me: sat.address}, **kw)


def test_set_get_probe_evict_stats():
    async def go(sat):
        async with client_for(sat) as c:
            await c.noop(sat.me)
            await c.set_chunk(sat.me, H, 0, 2, b"hello")
            await c.set_chunk(sat.me, H, 1, 2, b"world")
            assert await c.get_chunk(sat.me, H, 1) == b"world"
            assert await c.probe(sat.me, H, 0) == 2
            assert await c.get_chunks(sat.me, H, 0, 2) == {0: b"hello", 1: b"world"}
            st = await c.stats(sat.me)
            assert st.chunks == 2
            assert await c.evict_block(sat.me, H) == 2
            assert await c.probe(sat.me, H, 0) is None
            with pytest.raises(ChunkNotFound):
                await c.get_chunk(sat.me, H, 0)

    with FakeSatellite(1, 2) as sat:
        run(go(sat))


def test_retry_after_lost_request():
    async def go(sat):
        async with client_for(sat) as c:
            sat.drop_requests = 2
            await c.set_chunk(sat.me, H, 0, 1, b"x")
            assert c.counters["retries"] == 2

    with FakeSatellite() as sat:
        run(go(sat))


def test_timeout_when_nobody_answers():
    async def go(sat):
        async with client_for(sat, retries=1, timeout=0.05) as c:
            sat.drop_requests = 10
            with pytest.raises(RequestTimeout):
                await c.noop(sat.me)

    with FakeSatellite() as sat:
        run(go(sat))


def test_duplicates_are_dropped_and_counted():
    async def go(sat):
        async with client_for(sat) as c:
            sat.duplicate_replies = True
            await c.set_chunk(sat.me, H, 0, 1, b"abc")
            assert await c.get_chunks(sat.me, H, 0, 1) == {0: b"abc"}
            await asyncio.sleep(0.05)  # let the second copies arrive
            assert c.counters["duplicates"] >= 2

    with FakeSatellite() as sat:
        run(go(sat))


def test_corrupt_chunk_is_never_returned():
    async def go(sat):
        async with client_for(sat) as c:
            await c.set_chunk(sat.me, H, 0, 1, b"payload")
            sat.corrupt_replies = 1
            assert await c.get_chunk(sat.me, H, 0) == b"payload"
            assert c.counters["crc_failures"] == 1
            sat.corrupt_replies = 100
            with pytest.raises(RequestTimeout, match="CRC32C"):
                await c.get_chunk(sat.me, H, 0)

    with FakeSatellite() as sat:
        run(go(sat))


def test_busy_nak_is_retried():
    async def go(sat):
        async with client_for(sat) as c:
            sat.busy_replies = 1
            await c.noop(sat.me)
            assert c.counters["retries"] == 1

    with FakeSatellite() as sat:
        run(go(sat))


def test_get_chunks_reports_missing_and_refetches_lost():
    async def go(sat):
        async with client_for(sat) as c:
            for i in range(0, 10, 2):  # only even chunks exist
                await c.set_chunk(sat.me, H, i, 10, bytes([i]) * 100)
            got = await c.get_chunks(sat.me, H, 0, 10)
            assert got == {i: bytes([i]) * 100 for i in range(0, 10, 2)}
            sat.corrupt_replies = 2  # two chunks of the burst arrive corrupt -> refetched one by one
            got = await c.get_chunks(sat.me, H, 0, 5, stride=2)
            assert got == {i: bytes([i]) * 100 for i in range(0, 10, 2)}
            assert c.counters["get_chunks_refetch"] == 2

    with FakeSatellite() as sat:
        run(go(sat))


def test_window_bounds_requests_in_flight():
    async def go(sat):
        async with client_for(sat, window=4) as c:
            await asyncio.gather(*(c.set_chunk(sat.me, H, i, 50, b"z" * 10) for i in range(50)))
            assert len(sat.store) == 50

    with FakeSatellite() as sat:
        run(go(sat))


def test_request_carries_route_via_and_station():
    async def go(sat):
        async with SkyMemoryClient({(0, 0): sat.address}, via=(0, 0), station_id=7, timeout=0.1) as c:
            await c.noop((3, 4))  # the fake answers for anyone; we check the packet it received
        cmd = wire.decode_command(sat.received[-1])
        assert (cmd.route.dst_plane, cmd.route.dst_sat) == (3, 4)
        assert (cmd.route.via_plane, cmd.route.via_sat) == (0, 0)
        assert (cmd.route.src_plane, cmd.route.src_sat) == (wire.SKYMEM_GROUND_PLANE, 7)

    with FakeSatellite(0, 0) as sat:
        run(go(sat))


def test_unsolicited_evicted_notice_is_recorded():
    async def go(sat):
        async with client_for(sat) as c:
            route = wire.RouteHeader(wire.SKYMEM_GROUND_PLANE, 0, 4, 5, 4, 5, 0)
            notice = wire.encode_reply(route, wire.SKYMEM_REPLY_EVICTED, 0, body=H)
            sat.sock.sendto(notice, c.local_address)
            sat.sock.sendto(b"\x08\x92garbage", c.local_address)
            await c.noop(sat.me)  # by now both datagrams have been read (same path, sent first)
            await asyncio.sleep(0.05)
            assert c.evicted == [((4, 5), H)]
            assert c.counters["malformed"] == 1

    with FakeSatellite() as sat:
        run(go(sat))
