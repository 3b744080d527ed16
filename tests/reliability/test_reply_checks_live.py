"""An attacker on the ground link cannot answer the ground's requests with signed replies it captured
(issue 25, L1): real skymem_node processes, keyed, and a UDP relay standing for the link between the
ground and satellite (0,0) that records every reply and lets the test inject packets into the ground's
port while a request is waiting.

Request ids are random per request, so two requests can draw the same one (the tests make the second
draw the first's): the captured reply then carries the right id, a valid tag -- and either a sequence
the ground has already seen from that satellite (replay) or another satellite as its source. Neither
may answer; the genuine reply still completes the request. The same for the C fast path.

A new client (a Signer of its own, so windows that never saw the captured reply) started within the
satellites' clock allowance of the capture (auth.REPLY_SKEW_US, L1 of issue 53) is above its floor: there a
captured reply is refused because its satellite signed it before the request left -- before the newest
reply the client had from that satellite when it asked (auth.Signer.reply_top) -- whatever its request id.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import select
import socket
import threading

import pytest

from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.link.fastpath import OK, BlockJob, BulkTransfer
from skymemory.protocol import auth, native, wire
from skymemory.protocol.errors import RequestTimeout

ENTRY = (0, 0)


class Link:
    """UDP relay between ground sockets and one satellite's ground port. `replies` records what came
    down; `drop_from` (a satellite) keeps that one's replies from the ground; `inject` is sent to the
    ground socket of the next request before the request itself goes up."""

    def __init__(self, satellite: tuple[str, int]) -> None:
        self.satellite = satellite
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.address = self.sock.getsockname()
        self.replies: list[bytes] = []
        self.drop_from: tuple[int, int] | None = None
        self.inject: list[bytes] = []
        self._ground: tuple[str, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not select.select([self.sock], [], [], 0.05)[0]:
                continue
            data, addr = self.sock.recvfrom(65535)
            if addr != self.satellite:  # up: a request from a ground socket
                self._ground = addr
                while self.inject:
                    self.sock.sendto(self.inject.pop(0), addr)
                self.sock.sendto(data, self.satellite)
                continue
            self.replies.append(data)
            src = wire.decode_reply(data).route
            if self._ground is not None and self.drop_from != (src.src_plane, src.src_sat):
                self.sock.sendto(data, self._ground)

    def recorded(self, src, cc) -> list[bytes]:
        """The replies from satellite `src` to function code `cc`, in order."""
        return [p for p, r in ((p, wire.decode_reply(p)) for p in self.replies)
                if r.cc == cc and (r.route.src_plane, r.route.src_sat) == src]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture(scope="module")
def keyed(node_built, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replies")
    auth.write_key_files(tmp, [(p, s) for p in range(2) for s in range(3)])
    cl = Cluster(2, 3, keys=tmp).start_all()
    link = Link(cl.ground_addresses()[ENTRY])
    try:
        yield cl, link, auth.Signer.from_file(tmp / "constellation.keys")
    finally:
        link.close()
        assert all(code == 0 for code in cl.close().values())


def _client(link, signer) -> SkyMemoryClient:
    return SkyMemoryClient({ENTRY: link.address}, via=ENTRY, signer=signer, station_id=1, timeout=0.5, retries=3)


def _rid(packet: bytes) -> int:
    return wire.decode_reply(packet).route.request_id


def test_a_replayed_reply_does_not_answer_a_request_with_the_same_id(keyed):
    cl, link, signer = keyed
    h = hashlib.sha256(b"replayed-not-found").digest()

    async def go():
        async with _client(link, signer) as c:
            assert await c.probe((1, 1), h) is None  # not stored yet: NAK NOT_FOUND, signed by (1,1)
            captured = link.recorded((1, 1), wire.SKYMEM_PROBE_CC)[-1]
            await c.set_chunk((1, 1), h, 0, 4, b"stored now")
            c._next_id = lambda: _rid(captured)  # the next request draws the captured reply's id
            link.inject = [captured]  # ... and the attacker replays that reply to the ground first
            return await c.probe((1, 1), h), c.counters

    count, counters = asyncio.run(go())
    assert count == 4, "the replayed NOT_FOUND answered the second probe"
    assert counters["replayed"] == 1


def test_a_reply_of_another_satellite_does_not_answer(keyed):
    cl, link, signer = keyed
    h = hashlib.sha256(b"other-satellite").digest()

    async def go():
        async with _client(link, signer) as c:
            await c.set_chunk((1, 1), h, 0, 2, b"on (1,1)")
            # the attacker keeps (0,1)'s reply from the ground, so its sequence is one the ground never saw
            link.drop_from = (0, 1)
            c.retries = 0
            with pytest.raises(RequestTimeout):
                await c.probe((0, 1), h)
            link.drop_from, c.retries = None, 3
            captured = link.recorded((0, 1), wire.SKYMEM_PROBE_CC)[-1]
            c._next_id = lambda: _rid(captured)
            link.inject = [captured]  # a fresh, signed NOT_FOUND -- from (0,1), not from (1,1)
            return await c.probe((1, 1), h), c.counters

    count, counters = asyncio.run(go())
    assert count == 2, "(0,1)'s NOT_FOUND answered a probe of (1,1)"
    assert counters["wrong_source"] == 1


@pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")
def test_the_fast_path_does_not_take_replayed_replies(keyed):
    cl, link, signer = keyed
    payload = bytes(range(256)) * 20
    h = hashlib.sha256(payload).digest()
    sat = (1, 2)
    bulk = BulkTransfer({ENTRY: link.address}, via=ENTRY, station_id=1, rto_s=0.2, deadline_s=20, signer=signer)

    def get():
        job = BlockJob(h, bytearray(len(payload)), len(payload), 1024, [sat])
        return job, bulk.get([job])

    base = bulk._ids.randrange(1, 2**31)
    bulk._ids.randrange = lambda *a: base  # both gets draw the same request ids
    job, stats = get()  # nothing stored yet: a NOT_FOUND per chunk
    assert stats.outcome == "done" and not (job.status == OK).any()
    captured = link.recorded(sat, wire.SKYMEM_GET_CHUNKS_CC)
    assert len(captured) == job.chunk_count
    put = BulkTransfer({ENTRY: link.address}, via=ENTRY, station_id=1, rto_s=0.2, deadline_s=20, signer=signer)
    job_set = BlockJob(h, bytearray(payload), len(payload), 1024, [sat])
    assert put.set([job_set]).outcome == "done"
    link.inject = list(captured)  # replayed ahead of the second get's request
    job, stats = get()
    assert stats.outcome == "done" and bytes(job.buf) == payload, "a replayed NOT_FOUND answered the second get"
    assert stats.replayed == len(captured)


def _seq(packet: bytes) -> int:
    return int.from_bytes(packet[-auth.TRAILER_LEN + 4:-auth.TAG_LEN], "big")


def _fresh_signer(cl) -> auth.Signer:
    """A new ground client's signer: the constellation's key, windows of its own, its floor at this moment."""
    return auth.Signer.from_file(cl.keys / "constellation.keys")


def test_a_new_client_within_the_clock_allowance_takes_no_captured_reply(keyed):
    cl, link, signer = keyed
    h = hashlib.sha256(b"new-client-captured-not-found").digest()
    sat = (1, 0)
    fresh = _fresh_signer(cl)  # started before the capture: its floor is below the captured reply's sequence

    async def go():
        async with _client(link, signer) as old:
            assert await old.probe(sat, h) is None  # not stored yet: NAK NOT_FOUND, signed by (1,0)
            captured = link.recorded(sat, wire.SKYMEM_PROBE_CC)[-1]
            await old.set_chunk(sat, h, 0, 5, b"stored now")
        assert _seq(captured) > fresh.reply_floor  # within the clock allowance: the windows' floor lets it by
        async with _client(link, fresh) as new:
            await new.noop(sat)  # its first genuine reply from (1,0), signed after the captured one
            new._next_id = lambda: _rid(captured)  # its next request draws the captured reply's id
            link.inject = [captured]  # ... and the attacker replays that reply to it first
            return await new.probe(sat, h), new.counters

    count, counters = asyncio.run(go())
    assert count == 5, "a new client took a captured NOT_FOUND signed before its request left"
    assert counters["replayed"] == 1


@pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")
def test_a_new_clients_fast_path_takes_no_captured_reply(keyed):
    cl, link, signer = keyed
    payload = bytes(range(200)) * 30
    h = hashlib.sha256(payload).digest()
    sat = (0, 2)
    fresh = _fresh_signer(cl)

    def get(signer_, base):
        bulk = BulkTransfer({ENTRY: link.address}, via=ENTRY, station_id=1, rto_s=0.2, deadline_s=20, signer=signer_)
        bulk._ids.randrange = lambda *a: base  # both gets draw the same request ids
        job = BlockJob(h, bytearray(len(payload)), len(payload), 1000, [sat])
        return job, bulk.get([job])

    base = random.SystemRandom().randrange(1, 2**30)
    job, stats = get(signer, base)  # the old client: nothing stored yet, a NOT_FOUND per chunk
    assert stats.outcome == "done" and not (job.status == OK).any()
    captured = link.recorded(sat, wire.SKYMEM_GET_CHUNKS_CC)
    assert len(captured) == job.chunk_count and all(_seq(p) > fresh.reply_floor for p in captured)
    put = BulkTransfer({ENTRY: link.address}, via=ENTRY, station_id=1, rto_s=0.2, deadline_s=20, signer=signer)
    assert put.set([BlockJob(h, bytearray(payload), len(payload), 1000, [sat])]).outcome == "done"

    async def first_contact():  # the new client's first genuine reply from (0,2), signed after the captured ones
        async with _client(link, fresh) as c:
            await c.noop(sat)

    asyncio.run(first_contact())
    link.inject = list(captured)  # replayed ahead of the new client's get, under the ids it draws
    job, stats = get(fresh, base)
    assert stats.outcome == "done" and bytes(job.buf) == payload, \
        "a new client's fast path took captured NOT_FOUNDs signed before its get began"
    assert stats.replayed == len(captured)
