"""Coded stripes in the C fast path (skymem_bulk.c with skymem_stripe.c) against scripted satellites: a set sends
each stripe's parity with its data, a get asks the parity only when a data chunk is gone or its satellite is silent,
and rebuilds what m dead, emptied or lying satellites no longer give, byte for byte."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from skymemory.link.fastpath import HELD, NOT_FOUND, OK, REBUILT, UNNEEDED, BlockJob, BulkTransfer
from skymemory.protocol import native
from skymemory.protocol.stripes import Stripes

from fakesat import FakeSatellite

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")

K, M = 3, 2
CHUNK = 1000


@pytest.fixture
def sats():
    sats = [FakeSatellite(0, i) for i in range(K + M)]
    for s in sats:
        s.__enter__()
    yield sats
    for s in sats:
        s.__exit__()


def transfer(sats, **kw):
    return BulkTransfer({s.me: s.address for s in sats}, **{"rto_s": 0.05, "deadline_s": 10, "retries": 4, **kw})


def job(sats, payload, *, buf=None, sealed=False, chunk=CHUNK):
    return BlockJob(hashlib.sha256(payload).digest(), bytearray(payload) if buf is None else buf, len(payload), chunk,
                    [s.me for s in sats], parity=M, stripe_data=K, sealed=sealed)


def stored(sats, payload, **kw):
    put = job(sats, payload, **kw)
    stats = transfer(sats).set([put])
    assert stats.outcome == "done" and bool(np.all(put.status == OK))
    return put


@pytest.mark.parametrize("size", [1, CHUNK, 20_500, 3 * CHUNK + 1])
def test_a_set_stores_data_and_parity_where_the_layout_says(sats, size):
    payload = os.urandom(size)
    put = stored(sats, payload)
    layout = Stripes(K, M, put.data_chunk_count)
    assert put.chunk_count == layout.wire_chunks
    held = sorted(cid for s in sats for _, cid in s.store)
    assert held == list(range(layout.wire_chunks))
    for server, s in enumerate(sats):  # chunk id c on server c mod n
        assert all(cid % (K + M) == server for _, cid in s.store)
    for d in range(layout.data_chunks):  # the data chunks travel as they are
        cid = layout.wire_id(d)
        data = next(s.store[(put.block_hash, cid)][1] for s in sats if (put.block_hash, cid) in s.store)
        assert data == payload[d * CHUNK:(d + 1) * CHUNK]


def test_a_healthy_get_asks_no_parity(sats):
    payload = os.urandom(20_500)
    stored(sats, payload)
    got = job(sats, payload, buf=bytearray(len(payload)))
    stats = transfer(sats).get([got])
    assert bytes(got.buf) == payload and got.complete()
    assert stats.parity_asked == 0 and stats.rebuilt == 0
    assert set(np.unique(got.status)) <= {OK, UNNEEDED}
    assert stats.packets_tx == data_runs(Stripes(K, M, got.data_chunk_count))  # one GET_CHUNKS per run: no parity


def data_on(got: BlockJob, satellites) -> int:
    """Data chunks of the block on these satellites (chunk c on satellite c mod n)."""
    return sum(int(w) % (K + M) in satellites for w in got.stripes.wire_ids())


def data_runs(layout: Stripes) -> int:
    """GET_CHUNKS a healthy get sends: one per run of a satellite's consecutive chunks that are all data."""
    data = set(layout.wire_ids().tolist())
    runs = 0
    for server in range(layout.n):
        ids = range(server, layout.wire_chunks, layout.n)
        runs += sum(i in data and (j < 0 or j not in data) for i, j in zip(ids, [-1, *ids]))
    return runs


@pytest.mark.parametrize("dead", [(0, 1), (0, 4), (3, 4), (2,)])
def test_m_silent_satellites_cost_only_their_share(sats, dead):
    payload = os.urandom(20_500)
    stored(sats, payload)
    for i in dead:
        sats[i].drop_requests = 10**9  # alive on the socket, answering nothing
    got = job(sats, payload, buf=bytearray(len(payload)))
    prefix = np.zeros(1, dtype=np.uint32)
    stats = transfer(sats, rto_s=2.0, hedge_s=0.05).get([got], prefix=prefix)  # a resend would take 2 s
    assert bytes(got.buf) == payload and got.complete()
    assert int(prefix[0]) == got.data_chunk_count
    data_lost = data_on(got, dead)  # parity rotates: most stripes have data on a dead satellite
    assert stats.rebuilt >= data_lost and (stats.rebuilt > 0) == (data_lost > 0)
    assert stats.retransmits == 0  # parity asked on silence, before any resend was due


def test_a_slow_satellite_is_not_waited_for(sats):
    """Satellite 1 answers, but slowly (a pause before each reply: never silent); each stripe whose other chunks
    came is completed from its parity rather than waiting for it."""
    payload = os.urandom(20_500)
    stored(sats, payload)
    sats[1].reply_gap_s = 0.2  # its 7 chunks would take 1.4 s
    got = job(sats, payload, buf=bytearray(len(payload)))
    stats = transfer(sats, rto_s=2.0, hedge_s=0.02).get([got])
    assert bytes(got.buf) == payload and got.complete()
    assert stats.parity_asked > 0 and stats.rebuilt > 0 and stats.retransmits == 0
    assert np.count_nonzero(got.status[1::K + M] == OK) < 7  # satellite 1's chunks were not all waited for


