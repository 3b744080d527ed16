"""Sealed named objects without a constellation (skymemory.store.objects): the metadata of format 2 opens only
as its own key's, sealed under the ground's content key; "v": 1 is what --no-seal and everything before sealing
wrote; the data of each version has a block of its own. tests/reliability/test_sealed_content.py runs the same
against real nodes and a captured satellite."""

from __future__ import annotations

import json
import os

import pytest

from skymemory.orbit.manifest import Manifest, SatelliteEntry
from skymemory.protocol.seal import ONE_CHUNK, OVERHEAD, ContentKeys, KeyFileError
from skymemory.store.contract import BlockMiss
from skymemory.store.objects import (META_VERSION, PLAIN_META_VERSION, ObjectStore, data_block_of, data_hash, key_of,
                                     meta_hash, open_metadata)

HOME = (1, 2)


def meta_v2(name: str = "object.bin") -> dict:
    return {"v": META_VERSION, "name": name, "key": key_of(name).hex(), "version": os.urandom(16).hex(),
            "size": 10_000, "sha256": "00" * 32, "chunk_bytes": 6144, "chunk_count": 2, "servers": [[0, 0], [1, 1]],
            "created_ms": 1234}


def sealed(keys: ContentKeys, meta: dict) -> bytes:
    blob = json.dumps(meta).encode()
    return keys.sealer().seal_chunk(meta_hash(bytes.fromhex(meta["key"])), 0, 1, len(blob), blob, layout=ONE_CHUNK)


def test_sealed_metadata_opens_as_its_own_keys_only():
    keys = ContentKeys.new()
    meta = meta_v2()
    key = key_of("object.bin")
    blob = sealed(keys, meta)
    assert len(blob) == len(json.dumps(meta)) + OVERHEAD and b"object.bin" not in blob
    assert open_metadata(key, blob, keys.sealer(), HOME) == meta

    altered = bytearray(blob)
    altered[40] ^= 1
    swapped = sealed(keys, meta_v2("another.bin"))  # the ground's, for another name
    foreign = sealed(ContentKeys.new(), meta)  # another ground's key under the same id
    for bad in (bytes(altered), swapped, foreign, blob[:20], os.urandom(200)):
        with pytest.raises(BlockMiss) as miss:
            open_metadata(key, bad, keys.sealer(), HOME)
        assert miss.value.reason == "seal" and str(HOME) in str(miss.value)
    # what a satellite could write in the clear: not an object's from before sealing
    for forged in (json.dumps({**meta, "v": 2}).encode(), b"{not json", json.dumps([1, 2]).encode()):
        with pytest.raises(BlockMiss) as miss:
            open_metadata(key, forged, keys.sealer(), HOME)
        assert miss.value.reason == "seal"


def test_a_retired_key_is_named_as_such():
    keys = ContentKeys.new()
    blob = sealed(keys, meta_v2())
    keys.rotate()
    keys.retire(1)
    with pytest.raises(BlockMiss) as miss:
        open_metadata(key_of("object.bin"), blob, keys.sealer(), HOME)
    assert miss.value.reason == "seal" and miss.value.retired_key


def test_metadata_in_the_clear_is_format_1_and_sealed_needs_a_sealer():
    key = key_of("old.bin")
    v1 = {"v": PLAIN_META_VERSION, "name": "old.bin", "key": key.hex(), "size": 3000, "sha256": "00" * 32,
          "chunk_bytes": 6144, "chunk_count": 1, "servers": [[2, 2]], "created_ms": 1}
    blob = json.dumps(v1, separators=(",", ":")).encode()
    assert open_metadata(key, blob, None, HOME) == v1  # --no-seal reads it as before
    assert open_metadata(key, blob, ContentKeys.new().sealer(), HOME)["v"] == 1  # ObjectStore.meta refuses it
    with pytest.raises(BlockMiss) as miss:
        open_metadata(key_of("another.bin"), blob, None, HOME)
    assert miss.value.reason == "bad-metadata"
    keys = ContentKeys.new()
    meta = meta_v2("old.bin")
    with pytest.raises(BlockMiss) as miss:
        open_metadata(key, sealed(keys, meta), None, HOME)
    assert miss.value.reason == "sealed"


def test_each_version_has_a_data_block_of_its_own():
    key, other = key_of("a"), key_of("b")
    v1, v2 = os.urandom(16), os.urandom(16)
    assert len({data_hash(key, v1), data_hash(key, v2), data_hash(other, v1), key, meta_hash(key)}) == 5
    assert data_block_of(key, {"v": 2, "version": v1.hex()}) == data_hash(key, v1)
    assert data_block_of(key, {"v": 1}) == key  # before sealing (and --no-seal): the key itself


def test_a_manifest_without_content_keys_fails_in_one_line_before_any_transfer():
    m = Manifest(planes=2, sats=2, satellites=[SatelliteEntry(p, s, "127.0.0.1", 9, 9) for p in range(2)
                                                for s in range(2)])
    with pytest.raises(KeyFileError) as no_keys:
        ObjectStore(m, 2, timeout_s=1).put("x", b"x")
    assert "--no-seal" in str(no_keys.value) and "\n" not in str(no_keys.value)
    with pytest.raises(KeyFileError):
        ObjectStore(m, 2, timeout_s=1).get(key_of("x"))
    assert ObjectStore(m, 2, seal=False).sealer() is None
