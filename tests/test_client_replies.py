"""Which replies the ground takes (issue 25, L1): only an answer to a request still waiting (its request
id, random per request), from the satellite that request was sent to, signed with the ground's key
and with a sequence that satellite has not used before -- in the asyncio client and in the C fast path.

A scripted satellite (tests/fakesat.py's, real UDP sockets) answers some requests first with a reply
that must not count: from another satellite, a replay of an earlier reply, a sequence already used or
older than the window, another request id. The genuine reply follows and must complete the request.
"""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from skymemory.link.client import SkyMemoryClient
from skymemory.link.fastpath import OK, BlockJob, BulkTransfer
from skymemory.protocol import auth, native, wire
from skymemory.protocol.errors import NakError

from fakesat import FakeSatellite

KEY = bytes(range(32))
H = hashlib.sha256(b"client-replies").digest()


class ScriptedSatellite(FakeSatellite):
    """A FakeSatellite that signs its replies like a keyed one, and answers a request with `script[0]`'s
    packets (then pops it) while there is a script: script entries are functions cmd -> [packets]."""

    def __init__(self, plane: int = 0, sat: int = 0, signer: auth.Signer | None = None) -> None:
        super().__init__(plane, sat)
        self.signer = signer
        self.script: list = []
        self.sent: list[bytes] = []  # every reply, signed, in order

    def sign(self, packet: bytes, seq: int | None = None) -> bytes:
        return self.signer.sign(packet, seq) if self.signer else packet

    def reply(self, cmd, kind, *, src=None, rid=None, value=0, chunk_id=0, body=b"", status=0, seq=None) -> bytes:
        """A reply to `cmd` as satellite `src` (default: this one) would sign it, request id `rid`."""
        r = cmd.route
        plane, sat = src or self.me
        route = wire.RouteHeader(r.src_plane, r.src_sat, plane, sat, r.via_plane, r.via_sat,
                                 r.request_id if rid is None else rid)
        return self.sign(wire.encode_reply(route, kind, cmd.cc, status, chunk_id, value, body), seq)

    def _answer(self, cmd):
        out = self.script.pop(0)(cmd) if self.script else [self.sign(p) for p in super()._answer(cmd)]
        self.sent += out
        return out


def seq_of(packet: bytes) -> int:
    """The sequence in a signed packet's trailer."""
    return int.from_bytes(packet[-auth.TRAILER_LEN + 4:-auth.TAG_LEN], "big")


def _run(coro):
    return asyncio.run(coro)


def _client(sat: ScriptedSatellite) -> SkyMemoryClient:
    return SkyMemoryClient({sat.me: sat.address}, signer=auth.Signer(1, KEY) if sat.signer else None,
                           station_id=1, timeout=0.2, retries=3)


@pytest.fixture(params=["keyed", "unkeyed"])
def sat(request):
    with ScriptedSatellite(0, 0, auth.Signer(1, KEY) if request.param == "keyed" else None) as s:
        yield s


def test_request_ids_are_random_per_request(sat):
    async def go():
        async with _client(sat) as c:
            for _ in range(64):
                await c.noop(sat.me)

    _run(go())
    ids = [wire.decode_command(p).route.request_id for p in sat.received]
    assert len(set(ids)) == 64 and 0 not in ids
    # counting up from one random start, as before, gives 63 steps of one
    assert sum(b - a == 1 for a, b in zip(ids, ids[1:])) < 3, ids


def test_a_reply_from_another_satellite_answers_nothing(sat):
    # the satellite asked holds 3 chunks of H; (1, 1) claims 7
    sat.script = [lambda cmd: [sat.reply(cmd, wire.SKYMEM_REPLY_ACK, src=(1, 1), value=7, body=H),
                               sat.reply(cmd, wire.SKYMEM_REPLY_ACK, value=3, body=H)]]

    async def go():
        async with _client(sat) as c:
            return await c.probe(sat.me, H), c.counters

    count, counters = _run(go())
    assert count == 3 and counters["wrong_source"] == 1


