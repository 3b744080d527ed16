"""The ground index of cached blocks: longest prefix, subtree removal, one SQLite file shared by processes."""

import hashlib
import json
import logging
import multiprocessing
import sqlite3
import threading
import time

import pytest

from skymemory.kv.index.radix import FILE_NAME, JSON_FILE_NAME, IndexEntry, IndexVersionError, RadixIndex
from skymemory.kv.store import BlockRecord
from skymemory.protocol.stripes import MAX_STRIPE_CHUNKS

ROOT = hashlib.sha256(b"root").digest()


def _hash(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def _record(block_hash: bytes, n: int = 100) -> BlockRecord:
    return BlockRecord(block_hash, n, 6144, 1, 123456, "rotation-hop", 10, (3, 7))


def _chain(index: RadixIndex, labels: list[str], parent: bytes = ROOT) -> list[bytes]:
    hashes = [_hash(label) for label in labels]
    index.insert_chain(parent, [(_record(h), {"kv_format": "fp16", "position": p}) for p, h in enumerate(hashes)])
    return hashes


@pytest.fixture(params=["file", "memory"])
def index(request, tmp_path):
    index = RadixIndex(tmp_path if request.param == "file" else None)
    yield index
    index.close()


def test_longest_prefix_walks_the_chain(index):
    a = _chain(index, ["a0", "a1", "a2"])
    assert [e.block_hash for e in index.longest_prefix(ROOT, a)] == a
    assert [e.block_hash for e in index.longest_prefix(ROOT, a[:2] + [_hash("x")])] == a[:2]
    assert index.longest_prefix(ROOT, [_hash("x")] + a[1:]) == []
    assert index.longest_prefix(ROOT, []) == []
    # another root (model) sees nothing, even for hashes it names
    assert index.longest_prefix(_hash("other root"), a) == []
    assert index.knows_root(ROOT) and not index.knows_root(_hash("other root"))
    # a hash indexed below another parent does not continue this chain
    _chain(index, ["elsewhere"], parent=_hash("not a1"))
    assert [e.block_hash for e in index.longest_prefix(ROOT, a[:2] + [_hash("elsewhere")])] == a[:2]


def test_remove_drops_the_block_and_everything_after_it(index):
    a = _chain(index, ["a0", "a1", "a2", "a3"])
    b = _chain(index, ["b2", "b3"], parent=a[1])  # a second chain sharing a0, a1
    assert index.remove(a[1]) == 5  # a1, a2, a3, b2, b3
    assert len(index) == 1
    assert [e.block_hash for e in index.longest_prefix(ROOT, a)] == a[:1]
    assert index.remove(b[0]) == 0


def test_entries_keep_their_record_metadata_and_last_use(index):
    a = _chain(index, ["a0", "a1"])
    entry = index.get(a[1])
    assert entry.record == _record(a[1]) and entry.parent == a[0]
    assert entry.meta == {"kv_format": "fp16", "position": 1}
    assert entry.last_used_ms > 0 and a[1] in index and _hash("x") not in index
    before = entry.last_used_ms
    index.touch([a[1]])
    assert index.get(a[1]).last_used_ms >= before
    with pytest.raises(ValueError, match="unknown block metadata"):
        index.insert(ROOT, _record(_hash("z")), {"colour": "red"})
    assert index.newest(1)[0].block_hash in a


def test_index_survives_a_restart_in_one_file(tmp_path):
    index = RadixIndex(tmp_path)
    a = _chain(index, ["a0", "a1"])
    index.close()
    reloaded = RadixIndex(tmp_path)
    assert [e.block_hash for e in reloaded.longest_prefix(ROOT, a)] == a
    assert reloaded.get(a[1]).meta == {"kv_format": "fp16", "position": 1}
    assert {p.name for p in tmp_path.iterdir()} <= {FILE_NAME, FILE_NAME + "-wal", FILE_NAME + "-shm"}


def test_two_openers_see_each_others_writes(tmp_path):
    # the JSON index lost one of these (the last writer rewrote the file without the other's block)
    a_side, b_side = RadixIndex(tmp_path), RadixIndex(tmp_path)
    a = _chain(a_side, ["a0"])
    b = _chain(b_side, ["b0"])
    third = RadixIndex(tmp_path)
    assert a[0] in third and b[0] in third and a[0] in b_side and b[0] in a_side
    seen = third.changes()
    _chain(a_side, ["a1"], parent=a[0])
    assert third.changes() != seen  # a follower can tell that someone committed


def test_a_damaged_file_is_moved_aside_and_the_index_starts_empty(tmp_path, caplog):
    (tmp_path / FILE_NAME).write_bytes(b"this is not a database" * 100)
    with caplog.at_level(logging.WARNING):
        index = RadixIndex(tmp_path)
    assert len(index) == 0 and "damaged" in caplog.text
    assert any(p.name.startswith(FILE_NAME + ".damaged-") for p in tmp_path.iterdir())
    _chain(index, ["a0"])
    assert len(RadixIndex(tmp_path)) == 1


def test_an_index_of_another_schema_is_refused_with_a_sentence(tmp_path):
    RadixIndex(tmp_path).close()
    with sqlite3.connect(tmp_path / FILE_NAME) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(IndexVersionError, match="schema version 99; this skymemory reads version 2"):
        RadixIndex(tmp_path)
    with sqlite3.connect(tmp_path / FILE_NAME) as conn:  # refused, not upgraded
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 99
        assert "parity" in [c[1] for c in conn.execute("PRAGMA table_info(blocks)")]


def _json_index(path, entries) -> None:
    path.write_text(json.dumps({"version": 1, "entries": [
        {"hash": h.hex(), "parent": parent.hex(), "meta": {"position": position},
         "record": {"block_hash": h.hex(), "n_bytes": 100, "chunk_bytes": 6144, "chunk_count": 1,
                    "created_ms": 123456, "strategy": "rotation-hop", "n_servers": 10, "centre": [3, 7]}}
        for h, parent, position in entries]}))


def test_an_old_json_index_is_imported_once_and_left_as_it_was(tmp_path, caplog):
    a0, a1 = _hash("a0"), _hash("a1")
    source = tmp_path / JSON_FILE_NAME
    _json_index(source, [(a0, ROOT, 0), (a1, a0, 1)])
    original = source.read_bytes()
    with caplog.at_level(logging.WARNING):
        index = RadixIndex(tmp_path)
    assert [e.block_hash for e in index.longest_prefix(ROOT, [a0, a1])] == [a0, a1]
    assert index.get(a1).record == _record(a1) and index.get(a1).meta == {"position": 1}
    notes = [r.getMessage() for r in caplog.records if "imported" in r.getMessage()]
    assert len(notes) == 1 and "2 blocks" in notes[0] and "left as it was" in notes[0]
    assert source.read_bytes() == original
    # once: a block removed since is not brought back by the next opener, and nothing more is said
    index.remove(a1)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = RadixIndex(tmp_path)
    assert a1 not in again and a0 in again and "imported" not in caplog.text


def test_an_unreadable_json_index_is_noted_and_not_read_again(tmp_path, caplog):
    (tmp_path / JSON_FILE_NAME).write_text("{not json")
    with caplog.at_level(logging.WARNING):
        assert len(RadixIndex(tmp_path)) == 0
    assert "unreadable" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        RadixIndex(tmp_path)
    assert caplog.text == ""


def test_threads_share_one_index(tmp_path):
    index = RadixIndex(tmp_path)
    errors: list[BaseException] = []

    def writer(label: str) -> None:
        try:
            for i in range(50):
                _chain(index, [f"{label}{i}"])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(label,)) for label in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(index) == 200


