"""The ground index of cached blocks (paper §3.10), in one SQLite file shared by every process.

Block hashes are chained (`blocks.py`), so the blocks of all prompts seen form
a tree: the root hash (model + tokenizer + encoding) at the top, each block a
node whose parent is the block before it. A prompt's longest cached prefix is
the walk down that tree along its hash list, with no round trip to the
constellation. Each node keeps the BlockRecord (chunk count, byte size,
creation time, strategy, centre, servers, parity) so the blocks can be fetched
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
in the same folder is imported once, then left as it was. A file of an older
schema version (1: blocks without `parity`) is upgraded in place at open, in one
transaction; a file of any other version is refused (IndexVersionError). `RadixIndex()`
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

The file is not trusted (security review N8): anyone who can write it could plant in it.
* Every connection runs with `trusted_schema=OFF`, and a file whose schema holds a trigger,
  a view, a table or an index this index does not make is refused (IndexFileError, at open and
  before each write): planted SQL never runs in a process that opens the index.
* Every record read is checked field by field (`_bad_field`); one out of bounds is absent
  (a miss), counted in `bad_records` and logged once, never returned.
* The file, its -wal, -shm and -journal must not be symbolic links (IndexFileError naming the
  path): nothing is created or read through one.
* Damage met at any call ("malformed", "not a database") moves the file (and its -wal, -shm)
  aside to `kv-index.sqlite.damaged-<ns>` with a warning; that call answers as an empty index
  would (a miss), later calls use a fresh file. Other openers follow: in this process at their
  next call, other processes at their next write or error (a read: within a second).
* The file is made 0600 and the folders the index makes 0700, whatever the umask; an existing
  file (or -wal, -shm) readable by others is tightened to its owner at open (SQLite gives the
  -wal and -shm it makes the file's mode).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import re
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skymemory.orbit.placement import MAX_SERVERS, STRATEGIES
from skymemory.protocol import wire
from skymemory.protocol.stripes import MAX_STRIPE_CHUNKS

from ..store import BlockRecord

log = logging.getLogger(__name__)

FILE_NAME = "kv-index.sqlite"
JSON_FILE_NAME = "kv-index.json"  # the index before it moved to SQLite: imported once
SCHEMA_VERSION = 2  # 2: blocks.parity
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
    last_used_ms INTEGER NOT NULL,  -- wall clock of the insert or of the last fetch of this block
    parity       INTEGER NOT NULL DEFAULT 0  -- BlockRecord's too; last, where version 1's upgrade adds it
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
            "centre_sat, kv_format, layout, tokens, position, last_used_ms, parity")
_INSERT = f"INSERT OR REPLACE INTO blocks ({_COLUMNS}) VALUES ({', '.join('?' * 16)})"
# version v -> v + 1, run at open on an older skymemory's file (_upgrade)
_UPGRADES = {1: "ALTER TABLE blocks ADD COLUMN parity INTEGER NOT NULL DEFAULT 0"}
_NOTE_SEAL_FAILURES = """
INSERT INTO seal_failures (plane, sat, count, last_unix) VALUES (?, ?, ?, ?)
ON CONFLICT (plane, sat) DO UPDATE SET count = count + excluded.count, last_unix = max(last_unix, excluded.last_unix)
"""
_READ_SEAL_FAILURES = "SELECT plane, sat, count, last_unix FROM seal_failures ORDER BY plane, sat"
_HAS_LEDGER = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'seal_failures'"
# what the index makes in its file; anything else in sqlite_master was planted (or comes from a newer skymemory:
# refused rather than moved aside, so that a newer skymemory's index shared with this one is never thrown away)
_OWN_TABLES = frozenset({"blocks", "properties", "seal_failures"})
_OWN_INDEXES = frozenset({"blocks_by_parent", "blocks_by_created"})  # the second: files of an older skymemory (v1)
_SQLITE_TABLES = frozenset({"sqlite_sequence", "sqlite_stat1", "sqlite_stat2", "sqlite_stat3", "sqlite_stat4"})
_SIBLINGS = ("", "-wal", "-shm", "-journal")  # the file and those SQLite keeps beside it
_DAMAGE_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB (primary codes)
_REMOVE = """
WITH RECURSIVE doomed(hash) AS (
    SELECT hash FROM blocks WHERE hash = ?
    UNION
    SELECT blocks.hash FROM blocks JOIN doomed ON blocks.parent = doomed.hash)
