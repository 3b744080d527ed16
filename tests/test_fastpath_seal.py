"""Sealed content in the C fast path (csrc/skymem_seal.c, OpenSSL's AES-128-GCM) against real skymem_node
processes: it seals and opens byte for byte as skymemory.protocol.seal (the reference) does, what a satellite
keeps is only ciphertext, and a chunk that does not open fails alone (SEAL_FAILED), never as wrong bytes."""

from __future__ import annotations

import os
import select
import socket
import threading
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("cryptography")

from skymemory.link.fastpath import NOT_FOUND, OK, SEAL_FAILED, BlockJob, BulkTransfer  # noqa: E402
from skymemory.protocol import native  # noqa: E402
from skymemory.protocol.seal import OVERHEAD, ContentKeys, SealError, SealLayout, plain_chunk_bytes  # noqa: E402
from skymemory.store.constellation import ConstellationBlockStore  # noqa: E402

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")

CHUNK = 1000  # bytes on the wire: small, so that a few KB are many chunks
PLAIN = plain_chunk_bytes(CHUNK)  # 968 of content
E_SHORT, E_KEY, E_TAG = -1, -2, -3  # skymem_seal.h
LAYOUT = SealLayout(CHUNK)  # uncoded chunks of CHUNK bytes on the wire


# ---- the C seal against the Python reference, no satellites ------------------------------------------------

class CSeal:
    """skymem_seal_chunk / skymem_open_chunk through cffi, with a Sealer's keys."""

    def __init__(self, sealer):
        self.ffi, self.lib = native.ffi, native.lib
        table = self.ffi.new("skymem_seal_keys_t *")
        keys = sealer.c_keys()
        table.n_keys = len(keys)
        for i, (key_id, key) in enumerate(keys):
            table.keys[i].id = key_id
            self.ffi.memmove(table.keys[i].key, key, len(key))
        self.ctx = self.ffi.gc(self.lib.skymem_seal_ctx_new(table), self.lib.skymem_seal_ctx_free)
        assert self.ctx != self.ffi.NULL

    def c_layout(self, layout: SealLayout):
        return self.ffi.new("skymem_seal_layout_t *", (layout.chunk_bytes, layout.stripe_k, layout.stripe_m))

    def seal(self, h, cid, count, n_bytes, plain: bytes, layout: SealLayout = LAYOUT) -> bytes:
        out = self.ffi.new("uint8_t[]", len(plain) + OVERHEAD)
        assert self.lib.skymem_seal_chunk(self.ctx, h, cid, count, n_bytes, self.c_layout(layout), plain, len(plain),
                                          out) == 0
        return bytes(self.ffi.buffer(out))

    def open(self, h, cid, count, n_bytes, sealed: bytes, fill: int = 0xEE,
             layout: SealLayout = LAYOUT) -> tuple[int, bytes]:
        out = self.ffi.new("uint8_t[]", max(1, len(sealed) - OVERHEAD))
        self.ffi.memmove(out, bytes([fill]) * len(out), len(out))
        rc = self.lib.skymem_open_chunk(self.ctx, h, cid, count, n_bytes, self.c_layout(layout), sealed, len(sealed),
                                        out)
        return rc, bytes(self.ffi.buffer(out))[:max(0, len(sealed) - OVERHEAD)]


@pytest.mark.parametrize("n", [0, 1, 967, PLAIN, 6112])
def test_c_and_python_open_what_the_other_sealed(n):
    sealer = ContentKeys.new().sealer("tenant-a")
    c = CSeal(sealer)
    h, plain = os.urandom(32), os.urandom(n)
    sealed = c.seal(h, 2, 5, 99_999, plain)
    assert len(sealed) == n + OVERHEAD and sealed[:4] == sealer.current_id.to_bytes(4, "big")
    assert sealer.open_chunk(h, 2, 5, 99_999, sealed, layout=LAYOUT) == plain
    assert c.seal(h, 2, 5, 99_999, plain)[4:16] != sealed[4:16]  # a fresh nonce every time
    assert c.open(h, 2, 5, 99_999, sealer.seal_chunk(h, 2, 5, 99_999, plain, layout=LAYOUT)) == (0, plain)
    assert c.open(h, 2, 5, 99_999, sealed) == (0, plain)


