"""The ground index of cached blocks (paper §3.10), in one SQLite file shared by every process.

Block hashes are chained (`blocks.py`), so the blocks of all prompts seen form
a tree: the root hash (model + tokenizer + encoding) at the top, each block a
node whose parent is the block before it. A prompt's longest cached prefix is
the walk down that tree along its hash list, with no round trip to the
constellation. Each node keeps the BlockRecord (chunk count, byte size,
creation time, strategy, centre, servers) so the blocks can be fetched
directly, how the payload is encoded (KV format, layout, tokens, position) and
when it was last used.

Layout: one table `blocks`, a row per block in insertion order (rows append
to the table's B-tree, and the newest blocks are its last rows), with a unique
index on the 32-byte hash and an index on `parent` (children of a block).
Costs at n blocks: a prompt's longest prefix is one `hash IN (...)` query, k
point reads of O(log n) pages, walked in Python; a prompt's blocks go in with
one transaction (its writes land on about k + 2 pages: random hashes scatter
the two indexes, the table only grows at its end); `remove` of a block and
every block after it in its chains is one recursive DELETE down the parent
index.

Sharing: the file is in WAL mode, so readers never wait for a writer and see
the last committed state; writers take the write lock up front (BEGIN
IMMEDIATE) and wait up to `busy_timeout_s` for one another. Each thread gets
its own connection (reopened in a forked child), so the KV layer's fetch
threads, the CLI, the dashboard and a serving engine's scheduler and workers
can all use one index at once. synchronous=NORMAL: a power cut may lose the
last commits, never the file.

The index is only a hint: the constellation stays the truth. A block the
index names but the constellation lost is a clean miss; `remove` then drops
that block and every block after it in its chains (they are unreachable as a
prefix anyway).

An older index (`kv-index.json`, the whole index rewritten after every change)
in the same folder is imported once, then left as it was. `RadixIndex()`
with no folder keeps the index in this process's memory.

The seal-failure ledger: beside the blocks, table `seal_failures` counts, per
satellite, the KV blocks whose chunks it served came intact and did not open
under the ground's key (skymemory.protocol.seal: altered on the satellite, or
another block's), with the Unix time of the last one. Every process that
loads KV through this index notes its failures there (`note_seal_failures`,
best effort: a failure to note is logged, never raised into a request), so
`skymemory status` and the dashboard show one count per ground host
(`seal_failures`, or `seal_failures_in(folder)`, which creates nothing). The
table was added without a new schema version (older skymemory ignores it and
shares the file as before): a file made before it gets it at its first note.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .store import BlockRecord

log = logging.getLogger(__name__)

FILE_NAME = "kv-index.sqlite"
JSON_FILE_NAME = "kv-index.json"  # the index before it moved to SQLite: imported once
SCHEMA_VERSION = 1
META_KEYS = ("kv_format", "layout", "tokens", "position")  # what a block's `meta` may say
DEFAULT_BUSY_TIMEOUT_S = 10.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS blocks (
    id           INTEGER PRIMARY KEY,  -- insertion order: new rows append, the newest are the highest ids
    hash         BLOB NOT NULL UNIQUE,
    parent       BLOB NOT NULL,     -- the previous block's hash, or the chain's root for a first block
    n_bytes      INTEGER NOT NULL,  -- BlockRecord's fields, one column each
    chunk_bytes  INTEGER NOT NULL,
    chunk_count  INTEGER NOT NULL,
    created_ms   INTEGER NOT NULL,
    strategy     TEXT NOT NULL,
    n_servers    INTEGER NOT NULL,
    centre_plane INTEGER NOT NULL,
    centre_sat   INTEGER NOT NULL,
    kv_format    TEXT,              -- how the payload is encoded (meta); NULL: not said
    layout       TEXT,
    tokens       INTEGER,
    position     INTEGER,
    last_used_ms INTEGER NOT NULL   -- wall clock of the insert or of the last fetch of this block
);
CREATE INDEX IF NOT EXISTS blocks_by_parent ON blocks(parent);
CREATE TABLE IF NOT EXISTS properties (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS seal_failures (  -- per satellite: KV blocks it served whose chunks did not open
    plane     INTEGER NOT NULL,
    sat       INTEGER NOT NULL,
    count     INTEGER NOT NULL,
    last_unix REAL NOT NULL,        -- wall clock (Unix seconds) of the last one
    PRIMARY KEY (plane, sat)
);
"""
_SCHEMA += _LEDGER_SCHEMA  # a new file has it; a file made before it gets it at its first note
_COLUMNS = ("hash, parent, n_bytes, chunk_bytes, chunk_count, created_ms, strategy, n_servers, centre_plane, "
            "centre_sat, kv_format, layout, tokens, position, last_used_ms")