DELETE FROM blocks WHERE hash IN (SELECT hash FROM doomed)
"""


Sat = tuple[int, int]


def default_directory() -> Path:
    """The folder of the index KVCManager keeps unless told otherwise: $SKYMEMORY_CACHE/index
    (kv.model.models.cache_dir() / "index", said here too so that a command without torch finds it)."""
    return Path(os.environ.get("SKYMEMORY_CACHE") or Path.home() / ".cache" / "skymemory") / "index"


class IndexVersionError(RuntimeError):
    """The index file was written by a skymemory with another schema."""


class IndexFileError(RuntimeError):
    """The index file is refused: a symbolic link (or not a regular file), or its schema holds SQL the index does
    not make (a trigger, a view, a table or an index planted by someone who could write it)."""


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


# ---- what a record read from the file may hold (N8: the file is not trusted; these are what the writers allow)

_MAX_INT = 2**63 - 1  # SQLite's integers; created_ms is a u64 on the wire
_MAX_CHUNK_COUNT = 2**32 - 1  # the chunk count is a u32 on the wire
_MAX_SAT = wire.SKYMEM_NO_SAT - 1  # plane and sat are u16 on the wire, 0xFFFF meaning none
_MAX_TEXT = 256  # kv_format, layout: short names
_MAX_META_INT = 2**31 - 1  # tokens per block, position in a prompt
_MAX_PARITY = MAX_STRIPE_CHUNKS - 1  # a stripe keeps at least one data chunk
_STRATEGY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # placement strategy names ("rotation-hop", "explicit")
_KNOWN_STRATEGIES = frozenset((*STRATEGIES, "explicit", "local"))  # the common ones, without the regex
_HASH_LEN = wire.SKYMEM_BLOCK_HASH_LEN
_MAX_CHUNK_DATA = wire.SKYMEM_MAX_CHUNK_DATA
_FIELDS = ("hash", "parent", "n_bytes", "chunk_bytes", "chunk_count", "created_ms", "strategy", "n_servers",
           "centre_plane", "centre_sat", "kv_format", "layout", "tokens", "position", "last_used_ms", "parity")


def _int_in(value, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high  # SQLite types per value: a planted REAL or TEXT is no int


def _sane(row: tuple) -> bool:
    """_bad_field(row) is None, in one expression: this runs for every row a lookup reads."""
    if len(row) != 16:
        return False
    (block_hash, parent, n_bytes, chunk_bytes, chunk_count, created_ms, strategy, n_servers, plane, sat,
     kv_format, layout, tokens, position, used_ms, parity) = row
    return (type(block_hash) is bytes and len(block_hash) == _HASH_LEN
            and type(parent) is bytes and len(parent) == _HASH_LEN
            and type(chunk_bytes) is int and 1 <= chunk_bytes <= _MAX_CHUNK_DATA
            and type(chunk_count) is int and 1 <= chunk_count <= _MAX_CHUNK_COUNT
            and type(n_bytes) is int and -1 <= n_bytes <= chunk_bytes * chunk_count
            and type(created_ms) is int and created_ms >= 0
            and type(strategy) is str and (strategy in _KNOWN_STRATEGIES or _STRATEGY.fullmatch(strategy) is not None)
            and type(n_servers) is int and 1 <= n_servers <= MAX_SERVERS
            and type(parity) is int and 0 <= parity < n_servers and parity <= _MAX_PARITY
            and type(plane) is int and 0 <= plane <= _MAX_SAT and type(sat) is int and 0 <= sat <= _MAX_SAT
            and (kv_format is None or type(kv_format) is str and len(kv_format) <= _MAX_TEXT)
            and (layout is None or type(layout) is str and len(layout) <= _MAX_TEXT)
            and (tokens is None or type(tokens) is int and 1 <= tokens <= _MAX_META_INT)
            and (position is None or type(position) is int and 0 <= position <= _MAX_META_INT)
            and type(used_ms) is int and used_ms >= 0)


def _bad_field(row: tuple) -> str | None:
    """The first field of a blocks row (in _COLUMNS order) out of bounds, as `name=value`; None for a sane row."""
    if _sane(row):
        return None
    if len(row) != len(_FIELDS):
        return f"{len(row)} fields"
    (block_hash, parent, n_bytes, chunk_bytes, chunk_count, created_ms, strategy, n_servers, plane, sat,
     kv_format, layout, tokens, position, used_ms, parity) = row
    checks = (
        ("hash", type(block_hash) is bytes and len(block_hash) == wire.SKYMEM_BLOCK_HASH_LEN),
        ("parent", type(parent) is bytes and len(parent) == wire.SKYMEM_BLOCK_HASH_LEN),
        ("chunk_bytes", _int_in(chunk_bytes, 1, wire.SKYMEM_MAX_CHUNK_DATA)),
        ("chunk_count", _int_in(chunk_count, 1, _MAX_CHUNK_COUNT)),
        # -1: size not known yet (a probe's record); a block's bytes fit in its chunks
        ("n_bytes", type(chunk_bytes) is int and type(chunk_count) is int
         and _int_in(n_bytes, -1, chunk_bytes * chunk_count)),
        ("created_ms", _int_in(created_ms, 0, _MAX_INT)),
        ("strategy", type(strategy) is str and _STRATEGY.fullmatch(strategy) is not None),
        ("n_servers", _int_in(n_servers, 1, MAX_SERVERS)),
        ("centre_plane", _int_in(plane, 0, _MAX_SAT)),
        ("centre_sat", _int_in(sat, 0, _MAX_SAT)),
        ("kv_format", kv_format is None or (type(kv_format) is str and len(kv_format) <= _MAX_TEXT)),
        ("layout", layout is None or (type(layout) is str and len(layout) <= _MAX_TEXT)),
        ("tokens", tokens is None or _int_in(tokens, 1, _MAX_META_INT)),
        ("position", position is None or _int_in(position, 0, _MAX_META_INT)),
        ("last_used_ms", _int_in(used_ms, 0, _MAX_INT)),
        # k = n_servers - parity data chunks per stripe: at least one
        ("parity", type(n_servers) is int and _int_in(parity, 0, min(n_servers - 1, _MAX_PARITY))),
    )
    for name, ok in checks:
        if not ok:
            value = row[_FIELDS.index(name)]
            return f"{name}={value.hex() if isinstance(value, bytes) else value!r:.80}"
    return "out of bounds"  # _sane and the checks above disagree: never expected


def entry_fault(entry: IndexEntry) -> str | None:
    """What makes an entry from elsewhere (a record read from orbit) one the index would refuse to return: its
    first field out of bounds, as `name=value`, or metadata the index does not keep; None for a sane one."""
    try:
        row = _row(entry.parent, entry.record, entry.meta, entry.last_used_ms)
    except ValueError as exc:
        return str(exc)
    return _bad_field(row)


def _bad_ledger_field(row: tuple) -> str | None:
    """The first field of a seal_failures row (plane, sat, count, last_unix) out of bounds; None for a sane row."""
    plane, sat, count, last_unix = row
    for name, ok in (("plane", _int_in(plane, 0, _MAX_SAT)), ("sat", _int_in(sat, 0, _MAX_SAT)),
                     ("count", _int_in(count, 1, _MAX_INT)),
                     ("last_unix", type(last_unix) in (int, float) and math.isfinite(last_unix) and last_unix >= 0)):
        if not ok:
            return f"{name}={row[('plane', 'sat', 'count', 'last_unix').index(name)]!r:.80}"
    return None


# ---- the file on disk (N8)

def _refuse_links(path: Path, *, tighten: bool) -> None:
    """The file and its siblings must be regular files, not symbolic links (SQLite would follow the file's to wherever
    it points, and create the database there); `tighten`: one readable by others is made its owner's alone."""
    for suffix in _SIBLINGS:
        name = f"{path}{suffix}"
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise IndexFileError(f"the KV index file {name} is a symbolic link; refusing to open it (remove it, or "
                                 "give the index another folder)")
        if not stat.S_ISREG(st.st_mode):
            raise IndexFileError(f"the KV index file {name} is not a regular file; refusing to open it")
        mode = stat.S_IMODE(st.st_mode)
        if tighten and mode & 0o077:
            try:  # lstat said a regular file: chmod by name (an fd of our own, closed, would drop SQLite's locks)
                os.chmod(name, mode & 0o700)
            except OSError as exc:  # another user's file: say so, and open it as before
                log.warning("the KV index file %s is mode %o and could not be made private: %s", name, mode, exc)


