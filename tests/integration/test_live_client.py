"""The ground client against real skymem_node processes (launched by the `constellation` fixture)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

import pytest
from spacepacket import SpacePacket

from skymemory.protocol.auth import signer_for_manifest
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import telemetry, wire
from skymemory.protocol.errors import ChunkNotFound

H = hashlib.sha256(b"live").digest()


def client(m, **kw) -> SkyMemoryClient:
    kw.setdefault("timeout", 0.5)
    kw.setdefault("signer", signer_for_manifest(m))  # the launcher keys every constellation
    return SkyMemoryClient(m.ground_addresses(), bind=(m.ground_host, 0), **kw)


def run(coro):
    return asyncio.run(coro)


def test_every_satellite_reachable_through_one_ground_link(constellation):
    m = constellation

    async def go():
        async with client(m, via=(0, 0)) as c:
            before = (await c.stats((0, 0))).forwarded
            for e in m.satellites:
                await c.noop((e.plane, e.sat))
            after = (await c.stats((0, 0))).forwarded
            return before, after

    before, after = run(go())
    assert after - before >= m.planes * m.sats - 1  # every request for another satellite relayed over ISL


def test_chunk_commands_over_isl(constellation):
    m = constellation
    far, via = (2, 2), (0, 0)

    async def go():
        async with client(m, via=via) as c:
            data = [os.urandom(3000 + i) for i in range(6)]
            await asyncio.gather(*(c.set_chunk(far, H, i, 6, d) for i, d in enumerate(data)))
            assert await c.get_chunk(far, H, 3) == data[3]
            assert await c.probe(far, H, 5) == 6
            assert await c.probe(far, H, 9) is None
            got = await c.get_chunks(far, H, 0, 6)
            assert got == dict(enumerate(data))
            assert await c.get_chunks(far, H, 1, 3, stride=2) == {1: data[1], 3: data[3], 5: data[5]}
            assert await c.evict_block(far, H) == 6
            with pytest.raises(ChunkNotFound):
                await c.get_chunk(far, H, 0)
            assert c.counters["crc_failures"] == 0

    run(go())


def test_migrate_moves_chunks_between_satellites(constellation):
    m = constellation
    src, dst = (1, 3), (1, 0)
    h = hashlib.sha256(b"migrate").digest()

    async def go():
        async with client(m) as c:
            for i in range(4):
                await c.set_chunk(src, h, i, 4, bytes([i]) * 500)
            moved = await c.migrate(src, h, 0, 4, dst)
            assert moved == 4
            assert await c.get_chunks(dst, h, 0, 4) == {i: bytes([i]) * 500 for i in range(4)}
            assert await c.probe(src, h, 0) is None

    run(go())


def test_evict_gossip_purges_neighbours(constellation):
    m = constellation
    centre = (2, 1)
    ring = [(1, 1), (3, 1), (2, 0), (2, 2)]
    h = hashlib.sha256(b"gossip").digest()

    async def go():
        async with client(m) as c:
            for k, s in enumerate([centre, *ring]):  # set with a gossip radius: only such chunks does a link's
                await c.set_chunk(s, h, k, 5, b"g" * 100, gossip_radius=1)  # gossip purge (skymem_sat.h, D1)
            await c.evict_block(centre, h, radius=1)
            deadline = time.monotonic() + 5
            left = list(enumerate(ring, 1))
            while left and time.monotonic() < deadline:  # gossip is asynchronous: poll, bounded
                left = [(k, s) for k, s in left if await c.probe(s, h, k) is not None]
                await asyncio.sleep(0.05)
            return left

    assert run(go()) == []


def test_hk_telemetry_and_capture_decode_with_ccsdspy(constellation):
    m = constellation

    async def go():
        async with client(m) as c:
            c.capture = []
            await c.set_chunk((3, 3), H, 0, 1, b"captured")
            await c.get_chunk((3, 3), H, 0)
            raw_hk = [ (await c.housekeeping((e.plane, e.sat)))[0] for e in m.satellites[:4]]
            return c.capture, raw_hk

    capture, raw_hk = run(go())
    hk = telemetry.decode_hk_stream(b"".join(raw_hk))
    assert [(int(p), int(s)) for p, s in zip(hk["STATS_PLANE"], hk["STATS_SAT"])] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert all(int(b) == m.memory_budget for b in hk["STATS_BYTES_BUDGET"])
    data_pkts = [p for p in capture if p[:2] in (b"\x18\x92", b"\x08\x92")]
    decoded = telemetry.decode_stream(b"".join(data_pkts))
    cmds, replies = decoded[wire.SKYMEM_DATA_CMD_MID], decoded[wire.SKYMEM_REPLY_TLM_MID]
    sp_cmds = [SpacePacket.decode(p) for p in data_pkts if p[0] & 0x10]
    sp_replies = [SpacePacket.decode(p) for p in data_pkts if not p[0] & 0x10]
    assert len(sp_cmds) == len(cmds["CCSDS_APID"]) >= 2 and len(sp_replies) == len(replies["CCSDS_APID"]) >= 2
    for i, sp in enumerate(sp_cmds):
        assert (cmds["CCSDS_APID"][i], cmds["CCSDS_SEQUENCE_COUNT"][i], cmds["CCSDS_PACKET_LENGTH"][i]) == \
            (sp.apid, sp.packet_sequence_count, len(sp.packet_data_field) - 1)
        assert cmds["FUNCTION_CODE"][i] == sp.packet_data_field[0] & 0x7F
    for i, sp in enumerate(sp_replies):
        assert replies["CCSDS_SEQUENCE_COUNT"][i] == sp.packet_sequence_count
        assert replies["REPLY_KIND"][i] == sp.packet_data_field[10 + 20]
        assert int.from_bytes(sp.packet_data_field[10 + 12:10 + 16], "big") == replies["ROUTE_REQUEST_ID"][i]
