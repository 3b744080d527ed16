"""A new ground client's reply windows start with a floor (L1): a genuine reply signed before the client
started is stale, and refused even when it is the first reply heard from its satellite and names a request
still waiting (request ids are random: a new request can draw a captured reply's id).

Satellites sign replies with Unix-time sequences (skymem_auth_next_seq on their clock), so the floor is the
client's start as a sequence (auth.reply_floor: skymem_auth_seq_at(start_us)) less the satellites' allowance
for clock error (auth.REPLY_SKEW_US, skymem_sat.h's SKYMEM_SAT_SEQ_AHEAD_US). Checked in the core's windows
(skymem_reply_window_new / _check, the C path the client and the fast path use) and in Signer.check_reply's
Python windows (without the build; forced here as tests/test_client_replies.py does, reply_window = None).
"""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest

from skymemory.link.client import SkyMemoryClient
from skymemory.link.fastpath import OK, BlockJob, BulkTransfer
from skymemory.protocol import auth, native, wire

from fakesat import FakeSatellite

KEY = bytes(range(32))
H = hashlib.sha256(b"reply-window-floor").digest()
SKEW = auth.REPLY_SKEW_US // auth.SEQ_US  # the floor's allowance, in sequences
HOUR = 3600 * 1_000_000 // auth.SEQ_US

needs_native = pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")
PATHS = [pytest.param("c", marks=needs_native), "python"]


def now_seq() -> int:
    return time.time_ns() // 1000 // auth.SEQ_US


def ground_signer(path: str) -> auth.Signer:
    """A new client's signer, checking replies in the core's windows ("c") or in Python's ("python")."""
    signer = auth.Signer(1, KEY)
    if path == "c":
        assert signer.reply_window is not None
    else:
        signer.reply_window = None  # Signer.check_reply's fallback, as without the build
    return signer


# the satellite's side: its replies signed with its DOWN key (derived from the ground master, as the launcher
# derives its key file), under the ground's key id 1, at whatever sequence a test says
SATELLITE = auth.Signer(1, KEY)


def signed_reply(seq: int, src=(0, 0), rid: int = 5) -> bytes:
    route = wire.RouteHeader(wire.SKYMEM_GROUND_PLANE, 1, *src, wire.SKYMEM_NO_SAT, wire.SKYMEM_NO_SAT, rid)
    return SATELLITE.sign(wire.encode_reply(route, wire.SKYMEM_REPLY_ACK, wire.SKYMEM_NOOP_CC), seq)


# ---- the floor -----------------------------------------------------------------------------------------

def test_the_floor_is_the_signers_start_less_the_satellites_clock_allowance():
    before = now_seq()
    signer = auth.Signer(1, KEY)
    after = now_seq()
    assert signer.reply_floor == auth.reply_floor(signer.started_us) == signer.started_us // auth.SEQ_US - SKEW
    assert before - SKEW <= signer.reply_floor <= after - SKEW
    assert auth.REPLY_SKEW_US == 1_000_000  # _cffi_build.MIRRORS checks it against SKYMEM_SAT_SEQ_AHEAD_US
    assert auth.reply_floor(0) == 0 and auth.reply_floor(SKEW * auth.SEQ_US) == 0  # none, or before the epoch
    assert auth.reply_floor((SKEW + 1) * auth.SEQ_US) == 1


@needs_native
@pytest.mark.parametrize("start_us", [0, 1, auth.REPLY_SKEW_US - 1, auth.REPLY_SKEW_US, auth.REPLY_SKEW_US + 15,
                                      auth.REPLY_SKEW_US + 16, 1_700_000_000_123_457, 2**63])
def test_the_core_computes_the_same_floor(start_us):
    assert native.lib.skymem_reply_window_floor(start_us) == auth.reply_floor(start_us)


# ---- a new client's verdicts ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", PATHS)
def test_a_genuine_reply_signed_before_the_client_started_is_refused(path):
    captured = [signed_reply(now_seq() - HOUR), signed_reply(now_seq() - 10 * SKEW, rid=6)]
    ground = ground_signer(path)
    for packet in captured:
        assert ground.reply_ok(packet)  # genuine: the right key, the tag holds
        assert ground.check_reply(packet) == auth.REPLY_REPLAYED  # the first from (0, 0), yet stale
    # just past the allowance for the satellite's clock, to the sequence: at the floor refused, above it taken
    assert ground.check_reply(signed_reply(ground.reply_floor, rid=7)) == auth.REPLY_REPLAYED
    assert ground.check_reply(signed_reply(ground.reply_floor - 1, src=(1, 1))) == auth.REPLY_REPLAYED
    assert ground.check_reply(signed_reply(ground.reply_floor + 1, rid=8)) == auth.REPLY_OK