def test_nonces_never_repeat_within_a_context_and_contexts_start_apart():
    """A context's k-th seal takes its random base plus k (low 64 bits); another context draws another base."""
    sealer = ContentKeys.new().sealer("t")
    h, plain = os.urandom(32), b"x" * 10
    one, two = CSeal(sealer), CSeal(sealer)
    nonces = [one.seal(h, 0, 1, 10, plain)[4:16] for _ in range(1000)]
    assert len(set(nonces)) == 1000
    first = int.from_bytes(nonces[0][4:], "big")
    assert all(n[:4] == nonces[0][:4] and int.from_bytes(n[4:], "big") == (first + k) % 2**64
               for k, n in enumerate(nonces))
    assert two.seal(h, 0, 1, 10, plain)[4:16] not in nonces


@pytest.mark.parametrize("what", ["block", "position", "count", "size", "chunk size", "stripes", "no stripes", "bit",
                                  "tag", "tenant"])
def test_c_opens_a_chunk_only_as_what_it_was_sealed_as(what):
    keys = ContentKeys.new()
    sealer = keys.sealer("tenant-a")
    h, plain = os.urandom(32), os.urandom(500)
    striped = SealLayout(CHUNK, 7, 2)  # the same block, 9 chunks, read as stripes of 4 + 1 or as no stripes
    sealed = bytearray(sealer.seal_chunk(h, 1, 9, 2000, plain, layout=striped))
    opener, block, cid, count, size, layout = CSeal(sealer), h, 1, 9, 2000, striped
    if what == "block":
        block = os.urandom(32)
    elif what == "position":
        cid = 2
    elif what == "count":
        count = 5
    elif what == "size":
        size = 2001
    elif what == "chunk size":
        layout = SealLayout(CHUNK + 1, 7, 2)
    elif what == "stripes":
        layout = SealLayout(CHUNK, 4, 1)
    elif what == "no stripes":
        layout = SealLayout(CHUNK)
    elif what == "bit":
        sealed[100] ^= 1
    elif what == "tag":
        sealed[-1] ^= 0x80
    else:
        opener = CSeal(keys.sealer("tenant-b"))  # the same key id, another tenant's key
    rc, out = opener.open(block, cid, count, size, bytes(sealed), layout=layout)
    assert rc == E_TAG
    assert out == bytes(len(plain))  # zeros: GCM's unchecked output never stays


def test_c_refuses_an_unknown_key_id_and_a_short_chunk_and_follows_rotation():
    keys = ContentKeys.new()
    old = keys.sealer("t")
    h, plain = os.urandom(32), os.urandom(300)
    sealed_old = CSeal(old).seal(h, 0, 1, 300, plain)
    keys.rotate()
    new = CSeal(keys.sealer("t"))  # seals under id 2, still opens id 1
    sealed_new = new.seal(h, 0, 1, 300, plain)
    assert sealed_new[:4] == (2).to_bytes(4, "big")
    assert new.open(h, 0, 1, 300, sealed_old) == (0, plain)
    keys.retire(1)
    retired = CSeal(keys.sealer("t"))
    assert retired.open(h, 0, 1, 300, sealed_old) == (E_KEY, bytes(300))
    assert retired.open(h, 0, 1, 300, sealed_new) == (0, plain)
    assert retired.open(h, 0, 1, 300, sealed_new[:OVERHEAD - 1])[0] == E_SHORT


def test_a_key_table_with_an_id_twice_or_no_key_is_refused():
    ffi, lib = native.ffi, native.lib
    table = ffi.new("skymem_seal_keys_t *")
    assert lib.skymem_seal_ctx_new(table) == ffi.NULL  # no key
    table.n_keys, table.keys[0].id, table.keys[1].id = 2, 7, 7
    assert lib.skymem_seal_ctx_new(table) == ffi.NULL
    table.n_keys = 17
    assert lib.skymem_seal_keys_check(table) != 0


