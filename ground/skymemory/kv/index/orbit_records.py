"""The KV index in orbit: every block's record kept on home satellites, so any ground host finds any block.

The ground index (kv.index.radix) is one host's file. What it says of a block (its BlockRecord: where the chunks were
placed, when, in which layout; its parent; how it is encoded) is also written to the constellation when the block
is stored, as the block's *record*: one chunk kept on the R home satellites of

    record key = SHA-256(b"skymemory/kv-record\\0" + block hash)

(store.object_homes' choice, as for named objects' metadata: different planes, different hosts where there are
several), sealed under the block's tenant's content key with that key in its associated data (protocol.seal).
So a satellite can neither read a record, alter it, nor pass one block's record off as another's: a record that
does not open is no record (a miss), and another home's copy may still open.

The local index is a cache of it:
  publish(entries, tenant)       write-through, when blocks are stored (kv.index.saving): every record to its homes
                                 at once, best effort (a record no home took is logged, and the block is
                                 still found by the host that stored it)
  find(parent, hashes, tenant)   read-through, for the blocks past the local index's prefix: every record
                                 asked at once of all its homes (the first copy that opens wins), the chain
                                 walked from `parent`; bounded by `timeout_s`. A block no home holds a record
                                 of is remembered as absent for `negative_s`, so a prompt asked again soon
                                 does not ask again.
  find_later(...)                the same on a worker thread, for a scheduler that must not wait (vLLM's
                                 get_num_new_matched_tokens answers "not yet" and is asked again)
  forget_absent(hashes)          blocks known to be on their way (a prefill site stores them): asked again
  forget(hashes)                 a block that failed to load (kv.index.lost): its record leaves its homes too

Records do not migrate: a home is a satellite named by the record key alone (so any ground host, wherever it is,
finds it), reached over its own link or over ISLs (store.routes; the rotating store goes up to the satellite
overhead now), wherever it is in its orbit. A satellite's own LRU eviction drops a block's chunks and not its
record: the record then leads to a clean miss, and the host that meets it forgets it (kv.index.lost).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from skymemory.link.fastpath import SEAL_OVERHEAD
from skymemory.protocol import wire
from skymemory.protocol.seal_layout import ONE_CHUNK
from skymemory.store.contract import BlockRecord, RecordKeeping, Sat

from .radix import IndexEntry, entry_fault

if TYPE_CHECKING:
    from skymemory.store.constellation import ConstellationBlockStore

log = logging.getLogger(__name__)

RECORD_PREFIX = b"skymemory/kv-record\0"
RECORD_VERSION = 1
TIMEOUT_S = 0.5  # a lookup's wait for the records' homes (a round trip over rf is about 0.07 s)
NEGATIVE_S = 5.0  # a block no home holds a record of is not asked for again for this long
PUBLISH_TIMEOUT_S = 1.0
MAX_ASKED = 64  # records asked in one lookup: a prompt longer than 64 blocks finds the rest in a later one


def record_key(block_hash: bytes) -> bytes:
    """The one-chunk block a KV block's record is kept as."""
    return hashlib.sha256(RECORD_PREFIX + block_hash).digest()


def encode(entry: IndexEntry) -> bytes:
    r = entry.record
    return json.dumps({"v": RECORD_VERSION, "hash": entry.block_hash.hex(), "parent": entry.parent.hex(),
                       "n_bytes": r.n_bytes, "chunk_bytes": r.chunk_bytes, "chunk_count": r.chunk_count,
                       "created_ms": r.created_ms, "strategy": r.strategy, "n_servers": r.n_servers,
                       "centre": list(r.centre), "parity": r.parity, "meta": entry.meta},
                      separators=(",", ":")).encode()