_INSERT = f"INSERT OR REPLACE INTO blocks ({_COLUMNS}) VALUES ({', '.join('?' * 15)})"
_NOTE_SEAL_FAILURES = """
INSERT INTO seal_failures (plane, sat, count, last_unix) VALUES (?, ?, ?, ?)
ON CONFLICT (plane, sat) DO UPDATE SET count = count + excluded.count, last_unix = max(last_unix, excluded.last_unix)
"""
_READ_SEAL_FAILURES = "SELECT plane, sat, count, last_unix FROM seal_failures ORDER BY plane, sat"
_HAS_LEDGER = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'seal_failures'"
_REMOVE = """
WITH RECURSIVE doomed(hash) AS (
    SELECT hash FROM blocks WHERE hash = ?
    UNION
    SELECT blocks.hash FROM blocks JOIN doomed ON blocks.parent = doomed.hash)
DELETE FROM blocks WHERE hash IN (SELECT hash FROM doomed)
"""


Sat = tuple[int, int]


def default_directory() -> Path:
    """The folder of the index KVCManager keeps unless told otherwise: $SKYMEMORY_CACHE/index (kv.models.cache_dir()
    / "index", said here too so that a command without torch finds it)."""
    return Path(os.environ.get("SKYMEMORY_CACHE") or Path.home() / ".cache" / "skymemory") / "index"


class IndexVersionError(RuntimeError):
    """The index file was written by a skymemory with another schema."""


class _Connection(sqlite3.Connection):
    """A connection that can be weakly referenced (the index closes the ones still open at close())."""


@dataclass
class IndexEntry:
    block_hash: bytes
    parent: bytes  # previous block's hash, or the chain's root hash for the first block
    record: BlockRecord
    meta: dict = field(default_factory=dict)  # kv_format, layout, tokens, position (those that were given)
    last_used_ms: int = 0  # wall clock, ms: inserted or last fetched


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _row(parent: bytes, record: BlockRecord, meta: dict | None, used_ms: int) -> tuple:
    meta = meta or {}
    unknown = set(meta) - set(META_KEYS)
    if unknown:
        raise ValueError(f"unknown block metadata {sorted(unknown)}; the index keeps {', '.join(META_KEYS)}")
    r = record
    return (r.block_hash, parent, r.n_bytes, r.chunk_bytes, r.chunk_count, r.created_ms, r.strategy, r.n_servers,
            r.centre[0], r.centre[1], *(meta.get(k) for k in META_KEYS), used_ms)


def _entry(row: tuple) -> IndexEntry:
    (block_hash, parent, n_bytes, chunk_bytes, chunk_count, created_ms, strategy, n_servers, plane, sat,
     *meta_values, used_ms) = row
    record = BlockRecord(block_hash, n_bytes, chunk_bytes, chunk_count, created_ms, strategy, n_servers, (plane, sat))
    meta = {k: v for k, v in zip(META_KEYS, meta_values) if v is not None}
    return IndexEntry(block_hash, parent, record, meta, used_ms)