def test_the_sealed_layout_matches_the_reference():
    sealer = ContentKeys.new().sealer()
    for n in (0, 1, PLAIN - 1, PLAIN, PLAIN + 1, 5 * PLAIN + 17, 7 * PLAIN):
        chunks = sealer.seal_block(b"\0" * 32, os.urandom(n), CHUNK)
        job = BlockJob(b"\0" * 32, bytearray(n), n, CHUNK, [(0, 0)], sealed=True)
        assert job.chunk_count == len(chunks) == native.lib.skymem_seal_chunk_count(n, CHUNK)
        assert job.plain_chunk_bytes == PLAIN
    assert native.lib.skymem_seal_chunk_count(10, OVERHEAD) == 0
    with pytest.raises(ValueError):
        BlockJob(b"\0" * 32, bytearray(10), 10, OVERHEAD, [(0, 0)], sealed=True)


# ---- against satellites -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sky(constellation):
    m = constellation
    servers = m.constellation().nearest(3)
    with ConstellationBlockStore.from_manifest(m, servers, chunk_bytes=CHUNK,
                                               fast_options={"rto_s": 0.1, "deadline_s": 30}) as store:
        yield SimpleNamespace(store=store, fast=store.fast, client=store.client, servers=list(servers))


def sealed_job(sky, h, buf, n, **kw) -> BlockJob:
    return BlockJob(h, buf, n, CHUNK, sky.servers, created_ms=sky.store.mission_ms(), sealed=True, **kw)


def put_c(sky, sealer, payload: bytes) -> bytes:
    """Stores payload sealed by the C set; returns its (random) block hash."""
    h = os.urandom(32)
    job = sealed_job(sky, h, payload, len(payload))
    stats = sky.fast.set([job], sealer=sealer)
    assert stats.outcome == "done" and (job.status == OK).all(), stats
    return h


def get_c(sky, sealer, h, n, **kw):
    buf = bytearray(b"\xee" * n)  # not zeros: a failed chunk must be zeroed by the get
    job = sealed_job(sky, h, buf, n, **kw)
    prefix = np.zeros(1, dtype=np.uint32)
    stats = sky.fast.get([job], sealer=sealer, prefix=prefix)
    return job, stats, int(prefix[0])


def wire_chunks(sky, h, count) -> list[bytes]:
    """The chunks as the satellites keep them, read one by one with the asyncio client."""
    async def read():
        return [await sky.client.get_chunk(sky.servers[i % len(sky.servers)], h, i) for i in range(count)]
    return sky.store._run(read())


def set_wire_chunk(sky, h, cid, count, data: bytes) -> None:
    sky.store._run(sky.client.set_chunk(sky.servers[cid % len(sky.servers)], h, cid, count, data))


@pytest.mark.parametrize("n", [1, PLAIN, 5 * PLAIN + 17, 7 * PLAIN])
def test_sealed_set_then_get_returns_the_bytes(sky, n):
    sealer = ContentKeys.new().sealer("tenant-a")
    payload = os.urandom(n)
    h = put_c(sky, sealer, payload)
    job, stats, prefix = get_c(sky, sealer, h, n)
    assert stats.outcome == "done" and stats.seal_failures == 0 and (job.status == OK).all()
    assert bytes(job.buf) == payload and prefix == job.chunk_count


def test_several_sealed_blocks_in_one_call_in_waves(sky):
    sealer = ContentKeys.new().sealer("tenant-a")
    payloads = [os.urandom(3 * PLAIN + 100 * i) for i in range(3)]
    hashes = [os.urandom(32) for _ in payloads]
    jobs = [sealed_job(sky, h, p, len(p)) for h, p in zip(hashes, payloads)]
    assert sky.fast.set(jobs, sealer=sealer).outcome == "done"
    back = [sealed_job(sky, h, bytearray(len(p)), len(p)) for h, p in zip(hashes, payloads)]
    prefix = np.zeros(len(back), dtype=np.uint32)
    stats = sky.fast.get(back, sealer=sealer, prefix=prefix, wave_chunks=2)
    assert stats.outcome == "done" and [bytes(j.buf) for j in back] == payloads
    assert list(prefix) == [j.chunk_count for j in back]


