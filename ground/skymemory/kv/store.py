"""The block-store contract as the KV layer sees it (docs/CONTRACTS.md, "Block store").

`skymemory.blockstore` (the constellation side) defines BlockRecord, BlockMiss
and the BlockStore protocol; this module re-exports them. Until that module is
in the tree, identical local definitions stand in, so the KV layer can be
built and tested on its own.

`MemoryBlockStore` is a minimal in-process store (a dict; nothing is chunked
or sent anywhere). It is what the KV layer's tests and the `skymemory model
verify` report use to isolate the KV layer; the benchmarks use the real stores.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

try:  # the constellation's definitions, once present
    from skymemory.blockstore import BlockMiss, BlockRecord, BlockStore  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised only before skymemory.blockstore lands

    @dataclass(frozen=True)
    class BlockRecord:  # type: ignore[no-redef]
        """Everything needed to find a block again without asking anyone."""

        block_hash: bytes
        n_bytes: int
        chunk_bytes: int
        chunk_count: int
        created_ms: int
        strategy: str
        n_servers: int
        centre: tuple[int, int]

    class BlockMiss(Exception):  # type: ignore[no-redef]
        """A block (or one of its chunks) could not be retrieved; `.reason` says why."""

        def __init__(self, reason: str, message: str = ""):
            self.reason = reason
            super().__init__(message or reason)

    class BlockStore(Protocol):  # type: ignore[no-redef]
        def put_block(self, block_hash: bytes, payload: bytes) -> BlockRecord: ...
        def get_block(self, record: BlockRecord) -> bytes: ...
        def probe_block(self, block_hash: bytes) -> BlockRecord | None: ...
        def evict_block(self, record: BlockRecord) -> None: ...


def make_miss(reason: str, message: str | None = None) -> BlockMiss:
    """A BlockMiss with `.reason` set (the contract: BlockMiss(reason, message))."""
    return BlockMiss(reason, message or "")


class MemoryBlockStore:
    """Blocks kept whole in a dict. Thread-safe. One 'chunk' per block."""

    def __init__(self, chunk_bytes: int = 6144):
        self.chunk_bytes = chunk_bytes
        self._blocks: dict[bytes, tuple[BlockRecord, bytes]] = {}
        self._lock = threading.Lock()
        self.puts = self.gets = self.probes = self.evictions = 0

    def put_block(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        record = BlockRecord(
            block_hash=block_hash,
            n_bytes=len(payload),
            chunk_bytes=self.chunk_bytes,
            chunk_count=max(1, -(-len(payload) // self.chunk_bytes)),
            created_ms=int(time.time() * 1000),
            strategy="memory",
            n_servers=1,
            centre=(0, 0),
        )
        with self._lock:
            self._blocks[block_hash] = (record, bytes(payload))
            self.puts += 1
        return record

    def get_block(self, record: BlockRecord) -> bytes:
        with self._lock:
            self.gets += 1
            entry = self._blocks.get(record.block_hash)
        if entry is None:
            raise make_miss("not-found")
        return entry[1]

    def probe_block(self, block_hash: bytes) -> BlockRecord | None:
        with self._lock:
            self.probes += 1
            entry = self._blocks.get(block_hash)
        return entry[0] if entry else None

    def evict_block(self, record: BlockRecord) -> None:
        with self._lock:
            self.evictions += 1
            self._blocks.pop(record.block_hash, None)

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._blocks
