"""The block-store contract: what the KV layer needs from wherever blocks are kept (docs/CONTRACTS.md).

A block (one KV-cache block, or any byte string) is put whole and read whole;
a store may cut it into chunks of `chunk_bytes` (chunk i on server i mod n).
`BlockRecord` is everything needed to find a block again without asking
anyone; `BlockMiss` says why a block cannot be read back; `get_blocks_into`
(the stores that have it) puts blocks straight into the caller's buffers and
reports a `Landed`: how many leading blocks arrived whole, each one's CRC32C
as it arrived, and why the next one did not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from skymemory.protocol import wire

Sat = tuple[int, int]


@dataclass(frozen=True)
class BlockRecord:
    """Everything needed to find a block again without asking anyone."""

    block_hash: bytes  # 32 bytes
    n_bytes: int  # payload size (-1 when unknown, e.g. from probe_block)
    chunk_bytes: int  # chunk data size used (last chunk may be shorter)
    chunk_count: int
    created_ms: int  # mission time of the set
    strategy: str  # placement strategy name ("explicit" for a fixed server list)
    n_servers: int
    centre: tuple[int, int]  # (plane, sat) overhead at creation


class BlockMiss(Exception):
    """The block cannot be read back; `.reason` says why ("not-found", "timeout", "crc", "incomplete"...)."""

    def __init__(self, reason: str, message: str = "") -> None:
        self.reason = reason
        super().__init__(message or reason)


@dataclass
class Landed:
    """What get_blocks_into put in the caller's buffers."""

    complete: int  # blocks [0, complete) arrived whole, every chunk intact
    block_crcs: list[int]  # CRC32C of each of those blocks' bytes as they arrived
    miss: BlockMiss | None = None  # why block `complete` did not (None: every block arrived)
    first_reply_s: float | None = None  # the transport's round trip to its first reply, when it measured one


def land_one_by_one(records: Sequence["BlockRecord"], buffers: Sequence,
                     read: Callable[["BlockRecord"], tuple[bytes, int]]) -> Landed:
    """get_blocks_into for a store that reads blocks whole: read(record) -> (payload, its CRC32C)."""
    crcs: list[int] = []
    for record, buffer in zip(records, buffers, strict=True):
        try:
            payload, crc = read(record)
        except BlockMiss as miss:
            return Landed(len(crcs), crcs, miss)
        if record.n_bytes >= 0 and len(payload) != record.n_bytes:
            return Landed(len(crcs), crcs, BlockMiss("incomplete", f"{len(payload)} bytes, the record says "
                                                                     f"{record.n_bytes}"))
        target = memoryview(buffer).cast("B")
        if len(target) < len(payload):
            raise ValueError(f"a buffer of {len(target)} bytes cannot hold a block of {len(payload)}")
        target[:len(payload)] = payload
        crcs.append(crc)
    return Landed(len(crcs), crcs)


class BlockStore(Protocol):
    def put_block(self, block_hash: bytes, payload: bytes) -> BlockRecord: ...
    def get_block(self, record: BlockRecord) -> bytes: ...
    def probe_block(self, block_hash: bytes) -> BlockRecord | None: ...
    def evict_block(self, record: BlockRecord) -> None: ...


def split_chunks(payload: bytes, chunk_bytes: int) -> list[bytes]:
    if chunk_bytes < 1:
        raise ValueError("chunk_bytes must be >= 1")
    if not payload:
        return [b""]
    return [payload[i:i + chunk_bytes] for i in range(0, len(payload), chunk_bytes)]


def check_hash(block_hash: bytes) -> None:
    if len(block_hash) != wire.SKYMEM_BLOCK_HASH_LEN:
        raise ValueError(f"block hash must be {wire.SKYMEM_BLOCK_HASH_LEN} bytes, got {len(block_hash)}")