def test_a_reply_to_no_waiting_request_answers_nothing(sat):
    sat.script = [lambda cmd: [sat.reply(cmd, wire.SKYMEM_REPLY_ACK, rid=cmd.route.request_id ^ 1, value=7, body=H),
                               sat.reply(cmd, wire.SKYMEM_REPLY_ACK, value=3, body=H)]]

    async def go():
        async with _client(sat) as c:
            return await c.probe(sat.me, H), c.counters

    count, counters = _run(go())
    assert count == 3 and counters["duplicates"] == 1


def test_a_route_nak_may_come_from_the_satellite_where_the_route_failed(sat):
    # TTL_EXPIRED / NO_ROUTE / AUTH_FAILED are sent by the satellite where the request stopped
    sat.script = [lambda cmd: [sat.reply(cmd, wire.SKYMEM_REPLY_NAK, src=(1, 1), status=wire.SKYMEM_NAK_TTL_EXPIRED)]]

    async def go():
        async with _client(sat) as c:
            await c.noop(sat.me)

    with pytest.raises(NakError) as err:
        _run(go())
    assert err.value.reason == wire.SKYMEM_NAK_TTL_EXPIRED


def test_replayed_and_stale_sequences_answer_nothing():
    """Request ids are random, so two requests can draw the same one; the second must not take
    the first's reply (replayed byte for byte), nor one signed with a sequence already used or
    older than the window (2^15 sequences below the newest from that satellite)."""
    signer = auth.Signer(1, KEY)
    with ScriptedSatellite(0, 0, signer) as sat:
        first = []

        def answer_first(cmd):
            first.append(sat.reply(cmd, wire.SKYMEM_REPLY_NAK, status=wire.SKYMEM_NAK_NOT_FOUND, body=H))
            return first

        def answer_second(cmd):
            return [first[0],  # the first request's reply again (same request id: drawn twice)
                    sat.reply(cmd, wire.SKYMEM_REPLY_NAK, status=wire.SKYMEM_NAK_NOT_FOUND, body=H,
                              seq=seq_of(first[0]) - 40_000),
                    sat.reply(cmd, wire.SKYMEM_REPLY_ACK, value=3, body=H)]

        sat.script = [answer_first, answer_second]

        async def go():
            async with _client(sat) as c:
                assert await c.probe(sat.me, H) is None
                rid = wire.decode_reply(first[0]).route.request_id
                c._next_id = lambda: rid  # the next request draws the same id
                return await c.probe(sat.me, H), c.counters

        count, counters = _run(go())
    assert count == 3
    assert counters["replayed"] == 2  # the first reply again, and the one older than the window


def test_a_reused_sequence_answers_nothing():
    signer = auth.Signer(1, KEY)
    with ScriptedSatellite(0, 0, signer) as sat:
        seqs = []

        def answer(value):
            def send(cmd):
                if not seqs:
                    seqs.append(signer.next_seq())
                return [sat.reply(cmd, wire.SKYMEM_REPLY_ACK, value=value, body=H, seq=seqs[0])]
            return send

        def answer_fresh(cmd):
            return [sat.reply(cmd, wire.SKYMEM_REPLY_ACK, value=3, body=H)]

        sat.script = [answer(1), answer(7), answer_fresh]

        async def go():
            async with _client(sat) as c:
                assert await c.probe(sat.me, H) == 1
                return await c.probe(sat.me, H), c.counters  # its first answer reuses the sequence

        count, counters = _run(go())
    assert count == 3 and counters["replayed"] == 1 and counters["retries"] >= 1


# ---- the C fast path ----------------------------------------------------------------------------
needs_native = pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")


def _get(sat, signer, payload, chunk_bytes=1000):
    job = BlockJob(hashlib.sha256(payload).digest(), bytearray(len(payload)), len(payload), chunk_bytes, [sat.me])
    bulk = BulkTransfer({sat.me: sat.address}, station_id=1, rto_s=0.1, deadline_s=10, retries=4, signer=signer)
    return job, bulk.get([job]), bulk