def test_an_emptied_satellite_is_answered_by_parity_at_once(sats):
    payload = os.urandom(20_500)
    stored(sats, payload)
    sats[1].store.clear()  # restarted: answers NOT_FOUND
    got = job(sats, payload, buf=bytearray(len(payload)))
    stats = transfer(sats, rto_s=2.0, hedge_s=5.0).get([got])  # no silence: the refusals alone ask the parity
    assert bytes(got.buf) == payload and got.complete()
    lost = data_on(got, [1])  # satellite 1's data chunks: one in each stripe where it holds no parity
    assert lost >= 4 and stats.rebuilt >= lost and stats.retransmits == 0  # more when parity came before data
    assert list(got.data_status()).count(NOT_FOUND | REBUILT) == lost


def test_a_lying_satellite_is_rebuilt_around(sats):
    payload = os.urandom(20_500)
    stored(sats, payload)
    sats[2].corrupt_replies = 10**9  # every chunk it sends fails its CRC
    got = job(sats, payload, buf=bytearray(len(payload)))
    transfer(sats).get([got])
    assert bytes(got.buf) == payload and got.complete()


def test_more_than_m_lost_is_incomplete_never_wrong(sats):
    payload = os.urandom(20_500)
    stored(sats, payload)
    for i in (0, 1, 2):
        sats[i].store.clear()
    got = job(sats, payload, buf=bytearray(len(payload)))
    transfer(sats).get([got])
    assert not got.complete()
    assert not np.any(got.status & REBUILT)


def test_parity_asked_with_the_data_when_hedge_is_zero(sats):
    payload = os.urandom(20_500)
    stored(sats, payload)
    got = job(sats, payload, buf=bytearray(len(payload)))
    stats = transfer(sats, hedge_s=0).get([got])
    assert bytes(got.buf) == payload and got.complete()
    assert stats.parity_asked == 14 and HELD not in got.status


def test_several_coded_blocks_in_waves(sats):
    payloads = [os.urandom(4_000 + 997 * i) for i in range(4)]
    for p in payloads:
        stored(sats, p)
    sats[0].drop_requests = 10**9
    jobs = [job(sats, p, buf=bytearray(len(p))) for p in payloads]
    prefix = np.zeros(len(jobs), dtype=np.uint32)
    transfer(sats).get(jobs, prefix=prefix, wave_chunks=2, wave_doubling=True)
    assert [bytes(j.buf) for j in jobs] == payloads and all(j.complete() for j in jobs)
    assert list(prefix) == [j.data_chunk_count for j in jobs]


def test_a_coded_job_needs_distinct_servers_for_a_stripe(sats):
    with pytest.raises(ValueError, match="distinct servers"):
        BlockJob(b"\x01" * 32, bytearray(10), 10, CHUNK, [s.me for s in sats[:4]], parity=M, stripe_data=K)


def test_sealed_stripes_open_every_chunk_and_rebuild_around_one_that_does_not(sats):
    pytest.importorskip("cryptography")
    from dataclasses import replace

    from skymemory.protocol.seal import ContentKeys

    sealer = ContentKeys.new().sealer("tenant-a")
    payload = os.urandom(20_500)
    put = job(sats, payload, sealed=True)
    assert transfer(sats).set([put], sealer=sealer).outcome == "done"
    assert all(payload[:64] not in data for s in sats for _, data in s.store.values())  # ciphertext only
    for key, (desc, data) in list(sats[1].store.items()):  # the satellite rewrites what it keeps, CRC and all
        data = bytes([data[0] ^ 1]) + data[1:]
        sats[1].store[key] = (replace(desc, crc32c=native.crc32c(data)), data)
    got = job(sats, payload, buf=bytearray(len(payload)), sealed=True)
    stats = transfer(sats).get([got], sealer=sealer)
    assert bytes(got.buf) == payload and got.complete()
    assert stats.seal_failures > 0 and stats.rebuilt >= stats.seal_failures  # more when parity came first
    other = ContentKeys.new().sealer("tenant-a")  # another ground's keys: nothing opens, nothing is rebuilt
    got = job(sats, payload, buf=bytearray(len(payload)), sealed=True)
    transfer(sats).get([got], sealer=other)
    assert not got.complete() and REBUILT not in got.status


@pytest.mark.parametrize("silent", [(), (0,)])
def test_a_coded_blocks_crc_is_its_contents_whether_folded_or_read(sats, silent):
    payload = os.urandom(20_500)
    stored(sats, payload)
    for i in silent:
        sats[i].drop_requests = 10**9
    got = job(sats, payload, buf=bytearray(len(payload)))
    got.chunk_crcs = np.zeros(got.chunk_count, dtype=np.uint32)
    transfer(sats).get([got])
    assert got.complete() and got.block_crc32c() == native.crc32c(payload)