# ---- several processes at once ------------------------------------------------------------------

BLOCKS_PER_WRITER = 2_000
WRITERS = 8
PROMPT_BLOCKS = 8


def _writer(directory: str, writer: int, start: multiprocessing.Event) -> None:
    index = RadixIndex(directory, busy_timeout_s=60)
    start.wait(60)
    for prompt in range(BLOCKS_PER_WRITER // PROMPT_BLOCKS):
        _chain(index, [f"w{writer}p{prompt}b{b}" for b in range(PROMPT_BLOCKS)])


def _reader(directory: str, stop: multiprocessing.Event, result) -> None:
    index = RadixIndex(directory, busy_timeout_s=60)
    reads = failures = 0
    while not stop.is_set():
        try:
            found = index.longest_prefix(ROOT, [_hash(f"w0p0b{b}") for b in range(PROMPT_BLOCKS)])
            assert len(found) in (0, PROMPT_BLOCKS)  # a prompt's blocks are committed together
            len(index)
            reads += 1
        except (sqlite3.Error, AssertionError):
            failures += 1
    result.put((reads, failures))


def test_eight_writer_processes_lose_nothing_and_a_reader_never_fails(tmp_path):
    RadixIndex(tmp_path)  # the file exists before the race (creating it is not what is tested)
    ctx = multiprocessing.get_context("spawn")
    start, stop, result = ctx.Event(), ctx.Event(), ctx.Queue()
    writers = [ctx.Process(target=_writer, args=(str(tmp_path), w, start)) for w in range(WRITERS)]
    reader = ctx.Process(target=_reader, args=(str(tmp_path), stop, result))
    for p in writers + [reader]:
        p.start()
    start.set()
    for p in writers:
        p.join(300)
    stop.set()
    reads, failures = result.get(timeout=60)
    reader.join(60)
    assert [p.exitcode for p in writers] == [0] * WRITERS
    assert failures == 0 and reads > 0
    index = RadixIndex(tmp_path)
    assert len(index) == WRITERS * BLOCKS_PER_WRITER
    for w in range(WRITERS):  # every writer's every chain is whole
        for prompt in (0, BLOCKS_PER_WRITER // PROMPT_BLOCKS - 1):
            chain = [_hash(f"w{w}p{prompt}b{b}") for b in range(PROMPT_BLOCKS)]
            assert len(index.longest_prefix(ROOT, chain)) == PROMPT_BLOCKS


def test_entries_import_in_one_transaction(tmp_path):
    index = RadixIndex(tmp_path)
    entries = [IndexEntry(_hash(f"e{i}"), ROOT, _record(_hash(f"e{i}")), {"position": 0}) for i in range(100)]
    assert index.insert_entries(entries) == 100 and len(index) == 100


# ---- parity (schema version 2) and the upgrade of a version-1 file ------------------------------------------

def _coded(block_hash: bytes, parity: int = 2, n_servers: int = 10) -> BlockRecord:
    return BlockRecord(block_hash, 100, 6144, 12, 123456, "rotation-hop", n_servers, (3, 7), parity)


def test_a_record_with_parity_round_trips(index):
    h = _hash("coded")
    index.insert(ROOT, _coded(h), {"position": 0})
    assert index.get(h).record == _coded(h) and index.get(h).record.parity == 2
    assert [e.record for e in index.longest_prefix(ROOT, [h])] == [_coded(h)]
    assert index.newest(1)[0].record.stripe_data == 8
    widest = _hash("widest")  # k = 1 data chunk per stripe, MAX_STRIPE_CHUNKS - 1 parity chunks
    index.insert(ROOT, _coded(widest, MAX_STRIPE_CHUNKS - 1, MAX_STRIPE_CHUNKS))
    assert index.get(widest).record.parity == MAX_STRIPE_CHUNKS - 1


def test_parity_survives_a_restart(tmp_path):
    h = _hash("coded")
    index = RadixIndex(tmp_path)
    index.insert(ROOT, _coded(h))
    index.close()
    reopened = RadixIndex(tmp_path)
    assert reopened.get(h).record == _coded(h)
    reopened.close()


# INTEGER affinity stores "2" and 2.0 as 2: a planted text or real must not read as an integer
BAD_PARITY = [(-1, 10), (10, 10), (11, 10), (MAX_STRIPE_CHUNKS, 40), ("two", 10), (1.5, 10), (b"\x02", 10)]


@pytest.mark.parametrize("parity, n_servers", BAD_PARITY, ids=[f"{p!r}-of-{n}" for p, n in BAD_PARITY])
def test_a_record_with_parity_out_of_bounds_is_a_miss(tmp_path, caplog, parity, n_servers):
    index = RadixIndex(tmp_path)
    h, after = _hash("coded"), _hash("after")
    index.insert_chain(ROOT, [(_coded(h, 0, n_servers), None), (_record(after), None)])
    with sqlite3.connect(tmp_path / FILE_NAME) as conn:
        conn.execute("UPDATE blocks SET parity = ? WHERE hash = ?", (parity, h))
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.index.radix"):
        assert index.get(h) is None and h not in index and index.longest_prefix(ROOT, [h, after]) == []
    assert index.bad_records == 1 and "parity=" in caplog.text
    assert index.get(after).record == _record(after)  # the others are as they were
    index.close()


# the previous release's schema (user_version 1), as it made it: blocks without parity
V1_SCHEMA = """
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
CREATE TABLE IF NOT EXISTS seal_failures (  -- per satellite: KV blocks it served whose chunks did not open
    plane     INTEGER NOT NULL,
    sat       INTEGER NOT NULL,
    count     INTEGER NOT NULL,
    last_unix REAL NOT NULL,        -- wall clock (Unix seconds) of the last one
    PRIMARY KEY (plane, sat)
);
"""


def _version_1_file(directory, block_hash: bytes) -> None:
    """A file as the previous release left it: WAL, schema version 1, one block."""
    conn = sqlite3.connect(directory / FILE_NAME, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(f"BEGIN IMMEDIATE; {V1_SCHEMA} PRAGMA user_version=1; COMMIT;")
    conn.execute("INSERT INTO blocks (hash, parent, n_bytes, chunk_bytes, chunk_count, created_ms, strategy, "
                 "n_servers, centre_plane, centre_sat, kv_format, layout, tokens, position, last_used_ms) VALUES "
                 "(?, ?, 100, 6144, 1, 123456, 'rotation-hop', 10, 3, 7, 'fp16', NULL, NULL, 0, 5)",
                 (block_hash, ROOT))
    conn.close()


def _file_version_and_columns(directory) -> tuple[int, list[str]]:
    with sqlite3.connect(directory / FILE_NAME) as conn:
        return (conn.execute("PRAGMA user_version").fetchone()[0],
                [c[1] for c in conn.execute("PRAGMA table_info(blocks)")])


def test_a_version_1_file_is_upgraded_in_place(tmp_path):
    old, new = _hash("old"), _hash("new")
    _version_1_file(tmp_path, old)
    index = RadixIndex(tmp_path)
    version, columns = _file_version_and_columns(tmp_path)
    assert version == 2 and columns[-1] == "parity"
    entry = index.get(old)
    assert entry.record == _record(old) and entry.record.parity == 0
    assert entry.meta == {"kv_format": "fp16", "position": 0} and entry.last_used_ms == 5
    index.insert(old, _coded(new), {"position": 1})  # a write re-checks the altered schema: still the index's own
    assert [e.record for e in index.longest_prefix(ROOT, [old, new])] == [_record(old), _coded(new)]
    index.close()
    again = RadixIndex(tmp_path)  # reopened: the upgraded file passes the schema check, nothing is done twice
    assert again.get(new).record.parity == 2 and again.get(old).record.parity == 0 and len(again) == 2
    assert _file_version_and_columns(tmp_path) == (version, columns)
    again.close()


def test_openers_racing_on_a_version_1_file_upgrade_it_once(tmp_path):
    old = _hash("old")
    _version_1_file(tmp_path, old)
    holder = sqlite3.connect(tmp_path / FILE_NAME, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # every opener reads version 1, then waits for the write lock
    opened, errors = [], []

    def open_it() -> None:
        try:
            opened.append(RadixIndex(tmp_path))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    holder.execute("ROLLBACK")
    holder.close()
    for t in threads:
        t.join(60)
    assert errors == [] and len(opened) == 6
    assert _file_version_and_columns(tmp_path)[0] == 2
    assert all(index.get(old).record == _record(old) for index in opened)
    for index in opened:
        index.close()


def test_a_json_index_record_keeps_its_parity_and_has_none_without_one(tmp_path):
    coded, plain = _hash("coded"), _hash("plain")
    records = {"coded": {"parity": 2, "chunk_count": 12}, "plain": {}}
    (tmp_path / JSON_FILE_NAME).write_text(json.dumps({"version": 1, "entries": [
        {"hash": h.hex(), "parent": ROOT.hex(), "meta": {},
         "record": {"block_hash": h.hex(), "n_bytes": 100, "chunk_bytes": 6144, "chunk_count": 1,
                    "created_ms": 123456, "strategy": "rotation-hop", "n_servers": 10, "centre": [3, 7],
                    **records[label]}}
        for label, h in (("coded", coded), ("plain", plain))]}))
    index = RadixIndex(tmp_path)
    assert index.get(coded).record == _coded(coded) and index.get(plain).record == _record(plain)
    index.close()