def _store(sat, payload, chunk_bytes=1000):
    h = hashlib.sha256(payload).digest()
    count = -(-len(payload) // chunk_bytes)
    for cid in range(count):
        data = payload[cid * chunk_bytes:(cid + 1) * chunk_bytes]
        sat.store[(h, cid)] = (wire.make_desc(h, cid, count, 0, data), data)
    return h, count


def _data_reply(sat, cmd, cid, data, count, **kw):
    desc = wire.make_desc(cmd.block_hash, cid, count, 0, data)
    return sat.reply(cmd, wire.SKYMEM_REPLY_DATA, chunk_id=cid, body=desc.pack() + data, **kw)


@needs_native
def test_fast_path_takes_chunks_only_from_the_satellite_asked():
    signer = auth.Signer(1, KEY)
    payload = bytes(range(256)) * 12
    with ScriptedSatellite(0, 0, signer) as sat:
        h, count = _store(sat, payload)
        forged = b"\xee" * 1000  # what (1, 1) says chunk 0 is: CRC right, signed, but not from (0, 0)

        def answer(cmd):
            return [_data_reply(sat, cmd, 0, forged, count, src=(1, 1))] + \
                [sat.sign(p) for p in FakeSatellite._answer(sat, cmd)]

        sat.script = [answer]
        job, stats, _ = _get(sat, signer, payload)
    assert stats.outcome == "done" and bytes(job.buf) == payload and (job.status == OK).all()
    assert stats.wrong_source == 1


@needs_native
def test_fast_path_refuses_replayed_and_stale_replies():
    """A second get of a block that draws the first's request id must not take the first's
    replies again (here a NOT_FOUND of the chunk since stored), nor a reply older than the window."""
    signer = auth.Signer(1, KEY)
    payload = bytes(range(200)) * 10
    h = hashlib.sha256(payload).digest()
    with ScriptedSatellite(0, 0, signer) as sat:
        first = []

        def answer_first(cmd):  # the block is not there yet
            first.extend(sat.sign(p) for p in FakeSatellite._answer(sat, cmd))
            return first

        def answer_second(cmd):
            return first + [_data_reply(sat, cmd, 0, b"\x11" * 1000, 2, seq=seq_of(first[0]) - 40_000)] + \
                [sat.sign(p) for p in FakeSatellite._answer(sat, cmd)]

        sat.script = [answer_first, answer_second]
        job, stats, bulk = _get(sat, signer, payload)
        assert stats.outcome == "done" and not (job.status == OK).any()  # NOT_FOUND, both chunks
        _store(sat, payload)
        rid = wire.decode_reply(first[0]).route.request_id
        bulk._ids.randrange = lambda *a: rid  # the second get draws the first's request id
        job, stats, _ = _get_with(bulk, sat, payload)
    assert stats.outcome == "done" and bytes(job.buf) == payload and (job.status == OK).all()
    assert stats.replayed == 3  # two NOT_FOUNDs again and the stale chunk


def _get_with(bulk, sat, payload, chunk_bytes=1000):
    job = BlockJob(hashlib.sha256(payload).digest(), bytearray(len(payload)), len(payload), chunk_bytes, [sat.me])
    return job, bulk.get([job]), bulk


@needs_native
def test_the_python_reply_windows_decide_as_the_core():
    """Without the build, Signer.check_reply keeps the windows in Python: the same verdicts as the
    core's (the C ones), on a stream with repeats, reordering, jumps and two satellites."""
    signer = auth.Signer(1, KEY)
    python_only = auth.Signer(1, KEY)
    python_only.reply_window = None
    base = signer.next_seq()
    steps = [0, 0, -1, 5, 5, -40_000, 40_000, 7_233, 7_232, 7_231, 40_001, -1, 80_000, 47_233]
    packets = []
    for src in ((0, 0), (1, 1)):
        for d in steps:
            route = wire.RouteHeader(wire.SKYMEM_GROUND_PLANE, 1, *src, 0, 0, 5)
            packets.append(signer.sign(wire.encode_reply(route, wire.SKYMEM_REPLY_ACK, wire.SKYMEM_NOOP_CC),
                                       base + d))
    tampered = bytearray(packets[0])
    tampered[-1] ^= 1
    packets.append(bytes(tampered))
    c_verdicts = [signer.check_reply(p) for p in packets]
    assert c_verdicts == [python_only.check_reply(p) for p in packets]
    assert c_verdicts[:3] == [auth.REPLY_OK, auth.REPLY_REPLAYED, auth.REPLY_OK]
    assert c_verdicts[5] == auth.REPLY_REPLAYED and c_verdicts[-1] == auth.REPLY_FORGED
