"""The C fast path (skymem_bulk_get / skymem_bulk_set) against scripted satellites with faults."""

from __future__ import annotations

import hashlib
import os
import socket

import numpy as np
import pytest

from skymemory.link.bell import ProgressBell
from skymemory.link.fastpath import NOT_FOUND, OK, BlockJob, BulkTransfer, require_native
from skymemory.protocol import native, wire
from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import BlockMiss

from fakesat import FakeSatellite

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")


@pytest.fixture
def sats():
    sats = [FakeSatellite(0, i) for i in range(3)]
    for s in sats:
        s.__enter__()
    yield sats
    for s in sats:
        s.__exit__()


def store_for(sats, chunk_bytes=1000, **fast):
    return ConstellationBlockStore({s.me: s.address for s in sats}, [s.me for s in sats], chunk_bytes=chunk_bytes,
                                   client_options={"timeout": 0.2},
                                   fast_options={"rto_s": 0.05, "deadline_s": 10, **fast})


def test_hardware_crc_matches_the_reference():
    for n in (0, 1, 7, 8, 9, 6144, 60000, 100_003):
        data = os.urandom(n)
        assert native.lib.skymem_bulk_crc32c(native.ffi.from_buffer(data), n) == native.crc32c_py(data)


def test_get_survives_lost_requests_corrupt_and_duplicate_replies(sats):
    payload = os.urandom(20_500)
    h = hashlib.sha256(payload).digest()
    with store_for(sats) as store:
        rec = store.put_block(h, payload)
        sats[0].drop_requests = 1  # the first GET_CHUNKS to satellite 0 is lost
        sats[1].corrupt_replies = 2  # two chunks from satellite 1 fail CRC32C
        sats[2].duplicate_replies = True
        assert store.get_block(rec) == payload
        t = store.last_transfer
        assert t.crc_failures == 2 and t.retransmits >= 2 and t.ignored >= 6  # the duplicates


def test_set_resends_unacknowledged_chunks(sats):
    payload = os.urandom(9_000)
    h = hashlib.sha256(payload).digest()
    with store_for(sats) as store:
        sats[1].drop_requests = 2
        rec = store.put_block(h, payload)
        assert store.last_transfer.retransmits >= 2
        assert sorted(cid for _, cid in sats[1].store) == [1, 4, 7]
        assert store.get_block(rec) == payload


def test_several_blocks_in_waves_fill_prefix_and_buffers(sats):
    blocks = [os.urandom(7_777 + i) for i in range(4)]
    with store_for(sats) as store:
        records = [store.put_block(hashlib.sha256(b).digest(), b) for b in blocks]
        jobs = store.block_jobs(records)
        prefix = np.zeros(len(jobs), dtype=np.uint32)
        store.fetch_jobs(jobs, prefix=prefix, wave_chunks=2)
        assert [bytes(j.buf) for j in jobs] == blocks
        assert list(prefix) == [j.chunk_count for j in jobs]
        assert all((j.status == OK).all() for j in jobs)
        buffers = [bytearray(len(b)) for b in blocks]  # caller-provided buffers are filled in place
        assert store.get_blocks(records, buffers) is not None and buffers == [bytearray(b) for b in blocks]


def _rings(bell) -> int:
    """How many times the bell was rung since last read (0: never): the eventfd's counter, consumed."""
    try:
        return os.eventfd_read(bell.fd)
    except BlockingIOError:
        return 0


