"""The block-store contract: what the KV layer needs from wherever blocks are kept (docs/CONTRACTS.md).

A block (one KV-cache block, or any byte string) is put whole and read whole;
a store may cut it into chunks of `chunk_bytes` (chunk i on server i mod n).
`BlockRecord` is everything needed to find a block again without asking
anyone; `BlockMiss` says why a block cannot be read back; `Landed` is what a
bulk read put in the caller's buffers.

What a store can do is declared, not probed. `BlockStore` is the contract
every store keeps; each optional capability is a protocol of its own:

  BulkBlockReads      get_blocks_into: blocks straight into the caller's buffers, with their CRC32Cs
  BulkBlockWrites     put_blocks: several blocks in flight at once
  StreamedBlockReads  block_jobs / fetch_jobs: a transfer the caller watches chunk by chunk (kv.transfer.streaming)
  EvictionNotices     subscribe_evictions: the store tells who listens when it drops a block
  AsyncBlockStore     aput_block / aget_block, awaitable from any event loop

A store says what it implements by inheriting those protocols
(`class LocalBlockStore(BlockStore, BulkBlockReads, AsyncBlockStore)`): their
methods are abstract, so a class that declares one and lacks a method cannot
be instantiated, and tests/test_store_contract.py checks every store's
signatures against what it declares. Code above asks
`isinstance(store, BulkBlockReads)` (the optional ones are runtime-checkable;
an undeclared object with the methods passes too, as with any Protocol).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, Sequence, runtime_checkable

from skymemory.protocol import wire

if TYPE_CHECKING:  # only for annotations: the fast path's types, without loading it
    import numpy as np

    from skymemory.link.bell import ProgressBell
    from skymemory.link.fastpath import BlockJob, TransferStats

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
    # coded stripes (protocol.stripes): m parity chunks per stripe of k = n_servers - parity data chunks; chunk_count
    # then counts the chunks the satellites hold, data and parity. 0: every chunk stored once, no parity.
    parity: int = 0

    @property
    def stripe_data(self) -> int:
        """k: data chunks per stripe (0 for a record without parity)."""
        return self.n_servers - self.parity if self.parity else 0


class BlockMiss(Exception):
    """The block cannot be read back; `.reason` says why ("not-found", "timeout", "crc", "incomplete"...;
    ObjectStore.get says "chunks-missing" for an object whose metadata is there and some chunks are not).

    `.satellites` names the satellites to blame, as (plane, sat), when a store knows them: for a "seal" miss,
    those whose chunks came intact and did not open (empty when none is known). `.block` is the hash of the block
    that failed, when one did (None: the failure is not one block's, e.g. a refused request)."""

    def __init__(self, reason: str, message: str = "", *, satellites: Sequence[Sat] = (),
                 block: bytes | None = None) -> None:
        self.reason = reason
        self.satellites: tuple[Sat, ...] = tuple((int(p), int(s)) for p, s in satellites)
        self.block = block
        super().__init__(message or reason)


@dataclass
class Landed:
    """What get_blocks_into put in the caller's buffers."""

    complete: int  # blocks [0, complete) arrived whole, every chunk intact
    block_crcs: list[int]  # CRC32C of each of those blocks' bytes as they arrived
    miss: BlockMiss | None = None  # why block `complete` did not (None: every block arrived)
    first_reply_s: float | None = None  # the transport's round trip to its first reply, when it measured one
    # the blocks were sealed and opened under the ground's key (skymemory.protocol.seal): their bytes are
    # what the ground wrote, whatever block_crcs say (those cover the ciphertext on the wire)
    sealed: bool = False


# ---- the contract and its capabilities ----------------------------------------------------------------

@runtime_checkable
class BlockStore(Protocol):
    """The four calls every block store answers (KVCManager needs no more).

    put_block(block_hash, payload) -> BlockRecord: stores the payload whole under a 32-byte hash
        (ValueError for another length); raises when it could not (BlockMiss, or the transport's
        error: a timeout, a NAK) and then may have stored part of it.
    get_block(record) -> bytes: the payload the record describes; BlockMiss when it cannot be read
        back whole (`.reason`: "not-found", "timeout", "crc", "incomplete", ...).
    probe_block(block_hash) -> BlockRecord | None: a record for a block the caller has no record of
        (None: not stored); its n_bytes may be -1 (size unknown until read).
    evict_block(record): drops the block; dropping one that is not there is no error.

    Thread-safety: get_block may be called from several threads at once (KVCManager fetches a
    prefix's blocks on `fetch_workers` threads); the stores here allow every call from any thread.
    """

    @abstractmethod
    def put_block(self, block_hash: bytes, payload: bytes) -> BlockRecord: ...

    @abstractmethod
    def get_block(self, record: BlockRecord) -> bytes: ...

    @abstractmethod
    def probe_block(self, block_hash: bytes) -> BlockRecord | None: ...

    @abstractmethod
    def evict_block(self, record: BlockRecord) -> None: ...


@runtime_checkable
class BulkBlockReads(Protocol):
    """Blocks read straight into the caller's buffers (kv.transfer.landing lands a prefix through it).

    get_blocks_into(records, buffers) -> Landed: `buffers` holds one writable buffer of at least
    n_bytes per record. Blocks are taken in order and the first that does not arrive whole ends
    the prefix: a miss is reported in `Landed.miss`, not raised, and each complete block's CRC32C
    is that of its bytes as they arrived (so the caller need not read them again to check).
    Raises ValueError for a buffer too small or a count that does not match. Thread-safe.
    """

    @abstractmethod
    def get_blocks_into(self, records: Sequence[BlockRecord], buffers: Sequence) -> Landed: ...


@runtime_checkable
class BulkBlockWrites(Protocol):
    """Several blocks stored in one call, their chunks in flight together (KVCManager.add_blocks).

    put_blocks([(block_hash, payload), ...]) -> one BlockRecord per item, in order. Raises as
    put_block does if any block could not be stored whole; some of the others may then be stored
    all the same, and the caller indexes none of them. Thread-safe.
    """

    @abstractmethod
    def put_blocks(self, items: Sequence[tuple[bytes, bytes]]) -> list[BlockRecord]: ...


@runtime_checkable
class StreamedBlockReads(Protocol):
    """A read the caller watches chunk by chunk while it runs (kv.transfer.streaming: layers as they land).

    stream_deadline_s: seconds one fetch_jobs call may run before it gives up; None when this
        instance cannot stream (a ConstellationBlockStore built with fast=False): ask
        `streams(store)` rather than isinstance alone.
    block_jobs(records, buffers=None) -> list[BlockJob]: one job per record (skymemory.link.fastpath),
        filling `buffers` (one per record) or new ones; ValueError for a record of unknown size.
    fetch_jobs(jobs, *, prefix=None, wave_chunks=0, wave_doubling=False, pace_Bps=0.0, window_bytes=None,
               bell=None) -> TransferStats:
        runs the transfer on the calling thread; while it runs `prefix[i]` (uint32 per job) counts
        the chunks of block i received contiguously from chunk 0 and each job's `status` fills in,
        so another thread can use a layer as soon as it is in (`bell`, a link.bell.ProgressBell, wakes
        that thread when the prefixes reach what it waits for). `wave_chunks` asks chunk ids in
        waves across blocks (`wave_doubling`: each twice as wide as the one before), `pace_Bps`
        paces the waves, `window_bytes` caps the bytes in flight.
        Raises BlockMiss unless every chunk of every block arrived intact.
    Calls from several threads at once are independent (each its own socket).
    """

    @property
    @abstractmethod
    def stream_deadline_s(self) -> float | None: ...

    @abstractmethod
    def block_jobs(self, records: Sequence[BlockRecord], buffers: Sequence | None = None) -> list[BlockJob]: ...

    @abstractmethod
    def fetch_jobs(self, jobs: Sequence[BlockJob], *, prefix: np.ndarray | None = None, wave_chunks: int = 0,
                   wave_doubling: bool = False, pace_Bps: float = 0.0,
                   window_bytes: int | None = None, bell: ProgressBell | None = None) -> TransferStats: ...


@runtime_checkable
class EvictionNotices(Protocol):
    """A store that drops blocks on its own (LRU on the satellites, lazy eviction) says so.

    subscribe_evictions(callback): `callback(block_hash)` is called for every block the store
    drops from then on, evict_block included; TypeError if it is not callable. Callbacks run on
    the store's own thread: they must be quick and thread-safe; one that raises is logged and the
    others still run. KVCManager subscribes to drop the block and its descendants from its index.
    """

    @abstractmethod
    def subscribe_evictions(self, callback: Callable[[bytes], object]) -> None: ...


@runtime_checkable
class AsyncBlockStore(Protocol):
    """put_block and get_block awaitable from any running event loop (same results and errors)."""

    @abstractmethod
    async def aput_block(self, block_hash: bytes, payload: bytes) -> BlockRecord: ...

    @abstractmethod
    async def aget_block(self, record: BlockRecord) -> bytes: ...


@runtime_checkable
class RecordKeeping(Protocol):
    """A store that keeps small one-chunk blocks (records: kv.index.orbit_records) on named satellites, a copy on each.

    record_homes(key): the satellites a record for `key` lives on (None: this store does not know the
    constellation well enough to say, and keeps no records). put_copies: every copy at once, each a one-chunk
    block (sealed or not: the caller's). first_copies: for each key, its copies asked at once, the first that
    `accept(key, home, chunk)` takes (it returns a value, not None) wins. evict_copies: drop them. Each call
    ends by `timeout_s`; what did not answer by then is a TimeoutError in its place.
    """

    @abstractmethod
    def record_homes(self, key: bytes) -> "list[Sat] | None": ...

    @abstractmethod
    def put_copies(self, items: "Sequence[tuple[bytes, bytes]]", timeout_s: float) -> "list[list[Sat]]": ...

    @abstractmethod
    def first_copies(self, keys: "Sequence[bytes]", accept: "Callable[[bytes, Sat, bytes], object]",
                     timeout_s: float) -> list: ...

    @abstractmethod
    def evict_copies(self, keys: "Sequence[bytes]", timeout_s: float) -> int: ...


@runtime_checkable
class TenantSealing(Protocol):
    """A store that may seal what it keeps (skymemory.protocol.seal: under a ground key per tenant).

    `sealed`: whether this instance seals (its records are the sealed layout's, and the blocks it lands
    were opened under the ground's key: Landed.sealed). `for_tenant(tenant)`: the same store sealing
    under that tenant's key (a cache salt names a tenant; None is the default tenant); an unsealed store
    may return itself.
    """

    @property
    @abstractmethod
    def sealed(self) -> bool: ...

    @abstractmethod
    def for_tenant(self, tenant: str | None) -> "BlockStore": ...


CAPABILITIES = (BlockStore, BulkBlockReads, BulkBlockWrites, StreamedBlockReads, EvictionNotices, AsyncBlockStore,
                TenantSealing)


def streams(store: object) -> bool:
    """Whether `store` can stream a prefix now: it has StreamedBlockReads and this instance's transport streams."""
    return isinstance(store, StreamedBlockReads) and store.stream_deadline_s is not None


# ---- helpers for implementations ----------------------------------------------------------------------

def land_one_by_one(records: Sequence["BlockRecord"], buffers: Sequence,
                     read: Callable[["BlockRecord"], tuple[bytes, int]], sealed: bool = False) -> Landed:
    """get_blocks_into for a store that reads blocks whole: read(record) -> (payload, its CRC32C); `sealed`:
    read opened every block under the ground's key (Landed.sealed)."""
    crcs: list[int] = []
    for record, buffer in zip(records, buffers, strict=True):
        try:
            payload, crc = read(record)
        except BlockMiss as miss:
            return Landed(len(crcs), crcs, miss, sealed=sealed)
        if record.n_bytes >= 0 and len(payload) != record.n_bytes:
            return Landed(len(crcs), crcs, BlockMiss("incomplete", f"{len(payload)} bytes, the record says "
                                                                     f"{record.n_bytes}"), sealed=sealed)
        target = memoryview(buffer).cast("B")
        if len(target) < len(payload):
            raise ValueError(f"a buffer of {len(target)} bytes cannot hold a block of {len(payload)}")
        target[:len(payload)] = payload
        crcs.append(crc)
    return Landed(len(crcs), crcs, sealed=sealed)


def split_chunks(payload: bytes, chunk_bytes: int) -> list[bytes]:
    if chunk_bytes < 1:
        raise ValueError("chunk_bytes must be >= 1")
    if not payload:
        return [b""]
    return [payload[i:i + chunk_bytes] for i in range(0, len(payload), chunk_bytes)]


def check_hash(block_hash: bytes) -> None:
    if len(block_hash) != wire.SKYMEM_BLOCK_HASH_LEN:
        raise ValueError(f"block hash must be {wire.SKYMEM_BLOCK_HASH_LEN} bytes, got {len(block_hash)}")