def decode(blob: bytes, block_hash: bytes) -> IndexEntry | None:
    """The entry a record says, when it is one (well formed, of this block, every field in bounds); else None."""
    try:
        d = json.loads(blob)
        if d.get("v") != RECORD_VERSION or d.get("hash") != block_hash.hex():
            return None
        centre = d["centre"]
        if not (isinstance(centre, list) and len(centre) == 2):
            return None
        record = BlockRecord(block_hash, d["n_bytes"], d["chunk_bytes"], d["chunk_count"], d["created_ms"],
                             d["strategy"], d["n_servers"], (centre[0], centre[1]), d["parity"])
        entry = IndexEntry(block_hash, bytes.fromhex(d["parent"]), record, dict(d["meta"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return None if entry_fault(entry) else entry


def _keeps_records(store) -> bool:
    """Whether `store` can keep records: RecordKeeping, and it knows the homes (a manifest's constellation)."""
    return isinstance(store, RecordKeeping) and store.record_homes(bytes(wire.SKYMEM_BLOCK_HASH_LEN)) is not None


class OrbitRecords:
    """Records of KV blocks on their home satellites, through a store that keeps records (store.record_copies)."""

    def __init__(self, store: "ConstellationBlockStore", *, timeout_s: float = TIMEOUT_S,
                 negative_s: float = NEGATIVE_S) -> None:
        if not _keeps_records(store):
            raise ValueError("records in orbit need a store that keeps them (ConstellationBlockStore.from_manifest, "
                             "RotatingBlockStore)")
        if not timeout_s > 0 or not negative_s >= 0:
            raise ValueError(f"timeout_s must be > 0 and negative_s >= 0, got {timeout_s}, {negative_s}")
        self.store = store
        self.timeout_s = timeout_s
        self.negative_s = negative_s
        # block hash -> when it is asked again (a block's hash already names its tenant: kv.naming.extra_keys)
        self._absent: dict[bytes, float] = {}
        self._lock = threading.Lock()
        self._pool_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._later: dict[bytes, Future] = {}  # find_later's lookups, by their first hash
        self.counters = {"published": 0, "publish_failed": 0, "asked": 0, "found": 0, "absent": 0, "timeouts": 0,
                         "bad_copies": 0}

    @classmethod
    def for_store(cls, store, **kw) -> "OrbitRecords | None":
        """Records in orbit through `store` when it can keep them (built from a manifest); None otherwise."""
        return cls(store, **kw) if _keeps_records(store) else None

    def _sealer(self, tenant: str | None):
        return self.store.for_tenant(tenant).sealer()

    # ---- write-through ---------------------------------------------------------------------------------
    def publish(self, entries: Sequence[IndexEntry], tenant: str | None = None) -> int:
        """Every entry's record to its homes, at once; how many records at least one home took. Never raises:
        a record no home took is logged (the block stays found through the local index)."""
        if not entries:
            return 0
        try:
            sealer = self._sealer(tenant)
            items = []
            for entry in entries:
                key, blob = record_key(entry.block_hash), encode(entry)
                items.append((key, blob if sealer is None
                              else sealer.seal_chunk(key, 0, 1, len(blob), blob, layout=ONE_CHUNK)))
            took = self.store.put_copies(items, PUBLISH_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the blocks are stored; only other hosts lose sight of them
            log.warning("SkyMemory: publishing %d KV block records to orbit failed: %r", len(entries), exc)
            self._count(publish_failed=len(entries))
            return 0
        with self._lock:
            for entry in entries:
                self._absent.pop(entry.block_hash, None)
        placed = sum(1 for homes in took if homes)
        if placed < len(entries):
            log.warning("SkyMemory: %d of %d KV block records reached no home satellite: other ground hosts will "
                        "not find those blocks", len(entries) - placed, len(entries))
        self._count(published=placed, publish_failed=len(entries) - placed)
        return placed

    # ---- read-through ----------------------------------------------------------------------------------
    def find(self, parent: bytes, hashes: Sequence[bytes], tenant: str | None = None) -> list[IndexEntry]:
        """The entries of the longest run of `hashes` whose records are in orbit, the first below `parent`."""
        asked = self._to_ask(hashes)
        if not asked:
            return []
        try:
            sealer = self._sealer(tenant)
            answers = self.store.first_copies([record_key(h) for h in asked],
                                              self._opener(sealer, asked), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - an unreachable orbit is a miss, never a stalled engine
            log.warning("SkyMemory: looking %d KV block records up in orbit failed: %r", len(asked), exc)
            self._note_absent(asked[0], timed_out=True)  # not asked again at once (a scheduler would wait on it)
            return []
        found: list[IndexEntry] = []
        for block_hash, answer in zip(asked, answers):
            if isinstance(answer, IndexEntry) and answer.parent == parent:
                found.append(answer)
                parent = block_hash
                continue
            self._note_absent(block_hash, timed_out=isinstance(answer, BaseException))
            break
        self._count(asked=len(asked), found=len(found))
        return found

    def _to_ask(self, hashes: Sequence[bytes]) -> list[bytes]:
        """The hashes to ask: up to the first known absent, at most MAX_ASKED."""
        now = time.monotonic()
        asked = []
        with self._lock:
            for block_hash in hashes[:MAX_ASKED]:
                until = self._absent.get(block_hash)
                if until is not None and until > now:
                    break
                asked.append(block_hash)
        return asked

    def _opener(self, sealer, asked: Sequence[bytes]) -> Callable[[bytes, Sat, bytes], IndexEntry | None]:
        """What first_copies accepts: a copy that opens (sealed) and is this block's record."""
        from skymemory.protocol.seal import SealError

        block_of = {record_key(h): h for h in asked}

        def accept(key: bytes, home: Sat, blob: bytes) -> IndexEntry | None:
            blob, block_hash = bytes(blob), block_of[key]
            try:
                plain = blob if sealer is None else sealer.open_chunk(key, 0, 1, max(0, len(blob) - SEAL_OVERHEAD),
                                                                       blob, layout=ONE_CHUNK)
            except SealError:
                plain = None
            entry = None if plain is None else decode(plain, block_hash)
            if entry is None:
                self._count(bad_copies=1)
                log.warning("SkyMemory: the record of KV block %s at satellite %s does not open or is not one",
                            block_hash.hex()[:16], home)
            return entry

        return accept

    def forget_absent(self, hashes: Sequence[bytes]) -> None:
        """These blocks may have been stored since they were found absent (a prefill site is uploading them):
        the next lookup asks their homes again."""
        with self._lock:
            for block_hash in hashes:
                self._absent.pop(block_hash, None)

    def _note_absent(self, block_hash: bytes, *, timed_out: bool) -> None:
        self._count(timeouts=int(timed_out), absent=int(not timed_out))
        if self.negative_s:
            with self._lock:
                self._absent[block_hash] = time.monotonic() + self.negative_s
                if len(self._absent) > 100_000:  # a long-running host: drop what has expired
                    now = time.monotonic()
                    self._absent = {k: t for k, t in self._absent.items() if t > now}

    def find_later(self, parent: bytes, hashes: Sequence[bytes], tenant: str | None,
                   found: Callable[[list[IndexEntry]], None]) -> bool:
        """find() on a worker thread, `found(entries)` called there with what it finds. False when there is
        nothing to ask (every hash known absent); True while a lookup of these hashes runs (one at a time)."""
        if not self._to_ask(hashes):
            return False
        key = hashes[0]
        with self._lock:
            running = self._later.get(key)
            if running is not None and not running.done():
                return True

            def run() -> None:
                try:
                    found(self.find(parent, hashes, tenant))
                except Exception as exc:  # noqa: BLE001 - what it found could not be learnt: a miss
                    log.warning("SkyMemory: an orbit lookup failed: %r", exc)
                    self._note_absent(hashes[0], timed_out=True)  # not asked again at once: the caller goes on

            self._later[key] = self._worker().submit(run)
            self._later = {k: f for k, f in self._later.items() if not f.done() or k == key}
        return True

    def _worker(self) -> ThreadPoolExecutor:
        """The threads lookups and removals run on when their caller must not wait (made on first use)."""
        with self._pool_lock:  # its own lock: find_later asks for it holding self._lock
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="skymemory-orbit")
            return self._pool

    # ---- removal ----------------------------------------------------------------------------------------
    def forget(self, hashes: Sequence[bytes]) -> None:
        """These blocks are gone: their records leave their homes (best effort) and are remembered absent."""
        if not hashes:
            return
        for block_hash in hashes:
            self._note_absent(block_hash, timed_out=False)
        try:
            self.store.evict_copies([record_key(h) for h in hashes], PUBLISH_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - best effort, as every eviction
            log.info("SkyMemory: evicting %d KV block records failed: %r", len(hashes), exc)

    def forget_later(self, hashes: Sequence[bytes]) -> Future:
        """forget() on a worker thread: for a caller on the store's own loop (an eviction notice), which a
        synchronous call back into the store would deadlock."""
        return self._worker().submit(self.forget, list(hashes))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _count(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                self.counters[name] += n