@pytest.mark.parametrize("path", PATHS)
def test_a_reply_signed_after_the_client_started_is_taken(path):
    ground = ground_signer(path)
    fresh = signed_reply(SATELLITE.next_seq())
    assert ground.check_reply(fresh) == auth.REPLY_OK
    assert ground.check_reply(fresh) == auth.REPLY_REPLAYED  # and once only
    # a satellite whose clock is behind the ground's, within the allowance, is still heard
    assert ground.check_reply(signed_reply(ground.started_us // auth.SEQ_US - SKEW // 2, src=(2, 3))) == auth.REPLY_OK


@pytest.mark.parametrize("path", PATHS)
def test_a_refused_stale_reply_opens_no_window(path):
    """The stale reply first, then a fresh one from the same satellite: the fresh one is taken, and the
    stale one is still refused after it (the window's top moved on; the floor never moves back)."""
    ground = ground_signer(path)
    stale = signed_reply(now_seq() - HOUR)
    assert ground.check_reply(stale) == auth.REPLY_REPLAYED
    assert ground.check_reply(signed_reply(SATELLITE.next_seq())) == auth.REPLY_OK
    assert ground.check_reply(stale) == auth.REPLY_REPLAYED
    # forged stays forged, before and after the floor: the floor is checked only on a tag that holds
    forged = bytearray(stale)
    forged[-1] ^= 1
    assert ground.check_reply(bytes(forged)) == auth.REPLY_FORGED


@needs_native
def test_a_window_made_without_a_start_has_no_floor():
    """skymem_reply_window_new(key_id, 0): the first reply from a satellite opens its window, as before."""
    ffi, lib = native.ffi, native.lib
    window = ffi.gc(lib.skymem_reply_window_new(1, 0), lib.skymem_reply_window_free)
    key = auth.Signer(1, KEY).mac_key(auth.DOWN, 0, 0).c_key
    for seq, rc in ((now_seq() - HOUR, 0), (1, auth.AUTH_E_REPLAY)):  # the second: too old for the window
        packet = signed_reply(seq)
        assert lib.skymem_reply_window_check(window, key, ffi.from_buffer(packet), len(packet), 0, 0, ffi.NULL) == rc
    started = time.time_ns() // 1000
    window = ffi.gc(lib.skymem_reply_window_new(1, started), lib.skymem_reply_window_free)
    for seq, rc in ((auth.reply_floor(started), auth.AUTH_E_REPLAY), (auth.reply_floor(started) + 1, 0)):
        packet = signed_reply(seq)
        assert lib.skymem_reply_window_check(window, key, ffi.from_buffer(packet), len(packet), 0, 0, ffi.NULL) == rc


# ---- through the client and the fast path -------------------------------------------------------------

class ReplayingSatellite(FakeSatellite):
    """Answers the first request with `stale(cmd)` -- a reply captured before the client started, its
    request id the one drawn -- ahead of its genuine, freshly signed answer; every later one genuinely."""

    def __init__(self, stale) -> None:
        super().__init__(0, 0)
        self.stale = stale

    def _answer(self, cmd):
        fresh = [SATELLITE.sign(p) for p in super()._answer(cmd)]
        stale, self.stale = self.stale, None
        return ([stale(cmd)] if stale else []) + fresh


def _stale_ack(cmd) -> bytes:
    """What this satellite answered, an hour ago, a probe that drew the same request id: 7 chunks of H."""
    r = cmd.route
    route = wire.RouteHeader(r.src_plane, r.src_sat, 0, 0, r.via_plane, r.via_sat, r.request_id)
    return SATELLITE.sign(wire.encode_reply(route, wire.SKYMEM_REPLY_ACK, cmd.cc, 0, 0, 7, H), now_seq() - HOUR)


@pytest.mark.parametrize("path", PATHS)
def test_a_new_client_takes_no_stale_reply_to_its_waiting_request(path):
    with ReplayingSatellite(_stale_ack) as sat:
        for cid in range(3):
            sat.store[(H, cid)] = (wire.make_desc(H, cid, 3, 0, b"x"), b"x")

        async def go():
            async with SkyMemoryClient({sat.me: sat.address}, signer=ground_signer(path), station_id=1,
                                       timeout=0.5, retries=2) as c:
                return await c.probe(sat.me, H), c.counters

        count, counters = asyncio.run(go())
    assert count == 3  # the genuine answer, not the captured 7
    assert counters["replayed"] == 1 and counters["auth_failures"] == 0


@needs_native
def test_the_fast_path_takes_no_stale_chunk():
    payload = bytes(range(250)) * 8
    h = hashlib.sha256(payload).digest()

    def stale_chunk(cmd):  # chunk 0 as it was an hour ago: CRC right, signed, request id right
        r = cmd.route
        old = b"\x11" * 1000
        desc = wire.make_desc(h, 0, 2, 0, old)
        route = wire.RouteHeader(r.src_plane, r.src_sat, 0, 0, r.via_plane, r.via_sat, r.request_id)
        return SATELLITE.sign(wire.encode_reply(route, wire.SKYMEM_REPLY_DATA, cmd.cc, 0, 0, 0, desc.pack() + old),
                              now_seq() - HOUR)

    with ReplayingSatellite(stale_chunk) as sat:
        for cid in range(2):
            data = payload[cid * 1000:(cid + 1) * 1000]
            sat.store[(h, cid)] = (wire.make_desc(h, cid, 2, 0, data), data)
        signer = ground_signer("c")
        job = BlockJob(h, bytearray(len(payload)), len(payload), 1000, [sat.me])
        bulk = BulkTransfer({sat.me: sat.address}, station_id=1, rto_s=0.1, deadline_s=10, retries=4, signer=signer)
        stats = bulk.get([job])
    assert stats.outcome == "done" and bytes(job.buf) == payload and (job.status == OK).all()
    assert stats.replayed == 1