class RadixIndex:
    """Tree of block hashes with per-block metadata, in one SQLite file (or in memory). Thread- and process-safe."""

    def __init__(self, directory: str | os.PathLike | None = None, *,
                 busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S):
        if busy_timeout_s <= 0:
            raise ValueError("busy_timeout_s must be positive")
        self.directory = Path(directory) if directory is not None else None
        self.path = self.directory / FILE_NAME if self.directory is not None else None
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()  # this thread's connection, and the pid that opened it
        self._connections: weakref.WeakSet[_Connection] = weakref.WeakSet()  # a thread's goes when the thread ends
        if self.path is None:  # one connection: the threads take turns (an in-memory database is per connection)
            self._memory_lock = threading.RLock()
            self._memory: _Connection | None = self._open(":memory:")
        else:
            self._memory_lock, self._memory = contextlib.nullcontext(), None
            self.directory.mkdir(parents=True, exist_ok=True)
            self._connection_or_fresh_file()
            self._import_json_once()

    # ------------------------------------------------------------------ connections

    def _open(self, where: str) -> "_Connection":
        # check_same_thread=False: close() may close another thread's; each is used by its own thread only
        conn = sqlite3.connect(where, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False,
                               factory=_Connection)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA cache_size=-65536")  # 64 MiB of pages per connection
            conn.execute("PRAGMA mmap_size=4294967296")  # reads straight from the OS's page cache, no copy
            conn.execute("PRAGMA journal_size_limit=67108864")  # the WAL shrinks back to 64 MiB after a big import
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:  # a new file (two processes may both get here: the schema is IF NOT EXISTS)
                conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
            elif version != SCHEMA_VERSION:
                raise IndexVersionError(f"{where} is a KV index of schema version {version}; this skymemory reads "
                                        f"version {SCHEMA_VERSION} (use another index folder, or this index's "
                                        "skymemory)")
        except BaseException:
            conn.close()
            raise
        self._connections.add(conn)
        return conn

    def _connection(self) -> "_Connection":
        if self._memory is not None:
            return self._memory
        local = self._local
        if getattr(local, "pid", None) != os.getpid():  # new thread, or a forked child: never share a handle
            local.conn, local.pid = self._open(str(self.path)), os.getpid()
        return local.conn

    def _connection_or_fresh_file(self) -> None:
        """Open the file; one that is not a database (damaged) is moved aside and a new one started."""
        try:
            self._connection()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):  # locked, no permission, disk full: say so
                raise
            aside = self.path.with_name(f"{FILE_NAME}.damaged-{time.time_ns()}")
            log.warning("the KV index %s is damaged (%s): moved to %s, starting an empty index (it is only a hint: "
                        "blocks are fetched again by a probe or stored again)", self.path, exc, aside.name)
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
            self._local = threading.local()
            self._connection()

    @contextlib.contextmanager
    def _reading(self):
        with self._memory_lock:
            yield self._connection()

    @contextlib.contextmanager
    def _writing(self):
        """One write transaction, its lock taken at BEGIN (a deferred one could fail instead of waiting)."""
        with self._memory_lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection this object opened, in any thread (a later call on a file index opens anew)."""
        for conn in list(self._connections):
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        with self._reading() as conn:
            return conn.execute("SELECT count(*) FROM blocks").fetchone()[0]

    def __contains__(self, block_hash: bytes) -> bool:
        with self._reading() as conn:
            return conn.execute("SELECT 1 FROM blocks WHERE hash = ?", (block_hash,)).fetchone() is not None

    def get(self, block_hash: bytes) -> IndexEntry | None:
        with self._reading() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM blocks WHERE hash = ?", (block_hash,)).fetchone()
        return _entry(row) if row is not None else None

    def longest_prefix(self, root: bytes, hashes: Sequence[bytes]) -> list[IndexEntry]:
        """Entries for the longest run hashes[0..k-1] present as a chain below `root`."""
        if not hashes:
            return []
        with self._reading() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM blocks WHERE hash IN ({', '.join('?' * len(hashes))})",
                                list(hashes)).fetchall()
        by_hash = {row[0]: row for row in rows}
        found, parent = [], root
        for block_hash in hashes:
            row = by_hash.get(block_hash)
            if row is None or row[1] != parent:
                break
            found.append(_entry(row))
            parent = block_hash
        return found

    def knows_root(self, root: bytes) -> bool:
        """True when at least one block is indexed directly below `root`."""
        with self._reading() as conn:
            return conn.execute("SELECT 1 FROM blocks WHERE parent = ? LIMIT 1", (root,)).fetchone() is not None

    def newest(self, limit: int) -> list[IndexEntry]:
        """The `limit` most recently indexed blocks, newest first."""
        with self._reading() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM blocks ORDER BY id DESC LIMIT ?", (limit,))
            return [_entry(row) for row in rows]

    def changes(self) -> int:
        """A number that changes whenever any connection (any process) commits a change to the index."""
        with self._reading() as conn:
            return conn.execute("PRAGMA data_version").fetchone()[0]

    def seal_failures(self) -> dict[Sat, tuple[int, float]]:
        """The seal-failure ledger: (plane, sat) -> (KV blocks it served that did not open, Unix time of the last)."""
        with self._reading() as conn:
            return _ledger(conn)

    # ------------------------------------------------------------------ updates

    def insert(self, parent: bytes, record: BlockRecord, meta: dict | None = None) -> None:
        """Index one block below `parent` (replacing what the index said of the same hash)."""
        self.insert_chain(parent, [(record, meta)])

    def insert_chain(self, parent: bytes, blocks: Sequence[tuple[BlockRecord, dict | None]]) -> None:
        """Index consecutive blocks of one chain, the first below `parent`, in one transaction."""
        now, rows = _now_ms(), []
        for record, meta in blocks:
            rows.append(_row(parent, record, meta, now))
            parent = record.block_hash
        self._insert_rows(rows)

    def insert_entries(self, entries: Iterable[IndexEntry]) -> int:
        """Index many blocks of any chains in one transaction (an import, a benchmark's fill); returns how many."""
        now = _now_ms()
        return self._insert_rows([_row(e.parent, e.record, e.meta, e.last_used_ms or now) for e in entries])

    def _insert_rows(self, rows: list[tuple]) -> int:
        if rows:
            with self._writing() as conn:
                conn.executemany(_INSERT, rows)
        return len(rows)

    def touch(self, block_hashes: Sequence[bytes]) -> None:
        """These blocks were just used (fetched): their last use is now."""
        if block_hashes:
            with self._writing() as conn:
                conn.executemany("UPDATE blocks SET last_used_ms = ? WHERE hash = ?",
                                 [(_now_ms(), h) for h in block_hashes])

    def remove(self, block_hash: bytes) -> int:
        """Drop a block and everything after it in its chains; returns how many entries went."""
        with self._writing() as conn:
            conn.execute(_REMOVE, (block_hash,))
            return conn.execute("SELECT changes()").fetchone()[0]  # sqlite3's rowcount misses a WITH ... DELETE

    def clear(self) -> None:
        with self._writing() as conn:
            conn.execute("DELETE FROM blocks")

    def note_seal_failures(self, counts: Mapping[Sat, int]) -> bool:
        """Add `counts` ((plane, sat) -> KV blocks of that satellite that did not open) to the ledger, now, in one
        transaction. Best effort, as it is noted in a request: a failure (the file read-only, locked past
        busy_timeout_s, ...) is logged and returns False, never raised."""
        try:
            now = time.time()
            rows = [(int(p), int(s), int(n), now) for (p, s), n in counts.items() if int(n) > 0]
            if not rows:
                return True
            with self._writing() as conn:
                conn.execute(_LEDGER_SCHEMA)  # a file made before the ledger; nothing to do on any other
                conn.executemany(_NOTE_SEAL_FAILURES, rows)
            return True
        except Exception as exc:  # noqa: BLE001 - the ledger is telemetry: the request goes on without it
            log.warning("noting seal failures %s in the KV index %s failed: %r", dict(counts),
                        self.path or "in memory", exc)
            return False

    # ------------------------------------------------------------------ the JSON index, once

    def _import_json_once(self) -> None:
        """Blocks of an older kv-index.json in the folder, indexed once (the file itself is left as it was)."""
        source = self.directory / JSON_FILE_NAME
        if not source.exists():
            return
        with self._writing() as conn:
            if conn.execute("SELECT 1 FROM properties WHERE name = 'json_imported'").fetchone():
                return  # done before, by this process or another
            try:
                rows = _json_index_rows(source)
                outcome = f"{len(rows)} blocks"
            except (OSError, ValueError, KeyError, TypeError) as exc:
                rows, outcome = [], f"nothing: unreadable ({exc})"
            conn.executemany(_INSERT.replace("OR REPLACE", "OR IGNORE"), rows)  # what SQLite knew already wins
            conn.execute("INSERT INTO properties VALUES ('json_imported', ?)",
                         (json.dumps({"at_ms": _now_ms(), "outcome": outcome}),))
        log.warning("note: imported %s from %s into %s; the JSON file is left as it was and no longer read",
                    outcome, source, self.path.name)


def _ledger(conn: sqlite3.Connection) -> dict[Sat, tuple[int, float]]:
    if conn.execute(_HAS_LEDGER).fetchone() is None:  # a file made before the ledger, never noted in since
        return {}
    return {(plane, sat): (count, last_unix) for plane, sat, count, last_unix in conn.execute(_READ_SEAL_FAILURES)}


def seal_failures_in(directory: str | os.PathLike | None = None) -> dict[Sat, tuple[int, float]]:
    """The seal-failure ledger of the index in `directory` (default: default_directory(); its kv-index.sqlite may be
    named instead), read-only: nothing is created, moved or migrated there. {} when there is no index; one that
    cannot be read is logged and {} (a status display, not a request, asks this)."""
    path = Path(directory) if directory is not None else default_directory()
    if path.name != FILE_NAME:
        path = path / FILE_NAME
    if not path.is_file():
        return {}
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=DEFAULT_BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        log.warning("cannot read the seal failures of the KV index %s: %s", path, exc)
        return {}
    try:
        return _ledger(conn)
    except sqlite3.Error as exc:
        log.warning("cannot read the seal failures of the KV index %s: %s", path, exc)
        return {}
    finally:
        conn.close()


def _json_index_rows(path: Path) -> list[tuple]:
    """Rows of the blocks in a version-1 kv-index.json (the index's file before SQLite)."""
    document = json.loads(path.read_text())
    if document.get("version") != 1:
        raise ValueError(f"index file version {document.get('version')}")
    now, rows = _now_ms(), []
    for item in document["entries"]:
        fields = dict(item["record"])
        fields["block_hash"] = bytes.fromhex(fields["block_hash"])
        fields["centre"] = tuple(fields["centre"])
        meta = {k: v for k, v in (item.get("meta") or {}).items() if k in META_KEYS}
        rows.append(_row(bytes.fromhex(item["parent"]), BlockRecord(**fields), meta, now))
    return rows
