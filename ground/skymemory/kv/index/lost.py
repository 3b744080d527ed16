"""What happens to a cached block that failed to load: one rule for KVCManager, streaming and the vLLM connector.

A block that did not arrive whole, did not check or did not open is gone as far as the cache is concerned, and
so is every block after it in its chain (each is only reachable through it): they leave the store (lazy
eviction, paper §3.9: an EVICT to their satellites, best effort) and the ground index (removing a block removes
those after it). The blocks before it stay: they arrived whole. A block that did not open ("seal") is noted
against the satellites that served it, in the index's seal-failure ledger.

Which block failed is typed (BlockMiss.block, StreamFailed.block, PrefixStream.intact_blocks), never read from an
error message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from skymemory.store.contract import BlockRecord

log = logging.getLogger(__name__)


def forget_from(store, index, records: Sequence[BlockRecord], position: int, reason: str,
                satellites: Sequence[tuple[int, int]] = (), orbit=None) -> None:
    """records[position] failed: it and the records after it leave `store` and `index` (and their records leave
    orbit: kv.index.orbit_records, when `orbit` is given); nothing here raises (the caller goes on without the cache).
    store None: the caller evicts them itself, later (`evict`: the vLLM worker does it off the engine's step)."""
    if reason == "seal" and satellites:
        index.note_seal_failures({tuple(sat): 1 for sat in satellites})  # best effort: never raises
    if store is not None:
        evict(store, records[position:])
    try:
        index.remove(records[position].block_hash)  # and every block after it
    except Exception as exc:  # noqa: BLE001 - the index is a hint; whoever failed goes on without it
        log.warning("SkyMemory: block %s could not leave the ground index: %r",
                    records[position].block_hash.hex()[:16], exc)
    if orbit is not None:  # never raises: best effort, as every eviction
        orbit.forget([r.block_hash for r in records[position:]])


def evict(store, records: Sequence[BlockRecord]) -> None:
    """Lazy eviction of `records` from the constellation, best effort (a satellite that does not answer keeps its
    chunks until its LRU drops them)."""
    for record in records:
        try:
            store.evict_block(record)
        except Exception as exc:  # noqa: BLE001 - eviction is best effort
            log.info("evicting %s failed: %r", record.block_hash.hex()[:16], exc)
