"""Block stores: striping over several (scripted) satellites, misses, async use; LocalBlockStore."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import BlockMiss, split_chunks
from skymemory.store.local import LocalBlockStore

from fakesat import FakeSatellite

H = hashlib.sha256(b"blk").digest()


def test_split_chunks():
    assert split_chunks(b"abcdefg", 3) == [b"abc", b"def", b"g"]
    assert split_chunks(b"", 3) == [b""]


def test_local_store_roundtrip_and_miss():
    s = LocalBlockStore(chunk_bytes=4)
    rec = s.put_block(H, b"0123456789")
    assert rec.chunk_count == 3 and s.get_block(rec) == b"0123456789"
    assert s.probe_block(H) == rec
    s.evict_block(rec)
    with pytest.raises(BlockMiss) as e:
        s.get_block(rec)
    assert e.value.reason == "not-found"


def test_striped_roundtrip_over_three_satellites():
    sats = [FakeSatellite(0, i) for i in range(3)]
    for s in sats:
        s.__enter__()
    try:
        addresses = {s.me: s.address for s in sats}
        payload = os.urandom(10_000)
        with ConstellationBlockStore(addresses, [s.me for s in sats], chunk_bytes=1000,
                                     client_options={"timeout": 0.2}) as store:
            rec = store.put_block(H, payload)
            assert rec.chunk_count == 10 and rec.n_servers == 3
            # chunk i on servers[i % 3]
            assert sorted(cid for _, cid in sats[1].store) == [1, 4, 7]
            assert store.get_block(rec) == payload
            probed = store.probe_block(H)
            assert probed is not None and (probed.chunk_count, probed.n_bytes, probed.chunk_bytes) == (10, 10_000, 1000)
            # one chunk gone -> the whole block is a miss, never partial data
            del sats[2].store[(H, 5)]
            with pytest.raises(BlockMiss) as e:
                store.get_block(rec)
            assert e.value.reason == "not-found"
            store.evict_block(rec)
            assert all(not s.store for s in sats)
            assert store.probe_block(H) is None

            async def from_another_loop():
                r = await store.aput_block(H, b"xyz")
                return await store.aget_block(r)

            assert asyncio.run(from_another_loop()) == b"xyz"

            from concurrent.futures import ThreadPoolExecutor

            records = [store.put_block(hashlib.sha256(bytes([i])).digest(), bytes([i]) * 2500) for i in range(8)]
            with ThreadPoolExecutor(8) as pool:  # several threads at once, as the KV layer does
                assert list(pool.map(store.get_block, records)) == [bytes([i]) * 2500 for i in range(8)]
    finally:
        for s in sats:
            s.__exit__()


def test_rejects_bad_configuration():
    with pytest.raises(ValueError):
        ConstellationBlockStore({}, [(0, 0), (0, 0)])
    with pytest.raises(ValueError):
        ConstellationBlockStore({}, None)


def test_kvstore_keys():
    from skymemory.store.objects import key_of, meta_hash, parse_key

    k = key_of("report.pdf")
    assert k == hashlib.sha256(b"report.pdf").digest()
    assert parse_key(k.hex()) == k and parse_key("report.pdf") == k
    assert parse_key("z" * 64) == key_of("z" * 64)  # 64 chars that are not hex: a name
    assert meta_hash(k) != k and len(meta_hash(k)) == 32  # where the homes are: tests/test_object_homes.py
