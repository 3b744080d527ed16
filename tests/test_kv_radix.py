"""The local radix index: longest prefix, subtree removal, persistence."""

import hashlib
import json

from skymemory.kv.radix import FILE_NAME, RadixIndex
from skymemory.kv.store import BlockRecord

ROOT = hashlib.sha256(b"root").digest()


def _hash(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def _record(block_hash: bytes, n: int = 100) -> BlockRecord:
    return BlockRecord(block_hash, n, 6144, 1, 123456, "rotation-hop", 10, (3, 7))


def _chain(index: RadixIndex, labels: list[str], parent: bytes = ROOT) -> list[bytes]:
    hashes = []
    for position, label in enumerate(labels):
        h = _hash(label)
        index.insert(parent, _record(h), {"kv_format": "fp16", "position": position})
        hashes.append(h)
        parent = h
    return hashes


def test_longest_prefix_walks_the_chain(tmp_path):
    index = RadixIndex(tmp_path)
    a = _chain(index, ["a0", "a1", "a2"])
    assert [e.block_hash for e in index.longest_prefix(ROOT, a)] == a
    assert [e.block_hash for e in index.longest_prefix(ROOT, a[:2] + [_hash("x")])] == a[:2]
    assert index.longest_prefix(ROOT, [_hash("x")] + a[1:]) == []
    # another root (model) sees nothing
    assert index.longest_prefix(_hash("other root"), a) == []
    assert index.knows_root(ROOT) and not index.knows_root(_hash("other root"))


def test_remove_drops_the_block_and_everything_after_it(tmp_path):
    index = RadixIndex(tmp_path)
    a = _chain(index, ["a0", "a1", "a2", "a3"])
    b = _chain(index, ["b2", "b3"], parent=a[1])  # a second chain sharing a0, a1
    assert index.remove(a[1]) == 5  # a1, a2, a3, b2, b3
    assert len(index) == 1
    assert [e.block_hash for e in index.longest_prefix(ROOT, a)] == a[:1]
    assert index.remove(b[0]) == 0


def test_index_survives_a_restart_and_keeps_the_metadata(tmp_path):
    index = RadixIndex(tmp_path)
    a = _chain(index, ["a0", "a1"])
    reloaded = RadixIndex(tmp_path)
    entries = reloaded.longest_prefix(ROOT, a)
    assert [e.block_hash for e in entries] == a
    assert entries[1].record == _record(a[1])
    assert entries[1].meta == {"kv_format": "fp16", "position": 1}
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # no temporary files left behind


def test_damaged_index_file_starts_empty(tmp_path):
    (tmp_path / FILE_NAME).write_text("{not json")
    assert len(RadixIndex(tmp_path)) == 0
    (tmp_path / FILE_NAME).write_text(json.dumps({"version": 1, "entries": [{"hash": "zz"}]}))
    assert len(RadixIndex(tmp_path)) == 0