def _prepare_file(path: Path) -> None:
    """Make the file (0600 whatever the umask, never through a link) when there is none; refuse links; tighten."""
    try:  # O_EXCL: a dangling link there is EEXIST, never followed; O_NOFOLLOW for good measure
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        pass  # there already (or another opener just made it): checked below
    except OSError:
        pass  # no right to make it here: SQLite says so when it tries, as it always did
    else:
        try:
            os.fchmod(fd, 0o600)  # the umask may have taken bits off; never adds any
        finally:
            os.close(fd)  # empty: SQLite starts a new database in it
    _refuse_links(path, tighten=True)


def _make_private_folder(directory: Path) -> None:
    """mkdir -p, each folder the index makes 0700 whatever the umask; folders already there are left as they are."""
    missing, folder = [], directory
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue  # another process made it
        os.chmod(folder, 0o700)
    directory.mkdir(parents=True, exist_ok=True)  # a folder there that is not one: the error it always gave


def _check_schema(conn: sqlite3.Connection, where: str) -> None:
    """Refuse a file whose schema holds anything the index does not make itself (IndexFileError)."""
    foreign = []
    for kind, name, table, sql in conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"):
        ordinary = isinstance(sql, str) and sql.lstrip().upper().startswith(("CREATE TABLE", "CREATE INDEX",
                                                                               "CREATE UNIQUE INDEX"))
        if kind == "table" and (name in _OWN_TABLES or name in _SQLITE_TABLES) and (ordinary or sql is None):
            continue
        if kind == "index" and table in _OWN_TABLES and (
                name in _OWN_INDEXES and ordinary
                or isinstance(name, str) and name.startswith("sqlite_autoindex_") and sql is None):
            continue
        foreign.append(f"{kind} {name!r}")
    if foreign:
        raise IndexFileError(f"the KV index {where} holds {', '.join(foreign[:5])}"
                             f"{' and more' if len(foreign) > 5 else ''}, not made by this index (planted, or a newer "
                             "skymemory's): refusing to open it; move it aside to start an empty index")


