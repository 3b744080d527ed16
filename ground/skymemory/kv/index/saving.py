"""Saving KV blocks and noting their use: one path for KVCManager and the vLLM connector.

Both engines save a block alike, so that either finds what the other stored: its bytes (kv.format.codec) are stored
on the constellation as its tenant writes them (sealed under that tenant's key where the store seals: the
caller passes the tenant's store), it is indexed below its parent with the metadata its `BlockFormat` gives,
its record goes to orbit for other ground hosts (kv.index.orbit_records, when the caller keeps records there), and
it is written through to the host and device tiers when there are any. A store with bulk writes takes
all the blocks in one call (their chunks in flight together) and they are indexed in one transaction after
it; another takes them one by one, and those stored before a failure stay indexed.

After a load, both engines tell the index the blocks were used (`note_use`), best effort.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..store import BlockRecord, BlockStore, BulkBlockWrites
from .orbit_records import OrbitRecords
from .radix import IndexEntry, RadixIndex

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BlockFormat:
    """How an engine encodes its blocks: what the index says of each block it saves."""

    kv_format: str  # kv.format.codec.KV_FORMATS
    layout: str  # kv.format.codec.layout_name: sealed or not, SHA-256 or not
    block_tokens: int

    def meta(self, position: int) -> dict:
        """A block's index metadata (position: its index in its prompt's chain)."""
        return {"kv_format": self.kv_format, "layout": self.layout, "tokens": self.block_tokens,
                "position": position}


@dataclass(frozen=True)
class BlockSave:
    block_hash: bytes
    parent: bytes  # the block before it in its chain (the chain's root for the first)
    position: int
    payload: bytes | bytearray | memoryview  # the encoded block (kv.format.codec)


class SaveFailed(RuntimeError):
    """Storing a block failed; the first `saved` blocks were stored and indexed (one by one stores only)."""

    def __init__(self, saved: int, cause: BaseException) -> None:
        self.saved = saved
        super().__init__(f"{type(cause).__name__}: {cause}")


def save_blocks(store: BlockStore, index: RadixIndex, saves: Sequence[BlockSave], form: BlockFormat,
                tiers=None, orbit: OrbitRecords | None = None, tenant: str | None = None) -> list[BlockRecord]:
    """Store, index and keep near `saves` (one chain's or several); their records, in order.

    store: the tenant's (BlockStore.for_tenant where it seals). tiers: a kv.transfer.tiers.BlockTiers or None.
    orbit: where the blocks' records are published (sealed under `tenant`'s key), or None.
    Raises SaveFailed (with how many were saved) when a block could not be stored.
    """
    if not saves:
        return []
    if isinstance(store, BulkBlockWrites):  # all blocks' chunks in flight at once; none indexed if one fails
        try:
            records = store.put_blocks([(s.block_hash, s.payload) for s in saves])
        except Exception as exc:  # noqa: BLE001 - said with how many were saved
            raise SaveFailed(0, exc) from exc
        _indexed(index, saves, records, form, tiers, orbit, tenant)
        return records
    records = []
    for save in saves:  # one by one: those stored before a failure stay indexed
        try:
            record = store.put_block(save.block_hash, save.payload)
        except Exception as exc:  # noqa: BLE001 - said with how many were saved
            raise SaveFailed(len(records), exc) from exc
        _indexed(index, [save], [record], form, tiers, orbit, tenant)
        records.append(record)
    return records


def _indexed(index: RadixIndex, saves: Sequence[BlockSave], records: Sequence[BlockRecord], form: BlockFormat,
             tiers, orbit: OrbitRecords | None, tenant: str | None) -> None:
    entries = [IndexEntry(s.block_hash, s.parent, record, form.meta(s.position)) for s, record in zip(saves, records)]
    index.insert_entries(entries)
    if orbit is not None:  # best effort: a record no home took leaves the block found here only
        orbit.publish(entries, tenant)
    if tiers is not None and tiers.enabled:  # write-through: the next load finds them near the model
        tiers.put([s.block_hash for s in saves], host_rows=[s.payload for s in saves])


def note_use(index: RadixIndex, hashes: Iterable[bytes]) -> None:
    """These blocks were loaded: the index's last use of each is now (best effort: a hint, never a failure)."""
    hashes = list(hashes)
    try:
        index.touch(hashes)
    except Exception as exc:  # noqa: BLE001 - the load succeeded; only the hint is late
        log.warning("SkyMemory: noting the use of %d KV blocks in the ground index failed: %r", len(hashes), exc)
