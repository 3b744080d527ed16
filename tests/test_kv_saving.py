"""kv.index.saving: the one path both engines save blocks by (stored, indexed with the same metadata, kept near)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

from skymemory.kv.index.radix import RadixIndex  # noqa: E402
from skymemory.kv.index.saving import BlockFormat, BlockSave, SaveFailed, note_use, save_blocks  # noqa: E402
from skymemory.kv.store import MemoryBlockStore  # noqa: E402
from skymemory.kv.transfer.tiers import BlockTiers  # noqa: E402

ROOT = b"\0" * 32
FORM = BlockFormat("fp16", "v2", 16)


def chain(n: int, size: int = 100) -> list[BlockSave]:
    hashes = [os.urandom(32) for _ in range(n)]
    return [BlockSave(h, ROOT if i == 0 else hashes[i - 1], i, os.urandom(size)) for i, h in enumerate(hashes)]


class BulkStore(MemoryBlockStore):
    """A store with bulk writes (BulkBlockWrites) that may refuse the whole call."""

    def __init__(self, refuse: bool = False):
        super().__init__()
        self.refuse, self.calls = refuse, 0

    def put_blocks(self, items):
        self.calls += 1
        if self.refuse:
            raise OSError("the constellation is gone")
        return [self.put_block(h, p) for h, p in items]


class FailingAt(MemoryBlockStore):
    def __init__(self, at: int):
        super().__init__()
        self.at = at

    def put_block(self, block_hash, payload):
        if self.puts == self.at:
            raise TimeoutError("no answer")
        return super().put_block(block_hash, payload)


def test_blocks_are_stored_indexed_as_a_chain_with_the_engines_metadata_and_kept_near():
    store, index, tiers = BulkStore(), RadixIndex(), BlockTiers(100, "cpu", host_bytes=10_000)
    saves = chain(3)
    records = save_blocks(store, index, saves, FORM, tiers)
    assert store.calls == 1 and [r.block_hash for r in records] == [s.block_hash for s in saves]
    assert [e.record for e in index.longest_prefix(ROOT, [s.block_hash for s in saves])] == records
    assert [index.get(s.block_hash).meta for s in saves] == [
        {"kv_format": "fp16", "layout": "v2", "tokens": 16, "position": i} for i in range(3)]
    raw, where = tiers.gather([s.block_hash for s in saves])
    assert where == ["host"] * 3 and [bytes(raw[i].numpy()) for i in range(3)] == [s.payload for s in saves]
    assert save_blocks(store, index, [], FORM) == [] and store.calls == 1  # nothing to save: no call


def test_a_failed_bulk_write_indexes_none_and_one_by_one_keeps_those_before_the_failure():
    index, saves = RadixIndex(), chain(4)
    with pytest.raises(SaveFailed) as failed:
        save_blocks(BulkStore(refuse=True), index, saves, FORM)
    assert failed.value.saved == 0 and len(index) == 0 and "OSError: the constellation is gone" in str(failed.value)
    with pytest.raises(SaveFailed) as failed:
        save_blocks(FailingAt(2), index, saves, FORM)
    assert failed.value.saved == 2 and isinstance(failed.value.__cause__, TimeoutError)
    assert [s.block_hash in index for s in saves] == [True, True, False, False]


def test_noting_use_never_fails_the_load(caplog):
    index, saves = RadixIndex(), chain(1)
    save_blocks(MemoryBlockStore(), index, saves, FORM)
    before = index.get(saves[0].block_hash).last_used_ms
    note_use(index, [saves[0].block_hash])
    assert index.get(saves[0].block_hash).last_used_ms >= before
    index.close()
    note_use(index, [saves[0].block_hash])  # a closed index: a warning, nothing raised
    assert "noting the use of 1 KV blocks" in caplog.text