def _version_error(where: str, version: int) -> IndexVersionError:
    return IndexVersionError(f"{where} is a KV index of schema version {version}; this skymemory reads version "
                             f"{SCHEMA_VERSION} (use another index folder, or this index's skymemory)")


def _upgrade(conn: sqlite3.Connection, where: str, *, begun: bool = False) -> None:
    """Bring the file to SCHEMA_VERSION in one transaction (all of it or nothing): an older skymemory's file, or a
    new one whose tables were just made in the transaction `begun` (then ended here)."""
    try:
        if not begun:
            conn.execute("BEGIN IMMEDIATE")
        _check_schema(conn, where)  # under the write lock, as _writing does: nothing planted since the open's check
        # read again under the lock: another opener (this skymemory or an older one) may have got here first
        found = conn.execute("PRAGMA user_version").fetchone()[0]
        version = SCHEMA_VERSION if begun and found == 0 else found  # 0: the tables made just now are today's
        while version in _UPGRADES:
            conn.execute(_UPGRADES[version])
            version += 1
        if version != SCHEMA_VERSION:  # a newer skymemory's: never guessed at
            raise _version_error(where, found)
        if found != SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already, or BEGIN failed
            conn.execute("ROLLBACK")
        raise


def _is_damage(exc: sqlite3.Error) -> bool:
    """SQLite says the file is damaged (or not a database at all)."""
    if isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _DAMAGE_CODES:
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


