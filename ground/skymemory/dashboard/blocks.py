"""The ground's KV index as the dashboard sees it, and where a block's chunks are now.

* `IndexFile` follows a `kv-index.json`, the file `skymemory.kv.radix.RadixIndex`
  rewrites atomically after every change (KVCManager keeps it in
  ~/.cache/skymemory/index/ unless told otherwise). It is re-read when its
  size or modification time changes; a missing or damaged file is an empty
  index with a reason, never an error.
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

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from skymemory.orbit import placement
from skymemory.orbit.constellation import Constellation
from skymemory.store.contract import BlockRecord

Sat = tuple[int, int]
INDEX_FILE_NAME = "kv-index.json"  # as skymemory.kv.radix names it
_RECORD_FIELDS = {f.name for f in dataclasses.fields(BlockRecord)}


@dataclass(frozen=True)
class IndexedBlock:
    block_hash: str  # hex
    parent: str  # hex: the previous block of its chain, or the chain's root
    record: BlockRecord
    meta: dict  # what the KV layer noted: tokens, position, kv_format, ...


def _block_from_json(item: dict) -> IndexedBlock:
    values = {k: v for k, v in item["record"].items() if k in _RECORD_FIELDS}
    values["block_hash"] = bytes.fromhex(values["block_hash"])
    values["centre"] = tuple(values["centre"])
    return IndexedBlock(item["hash"], item["parent"], BlockRecord(**values), dict(item.get("meta") or {}))


class IndexFile:
    """The blocks of a radix index file, re-read whenever the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.blocks: list[IndexedBlock] = []  # newest first
        self.problem: str | None = None  # why the index is empty, when it is not simply empty
        self._seen: tuple[int, int] | None = None

    def poll(self) -> bool:
        """Re-read the file if it changed; True when the block list may have changed."""
        try:
            st = self.path.stat()
        except OSError:
            if self._seen is None and self.problem is not None:
                return False
            self.blocks, self._seen = [], None
            self.problem = f"no ground index at {self.path} (a KVCManager's index_dir holds one; --kv-index PATH)"
            return True
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            document = json.loads(self.path.read_text())
            if document.get("version") != 1:
                raise ValueError(f"index file version {document.get('version')}")
            blocks = [_block_from_json(item) for item in document["entries"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.blocks, self.problem = [], f"unreadable index {self.path}: {exc}"
            return True
        self.blocks = sorted(blocks, key=lambda b: b.record.created_ms, reverse=True)
        self.problem = None
        return True

    def find(self, block_hash: str) -> IndexedBlock | None:
        return next((b for b in self.blocks if b.block_hash == block_hash), None)


def holders(record: BlockRecord, c: Constellation, mission_ms: int) -> dict[Sat, list[int]]:
    """Satellite -> the block's chunk ids it holds at `mission_ms` (from the placement, no network)."""
    if record.strategy in placement.STRATEGIES:
        rotation = placement.Rotation(c.planes, c.sats, c.step_ms)
        where = placement.locate_chunks(record, max(mission_ms, record.created_ms), rotation)
    else:  # a fixed server list, chosen as the nearest satellites when the block was stored
        servers = c.nearest(min(record.n_servers, c.planes * c.sats), record.created_ms)
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