def test_what_the_satellites_keep_is_sealed(sky):
    sealer = ContentKeys.new().sealer("tenant-a")
    payload = os.urandom(4 * PLAIN + 500)
    h = put_c(sky, sealer, payload)
    count = -(-len(payload) // PLAIN)
    chunks = wire_chunks(sky, h, count)
    assert [len(c) for c in chunks] == [CHUNK] * (count - 1) + [500 + OVERHEAD]
    for i, c in enumerate(chunks):
        assert c[:4] == sealer.current_id.to_bytes(4, "big")
        assert sealer.open_chunk(h, i, count, len(payload), c, layout=LAYOUT) == payload[i * PLAIN:(i + 1) * PLAIN]
        assert payload[i * PLAIN:i * PLAIN + 64] not in c  # no content in the clear
    # the chunks' CRCs the get reports are those of the sealed bytes, as they travel
    job = sealed_job(sky, h, bytearray(len(payload)), len(payload), chunk_crcs=np.zeros(count, dtype=np.uint32))
    assert sky.fast.get([job], sealer=sealer).outcome == "done" and bytes(job.buf) == payload
    assert list(job.chunk_crcs) == [native.crc32c(c) for c in chunks]
    assert job.block_crc32c() == native.crc32c(b"".join(chunks))


def test_chunks_python_sealed_open_in_the_c_get(sky):
    sealer = ContentKeys.new().sealer("tenant-a")
    payload = os.urandom(3 * PLAIN + 1)
    h = os.urandom(32)
    chunks = sealer.seal_block(h, payload, CHUNK)
    for i, c in enumerate(chunks):
        set_wire_chunk(sky, h, i, len(chunks), c)
    job, stats, prefix = get_c(sky, sealer, h, len(payload))
    assert stats.outcome == "done" and stats.seal_failures == 0 and bytes(job.buf) == payload


@pytest.mark.parametrize("what", ["another block", "another position", "another tenant", "other bytes"])
def test_a_chunk_replaced_on_a_satellite_fails_alone(sky, what):
    keys = ContentKeys.new()
    sealer = keys.sealer("tenant-a")
    payload = os.urandom(5 * PLAIN)
    h = put_c(sky, sealer, payload)
    count, bad = 5, 2
    if what == "another block":  # the same position of a block of the same size
        forged = sealer.seal_block(os.urandom(32), os.urandom(len(payload)), CHUNK)[bad]
    elif what == "another position":  # this block's own chunk 1, as it is stored
        forged = wire_chunks(sky, h, count)[1]
    elif what == "another tenant":  # sealed for this very place, under another tenant's key of the same id
        forged = keys.sealer("tenant-b").seal_chunk(h, bad, count, len(payload), payload[bad * PLAIN:][:PLAIN],
                                                    layout=LAYOUT)
    else:
        forged = os.urandom(CHUNK)
    set_wire_chunk(sky, h, bad, count, forged)
    job, stats, prefix = get_c(sky, sealer, h, len(payload))
    assert stats.outcome == "done" and stats.seal_failures == 1
    assert list(np.flatnonzero(job.status != OK)) == [bad] and job.status[bad] == SEAL_FAILED
    buf = bytes(job.buf)
    assert buf[bad * PLAIN:(bad + 1) * PLAIN] == bytes(PLAIN)  # nothing of what did not open
    assert buf[:bad * PLAIN] == payload[:bad * PLAIN] and buf[(bad + 1) * PLAIN:] == payload[(bad + 1) * PLAIN:]
    assert prefix == bad  # the usable prefix ends at the chunk that did not open, as at a missing one
    with pytest.raises(SealError):  # the reference agrees
        sealer.open_chunk(h, bad, count, len(payload), wire_chunks(sky, h, count)[bad], layout=LAYOUT)


def test_an_unknown_key_id_does_not_open_and_rotation_does(sky):
    keys = ContentKeys.new()
    payload = os.urandom(2 * PLAIN + 3)
    h = put_c(sky, keys.sealer("t"), payload)  # under id 1
    keys.rotate()
    job, stats, _ = get_c(sky, keys.sealer("t"), h, len(payload))  # id 2 seals, id 1 still opens
    assert stats.seal_failures == 0 and bytes(job.buf) == payload
    keys.retire(1)
    job, stats, prefix = get_c(sky, keys.sealer("t"), h, len(payload))
    assert stats.outcome == "done" and stats.seal_failures == job.chunk_count == 3
    assert (job.status == SEAL_FAILED).all() and prefix == 0 and bytes(job.buf) == bytes(len(payload))


def test_a_missing_chunk_is_not_found_in_a_sealed_get_too(sky):
    sealer = ContentKeys.new().sealer("t")
    job, stats, prefix = get_c(sky, sealer, os.urandom(32), 2 * PLAIN)  # never stored
    assert stats.outcome == "done" and (job.status == NOT_FOUND).all() and stats.seal_failures == 0


def test_jobs_and_the_sealer_must_agree(sky):
    sealer = ContentKeys.new().sealer("t")
    plain = BlockJob(os.urandom(32), bytearray(10), 10, CHUNK, sky.servers)
    sealed = sealed_job(sky, os.urandom(32), bytearray(10), 10)
    with pytest.raises(ValueError, match="sealed=True"):
        sky.fast.get([plain], sealer=sealer)
    with pytest.raises(ValueError, match="only with a sealer"):
        sky.fast.set([sealed])
    keys = ContentKeys.new()
    for _ in range(16):
        keys.rotate()
    with pytest.raises(ValueError, match="retire"):  # 17 key ids: more than the C table holds
        sky.fast.get([sealed_job(sky, os.urandom(32), bytearray(10), 10)], sealer=keys.sealer("t"))


# ---- the seal first, the trailer only to know whom to blame ---------------------------------------------------

class LinkAttacker:
    """A UDP hop between the ground and one satellite that rewrites the first `times` chunk replies it passes
    back with `change` (an attacker on the link; a test double for the path, not for what is tested)."""

    def __init__(self, satellite: tuple[str, int], change, times: int = 2):
        self.satellite, self.change, self.left = satellite, change, times
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for s in (self.front, self.back):
            s.bind(("127.0.0.1", 0))
        self.address = self.front.getsockname()
        self.ground = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopped.is_set():
            for s in select.select([self.front, self.back], [], [], 0.05)[0]:
                pkt, source = s.recvfrom(65536)
                if s is self.front:
                    self.ground = source
                    self.back.sendto(pkt, self.satellite)
                elif self.ground is not None:
                    if self.left > 0 and len(pkt) > CHUNK:  # a chunk's DATA reply
                        self.left -= 1
                        pkt = self.change(bytearray(pkt))
                    self.front.sendto(bytes(pkt), self.ground)

    def close(self):
        self.stopped.set()
        self.thread.join(5)
        self.front.close()
        self.back.close()


def flip(at: int):
    def change(pkt: bytearray) -> bytearray:
        pkt[at] ^= 0x01
        return pkt
    return change


TRAILER = 44  # key id, sequence, tag: the last bytes of a signed reply (skymem_auth.h)


@pytest.mark.parametrize("where", ["trailer", "sealed bytes"])
def test_a_reply_changed_on_the_link_costs_a_resend_or_nothing_and_blames_no_satellite(sky, where):
    """The seal is checked first (skymem_bulk.c; docs/RELIABILITY.md, "Sealed content"): a chunk that opens
    lands whatever its trailer says, the ground's own bytes in their place; one that does not is judged by
    its CRC and trailer, and a reply that fails them was changed on the way: asked again, no satellite blamed."""
    assert sky.fast.signer is not None  # the launched constellation is keyed
    sealer = ContentKeys.new().sealer("tenant-a")
    payload = os.urandom(6 * PLAIN)
    h = put_c(sky, sealer, payload)
    target = sky.servers[0]
    attacker = LinkAttacker(sky.fast.addresses[target], flip(-1 if where == "trailer" else -TRAILER - 20))
    try:
        through = BulkTransfer({**sky.fast.addresses, target: attacker.address}, signer=sky.fast.signer,
                               rto_s=0.1, deadline_s=30)
        job = sealed_job(sky, h, bytearray(len(payload)), len(payload))
        stats = through.get([job], sealer=sealer)
    finally:
        attacker.close()
    assert attacker.left == 0  # two of the target's replies were changed
    assert stats.outcome == "done" and bytes(job.buf) == payload and stats.seal_failures == 0
    if where == "trailer":
        assert stats.auth_failures == 0 and stats.retransmits == 0  # the seal vouched for both chunks
    else:
        assert stats.crc_failures == 2 and stats.retransmits >= 1  # judged changed on the way, fetched again