def _file_id(path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


# a file moved aside in this process: every RadixIndex of it (any thread) reopens at its next call
_moves_lock = threading.Lock()
_moves: dict[str, int] = {}


def _recovering(method):
    """A call that may meet a damaged file (or one another opener moved aside): it recovers (`_recover`) and the call
    runs once more, on the fresh file. A read there finds nothing: the caller gets a miss, later calls work."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            if not self._recover(exc):
                raise
        return method(self, *args, **kwargs)
    return guarded


def _row(parent: bytes, record: BlockRecord, meta: dict | None, used_ms: int) -> tuple:
    meta = meta or {}
    unknown = set(meta) - set(META_KEYS)
    if unknown:
        raise ValueError(f"unknown block metadata {sorted(unknown)}; the index keeps {', '.join(META_KEYS)}")
    r = record
    return (r.block_hash, parent, r.n_bytes, r.chunk_bytes, r.chunk_count, r.created_ms, r.strategy, r.n_servers,
            r.centre[0], r.centre[1], *(meta.get(k) for k in META_KEYS), used_ms, r.parity)


def _entry(row: tuple) -> IndexEntry:
    (block_hash, parent, n_bytes, chunk_bytes, chunk_count, created_ms, strategy, n_servers, plane, sat,
     *meta_values, used_ms, parity) = row
    record = BlockRecord(block_hash, n_bytes, chunk_bytes, chunk_count, created_ms, strategy, n_servers, (plane, sat),
                         parity)
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
        self.bad_records = 0  # distinct records out of bounds met in the file (each treated as absent, logged once)
        self._bad_seen: set = set()
        self._bad_lock = threading.Lock()
        self._local = threading.local()  # this thread's connection, the pid that opened it, the file's move count
        self._connections: weakref.WeakSet[_Connection] = weakref.WeakSet()  # a thread's goes when the thread ends
        if self.path is None:  # one connection: the threads take turns (an in-memory database is per connection)
            self._memory_lock = threading.RLock()
            self._memory: _Connection | None = self._open(":memory:")
        else:
            self._memory_lock, self._memory = contextlib.nullcontext(), None
            self._key = os.path.abspath(self.path)
            _make_private_folder(self.directory)
            self._connection_or_fresh_file()
            self._import_json_once()

    # ------------------------------------------------------------------ connections

    def _open(self, where: str) -> "_Connection":
        on_file = where != ":memory:"
        if on_file:
            _prepare_file(Path(where))  # 0600, no symbolic links (N8)
        # check_same_thread=False: close() may close another thread's; each is used by its own thread only
        conn = sqlite3.connect(where, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False,
                               factory=_Connection)
        conn.file_id = _file_id(where) if on_file else None  # which file it opened: moved aside since, or not
        try:
            # first: SQL stored in the file (triggers, views, defaults) may call no function not marked innocuous
            conn.execute("PRAGMA trusted_schema=OFF")
            if on_file:
                _check_schema(conn, where)  # before anything here writes to it (a trigger fires at a write)
            conn.schema_seen = conn.execute("PRAGMA schema_version").fetchone()[0]
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA cache_size=-65536")  # 64 MiB of pages per connection
            conn.execute("PRAGMA mmap_size=4294967296")  # reads straight from the OS's page cache, no copy
            conn.execute("PRAGMA journal_size_limit=67108864")  # the WAL shrinks back to 64 MiB after a big import
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:  # a new file (two processes may both get here: the schema is IF NOT EXISTS)
                conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA}")  # the transaction stays open: _upgrade ends it
                _upgrade(conn, where, begun=True)
            elif version in _UPGRADES:  # an older skymemory's file
                _upgrade(conn, where)
            elif version != SCHEMA_VERSION:
                raise _version_error(where, version)
        except sqlite3.Error as exc:
            exc.radix_file_id = conn.file_id  # which file failed (_recover: moved aside since, or to move)
            conn.close()
            raise
        except BaseException:
            conn.close()
            raise
        self._connections.add(conn)
        return conn

    def _connection(self, *, look: bool = False) -> "_Connection":
        """This thread's connection. A file moved aside (damaged) since it was opened: a new one, on the file there
        now; in this process at once, for a move by another process when it `look`s (every write, and a read at most
        once a second: SQLite itself would go on with the moved file, in WAL mode even writing to it)."""
        if self._memory is not None:
            return self._memory
        local = self._local
        moves = _moves.get(self._key, 0)
        fresh = getattr(local, "pid", None) == os.getpid() and local.moves == moves
        if fresh:
            now = time.monotonic()
            if look or now - local.looked >= 1.0:
                local.looked = now
                there = _file_id(self.path)
                fresh = there is None or there == local.conn.file_id  # none there (yet): keep the one it has
        if not fresh:  # new thread, or a forked child (never share a handle), or the file was moved aside
            if getattr(local, "pid", None) == os.getpid():
                with contextlib.suppress(sqlite3.Error):
                    local.conn.close()
            local.conn, local.pid, local.moves = self._open(str(self.path)), os.getpid(), moves
            local.looked = time.monotonic()
        return local.conn

    @_recovering
    def _connection_or_fresh_file(self) -> None:
        """Open the file; one that is not a database (damaged) is moved aside and a new one started."""
        self._connection()

    def _recover(self, exc: sqlite3.DatabaseError) -> bool:
        """After `exc` on a file index: True when the call may run again on a fresh connection, because the file it
        used was moved aside (or replaced) by another opener since, or because it is damaged and is now moved aside
        here (N8: damage anywhere in the file would otherwise fail every call, forever)."""
        if self.path is None:
            return False
        local = self._local
        mine = getattr(local, "conn", None) if getattr(local, "pid", None) == os.getpid() else None
        opened = exc.radix_file_id if hasattr(exc, "radix_file_id") else getattr(mine, "file_id", None)
        with _moves_lock:  # one thread of this process moves a file at a time
            moved = opened is not None and _file_id(self.path) != opened  # by another opener (or replaced)
            if not moved and not _is_damage(exc):
                return False  # locked, read-only, full: the caller hears of it as before, the connection stays
            if mine is not None:  # closed before a move: SQLite must not tidy up names that are the new file's
                with contextlib.suppress(sqlite3.Error):
                    mine.close()
                local.pid = None
            if moved:
                return True  # use what is there now
            aside = self.path.with_name(f"{FILE_NAME}.damaged-{time.time_ns()}")
            log.warning("the KV index %s is damaged (%s): moved to %s, starting an empty index (it is only a hint: "
                        "blocks are fetched again by a probe or stored again)", self.path, exc, aside.name)
            for suffix in _SIBLINGS:
                with contextlib.suppress(FileNotFoundError):
                    os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
            _moves[self._key] = _moves.get(self._key, 0) + 1
            return True

    def _checked(self, row: tuple | None) -> IndexEntry | None:
        """The entry of a row read from the file, or None (absent) when a field is out of bounds (N8)."""
        if row is None:
            return None
        if _sane(row):
            return _entry(row)
        self._note_bad("block", row[0], _bad_field(row))
        return None

    def _note_bad(self, what: str, key, why: str) -> None:
        """Count a bad record and log it, once per record (a planted file would otherwise log at every lookup)."""
        key = (what, key if isinstance(key, (bytes, str, int, float, tuple)) else repr(key))
        with self._bad_lock:
            if key in self._bad_seen:
                return
            self._bad_seen.add(key)
            self.bad_records += 1
        shown = key[1].hex()[:16] if isinstance(key[1], bytes) else repr(key[1])[:40]
        log.warning("the KV index %s holds a bad %s record %s (%s): treated as absent (bad records so far: %d)",
                    self.path or "in memory", what, shown, why, self.bad_records)

    @contextlib.contextmanager
    def _reading(self):
        with self._memory_lock:
            yield self._connection()

    @contextlib.contextmanager
    def _writing(self):
        """One write transaction, its lock taken at BEGIN (a deferred one could fail instead of waiting)."""
        with self._memory_lock:
            conn = self._connection(look=True)
            conn.execute("BEGIN IMMEDIATE")
            try:
                if self.path is not None:  # the schema changed since this connection looked (planted while it ran)?
                    version = conn.execute("PRAGMA schema_version").fetchone()[0]
                    if version != conn.schema_seen:
                        _check_schema(conn, str(self.path))  # under the write lock: nothing fires before this
                        conn.schema_seen = version
                yield conn
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already (damage, disk full)
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

    @_recovering
    def __len__(self) -> int:
        """Rows in the file (a bad record among them is counted here, and absent to every lookup)."""
        with self._reading() as conn:
            return conn.execute("SELECT count(*) FROM blocks").fetchone()[0]

    @_recovering
    def __contains__(self, block_hash: bytes) -> bool:
        with self._reading() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM blocks WHERE hash = ?", (block_hash,)).fetchone()
        if row is None or _sane(row):
            return row is not None
        self._note_bad("block", row[0], _bad_field(row))  # a bad record is absent here too
        return False

    @_recovering
    def get(self, block_hash: bytes) -> IndexEntry | None:
        with self._reading() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM blocks WHERE hash = ?", (block_hash,)).fetchone()
        return self._checked(row)

    @_recovering
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
            entry = self._checked(row)
            if entry is None:  # a bad record: absent, the prefix ends before it
                break
            found.append(entry)
            parent = block_hash
        return found

    @_recovering
    def knows_root(self, root: bytes) -> bool:
        """True when at least one block is indexed directly below `root`."""
        with self._reading() as conn:
            return any(self._checked(row) is not None
                       for row in conn.execute(f"SELECT {_COLUMNS} FROM blocks WHERE parent = ?", (root,)))

    @_recovering
    def newest(self, limit: int) -> list[IndexEntry]:
        """The `limit` most recently indexed blocks, newest first (bad records skipped)."""
        found: list[IndexEntry] = []
        if limit == 0:
            return found
        with self._reading() as conn:
            for row in conn.execute(f"SELECT {_COLUMNS} FROM blocks ORDER BY id DESC"):  # stepped only as needed
                entry = self._checked(row)
                if entry is not None:
                    found.append(entry)
                    if len(found) == limit:
                        break
        return found

    @_recovering
    def changes(self) -> int:
        """A number that changes whenever any connection (any process) commits a change to the index."""
        with self._reading() as conn:
            return conn.execute("PRAGMA data_version").fetchone()[0]

    @_recovering
    def seal_failures(self) -> dict[Sat, tuple[int, float]]:
        """The seal-failure ledger: (plane, sat) -> (KV blocks it served that did not open, Unix time of the last)."""
        with self._reading() as conn:
            return _ledger(conn, lambda row, why: self._note_bad("seal-failure", tuple(row[:2]), why))

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

    @_recovering
    def _insert_rows(self, rows: list[tuple]) -> int:
        if rows:
            with self._writing() as conn:
                conn.executemany(_INSERT, rows)
        return len(rows)

    @_recovering
    def touch(self, block_hashes: Sequence[bytes]) -> None:
        """These blocks were just used (fetched): their last use is now."""
        if block_hashes:
            with self._writing() as conn:
                conn.executemany("UPDATE blocks SET last_used_ms = ? WHERE hash = ?",
                                 [(_now_ms(), h) for h in block_hashes])

    @_recovering
    def remove(self, block_hash: bytes) -> int:
        """Drop a block and everything after it in its chains; returns how many entries went."""
        with self._writing() as conn:
            conn.execute(_REMOVE, (block_hash,))
            return conn.execute("SELECT changes()").fetchone()[0]  # sqlite3's rowcount misses a WITH ... DELETE

    @_recovering
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
            self._note_rows(rows)
            return True
        except Exception as exc:  # noqa: BLE001 - the ledger is telemetry: the request goes on without it
            log.warning("noting seal failures %s in the KV index %s failed: %r", dict(counts),
                        self.path or "in memory", exc)
            return False

    @_recovering
    def _note_rows(self, rows: list[tuple]) -> None:
        with self._writing() as conn:
            conn.execute(_LEDGER_SCHEMA)  # a file made before the ledger; nothing to do on any other
            conn.executemany(_NOTE_SEAL_FAILURES, rows)

    # ------------------------------------------------------------------ the JSON index, once

    @_recovering
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
                sane = [row for row in rows if _bad_field(row) is None]  # that file is not trusted either
                outcome = f"{len(sane)} blocks" + (f" ({len(rows) - len(sane)} bad ones left out)"
                                                   if len(sane) < len(rows) else "")
                rows = sane
            except (OSError, ValueError, KeyError, TypeError) as exc:
                rows, outcome = [], f"nothing: unreadable ({exc})"
            conn.executemany(_INSERT.replace("OR REPLACE", "OR IGNORE"), rows)  # what SQLite knew already wins
            conn.execute("INSERT INTO properties VALUES ('json_imported', ?)",
                         (json.dumps({"at_ms": _now_ms(), "outcome": outcome}),))
        log.warning("note: imported %s from %s into %s; the JSON file is left as it was and no longer read",
                    outcome, source, self.path.name)


def _ledger(conn: sqlite3.Connection, bad) -> dict[Sat, tuple[int, float]]:
    """The ledger's rows; one out of bounds is left out and told to bad(row, why)."""
    if conn.execute(_HAS_LEDGER).fetchone() is None:  # a file made before the ledger, never noted in since
        return {}
    ledger = {}
    for row in conn.execute(_READ_SEAL_FAILURES):
        why = _bad_ledger_field(row)
        if why is None:
            plane, sat, count, last_unix = row
            ledger[(plane, sat)] = (count, last_unix)
        else:
            bad(row, why)
    return ledger


def seal_failures_in(directory: str | os.PathLike | None = None) -> dict[Sat, tuple[int, float]]:
    """The seal-failure ledger of the index in `directory` (default: default_directory(); its kv-index.sqlite may be
    named instead), read-only: nothing is created, moved or migrated there. {} when there is no index; one that
    cannot be read is logged and {} (a status display, not a request, asks this)."""
    path = Path(directory) if directory is not None else default_directory()
    if path.name != FILE_NAME:
        path = path / FILE_NAME
    if not os.path.lexists(path):
        return {}
    try:
        _refuse_links(path, tighten=False)  # read-only: refused, never changed
        conn = sqlite3.connect(f"{path.parent.resolve().joinpath(path.name).as_uri()}?mode=ro", uri=True,
                               timeout=DEFAULT_BUSY_TIMEOUT_S)
    except (sqlite3.Error, IndexFileError) as exc:
        log.warning("cannot read the seal failures of the KV index %s: %s", path, exc)
        return {}
    try:
        conn.execute("PRAGMA trusted_schema=OFF")
        _check_schema(conn, str(path))
        return _ledger(conn, lambda row, why: log.warning("the KV index %s holds a bad seal-failure record %r (%s): "
                                                          "left out", path, row[:2], why))
    except (sqlite3.Error, IndexFileError) as exc:
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
        fields["centre"] = tuple(fields["centre"])  # "parity" absent (every file of that format): 0
        meta = {k: v for k, v in (item.get("meta") or {}).items() if k in META_KEYS}
        rows.append(_row(bytes.fromhex(item["parent"]), BlockRecord(**fields), meta, now))
    return rows
