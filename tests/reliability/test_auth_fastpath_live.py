"""The C fast path (skymem_bulk_set) against keyed satellites: with the ground key
it signs every SET_CHUNK, resends included, and the block round-trips; without
the key the put gets no answer (a keyed satellite answers nothing unsigned) and runs out of resends."""

from __future__ import annotations

import asyncio
import hashlib

import pytest

from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import auth, wire
from skymemory.protocol.errors import RequestTimeout
from skymemory.store.constellation import ConstellationBlockStore

SERVERS = [(0, 0), (0, 1), (1, 0), (1, 1)]
CHUNK = 1024


@pytest.fixture(scope="module")
def keyed(node_built, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("auth_fast")
    auth.write_key_files(tmp, [(p, s) for p in range(2) for s in range(2)])
    cl = Cluster(2, 2, keys=tmp).start_all()
    try:
        yield cl, auth.Signer.from_file(tmp / "constellation.keys")
    finally:
        assert all(code == 0 for code in cl.close().values())


def store(cl, signer):
    return ConstellationBlockStore(cl.ground_addresses(), SERVERS, chunk_bytes=CHUNK, request_timeout_s=20.0,
                                   client_options={"signer": signer, "timeout": 0.5, "retries": 3},
                                   fast_options={"rto_s": 0.05, "retries": 8})


def auth_failures(cl, signer) -> list[int]:
    async def go():
        async with SkyMemoryClient(cl.ground_addresses(), signer=signer, timeout=0.5, retries=3) as c:
            return [(await c.stats(s)).auth_failures for s in SERVERS]
    return asyncio.run(go())


def set_loss(cl, signer, ppm: int) -> None:
    async def go():
        async with SkyMemoryClient(cl.ground_addresses(), signer=signer, timeout=0.5, retries=5) as c:
            for s in SERVERS:
                await c.set_param(s, wire.SKYMEM_PARAM_LOSS_PPM, ppm)
    asyncio.run(go())


def test_fast_put_signed_round_trips_byte_exact(keyed):
    cl, signer = keyed
    payload = hashlib.sha256(b"fast-signed").digest() * 1000  # 32000 bytes: 32 chunks on 4 satellites
    h = hashlib.sha256(payload).digest()
    before = auth_failures(cl, signer)
    with store(cl, signer) as st:
        assert st.fast is not None and st.fast.signer is signer
        record = st.put_block(h, payload)
        assert st.last_transfer.outcome == "done"
        assert st.get_block(record) == payload
    assert auth_failures(cl, signer) == before  # nothing refused on the way


def test_fast_put_resends_are_signed_afresh(keyed):
    """With 30% loss many SET_CHUNKs (or their ACKs) are lost and resent: a resend
    carrying a used sequence would be dropped as a replay and the put would fail."""
    cl, signer = keyed
    payload = bytes(range(256)) * 160  # 40 chunks
    h = hashlib.sha256(b"lossy" + payload).digest()
    set_loss(cl, signer, 300_000)
    try:
        with store(cl, signer) as st:
            record = st.put_block(h, payload)
            assert st.last_transfer.retransmits > 0  # the loss did force resends
            assert st.last_transfer.outcome == "done"
            set_loss(cl, signer, 0)
            assert st.get_block(record) == payload
    finally:
        set_loss(cl, signer, 0)


def test_fast_put_without_key_is_refused_clearly(keyed, monkeypatch):
    cl, signer = keyed
    monkeypatch.delenv("SKYMEM_AUTH_KEY_FILE", raising=False)
    payload = b"x" * 5000
    h = hashlib.sha256(b"unsigned" + payload).digest()
    before = sum(auth_failures(cl, signer))
    with store(cl, None) as st:
        assert st.client.signer is None and st.fast.signer is None
        # a keyed satellite answers nothing unsigned (no signing oracle): the put runs out of resends
        with pytest.raises(RequestTimeout, match="not acknowledged"):
            st.put_block(h, payload)
    assert sum(auth_failures(cl, signer)) > before
