"""Sealed chunks (skymemory.protocol.seal): what the associated data binds, tenants, keys over time, the key file."""

from __future__ import annotations

import os
import stat

import pytest

from skymemory.protocol.seal import (ONE_CHUNK, OVERHEAD, ContentKeys, KeyFileError, SealError, Sealer, SealLayout,
                                     plain_chunk_bytes, tenant_key)

BLOCK = bytes(range(32))
OTHER = bytes(32)


@pytest.fixture
def keys() -> ContentKeys:
    return ContentKeys.new()


def test_a_block_round_trips_in_chunks_of_the_wire_size(keys):
    sealer = keys.sealer("tenant-a")
    payload = os.urandom(3 * plain_chunk_bytes(6144) + 17)
    chunks = sealer.seal_block(BLOCK, payload, 6144)
    assert [len(c) for c in chunks] == [6144, 6144, 6144, 17 + OVERHEAD]
    assert sealer.open_block(BLOCK, chunks, len(payload), 6144) == payload
    assert all(payload[:64] not in c for c in chunks)  # ciphertext, not the content


@pytest.mark.parametrize("what", ["block", "position", "count", "size", "chunk size", "stripes", "tenant", "bit"])
def test_a_chunk_opens_only_as_what_it_was_sealed_as(keys, what):
    sealer = keys.sealer("tenant-a")
    payload = os.urandom(1000)
    chunks = sealer.seal_block(BLOCK, payload, 300)  # 268 content bytes a chunk: 4 chunks
    chunk = chunks[1]
    opener, block, cid, count, size, layout = sealer, BLOCK, 1, len(chunks), len(payload), SealLayout(300)
    if what == "block":
        block = OTHER  # another block's chunk
    elif what == "position":
        cid = 2  # swapped within the block
    elif what == "count":
        count = 5
    elif what == "size":
        size = 999
    elif what == "chunk size":
        layout = SealLayout(301)
    elif what == "stripes":  # 4 chunks are also one stripe of 3 data + 1 parity
        layout = SealLayout(300, 3, 1)
    elif what == "tenant":
        opener = keys.sealer("tenant-b")
    else:
        chunk = chunk[:40] + bytes([chunk[40] ^ 1]) + chunk[41:]
    with pytest.raises(SealError):
        opener.open_chunk(block, cid, count, size, chunk, layout=layout)
    opened = sealer.open_chunk(BLOCK, 1, len(chunks), len(payload), chunks[1], layout=SealLayout(300))
    assert opened == payload[268:536]


def test_tenants_have_their_own_keys_and_no_salt_is_the_default_tenant(keys):
    master = keys.masters[1]
    assert tenant_key(master, "") != tenant_key(master, "a") != tenant_key(master, "b")
    assert keys.sealer(None).keys == keys.sealer("").keys
    sealed = keys.sealer("").seal_chunk(BLOCK, 0, 1, 5, b"hello", layout=ONE_CHUNK)
    assert keys.sealer(None).open_chunk(BLOCK, 0, 1, 5, sealed, layout=ONE_CHUNK) == b"hello"
    with pytest.raises(TypeError):
        keys.sealer(b"bytes")  # type: ignore[arg-type]


def test_rotation_seals_new_chunks_under_the_new_id_and_old_ones_open_until_retired(keys):
    old = keys.sealer("t").seal_chunk(BLOCK, 0, 1, 3, b"old", layout=ONE_CHUNK)
    assert keys.rotate() == 2
    new = keys.sealer("t").seal_chunk(BLOCK, 0, 1, 3, b"new", layout=ONE_CHUNK)
    assert new[:4] == (2).to_bytes(4, "big") and old[:4] == (1).to_bytes(4, "big")
    assert keys.sealer("t").open_chunk(BLOCK, 0, 1, 3, old, layout=ONE_CHUNK) == b"old"
    keys.retire(1)
    with pytest.raises(SealError, match="key id 1"):
        keys.sealer("t").open_chunk(BLOCK, 0, 1, 3, old, layout=ONE_CHUNK)
    assert keys.sealer("t").open_chunk(BLOCK, 0, 1, 3, new, layout=ONE_CHUNK) == b"new"
    with pytest.raises(KeyFileError, match="only one"):
        keys.retire(2)
    with pytest.raises(KeyFileError, match="no content key id 7"):
        keys.retire(7)


def test_a_key_id_cannot_be_changed_to_another_the_ground_holds(keys):
    keys.rotate()
    sealed = bytearray(keys.sealer("t").seal_chunk(BLOCK, 0, 1, 3, b"abc", layout=ONE_CHUNK))
    sealed[:4] = (1).to_bytes(4, "big")
    with pytest.raises(SealError):
        keys.sealer("t").open_chunk(BLOCK, 0, 1, 3, bytes(sealed), layout=ONE_CHUNK)


def test_the_key_file_is_private_and_read_back(keys, tmp_path):
    keys.rotate()
    keys.rotate()
    keys.retire(3)
    path = keys.save(tmp_path / "content.keys")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = ContentKeys.load(path)
    assert again.masters == keys.masters and again.current_id == 2 and again.retired == {3}
    assert again.rotate() == 4  # a retired id is never given to another master


@pytest.mark.parametrize("text,message", [
    ("seal 1 00\n", "expected \"skymem-content-keys 1\""),
    ("skymem-content-keys 1\nmaster 1 " + "00" * 32 + "\n", "expected \"seal KEY_ID HEX\" or \"retired KEY_ID\""),
    ("skymem-content-keys 1\nseal 1 " + "00" * 32 + "\nretired 1\n", "a retired key id must be"),
    ("skymem-content-keys 1\nretired 2\nseal 2 " + "00" * 32 + "\n", "must be 1..2.32-1 and appear once, got 2"),
    ("skymem-content-keys 1\nseal 0 " + "00" * 32 + "\n", "key id must be"),
    ("skymem-content-keys 1\nseal 1 " + "00" * 31 + "\n", "a master is 32 bytes"),
    ("skymem-content-keys 1\nseal 1 xyz\n", "hex digits"),
    ("skymem-content-keys 1\n", "no content key"),
])
def test_a_bad_key_file_is_refused_in_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "content.keys"
    path.write_text(text)
    with pytest.raises(KeyFileError, match=message) as err:
        ContentKeys.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_chunks_too_small_to_carry_content_are_refused():
    with pytest.raises(ValueError):
        plain_chunk_bytes(OVERHEAD)
    with pytest.raises(SealError):
        Sealer({1: bytes(16)}, 1).open_chunk(BLOCK, 0, 1, 0, b"short", layout=ONE_CHUNK)
