"""Issue 53's flight findings against a default (keyed) launch, with real sockets: N1, D1's flight half, the M3
residual and R1's flight part.

One 3x3 constellation per runtime, launched with authentication on, serves every test. The parties are those
of test_link_attacks.py: the ground station (a raw socket signing with the constellation's ground key), an
attacker on the link holding no key, and one holding satellite (1,1)'s key file (`Captured`: it signs with the
key of its link to (1,0) and sends into (1,0)'s ISL port). Each test asserts the defended outcome; on 4feb281
each fails for the reason of its finding.

Every wait is bounded, and what a test waits for is an event, never a duration: a STATS answered after a
datagram sent to the same ground port, or a later packet along the same links having taken effect.

Runtimes: the native node always; the cFS app where SKYMEM_CFS_EXE names a cFS build's exe/cpu1 (docs/CFS.md),
skipped with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import pytest

from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import auth, wire
from skymemory.protocol.native import xor_checksum

from test_link_attacks import (CAPTURED, NEIGHBOUR, WAIT_S, Captured, Observer, Party, Sky, _kind, _seq_ahead,
                               launched_sky, request_id_of, request_id_of_command, reply_to)

SATS = [(p, s) for p in range(3) for s in range(3)]


@pytest.fixture(scope="module", params=["native", "cfs"])
def sky(request, tmp_path_factory):
    yield from launched_sky(request, tmp_path_factory, 3, 3, "attacks53")


def ground(sky: Sky, station: int):
    """A signed client of station `station` (the ground's own library)."""
    return SkyMemoryClient(sky.m.ground_addresses(), signer=sky.signer, station_id=station,
                           bind=(sky.m.ground_host, 0), timeout=0.5, retries=20)


def until(what, deadline_s: float = WAIT_S):
    """what() once it is truthy, or its last value when the bound passed (the event is on its way)."""
    deadline = time.monotonic() + deadline_s
    while True:
        got = what()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


# ---- N1 -------------------------------------------------------------------------------------------
def test_n1_a_forged_relay_packet_does_not_steer_the_answers_of_an_own_link_request(sky):
    """N1. Station 16 reads 32 chunks from (0,0), its own link's satellite, with one GET_CHUNKS (request R), and
    gets them. The attacker, who saw R on the link, sends (0,0)'s ground port a packet carrying R and the
    station's id, for another satellite (0,1), with the AUTH flag, key id 1 and a zero tag: (0,0) cannot check
    it (only (0,1) can) and relays it. The station then sends R again, signed afresh (a retry): all 32 answers
    must reach the station, none the attacker (on 4feb281: the relayed packet claimed R's return slot at (0,0),
    and the retry's 32 answers went to the attacker -- about 200 KB for its 72-byte datagram at 6 KiB chunks)."""
    station = Party(sky, 16, sky.signer)
    attacker = Party(sky, 16, None)
    block = random.randbytes(32)
    own = (0, 0)
    try:
        async def store():
            async with ground(sky, 17) as c:
                for k in range(32):
                    await c.set_chunk(own, block, k, 32, bytes([k]) * 512, via=own)
        asyncio.run(store())

        body = wire.chunk_range(block, 0, 32, 1)
        ask = station.command(wire.SKYMEM_GET_CHUNKS_CC, own, body)
        rid = request_id_of_command(ask)

        def answers(party: Party, packet: bytes) -> int:
            """How many of the 32 answers reach `party` (bounded: read until all came or none comes)."""
            party.send(packet, own)
            got = 0
            while got < 32 and reply_to(packet, station, attacker) is not None:
                got = sum(1 for p in station.received if request_id_of(p) == rid)
            return got

        assert answers(station, ask) == 32, "(0,0) did not answer the station's GET_CHUNKS with 32 chunks"
        station.received.clear()

        forged = bytearray(auth.Signer(1, os.urandom(32)).sign(
            attacker.command(wire.SKYMEM_GET_CHUNKS_CC, (0, 1), body, via=own, request_id=rid)))
        forged[-32:] = bytes(32)  # the tag: zero (nobody at (0,0) can check it)
        forged[7] = 0
        forged[7] = xor_checksum(bytes(forged))
        attacker.send(bytes(forged), own)
        Observer(sky).settled(own)  # (0,0) has handled (relayed) the forged packet

        retry = station.command(wire.SKYMEM_GET_CHUNKS_CC, own, body, request_id=rid)
        to_station = answers(station, retry)
        Observer(sky).settled(own)
        to_attacker = [p for p in attacker.drain() + attacker.received if request_id_of(p) == rid]
        assert not to_attacker and to_station == 32, \
            (f"a forged relay packet carrying request {rid:#x} steered the retry of an own-link GET_CHUNKS: "
             f"{len(to_attacker)} answers ({sum(map(len, to_attacker))} bytes) went to the attacker for its "
             f"{len(forged)}-byte datagram, {to_station} of 32 to the station")
    finally:
        station.close()
        attacker.close()


# ---- D1 -------------------------------------------------------------------------------------------
def _holders(sky: Sky, block: bytes) -> list:
    async def go():
        async with ground(sky, 18) as c:
            found = await asyncio.gather(*(c.probe(s, block, 0) for s in SATS))
        return [s for s, n in zip(SATS, found) if n is not None]
    return asyncio.run(go())


def _store_everywhere(sky: Sky, block: bytes, radius: int) -> None:
    async def go():
        async with ground(sky, 18) as c:
            await asyncio.gather(*(c.set_chunk(s, block, 0, 1, b"d1" * 100, gossip_radius=radius) for s in SATS))
    asyncio.run(go())


def test_d1_one_link_gossip_evicts_no_further_than_the_ground_asked(sky):
    """D1, the flight half. Three blocks on all 9 satellites: a record (set, as every record is, without a gossip
    radius), a block set with gossip radius 2, and a marker with radius 4. Holding (1,1)'s key file, the
    attacker sends (1,0) a gossip EVICT_BLOCK with radius 4 for the record and for the block. Then the ground
    evicts the marker at (1,0) with radius 4 (its UP key): once the marker is gone from all 9 -- its gossip went
    the same links after the attack's -- the attack has done all it will. The record must be on all 9, and the
    block on the 4 satellites two hops from (1,0): a link's packet goes no further than the block's radius less
    one (on 4feb281: both purged from all 9). The ground's own gossip still reaches every holder (the marker)."""
    record, block, marker = (random.randbytes(32) for _ in range(3))
    _store_everywhere(sky, record, 0)
    _store_everywhere(sky, block, 2)
    _store_everywhere(sky, marker, 4)
    attacker = Captured(sky)
    try:
        for i, h in enumerate((record, block)):
            attacker.send(attacker.command(wire.SKYMEM_EVICT_BLOCK_CC, NEIGHBOUR,
                                           wire.evict_body(h, 0x5300 + i, 4), flags=wire.SKYMEM_RF_GOSSIP))
        # (1,0) holds the block with a gossip radius: purged there either way -- and then it has handled both
        # packets (its ISL port is read in order), and passed on whatever it passes on before the marker below
        assert until(lambda: NEIGHBOUR not in _holders(sky, block)), \
            "the captured satellite's gossip EVICT_BLOCK did not reach its neighbour (1,0)"

        async def evict_marker():
            async with ground(sky, 19) as c:
                return await c.evict_block(NEIGHBOUR, marker, radius=4)
        assert asyncio.run(evict_marker()) == 1
        left = until(lambda: not _holders(sky, marker)) or _holders(sky, marker)
        assert left is True, f"the ground's own eviction gossip (radius 4) did not reach every holder: {left} keep it"
    finally:
        attacker.close()
    kept_record = _holders(sky, record)
    kept_block = _holders(sky, block)
    far = [(0, 1), (0, 2), (2, 1), (2, 2)]  # two hops from (1,0) on the 3x3 torus
    assert kept_record == SATS and all(s in kept_block for s in far), \
        (f"one gossip EVICT_BLOCK (radius 4) signed with (1,1)'s link key: the record (set without a gossip radius) "
         f"is left on {len(kept_record)} of 9 satellites, the block set with radius 2 on {kept_block} "
         f"(the satellites two hops from (1,0), {far}, must keep it)")


# ---- M3 residual ----------------------------------------------------------------------------------
TARGET = (2, 2)


def test_m3_residual_a_command_refused_ahead_stays_refused_after_a_restart_when_its_time_comes(sky):
    """M3, residual. Station 20 signs SET_PARAM MEMORY_BUDGET_KB 5 s ahead of the satellite's clock and sends it
    to (2,2): refused. (2,2) is killed and started again; just before its sequence's time (within the 1 s a
    signer may lead) the same datagram comes again: it must be refused, the budget the restarted node's default
    (on 4feb281: what was refused lived only in memory, and the restarted node took it). Should the restart take
    longer than the lead allows, it is tried again with a longer one."""
    station = Party(sky, 20, sky.signer)
    observer = Observer(sky)

    def outcome(packet: bytes, failures_before: int) -> str:
        got = reply_to(packet, station, timeout=0)
        deadline = time.monotonic() + WAIT_S
        while got is None:
            if observer.stats(TARGET).auth_failures > failures_before:
                got = reply_to(packet, station, timeout=0)
                return "dropped" if got is None else _kind(got[1])
            assert time.monotonic() < deadline, "the SET_PARAM was neither answered nor counted"
            got = reply_to(packet, station, timeout=0.05)
        return _kind(got[1])

    try:
        for lead_s in (5.0, 10.0, 20.0):
            budget = observer.settled(TARGET).bytes_budget
            wanted_kb = budget // 1024 // 2 + 11
            seq = _seq_ahead(lead_s)
            packet = station.command(wire.SKYMEM_SET_PARAM_CC, TARGET,
                                     wire.encode_set_param(wire.SKYMEM_PARAM_MEMORY_BUDGET_KB, wanted_kb), seq=seq)
            failures = observer.stats(TARGET).auth_failures
            station.send(packet, TARGET)
            first = outcome(packet, failures)
            assert first != "ACK", f"a SET_PARAM signed {lead_s} s ahead was taken"

            sky.restart(TARGET)
            default = observer.stats(TARGET).bytes_budget
            just_before = seq - int(0.5e6) // auth.SEQ_US  # inside the 1 s a signer may lead
            if _seq_ahead(0) > just_before:
                continue  # the restart took longer than the lead: again, with a longer one
            while _seq_ahead(0) < just_before:  # its time nearly comes (the satellites share this clock)
                time.sleep(0.02)
            failures = observer.stats(TARGET).auth_failures
            station.send(packet, TARGET)
            again = outcome(packet, failures)
            now = observer.stats(TARGET).bytes_budget
            assert again != "ACK" and now == default, \
                (f"a SET_PARAM refused {lead_s} s ahead, sent again after (2,2) restarted, 0.5 s before its time, "
                 f"was taken ({again}; budget {default // 1024} -> {now // 1024} KiB)")
            return
        pytest.fail("(2,2) never restarted within the lead of a command signed 20 s ahead")
    finally:
        station.close()


# ---- R1 -------------------------------------------------------------------------------------------
def test_r1_a_relayed_migration_does_not_replace_a_chunk_held(sky):
    """R1, the flight part. The ground stores chunk 0 of a block at (0,0). Holding (1,1)'s key file, the attacker
    sends a migration SET_CHUNK for that chunk with other bytes, and then one for chunk 1, to (0,0) -- no
    neighbour of (1,1): relayed by (1,0), hop by hop. Once chunk 1 is at (0,0) (the same path, after), chunk 0
    must still be the ground's bytes (on 4feb281: replaced by the attacker's). A set from the ground may still
    overwrite it."""
    far = (0, 0)
    block = random.randbytes(32)
    genuine, planted = b"genuine " * 64, b"replant " * 64
    attacker = Captured(sky)

    async def set_(k: int, data: bytes) -> None:
        async with ground(sky, 21) as c:
            await c.set_chunk(far, block, k, 2, data, via=far)

    async def read(k: int) -> bytes | None:
        async with ground(sky, 21) as c:
            return await c.get_chunk(far, block, k, via=far) if await c.probe(far, block, k, via=far) else None

    try:
        asyncio.run(set_(0, genuine))
        for k, data in ((0, planted), (1, b"marker" * 10)):
            desc = wire.make_desc(block, k, 2, int(time.time() * 1000), data)
            attacker.send(attacker.command(wire.SKYMEM_SET_CHUNK_CC, far, wire.set_chunk_body(desc, data),
                                           flags=wire.SKYMEM_RF_MIGRATION))
        assert until(lambda: asyncio.run(read(1)) is not None), \
            "the captured satellite's relayed migration of a new chunk did not reach (0,0)"
        held = asyncio.run(read(0))
        assert held == genuine, \
            ("a migration SET_CHUNK signed with (1,1)'s link key, relayed by (1,0), replaced the chunk (0,0) held: it "
             f"now reads {held[:16]!r}... ({len(held)} bytes)" if held else "the chunk (0,0) held is gone")
        asyncio.run(set_(0, planted))  # the ground owns versions: its set overwrites
        assert asyncio.run(read(0)) == planted
    finally:
        attacker.close()
