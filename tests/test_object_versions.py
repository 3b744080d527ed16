"""The ledger of object versions (skymemory.store.object_versions): newest per key, shared through its file."""

from __future__ import annotations

import multiprocessing
import stat

import pytest

from skymemory.store.object_versions import DELETED, HEADER, LedgerError, Seen, VersionLedger

KEY, OTHER = bytes(range(32)), bytes(32)


def test_the_newest_per_key_wins_whatever_the_order_noted(tmp_path):
    ledger = VersionLedger(tmp_path / "object-versions")
    assert ledger.newest(KEY) is None
    v2 = Seen(2000, 0, "bb" * 16)
    assert ledger.note(KEY, v2) == v2
    assert ledger.note(KEY, Seen(1000, 0, "aa" * 16)) == v2  # an older one read later changes nothing
    repaired = Seen(2000, 2500, "bb" * 16)
    assert ledger.note(KEY, repaired) == repaired  # a repair's rewrite is newer than the put it repairs
    tomb = Seen(3000, 0, DELETED)
    assert ledger.note(KEY, tomb).deleted and ledger.newest(KEY) == tomb
    assert ledger.newest(OTHER) is None
    assert (tmp_path / "object-versions").read_text().splitlines()[0] == HEADER
    assert stat.S_IMODE((tmp_path / "object-versions").stat().st_mode) == 0o600


def test_seen_of_metadata_and_a_tombstone():
    assert Seen.of_meta({"created_ms": 5, "version": "ab"}) == Seen(5, 0, "ab")
    assert Seen.of_meta({"created_ms": 5, "repaired_ms": 9, "version": "ab"}) == Seen(5, 9, "ab")
    assert Seen.of_meta({"created_ms": 7, "deleted": True}).deleted
    assert Seen(5, 9, "ab") < Seen(6, 0, "aa") < Seen(7, 0, DELETED)


def _note(path, created_ms):
    VersionLedger(path).note(KEY, Seen(created_ms, 0, f"{created_ms:032x}"))


def test_processes_noting_at_once_lose_nothing(tmp_path):
    path = tmp_path / "object-versions"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_note, args=(path, ms)) for ms in range(100, 108)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert VersionLedger(path).newest(KEY).created_ms == 107
    lines = path.read_text().splitlines()
    assert lines[0] == HEADER and lines.count(HEADER) == 1


def test_a_damaged_ledger_is_said_in_one_line_naming_the_line(tmp_path):
    path = tmp_path / "object-versions"
    path.write_text(HEADER + "\n" + KEY.hex() + " x 0 -\n")
    with pytest.raises(LedgerError, match=r"object-versions:2: expected"):
        VersionLedger(path).newest(KEY)
    path.write_text("something else\n")
    with pytest.raises(LedgerError, match=r"object-versions:1: expected"):
        VersionLedger(path).newest(KEY)


def test_a_ledger_that_cannot_be_written_fails_in_one_line(tmp_path):
    ledger = VersionLedger(tmp_path / "no-such-dir" / "object-versions")
    assert ledger.newest(KEY) is None
    with pytest.raises(LedgerError, match=r"cannot write the ledger of object versions .*object-versions: No such"):
        ledger.note(KEY, Seen(1))
    with pytest.raises(LedgerError, match=r"cannot write the ledger"):
        ledger.check_writable()
    VersionLedger(tmp_path / "object-versions").check_writable()  # makes the file, empty: nothing noted
    assert VersionLedger(tmp_path / "object-versions").newest(KEY) is None
