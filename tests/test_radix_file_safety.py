"""The ground index does not trust its file (security review N8): real files in tmp_path, planted or damaged.

1. a planted trigger (or view, or foreign table) never runs: the file is refused, trusted_schema is off;
2. planted records out of bounds are misses, never returned (and logged once);
3. a symbolic link in place of the file (or its -wal/-shm) is refused, nothing is created at its target;
4. a file damaged in the middle is moved aside at the first damaged read, and the index works after it;
5. the file is 0600 (its new folders 0700) whatever the umask; a wider existing file is tightened.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import stat
import threading

import pytest

from skymemory.kv.index import radix
from skymemory.kv.index.radix import FILE_NAME, JSON_FILE_NAME, IndexEntry, RadixIndex, seal_failures_in
from skymemory.kv.store import BlockRecord

ROOT = hashlib.sha256(b"root").digest()


def _hash(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def _record(block_hash: bytes, n: int = 100) -> BlockRecord:
    return BlockRecord(block_hash, n, 6144, 1, 123456, "rotation-hop", 10, (3, 7))


def _chain(index: RadixIndex, labels: list[str], parent: bytes = ROOT) -> list[bytes]:
    hashes = [_hash(label) for label in labels]
    index.insert_chain(parent, [(_record(h), {"kv_format": "fp16", "position": p}) for p, h in enumerate(hashes)])
    return hashes


def _raw(path) -> sqlite3.Connection:
    """The file as an attacker (or any other program) sees it: the sqlite3 module, no RadixIndex."""
    return sqlite3.connect(path, isolation_level=None)


def _attempt(work):
    """Run work(); the exception it raised (None when none): a refusal is an allowed outcome here."""
    try:
        work()
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        return exc
    return None


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# ---- 1. planted triggers, views and tables -------------------------------------------------------------------

PLANTED_TRIGGERS = {
    # fires at every block a process indexes
    "on blocks": "CREATE TRIGGER spy AFTER INSERT ON blocks BEGIN INSERT INTO loot VALUES (hex(new.hash)); END",
    # fires while RadixIndex opens (the one-time import of kv-index.json writes `properties`)
    "on properties": "CREATE TRIGGER spy AFTER INSERT ON properties BEGIN INSERT INTO loot VALUES (new.name); END",
}


@pytest.mark.parametrize("trigger", PLANTED_TRIGGERS.values(), ids=PLANTED_TRIGGERS)
def test_a_planted_trigger_never_runs(tmp_path, trigger):
    RadixIndex(tmp_path).close()
    path = tmp_path / FILE_NAME
    with _raw(path) as conn:
        conn.execute("CREATE TABLE loot (what)")
        conn.execute(trigger)
    (tmp_path / JSON_FILE_NAME).write_text('{"version": 1, "entries": []}')

    def use() -> None:
        index = RadixIndex(tmp_path)
        _chain(index, ["a0", "a1"])
        index.get(_hash("a1"))
        index.close()

    refused = _attempt(use)
    with _raw(path) as conn:
        assert conn.execute("SELECT count(*) FROM loot").fetchone()[0] == 0  # the trigger did not run
    # the file is refused, with a sentence naming it and what was planted
    assert isinstance(refused, radix.IndexFileError), refused
    assert str(path) in str(refused) and "trigger 'spy'" in str(refused)


@pytest.mark.parametrize("plant", ["CREATE VIEW peek AS SELECT hash FROM blocks", "CREATE TABLE extra (x)"],
                         ids=["view", "table"])
def test_a_file_with_a_view_or_table_the_index_never_makes_is_refused(tmp_path, plant):
    RadixIndex(tmp_path).close()
    with _raw(tmp_path / FILE_NAME) as conn:
        conn.execute(plant)
    with pytest.raises(RuntimeError, match="not made by this index") as caught:
        RadixIndex(tmp_path)
    assert isinstance(caught.value, radix.IndexFileError) and str(tmp_path / FILE_NAME) in str(caught.value)
    # the status display reads nothing from it either (logged, not raised)
    assert seal_failures_in(tmp_path) == {}


def test_what_the_index_and_sqlite_make_is_not_refused(tmp_path):
    RadixIndex(tmp_path).close()
    with _raw(tmp_path / FILE_NAME) as conn:
        conn.execute("CREATE INDEX blocks_by_created ON blocks(created_ms)")  # an older skymemory's, same version
        conn.execute("ANALYZE")  # sqlite_stat1
    index = RadixIndex(tmp_path)
    _chain(index, ["a0"])
    assert _hash("a0") in index
    index.close()


def test_a_trigger_planted_while_the_index_is_open_never_runs(tmp_path):
    index = RadixIndex(tmp_path)
    _chain(index, ["a0"])
    with _raw(tmp_path / FILE_NAME) as conn:  # another program, while this one runs
        conn.execute("CREATE TABLE loot (what)")
        conn.execute(PLANTED_TRIGGERS["on blocks"])
    refused = _attempt(lambda: _chain(index, ["b0"]))
    with _raw(tmp_path / FILE_NAME) as conn:
        assert conn.execute("SELECT count(*) FROM loot").fetchone()[0] == 0
    assert isinstance(refused, radix.IndexFileError), refused
    index.close()


def test_every_connection_distrusts_the_schema(tmp_path):
    index = RadixIndex(tmp_path)
    seen = [index._connection().execute("PRAGMA trusted_schema").fetchone()[0]]
    other = threading.Thread(target=lambda: seen.append(index._connection().execute("PRAGMA trusted_schema")
                                                        .fetchone()[0]))
    other.start()
    other.join()
    assert seen == [0, 0]  # this thread's connection and another thread's
    assert RadixIndex()._connection().execute("PRAGMA trusted_schema").fetchone()[0] == 0  # in memory too
    index.close()


# ---- 2. planted records --------------------------------------------------------------------------------------

BAD_FIELDS = [
    ("n_bytes", 2**63 - 1), ("n_servers", 0), ("n_bytes", -2), ("n_bytes", 6145), ("n_bytes", "lots"),
    ("chunk_count", 0), ("chunk_bytes", 0), ("chunk_bytes", 10**9), ("n_servers", 10**9), ("centre_plane", -1),
    ("centre_sat", 70_000), ("created_ms", -5), ("strategy", ""), ("strategy", "x" * 1000), ("tokens", 0),
    ("position", -1), ("kv_format", b"fp16"), ("last_used_ms", 1.5), ("parent", b"short"),
]


@pytest.mark.parametrize("column, value", BAD_FIELDS, ids=[f"{c}={v!r:.20}" for c, v in BAD_FIELDS])
def test_a_planted_record_is_a_miss_and_is_logged_once(tmp_path, caplog, column, value):
    index = RadixIndex(tmp_path)
    a = _chain(index, ["a0", "a1", "a2"])
    with _raw(tmp_path / FILE_NAME) as conn:
        conn.execute(f"UPDATE blocks SET {column} = ? WHERE hash = ?", (value, a[1]))
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.index.radix"):
        for _ in range(3):  # asked again and again: logged once
            assert index.get(a[1]) is None
            assert [e.block_hash for e in index.longest_prefix(ROOT, a)] == a[:1]  # the chain stops before it
            assert a[1] not in index
            assert a[1] not in [e.block_hash for e in index.newest(10)]
    assert index.get(a[0]).record == _record(a[0]) and index.get(a[2]) is not None  # the others are as they were
    warnings = [r.getMessage() for r in caplog.records if a[1].hex()[:16] in r.getMessage()]
    assert len(warnings) == 1 and column in warnings[0]
    assert index.bad_records == 1
    # indexed again (a probe found the block): replaced, a hit again
    index.insert(a[0], _record(a[1]))
    assert index.get(a[1]).record == _record(a[1])
    index.close()


def test_planted_rows_with_a_foreign_hash_or_ledger_counts_are_not_returned(tmp_path):
    index = RadixIndex(tmp_path)
    index.note_seal_failures({(1, 2): 3})
    other_root = _hash("another model")
    with _raw(tmp_path / FILE_NAME) as conn:
        conn.execute("INSERT INTO blocks (hash, parent, n_bytes, chunk_bytes, chunk_count, created_ms, strategy, "
                     "n_servers, centre_plane, centre_sat, last_used_ms) VALUES (?, ?, 100, 6144, 1, 0, 'explicit', "
                     "1, 0, 0, 0)", (b"short", other_root))
        conn.executemany("INSERT INTO seal_failures VALUES (?, ?, ?, ?)",
                         [(0, 0, 0, 1.0), (-1, 5, 2, 1.0), (4, 4, 2**62, "yesterday")])
    assert index.get(b"short") is None and not index.knows_root(other_root)
    assert [e.block_hash for e in index.newest(5)] == []
    assert set(index.seal_failures()) == {(1, 2)} and set(seal_failures_in(tmp_path)) == {(1, 2)}
    index.close()


# ---- 3. symbolic links ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_a_dangling_symlink_is_refused_and_nothing_is_made_at_its_target(tmp_path, suffix):
    directory, elsewhere = tmp_path / "index", tmp_path / "elsewhere"
    directory.mkdir()
    elsewhere.mkdir()
    target = elsewhere / "planted"
    link = directory / (FILE_NAME + suffix)
    link.symlink_to(target)

    def use() -> None:
        index = RadixIndex(directory)
        _chain(index, ["a0"])
        index.get(_hash("a0"))
        index.close()

    refused = _attempt(use)
    assert not os.path.lexists(target) and list(elsewhere.iterdir()) == []  # nothing made through the link
    assert isinstance(refused, radix.IndexFileError), refused
    assert str(link) in str(refused) and "symbolic link" in str(refused)


def test_the_status_reader_does_not_follow_a_symlink_either(tmp_path, caplog):
    real, linked = tmp_path / "real", tmp_path / "linked"
    RadixIndex(real).note_seal_failures({(1, 1): 2})
    linked.mkdir()
    (linked / FILE_NAME).symlink_to(real / FILE_NAME)
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.index.radix"):
        assert seal_failures_in(linked) == {}
    assert "symbolic link" in caplog.text and seal_failures_in(real)[(1, 1)][0] == 2


# ---- 4. a file damaged in the middle --------------------------------------------------------------------------

def test_a_file_damaged_in_the_middle_is_moved_aside_and_the_index_works_after(tmp_path, caplog):
    index = RadixIndex(tmp_path)
    hashes = [_hash(f"b{i}") for i in range(3000)]
    parents = [ROOT] + hashes[:-1]
    index.insert_entries(IndexEntry(h, parent, _record(h), {"position": i})
                         for i, (h, parent) in enumerate(zip(hashes, parents)))
    index.close()  # the last connection checkpoints: everything is in the main file
    path = tmp_path / FILE_NAME
    assert not (tmp_path / (FILE_NAME + "-wal")).exists()
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    pages = len(data) // page
    assert pages > 40
    for n in range(pages // 4, 3 * pages // 4):  # the middle half; the header and the schema (page 1) are intact
        data[n * page:(n + 1) * page] = b"\xff" * page
    path.write_bytes(bytes(data))

    index, other = RadixIndex(tmp_path), RadixIndex(tmp_path)  # both open fine: the damage is further in
    assert other.changes() is not None
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.index.radix"):
        assert index.longest_prefix(ROOT, hashes) == []  # the lookup that meets the damage: a miss, not an error
    assert "damaged" in caplog.text
    aside = [p for p in tmp_path.iterdir()
             if p.name.startswith(FILE_NAME + ".damaged-") and not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1 and aside[0].read_bytes()[:16] == b"SQLite format 3\0"  # kept, as it was
    # later calls work, on a fresh file, in this index and in another opened before the move
    assert len(index) == 0 and index.get(hashes[0]) is None
    a = _chain(index, ["a0", "a1"])
    assert [e.block_hash for e in other.longest_prefix(ROOT, a)] == a
    _chain(other, ["c0"])
    assert len(index) == 3 and len(RadixIndex(tmp_path)) == 3
    index.close()
    other.close()


def test_a_file_another_process_moved_aside_is_followed(tmp_path):
    index = RadixIndex(tmp_path)
    _chain(index, ["a0"])
    for suffix in ("", "-wal", "-shm"):  # as another process does when it meets damage (by name: this one is not told)
        os.replace(tmp_path / (FILE_NAME + suffix), tmp_path / (f"{FILE_NAME}.damaged-1" + suffix))
    RadixIndex(tmp_path).close()  # ... and starts a fresh file
    b = _chain(index, ["b0"])  # SQLite alone would write this into the moved file (WAL mode), lost to all others
    assert b[0] in RadixIndex(tmp_path) and _hash("a0") not in index
    index.close()


# ---- 5. file modes -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_file_and_its_new_folders_are_private_whatever_the_umask(tmp_path, umask):
    directory = tmp_path / "cache" / "index"
    old = os.umask(umask)
    try:
        index = RadixIndex(directory)
        _chain(index, ["a0"])
    finally:
        os.umask(old)
    assert _mode(directory) == 0o700 and _mode(tmp_path / "cache") == 0o700  # the folders it made
    assert _mode(directory / FILE_NAME) == 0o600
    for suffix in ("-wal", "-shm"):  # made by SQLite beside the file, with its mode
        assert _mode(directory / (FILE_NAME + suffix)) == 0o600
    index.close()


def test_an_existing_wider_file_is_tightened_at_open(tmp_path):
    keeper = RadixIndex(tmp_path)
    _chain(keeper, ["a0"])  # the -wal and -shm exist while it is open
    for suffix in ("", "-wal", "-shm"):
        os.chmod(tmp_path / (FILE_NAME + suffix), 0o644)
    index = RadixIndex(tmp_path)
    for suffix in ("", "-wal", "-shm"):
        assert _mode(tmp_path / (FILE_NAME + suffix)) == 0o600
    assert index.get(_hash("a0")) is not None
    index.close()
    keeper.close()
