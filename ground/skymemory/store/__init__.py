"""Blocks kept on satellites (or in RAM): the block-store contract and the stores that keep it.

contract       BlockRecord, BlockMiss, Landed; the BlockStore protocol and the capabilities a store declares
               (BulkBlockReads, BulkBlockWrites, StreamedBlockReads, EvictionNotices, AsyncBlockStore)
local          LocalBlockStore: process memory, the "no network" limit
constellation  ConstellationBlockStore: chunks striped over a fixed or placed set of satellites
placed         PlacedStore: sets with a placement strategy, gets from where the chunks are now
rotation       MigrationDriver: MIGRATEs every block's leaving column at each rotation step
eviction       Evictions: REPLY_EVICTED notices, lazy eviction, the cleaner
rotating       RotatingBlockStore: the contract over a turning constellation (placed + rotation + eviction)
objects        ObjectStore: named objects of any size (the paper's key-value store, §3.10)
object_homes   where a named object's metadata lives: three home satellites, planes and hosts apart
object_versions  the newest version of each object this ground has seen: what a get must not go back behind
record_copies  small one-chunk records in copies on their home satellites (the KV index in orbit's)
routes         direct, relay, auto: which ground link a request goes up (the --route of every command)
progress       chunks done while a fast-path call runs (put/get -v)

The public face: `from skymemory.store import ConstellationBlockStore` (and the names below). Inside
the package, modules import each other by their own paths. Above skymemory.link; below skymemory.kv.
`KVStore`, ObjectStore's old name, still imports (with a DeprecationWarning) for one more release.
"""

import warnings

from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import (AsyncBlockStore, BlockMiss, BlockRecord, BlockStore, BulkBlockReads,
                                      BulkBlockWrites, EvictionNotices, Landed, StreamedBlockReads, TenantSealing,
                                      streams)
from skymemory.store.local import LocalBlockStore
from skymemory.store.objects import ObjectStore
from skymemory.store.rotating import RotatingBlockStore

__all__ = ["AsyncBlockStore", "BlockMiss", "BlockRecord", "BlockStore", "BulkBlockReads", "BulkBlockWrites",
           "ConstellationBlockStore", "EvictionNotices", "Landed", "LocalBlockStore", "ObjectStore",
           "RotatingBlockStore", "StreamedBlockReads", "TenantSealing", "streams"]


def __getattr__(name: str):
    if name == "KVStore":  # the old name, kept for one release
        warnings.warn("skymemory.store.KVStore is now ObjectStore; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
