"""The ground's KV index as the dashboard sees it, and where a block's chunks are now.

* `IndexFollower` follows the ground's KV index (`skymemory.kv.index.radix.RadixIndex`,
  one SQLite file that KVCManager keeps in ~/.cache/skymemory/index/ unless
  told otherwise): it asks the database whether anyone committed since it
  last looked and only then reads the count, the newest blocks and the
  seal-failure ledger (per satellite: KV blocks it served that did not open
  under the ground's key, noted by every process of the host). A missing
  or damaged index is an empty one with a reason, never an error. Its
  messages name the index as the user chose it (`label`), never a folder a
  benchmark made for itself in /tmp.
* `holders` says which satellite holds which chunks of a block now, from the
  block's record and the placement rules (skymemory.orbit.placement), without any
  network: a migrating layout is where the rotation has moved it. A block of
  the "explicit" strategy (a fixed server list: ConstellationBlockStore,
  `skymemory put`) is taken to be on the satellites nearest the ground host
  when it was created, which is how those stores choose their servers.
* `grid_route` is the path a request takes from the satellite holding the
  ground link to its destination, by the +GRID rule of docs/PROTOCOL.md §5
  (north or south first, the shorter way round, ties south; then west or
  east, ties east).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from skymemory.kv.index import radix
from skymemory.kv.index.radix import IndexEntry
from skymemory.orbit import placement
from skymemory.orbit.constellation import Constellation
from skymemory.store.contract import BlockRecord

Sat = tuple[int, int]
NEWEST_SHOWN = 200  # blocks the follower reads: the page lists the newest few


@dataclass(frozen=True)
class IndexedBlock:
    block_hash: str  # hex
    parent: str  # hex: the previous block of its chain, or the chain's root
    record: BlockRecord
    meta: dict  # what the KV layer noted: tokens, position, kv_format, ...


def _shown(entry: IndexEntry) -> IndexedBlock:
    return IndexedBlock(entry.block_hash.hex(), entry.parent.hex(), entry.record, entry.meta)


def index_directory(path: Path) -> Path:
    """The index's folder from what a user may name: the folder, its SQLite file or an old kv-index.json."""
    path = Path(path)
    return path.parent if path.name in (radix.FILE_NAME, radix.JSON_FILE_NAME) else path


class IndexFollower:
    """The ground KV index of a folder as the page shows it: its size and newest blocks, re-read on change."""

    def __init__(self, directory: Path, label: str | None = None) -> None:
        """`label`: how the page names the index, as the user chose it ("in PATH", "beside MANIFEST"); None for
        the index a benchmark's run keeps beside its own constellation."""
        self.directory = index_directory(directory)
        self.label = label
        self.path = self.directory / radix.FILE_NAME
        self.blocks: list[IndexedBlock] = []  # the newest NEWEST_SHOWN, newest first
        self.count = 0
        self.seal_failures: dict[Sat, tuple[int, float]] = {}  # (plane, sat) -> (blocks, Unix time of the last)
        self.problem: str | None = None  # why the index is empty, when it is not simply empty
        self._index: radix.RadixIndex | None = None
        self._seen: int | None = None

    def poll(self) -> bool:
        """Re-read the index if anyone changed it; True when the block list may have changed."""
        try:
            if self._index is None:
                if not (self.path.exists() or (self.directory / radix.JSON_FILE_NAME).exists()):
                    changed = self.problem is None or self.blocks != [] or self.seal_failures != {}
                    self.blocks, self.count, self.seal_failures = [], 0, {}
                    self.problem = (f"no ground index {self.label} (a KVCManager's index_dir holds one; "
                                    "--kv-index PATH)" if self.label else
                                    "no ground index beside the benchmark's constellation yet (it makes one as it "
                                    "stores its first blocks)")
                    return changed
                self._index, self._seen = radix.RadixIndex(self.directory), None
            seen = self._index.changes()
            if seen == self._seen:
                return False
            self.count = len(self._index)
            self.blocks = [_shown(e) for e in self._index.newest(NEWEST_SHOWN)]
            self.seal_failures = self._index.seal_failures()
            self._seen, self.problem = seen, None
        except sqlite3.Error as exc:
            self.blocks, self.count, self.problem = [], 0, f"unreadable ground index {self.label or 'of the benchmark'}: {exc}"
            self.seal_failures = {}
            self.close()
        return True

    def find(self, block_hash: str) -> IndexedBlock | None:
        """Any indexed block, by its hex hash (not only the newest)."""
        if self._index is None:
            return None
        try:
            entry = self._index.get(bytes.fromhex(block_hash))
        except (ValueError, sqlite3.Error):
            return None
        return _shown(entry) if entry is not None else None

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
        self._index, self._seen = None, None


def holders(record: BlockRecord, c: Constellation, mission_ms: int) -> dict[Sat, list[int]]:
    """Satellite -> the block's chunk ids it holds at `mission_ms` (from the placement, no network)."""
    if record.strategy in placement.STRATEGIES:
        rotation = placement.Rotation(c.planes, c.sats, c.step_ms)
        where = placement.locate_chunks(record, max(mission_ms, record.created_ms), rotation)
    else:  # a fixed server list, chosen as the nearest satellites when the block was stored
        servers = c.nearest(min(record.n_servers, c.planes * c.sats), record.created_ms, tuple(record.centre))
        where = [servers[i % len(servers)] for i in range(record.chunk_count)]
    out: dict[Sat, list[int]] = {}
    for chunk_id, sat in enumerate(where):
        out.setdefault(tuple(sat), []).append(chunk_id)
    return out


def grid_route(src: Sat, dst: Sat, planes: int, sats: int) -> list[Sat]:
    """Satellites a packet visits from src to dst by the +GRID rule, both ends included."""
    path = [src]
    plane, sat = src
    while (plane, sat) != tuple(dst):
        south, north = (dst[0] - plane) % planes, (plane - dst[0]) % planes
        east, west = (dst[1] - sat) % sats, (sat - dst[1]) % sats
        if plane != dst[0]:
            plane = (plane - 1) % planes if north < south else (plane + 1) % planes
        else:
            sat = (sat - 1) % sats if west < east else (sat + 1) % sats
        path.append((plane, sat))
    return path