def test_the_bell_rings_once_when_every_prefix_reaches_what_its_reader_waits_for(sats):
    """A streamed get's reader sleeps on an eventfd (link/bell.py): the C get writes it once every block's prefix
    has reached the armed count, once for that count; never for a count not reached, nor when unarmed."""
    blocks = [os.urandom(7_777 + i) for i in range(4)]  # 8 chunks each
    with store_for(sats) as store:
        records = [store.put_block(hashlib.sha256(b).digest(), b) for b in blocks]
        for want, rings in ((5, 1), (8, 1), (9, 0), (0, 0)):
            bell = ProgressBell()
            bell.arm(want)
            jobs = store.block_jobs(records)
            prefix = np.zeros(len(jobs), dtype=np.uint32)
            store.fetch_jobs(jobs, prefix=prefix, wave_chunks=2, bell=bell)
            assert [bytes(j.buf) for j in jobs] == blocks
            assert _rings(bell) == rings, f"armed at {want} chunks"
            bell.ring()  # what the transfer's thread does at its end: a reader of the last layer wakes
            bell.wait(10.0)
            assert _rings(bell) == 0  # wait consumed the ring
            bell.close()
        with pytest.raises(ValueError, match="pass prefix"):
            store.fast.get(store.block_jobs(records), bell=ProgressBell())


