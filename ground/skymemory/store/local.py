"""`LocalBlockStore`: blocks in this process's memory, the "no network" limit of a block store."""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

from skymemory.protocol import native, wire
from skymemory.store.contract import (AsyncBlockStore, BlockMiss, BlockRecord, BlockStore, BulkBlockReads, Landed,
                                      check_hash, land_one_by_one, split_chunks)


class LocalBlockStore(BlockStore, BulkBlockReads, AsyncBlockStore):
    """Blocks in this process's memory: same contract, no network."""

    def __init__(self, chunk_bytes: int = wire.SKYMEM_DEFAULT_CHUNK_DATA, clock: Callable[[], int] | None = None):
        self.chunk_bytes = chunk_bytes
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._blocks: dict[bytes, tuple[BlockRecord, bytes, int]] = {}  # hash -> record, payload, its CRC32C
        self._lock = threading.Lock()

    def put_block(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        check_hash(block_hash)
        payload = bytes(payload)
        rec = BlockRecord(block_hash, len(payload), self.chunk_bytes, len(split_chunks(payload, self.chunk_bytes)),
                          self.clock(), "local", 1, (0, 0))
        crc = native.crc32c(payload)  # what get_blocks_into reports: these bytes never leave this process
        with self._lock:
            self._blocks[block_hash] = (rec, payload, crc)
        return rec

    def _stored(self, record: BlockRecord) -> tuple[bytes, int]:
        with self._lock:
            item = self._blocks.get(record.block_hash)
        if item is None:
            raise BlockMiss("not-found", f"block {record.block_hash.hex()[:16]} not stored")
        return item[1], item[2]

    def get_block(self, record: BlockRecord) -> bytes:
        return self._stored(record)[0]

    def get_blocks_into(self, records: Sequence[BlockRecord], buffers: Sequence) -> Landed:
        """Copy each block into its buffer (one memcpy) with the CRC32C taken when it was put."""
        return land_one_by_one(records, buffers, self._stored)

    def probe_block(self, block_hash: bytes) -> BlockRecord | None:
        with self._lock:
            item = self._blocks.get(block_hash)
        return item[0] if item else None

    def evict_block(self, record: BlockRecord) -> None:
        with self._lock:
            self._blocks.pop(record.block_hash, None)

    async def aput_block(self, block_hash: bytes, payload: bytes) -> BlockRecord:
        return self.put_block(block_hash, payload)

    async def aget_block(self, record: BlockRecord) -> bytes:
        return self.get_block(record)
