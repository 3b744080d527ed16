"""kv.index.orbit_records against a scripted record keeper (a dict of copies per home): how a record is written and
read, what is refused, and what is remembered absent. The real satellites, seals and homes: tests/reliability/
test_orbit_index_live.py."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from skymemory.kv.index.orbit_records import OrbitRecords, decode, encode, record_key
from skymemory.kv.index.radix import IndexEntry, RadixIndex
from skymemory.kv.index.lookup import PrefixFinder
from skymemory.kv.paged.paged_scheduler import PagedScheduler
from skymemory.store.contract import BlockRecord, RecordKeeping

ROOT = hashlib.sha256(b"root").digest()
HOMES = [(0, 0), (1, 1), (2, 2)]


class ScriptedKeeper(RecordKeeping):
    """Copies in a dict, unsealed; `silent` homes never answer (a TimeoutError when no home does)."""

    def __init__(self) -> None:
        self.copies: dict[tuple, bytes] = {}
        self.silent: set = set()
        self.asked: list[bytes] = []
        self.gate = threading.Event()
        self.gate.set()

    def record_homes(self, key):
        return list(HOMES)

    def put_copies(self, items, timeout_s):
        for key, blob in items:
            for home in HOMES:
                self.copies[(home, key)] = blob
        return [list(HOMES) for _ in items]

    def first_copies(self, keys, accept, timeout_s):
        self.gate.wait(5)
        self.asked += list(keys)
        out = []
        for key in keys:
            answered = [h for h in HOMES if h not in self.silent]
            found = next((v for h in answered if (h, key) in self.copies
                          for v in [accept(key, h, self.copies[(h, key)])] if v is not None), None)
            out.append(found if found is not None or answered else TimeoutError("no home answered"))
        return out

    def evict_copies(self, keys, timeout_s):
        self.gate.wait(5)
        gone = [k for k in list(self.copies) if k[1] in keys]
        for k in gone:
            del self.copies[k]
        return len(gone)

    def for_tenant(self, tenant):
        return self

    def sealer(self):
        return None  # in the clear: the seal is the live test's


def chain(n: int) -> list[IndexEntry]:
    entries, parent = [], ROOT
    for i in range(n):
        h = hashlib.sha256(parent + bytes([i])).digest()
        entries.append(IndexEntry(h, parent, BlockRecord(h, 1000, 500, 2, 123, "explicit", 10, (1, 2), 2),
                                  {"kv_format": "fp16", "layout": "sealed", "tokens": 16, "position": i}))
        parent = h
    return entries


def test_a_record_says_what_the_index_says():
    entry = chain(1)[0]
    again = decode(encode(entry), entry.block_hash)
    assert (again.block_hash, again.parent, again.record, again.meta) == (entry.block_hash, entry.parent,
                                                                           entry.record, entry.meta)


@pytest.mark.parametrize("change", [
    lambda d: d.update(hash="00" * 32),  # another block's record
    lambda d: d.update(v=2),
    lambda d: d.update(chunk_count=0),
    lambda d: d.update(parity=10),  # a stripe with no data chunk
    lambda d: d.update(centre=[1]),
    lambda d: d["meta"].update(secret=1),  # metadata the index does not keep
    lambda d: d.pop("strategy"),
])
def test_a_record_that_is_not_one_is_refused(change):
    import json

    entry = chain(1)[0]
    d = json.loads(encode(entry))
    change(d)
    assert decode(json.dumps(d).encode(), entry.block_hash) is None
    assert decode(b"\xff not json", entry.block_hash) is None


def test_find_walks_the_chain_and_remembers_what_is_absent():
    keeper = ScriptedKeeper()
    orbit = OrbitRecords(keeper)
    entries = chain(4)
    orbit.publish(entries[:3])
    hashes = [e.block_hash for e in entries]
    assert [e.block_hash for e in orbit.find(ROOT, hashes)] == hashes[:3]
    assert [e.block_hash for e in orbit.find(entries[0].block_hash, hashes[1:3])] == hashes[1:3]
    assert orbit.find(ROOT, hashes[1:]) == []  # below another parent: not this chain
    keeper.asked.clear()
    assert orbit.find(entries[2].block_hash, hashes[3:]) == []  # remembered absent: not asked again
    assert keeper.asked == []
    orbit.publish(entries[3:])  # stored now: no longer absent
    assert [e.block_hash for e in orbit.find(entries[2].block_hash, hashes[3:])] == hashes[3:]


def test_silent_homes_are_a_miss_and_a_forgotten_block_leaves_its_homes():
    keeper = ScriptedKeeper()
    orbit = OrbitRecords(keeper)
    entries = chain(2)
    orbit.publish(entries)
    keeper.silent = set(HOMES)
    assert orbit.find(ROOT, [entries[0].block_hash]) == [] and orbit.counters["timeouts"] == 1
    keeper.silent = set()
    orbit.forget([entries[1].block_hash])
    assert not any(key == record_key(entries[1].block_hash) for _, key in keeper.copies)
    assert [e.block_hash for e in OrbitRecords(keeper).find(ROOT, [e.block_hash for e in entries])] == \
        [entries[0].block_hash]


def test_forget_later_removes_the_records_off_the_caller_s_thread():
    keeper = ScriptedKeeper()
    orbit = OrbitRecords(keeper)
    entries = chain(2)
    orbit.publish(entries)
    keeper.gate.clear()  # the keeper blocks: forget_later must still return at once
    done = orbit.forget_later([entries[0].block_hash])
    assert not done.done()
    keeper.gate.set()
    done.result(5)
    assert not any(key == record_key(entries[0].block_hash) for _, key in keeper.copies)
    assert any(key == record_key(entries[1].block_hash) for _, key in keeper.copies)
    orbit.close()


def test_a_scheduler_that_must_not_wait_is_told_pending_then_finds_it_in_its_index():
    keeper = ScriptedKeeper()
    OrbitRecords(keeper).publish(chain(3))
    hashes = [e.block_hash for e in chain(3)]
    index = RadixIndex()
    finder = PrefixFinder(index, block_tokens=16, block_bytes=1000, layers=2, orbit=OrbitRecords(keeper))
    keeper.gate.clear()  # the orbit is slow to answer
    found = finder.lookup(ROOT, hashes, wait=False)
    assert found.pending and found.records == []
    assert finder.lookup(ROOT, hashes, wait=False).pending  # still running: not asked twice
    keeper.gate.set()
    for _ in range(100):
        found = finder.lookup(ROOT, hashes, wait=False)
        if not found.pending:
            break
        threading.Event().wait(0.05)
    assert [r.block_hash for r in found.records] == hashes and found.source == "index"
    assert len(keeper.asked) == 3  # one lookup of the three records


def test_an_orbit_that_fails_is_a_miss_not_a_lookup_asked_for_ever():
    class Broken(ScriptedKeeper):
        def first_copies(self, keys, accept, timeout_s):
            self.asked += list(keys)
            raise OSError("the store is closed")

    keeper = Broken()
    finder = PrefixFinder(RadixIndex(), block_tokens=16, block_bytes=1000, layers=2, orbit=OrbitRecords(keeper))
    hashes = [e.block_hash for e in chain(2)]
    assert finder.lookup(ROOT, hashes).records == []  # a miss, said in the log
    found = finder.lookup(ROOT, hashes, wait=False)  # remembered: a scheduler is not told "not yet" again
    assert not found.pending and found.records == [] and len(keeper.asked) == 2


def test_a_request_waiting_in_the_engine_is_looked_up_in_orbit_once():
    """vLLM matches a request waiting for KV memory again every step: once its orbit lookup has answered, it asks
    this host's index only, and is never told "not yet" again when the absences it learnt expire."""
    keeper = ScriptedKeeper()  # no records: every block of the prompt is absent in orbit
    orbit = OrbitRecords(keeper, negative_s=0.05)
    scheduler = PagedScheduler(root=ROOT, block_tokens=4, block_bytes=1000, layers=2, index=RadixIndex(),
                               policy="fetch", orbit=orbit)
    prompt = list(range(10, 23))  # 3 whole blocks before the last token
    assert scheduler.match("a", prompt, 0) is None  # looked up in orbit on a worker thread: ask again
    give_up = time.monotonic() + 120  # the worker's answer comes in milliseconds; a loaded CI machine may take long
    while (matched := scheduler.match("a", prompt, 0)) is None and time.monotonic() < give_up:
        threading.Event().wait(0.05)
    assert matched == 0
    asked = len(keeper.asked)
    threading.Event().wait(0.1)  # the absences it learnt have expired
    assert scheduler.match("a", prompt, 0) == 0 and len(keeper.asked) == asked
    assert scheduler.match("b", prompt, 0) is None  # another request asks the orbit afresh
    orbit.close()
