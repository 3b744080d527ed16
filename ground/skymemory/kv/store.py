"""The block-store contract as the KV layer sees it (docs/CONTRACTS.md, "Block store").

BlockRecord, BlockMiss, the BlockStore protocol and the optional capabilities
the KV layer asks a store for (BulkBlockReads, BulkBlockWrites,
StreamedBlockReads and `streams`, EvictionNotices, TenantSealing) are defined once, in
`skymemory.store.contract`; this module re-exports them for the KV layer.

`MemoryBlockStore` is the in-process `LocalBlockStore` with call counters, so
the KV layer's tests and the `skymemory model verify` report can see how often
the store was asked (e.g. that a changed model fetched nothing).
"""

from __future__ import annotations

from skymemory.store.contract import (BlockMiss, BlockRecord, BlockStore, BulkBlockReads, BulkBlockWrites,
                                      EvictionNotices, StreamedBlockReads, TenantSealing, streams)
from skymemory.store.local import LocalBlockStore

__all__ = ["BlockMiss", "BlockRecord", "BlockStore", "BulkBlockReads", "BulkBlockWrites", "EvictionNotices",
           "MemoryBlockStore", "StreamedBlockReads", "TenantSealing", "make_miss", "streams"]


def make_miss(reason: str, message: str | None = None) -> BlockMiss:
    """A BlockMiss with `.reason` set (the contract: BlockMiss(reason, message))."""
    return BlockMiss(reason, message or "")


class MemoryBlockStore(LocalBlockStore):
    """Blocks kept whole in this process's memory, counting every call."""

    def __init__(self, chunk_bytes: int = 6144):
        super().__init__(chunk_bytes)
        self.puts = self.gets = self.probes = self.evictions = 0

    def put_block(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        self.puts += 1
        return super().put_block(block_hash, payload)

    def get_block(self, record: BlockRecord) -> bytes:
        self.gets += 1
        return super().get_block(record)

    def get_blocks_into(self, records, buffers):
        self.gets += len(records)
        return super().get_blocks_into(records, buffers)

    def probe_block(self, block_hash: bytes) -> BlockRecord | None:
        self.probes += 1
        return super().probe_block(block_hash)

    def evict_block(self, record: BlockRecord) -> None:
        self.evictions += 1
        super().evict_block(record)

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._blocks