def test_a_bell_past_descriptor_1023_still_wakes_its_reader():
    """A server process holds many descriptors (sockets, files): a stream's bell may be numbered past what
    select() takes, and its reader must still sleep and wake on it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if 0 <= hard < 1100:  # RLIM_INFINITY is -1
        pytest.skip(f"this process may open only {hard} descriptors")
    if 0 <= soft < 1100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1100, hard))
    held = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        bell = ProgressBell()
        assert bell.fd > 1023
        bell.ring()
        bell.wait(10.0)
        assert _rings(bell) == 0  # woken, and the ring consumed
        bell.wait(0.01)  # nothing rung: the timeout ends it
        bell.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_doubling_waves_ask_the_first_chunks_first_then_ever_wider_waves(sats):
    """wave_doubling (what a layer stream asks): waves of 2, 4, 8, ... chunk ids across blocks, in that order,
    so the whole prefix takes a few waves of requests instead of one per 2 chunks."""
    blocks = [os.urandom(20_000) for _ in range(2)]  # 20 chunks of 1000 B each
    with store_for(sats) as store:
        records = [store.put_block(hashlib.sha256(b).digest(), b) for b in blocks]
        sent = {}
        for waves in ("uniform", "doubling"):
            for s in sats:
                s.received.clear()
            jobs = store.block_jobs(records)
            prefix = np.zeros(len(jobs), dtype=np.uint32)
            stats = store.fetch_jobs(jobs, prefix=prefix, wave_chunks=2, wave_doubling=waves == "doubling")
            assert [bytes(j.buf) for j in jobs] == blocks and list(prefix) == [20, 20]
            assert stats.retransmits == 0
            asked = [wire.decode_command(d) for s in sats for d in s.received]
            sent[waves] = sorted(c.first for c in asked if c.cc == wire.SKYMEM_GET_CHUNKS_CC)
        # a request per block per satellite per wave, asking that satellite's chunk ids of the wave (chunk i is
        # on satellite i % 3): it starts at the wave's first chunk id that satellite holds
        def firsts(waves):
            return sorted(2 * [next(i for i in range(lo, hi) if i % 3 == k) for lo, hi in waves
                               for k in range(3) if any(i % 3 == k for i in range(lo, hi))])
        assert sent["uniform"] == firsts([(lo, lo + 2) for lo in range(0, 20, 2)])  # 10 waves, 40 requests
        assert sent["doubling"] == firsts([(0, 2), (2, 6), (6, 14), (14, 20)])  # 4 waves, 22 requests
        ffi, lib = require_native()
        c_blocks = ffi.new("skymem_bulk_block_t[]", 2)
        for b in c_blocks:
            b.chunk_count, b.n_servers = 20, 3
        assert lib.skymem_bulk_get_requests(c_blocks, 2, 2, 1) == len(sent["doubling"])
        assert lib.skymem_bulk_get_requests(c_blocks, 2, 2, 0) == len(sent["uniform"])


def test_paced_get_asks_the_first_wave_at_once_and_the_rest_at_the_pace(sats):
    """Pacing gives a lower bound on when the last request leaves: (bytes after the first wave) / pace."""
    blocks = [os.urandom(10_000) for _ in range(3)]  # 10 chunks of 1000 B each, 30 KB in all
    pace = 50_000.0  # B/s: the 24 KB after the first wave take at least 0.48 s
    with store_for(sats) as store:
        records = [store.put_block(hashlib.sha256(b).digest(), b) for b in blocks]
        for s in sats:
            s.received_at.clear()
        jobs = store.block_jobs(records)
        stats = store.fetch_jobs(jobs, wave_chunks=2, pace_Bps=pace)
        assert [bytes(j.buf) for j in jobs] == blocks
        arrivals = sorted(t for s in sats for t in s.received_at)
        first_wave = 3 * 2 * 1000
        assert arrivals[-1] - arrivals[0] >= 0.9 * (30_000 - first_wave) / pace
        assert stats.outcome == "done" and stats.retransmits == 0
        with pytest.raises(ValueError):
            store.fetch_jobs(store.block_jobs(records), pace_Bps=-1)


def test_put_blocks_stores_several_blocks_in_one_call(sats):
    blocks = [os.urandom(4_000 + 333 * i) for i in range(4)]
    with store_for(sats) as store:
        assert store.put_blocks([]) == []
        records = store.put_blocks([(hashlib.sha256(b).digest(), b) for b in blocks])
        assert [r.n_bytes for r in records] == [len(b) for b in blocks]
        assert store.last_transfer.packets_tx == sum(r.chunk_count for r in records)  # one call sent them all
        assert store.get_blocks(records) == blocks
        with pytest.raises(ValueError):
            store.put_blocks([(b"short", b"x")])


def test_window_fits_the_receive_buffer_the_socket_got(sats, monkeypatch):
    from skymemory.link import fastpath

    bulk = BulkTransfer({s.me: s.address for s in sats})
    with bulk._socket() as sock:  # the size the kernel granted (forced, or capped at net.core.rmem_max)
        granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        assert bulk._window("skymem_bulk_get", sock) == max(fastpath.MIN_WINDOW,
                                                             min(fastpath.GET_WINDOW_MAX, granted // 2))
        assert bulk._window("skymem_bulk_set", sock) == fastpath.SET_WINDOW  # satellites' buffers: unseen
    monkeypatch.setattr(fastpath, "RCVBUF", 1 << 20)  # a small buffer shrinks a get's window with it
    with bulk._socket() as sock:
        assert bulk._window("skymem_bulk_get", sock) <= sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2
    fixed = BulkTransfer({s.me: s.address for s in sats}, window_bytes=12345)
    with fixed._socket() as sock:
        assert fixed._window("skymem_bulk_get", sock) == fixed._window("skymem_bulk_set", sock) == 12345
    with pytest.raises(ValueError):
        BulkTransfer({}, window_bytes=0)


def test_missing_chunk_is_reported_per_chunk(sats):
    payload = os.urandom(5_000)
    h = hashlib.sha256(payload).digest()
    with store_for(sats) as store:
        rec = store.put_block(h, payload)
        del sats[0].store[(h, 3)]
        jobs = store.block_jobs([rec])
        with pytest.raises(BlockMiss) as e:
            store.fetch_jobs(jobs)
        assert e.value.reason == "not-found"
        assert list(np.flatnonzero(jobs[0].status == NOT_FOUND)) == [3]
        assert (np.delete(jobs[0].status, 3) == OK).all()


def test_silent_satellite_ends_at_the_retry_bound():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # bound, never answers
        silent.bind(("127.0.0.1", 0))
        bulk = BulkTransfer({(0, 0): silent.getsockname()}, rto_s=0.02, retries=2, deadline_s=5)
        job = BlockJob(b"\x01" * 32, bytearray(3000), 3000, 1000, [(0, 0)])
        stats = bulk.get([job])
        assert stats.outcome == "incomplete" and stats.retransmits == 2 and (job.status == 0).all()


def test_arguments_are_checked():
    bulk = BulkTransfer({(0, 0): ("127.0.0.1", 9)})
    with pytest.raises(ValueError):
        BlockJob(b"short", bytearray(10), 10, 5, [(0, 0)])
    with pytest.raises(ValueError):
        BlockJob(b"\x00" * 32, bytearray(5), 10, 5, [(0, 0)])  # buffer too small
    with pytest.raises(ValueError):
        bulk.get([BlockJob(b"\x00" * 32, bytearray(10), 10, 5, [(0, 1)])])  # no address for (0, 1)
    with pytest.raises(ValueError):
        BulkTransfer({}, rto_s=0)


def test_missing_native_module_is_an_error(monkeypatch):
    monkeypatch.setattr(native, "AVAILABLE", False)
    with pytest.raises(ImportError, match="pip install"):
        require_native()
    with pytest.raises(ImportError):
        ConstellationBlockStore({(0, 0): ("127.0.0.1", 9)}, [(0, 0)])


def test_get_blocks_into_reports_each_blocks_crc_folded_from_its_chunks(sats):
    """The block's CRC32C comes from the chunks' CRCs the C path verified: no second pass over the bytes."""
    blocks = [os.urandom(7_777 + i) for i in range(3)]
    with store_for(sats) as store:
        records = [store.put_block(hashlib.sha256(b).digest(), b) for b in blocks]
        buffers = [bytearray(len(b)) for b in blocks]
        sats[1].corrupt_replies = 1  # a chunk that fails CRC32C is asked again: the fold sees the good one
        landed = store.get_blocks_into(records, buffers)
        assert (landed.complete, landed.miss) == (3, None) and buffers == [bytearray(b) for b in blocks]
        assert landed.block_crcs == [native.crc32c(b) for b in blocks]
        assert 0 < landed.first_reply_s <= 10  # the round trip to the first reply
        gone = next(k for k in sats[2].store if k[0] == records[1].block_hash)
        del sats[2].store[gone]  # block 1 lost a chunk: the prefix ends there
        landed = store.get_blocks_into(records, [bytearray(len(b)) for b in blocks])
        assert landed.complete == 1 and landed.miss.reason == "not-found" and len(landed.block_crcs) == 1


def test_crc_fold_matches_the_reference_for_any_chunking():
    data = os.urandom(10_001)
    for chunk in (1, 100, 6144, 10_000, 10_001, 20_000):
        crcs = np.array([native.crc32c(data[i:i + chunk]) for i in range(0, len(data), chunk)], dtype=np.uint32)
        job = BlockJob(b"\0" * 32, bytearray(len(data)), len(data), chunk, [(0, 0)], chunk_crcs=crcs)
        assert job.block_crc32c() == native.crc32c(data)
        cut = min(chunk, len(data))
        head, tail = native.crc32c(data[:cut]), native.crc32c(data[cut:])
        assert native.crc32c_combine(head, tail, len(data) - cut) == native.crc32c(data)
        assert native.crc32c_combine_py(head, tail, len(data) - cut) == native.crc32c(data)


def test_get_blocks_into_without_the_fast_path_reads_and_checks_block_by_block(sats):
    blocks = [os.urandom(3_333 + i) for i in range(2)]
    with ConstellationBlockStore({s.me: s.address for s in sats}, [s.me for s in sats], chunk_bytes=1000,
                                 client_options={"timeout": 0.2}, fast=False) as store:
        records = [store.put_block(hashlib.sha256(b).digest(), b) for b in blocks]
        buffers = [bytearray(len(b)) for b in blocks]
        landed = store.get_blocks_into(records, buffers)
        assert (landed.complete, landed.miss) == (2, None) and buffers == [bytearray(b) for b in blocks]
        assert landed.block_crcs == [native.crc32c(b) for b in blocks] and landed.first_reply_s is None
