"""Local radix index of cached blocks (paper §3.10).

Block hashes are chained (`blocks.py`), so the blocks of all prompts seen form
a tree: the root hash (model + tokenizer + encoding) at the top, each block a
node whose parent is the block before it. A prompt's longest cached prefix is
the walk down that tree along its hash list, with no round trip to the
constellation. Each node keeps the BlockRecord (chunk count, byte size,
creation time, strategy, centre, servers) so the blocks can be fetched
directly, and how the payload is encoded (KV format, layout).

The index is only a hint: when the constellation reports a block missing or
evicted, `remove` drops that block and every block after it in its chains
(they are unreachable as a prefix anyway).

It survives restarts: a JSON file rewritten atomically (temporary file, fsync,
rename) after every change.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .store import BlockRecord

log = logging.getLogger(__name__)

FILE_NAME = "kv-index.json"
FILE_VERSION = 1
_RECORD_FIELDS = {f.name for f in dataclasses.fields(BlockRecord)}


@dataclass
class IndexEntry:
    block_hash: bytes
    parent: bytes  # previous block's hash, or the chain's root hash for the first block
    record: BlockRecord
    meta: dict = field(default_factory=dict)  # kv_format, layout, tokens, position


def _record_to_json(record: BlockRecord) -> dict:
    out = {}
    for name in _RECORD_FIELDS:
        value = getattr(record, name)
        out[name] = value.hex() if isinstance(value, bytes) else list(value) if isinstance(value, tuple) else value
    return out


def _record_from_json(data: dict) -> BlockRecord:
    values = {k: v for k, v in data.items() if k in _RECORD_FIELDS}
    values["block_hash"] = bytes.fromhex(values["block_hash"])
    values["centre"] = tuple(values["centre"])
    return BlockRecord(**values)


class RadixIndex:
    """Tree of block hashes with per-block metadata. Thread-safe."""

    def __init__(self, directory: str | os.PathLike | None = None, *, autosave: bool = True):
        self.path = Path(directory) / FILE_NAME if directory is not None else None
        self.autosave = autosave and self.path is not None
        self._entries: dict[bytes, IndexEntry] = {}
        self._children: dict[bytes, set[bytes]] = {}
        self._lock = threading.RLock()
        if self.path is not None and self.path.exists():
            self._load()

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._entries

    def get(self, block_hash: bytes) -> IndexEntry | None:
        return self._entries.get(block_hash)

    def longest_prefix(self, root: bytes, hashes: list[bytes]) -> list[IndexEntry]:
        """Entries for the longest run hashes[0..k-1] present as a chain below `root`."""
        found, parent = [], root
        with self._lock:
            for block_hash in hashes:
                entry = self._entries.get(block_hash)
                if entry is None or entry.parent != parent:
                    break
                found.append(entry)
                parent = block_hash
        return found

    def knows_root(self, root: bytes) -> bool:
        """True when at least one block is indexed directly below `root`."""
        return bool(self._children.get(root))

    # ------------------------------------------------------------------ updates

    def insert(self, parent: bytes, record: BlockRecord, meta: dict | None = None, *, save: bool = True) -> None:
        with self._lock:
            block_hash = record.block_hash
            old = self._entries.get(block_hash)
            if old is not None and old.parent != parent:
                self._children.get(old.parent, set()).discard(block_hash)
            self._entries[block_hash] = IndexEntry(block_hash, parent, record, dict(meta or {}))
            self._children.setdefault(parent, set()).add(block_hash)
            if save:
                self._autosave()

    def remove(self, block_hash: bytes) -> int:
        """Drop a block and everything after it in its chains; returns how many entries went."""
        with self._lock:
            entry = self._entries.get(block_hash)
            if entry is None:
                return 0
            self._children.get(entry.parent, set()).discard(block_hash)
            removed, stack = 0, [block_hash]
            while stack:
                current = stack.pop()
                if self._entries.pop(current, None) is not None:
                    removed += 1
                stack.extend(self._children.pop(current, ()))
            self._autosave()
            return removed

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._children.clear()
            self._autosave()

    # ------------------------------------------------------------------ persistence

    def _autosave(self) -> None:
        if self.autosave:
            self.save()

    def save(self) -> None:
        if self.path is None:
            return
        with self._lock:
            document = {
                "version": FILE_VERSION,
                "entries": [
                    {"hash": e.block_hash.hex(), "parent": e.parent.hex(), "record": _record_to_json(e.record), "meta": e.meta}
                    for e in self._entries.values()
                ],
            }
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=FILE_NAME + ".", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w") as handle:
                    json.dump(document, handle)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

    def _load(self) -> None:
        try:
            document = json.loads(self.path.read_text())
            if document.get("version") != FILE_VERSION:
                raise ValueError(f"index file version {document.get('version')}")
            for item in document["entries"]:
                record = _record_from_json(item["record"])
                self.insert(bytes.fromhex(item["parent"]), record, item.get("meta"), save=False)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # A damaged index only costs hits: start empty rather than fail.
            log.warning("ignoring unreadable KV index %s: %s", self.path, exc)
            self._entries.clear()
            self._children.clear()
