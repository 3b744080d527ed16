"""The ground's seal-failure ledger (issue 34): a KV block that does not open is counted against the satellite that
served it, typed (BlockMiss.satellites, StreamFailed.satellites), in the ground index every process of the host
shares (RadixIndex.note_seal_failures / seal_failures), and shown by `skymemory status`.

The live path (a satellite's chunk rewritten, read back through the constellation) is in
tests/reliability/test_sealed_kv.py and tests/reliability/test_seal_ledger_live.py.
"""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from skymemory.kv.index import radix
from skymemory.kv.index.radix import RadixIndex, seal_failures_in
from skymemory.store.contract import BlockMiss

from fakesat import FakeSatellite


# ---- the miss names the satellites, typed --------------------------------------------------------------------


def test_a_block_miss_names_its_satellites_as_a_tuple_of_pairs():
    miss = BlockMiss("seal", "2 of 9 chunks do not open", satellites=[(0, 1), [2, 3]])
    assert miss.satellites == ((0, 1), (2, 3)) and miss.reason == "seal" and str(miss) == "2 of 9 chunks do not open"
    assert BlockMiss("not-found").satellites == ()  # none known: empty, never None


def test_the_asyncio_paths_name_the_satellites_whose_chunks_did_not_open():
    """The C path's miss (ConstellationBlockStore._seal_miss) is checked live (tests/reliability); here the two
    Python openers: the constellation store's asyncio path and the placed (object) store's."""
    from collections import Counter

    from skymemory.protocol.seal import SealLayout, Sealer
    from skymemory.store.constellation import ConstellationBlockStore
    from skymemory.store.contract import BlockRecord
    from skymemory.store.placed import PlacedStore

    sealer = Sealer({1: bytes(range(16))}, 1)
    block, n_bytes = b"\7" * 32, 300
    record = BlockRecord(block, n_bytes, 132, 3, 0, "explicit", 2, (0, 0))
    chunks = {i: sealer.seal_chunk(block, i, 3, n_bytes, bytes([i]) * 100, layout=SealLayout.of_record(record))
              for i in range(3)}
    chunks[1] = chunks[1][:-1] + bytes([chunks[1][-1] ^ 1])  # altered where it rests
    servers = [(0, 0), (0, 1)]  # chunk i from servers[i % 2]: chunk 1 from (0, 1)

    store = SimpleNamespace(seal_failures=Counter())
    with pytest.raises(BlockMiss) as miss:
        ConstellationBlockStore._open_chunks(store, sealer, record, dict(chunks), servers)
    assert miss.value.reason == "seal" and miss.value.satellites == ((0, 1),) and "(0, 1)" in str(miss.value)
    assert store.seal_failures == {(0, 1): 1}

    placed = SimpleNamespace(counters=Counter(), seal_failures=Counter())
    with pytest.raises(BlockMiss) as miss:
        PlacedStore._open(placed, sealer, record, dict(chunks), {0: (0, 0), 1: (2, 3), 2: (0, 0)})
    assert miss.value.reason == "seal" and miss.value.satellites == ((2, 3),)
    with pytest.raises(BlockMiss) as miss:  # a chunk whose source is not known: blamed on nobody
        PlacedStore._open(placed, sealer, record, dict(chunks), {0: (0, 0), 2: (0, 0)})
    assert miss.value.satellites == ()


# ---- the ledger ---------------------------------------------------------------------------------------------


def test_the_ledger_adds_up_per_satellite_with_the_time_of_the_last(tmp_path):
    index = RadixIndex(tmp_path)
    assert index.seal_failures() == {}
    before = time.time()
    assert index.note_seal_failures({(0, 1): 1, (2, 3): 2, (4, 4): 0})  # a zero notes nothing
    assert index.note_seal_failures({(0, 1): 1})
    assert index.note_seal_failures({})  # nothing to note: nothing written, not a failure
    ledger = index.seal_failures()
    assert {sat: n for sat, (n, _) in ledger.items()} == {(0, 1): 2, (2, 3): 2}
    assert all(before - 1 <= t <= time.time() + 1 for _, t in ledger.values())
    assert ledger[(0, 1)][1] >= ledger[(2, 3)][1]
    index.clear()  # the blocks go; what the satellites did stays
    assert index.seal_failures() == ledger
    memory = RadixIndex()  # an index in this process's memory keeps one too
    assert memory.note_seal_failures({(1, 1): 3}) and memory.seal_failures()[(1, 1)][0] == 3


def test_two_index_objects_on_one_file_share_one_ledger(tmp_path):
    a, b = RadixIndex(tmp_path), RadixIndex(tmp_path)
    a.note_seal_failures({(0, 1): 1})
    b.note_seal_failures({(0, 1): 2, (1, 0): 1})
    assert {s: n for s, (n, _) in a.seal_failures().items()} == {(0, 1): 3, (1, 0): 1}
    assert a.seal_failures() == b.seal_failures() == seal_failures_in(tmp_path)
    a.close()
    b.close()


def test_processes_noting_at_once_lose_no_count(tmp_path):
    """Each process notes 25 times on its own connection: the writers queue (BEGIN IMMEDIATE), none is lost."""
    code = textwrap.dedent(f"""
        import sys
        from skymemory.kv.index.radix import RadixIndex
        index = RadixIndex({str(tmp_path)!r})
        me = int(sys.argv[1])
        ok = all(index.note_seal_failures({{(0, 0): 1, (1, me): 1}}) for _ in range(25))
        sys.exit(0 if ok else 3)
    """)
    RadixIndex(tmp_path).close()  # the file exists before they race
    procs = [subprocess.Popen([sys.executable, "-c", code, str(k)]) for k in range(3)]
    try:
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    counts = {s: n for s, (n, _) in RadixIndex(tmp_path).seal_failures().items()}
    assert counts == {(0, 0): 75, (1, 0): 25, (1, 1): 25, (1, 2): 25}


def test_noting_is_best_effort_on_a_read_only_or_locked_index(tmp_path, caplog):
    index = RadixIndex(tmp_path)
    index.note_seal_failures({(0, 1): 1})
    read_only = RadixIndex(tmp_path)
    read_only._connection().execute("PRAGMA query_only = 1")  # as a file this process may not write
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.index.radix"):
        assert read_only.note_seal_failures({(0, 1): 5}) is False  # logged, not raised
    assert "noting seal failures {(0, 1): 5}" in caplog.text and "readonly" in caplog.text
    assert read_only.seal_failures()[(0, 1)][0] == 1  # it still reads

    caplog.clear()
    holder = sqlite3.connect(tmp_path / radix.FILE_NAME, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock past the wait
    try:
        impatient = RadixIndex(tmp_path, busy_timeout_s=0.2)
        with caplog.at_level(logging.WARNING, logger="skymemory.kv.index.radix"):
            assert impatient.note_seal_failures({(0, 1): 1}) is False
        assert "locked" in caplog.text
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert index.seal_failures()[(0, 1)][0] == 1


def test_an_index_made_before_the_ledger_reads_empty_and_gets_it_at_its_first_note(tmp_path):
    RadixIndex(tmp_path).close()
    with sqlite3.connect(tmp_path / radix.FILE_NAME) as conn:  # as a file of the schema before the ledger
        conn.execute("DROP TABLE seal_failures")
    index = RadixIndex(tmp_path)  # the same schema version: opened as it is
    assert index.seal_failures() == {} and seal_failures_in(tmp_path) == {}
    assert index.note_seal_failures({(3, 4): 1})
    assert seal_failures_in(tmp_path)[(3, 4)][0] == 1


def test_reading_the_ledger_of_a_folder_creates_nothing(tmp_path, monkeypatch, caplog):
    missing = tmp_path / "none"
    assert seal_failures_in(missing) == {} and not missing.exists()
    monkeypatch.setenv("SKYMEMORY_CACHE", str(tmp_path / "cache"))
    assert radix.default_directory() == tmp_path / "cache" / "index"
    assert seal_failures_in() == {} and not (tmp_path / "cache").exists()
    RadixIndex(radix.default_directory()).note_seal_failures({(1, 2): 4})
    assert seal_failures_in()[(1, 2)][0] == 4
    assert seal_failures_in(radix.default_directory() / radix.FILE_NAME)[(1, 2)][0] == 4  # the file named
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / radix.FILE_NAME).write_bytes(b"not a database" * 100)
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.index.radix"):
        assert seal_failures_in(damaged) == {}
    assert "cannot read the seal failures" in caplog.text
    assert list(p.name for p in damaged.iterdir()) == [radix.FILE_NAME]  # left as it was: not moved aside


# ---- skymemory status ---------------------------------------------------------------------------------------


def test_status_shows_each_satellites_seal_failures_from_the_ground_index(tmp_path, capsys):
    from skymemory.cli import main
    from skymemory.cli.status import seal_line, status_rows
    from skymemory.orbit.manifest import Manifest, SatelliteEntry

    index_dir = tmp_path / "index"
    RadixIndex(index_dir).note_seal_failures({(0, 1): 3})
    with FakeSatellite(0, 0) as a, FakeSatellite(0, 1) as b:
        entries = [SatelliteEntry(plane=s.me[0], sat=s.me[1], host=s.address[0], isl_port=1, ground_port=s.address[1])
                   for s in (a, b)]
        Manifest(planes=1, sats=2, epoch_ms=int(time.time() * 1000), satellites=entries).save(tmp_path / "m.json")
        code = main(["status", "--manifest", str(tmp_path / "m.json"), "--index-dir", str(index_dir),
                     "--timeout", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    header, first, second = out.splitlines()[:3]
    end = header.index("seal fail") + len("seal fail")  # the table's columns are right-aligned
    assert first.split()[:2] == ["0", "0"] and first[:end].split()[-1] == "0"
    assert second.split()[:2] == ["0", "1"] and second[:end].split()[-1] == "3"
    assert f"seal failures (KV blocks that did not open, ground index {index_dir}): 3 from 0-1 x3" in out

    # a satellite that does not answer still shows what the ground counted of it
    rows = status_rows([((0, 0), TimeoutError("silent"))], {(0, 0): (2, 0.0)})
    assert dict(zip(rows[0], rows[1]))["seal fail"] == 2 and rows[1][-1] == "TimeoutError"
    assert seal_line({}, index_dir) is None
    assert seal_line({(1, 1): (1, 90.0), (0, 2): (4, 100.0)}, "d", now=130.0) == (
        "seal failures (KV blocks that did not open, ground index d): 5 from 0-2 x4, 1-1 x1; the last 30 s ago")


# ---- where a KV load fails on a seal ----------------------------------------------------------------------------


def test_a_kv_block_that_does_not_open_is_noted_against_its_satellites(tmp_path):
    from kv_support import FailingStore, random_prompt, tiny

    from skymemory.kv.hf.manager import KVCManager

    class SealFailingStore(FailingStore):
        def get_block(self, record):
            if self.fail.get(record.block_hash) == "seal":
                raise BlockMiss("seal", "1 of 3 chunks of block ... from satellite (0, 1) do not open",
                                satellites=((0, 1),))
            return super().get_block(record)

    store = SealFailingStore()
    model, tokenizer = tiny("fp32")
    manager = KVCManager(model, tokenizer, store, block_tokens=16, kv_dtype="fp32", index_dir=tmp_path,
                         policy="fetch")
    prompt = random_prompt(3 * 16 + 2, seed=340)
    hashes = manager.add_blocks(prompt).hashes
    store.fail[hashes[1]] = "seal"
    result = manager.get_cache(prompt)
    assert result.prefix_tokens == 16 and result.miss_reason == "seal"
    assert hashes[1] not in manager.index and store.evicted == hashes[1:]
    assert {s: n for s, (n, _) in manager.index.seal_failures().items()} == {(0, 1): 1}
    assert seal_failures_in(tmp_path).keys() == {(0, 1)}  # another process reads it from the file

    manager.add_blocks(prompt)  # stored again; now a plain miss: not a seal failure
    store.fail[hashes[1]] = "miss"
    assert manager.get_cache(prompt).miss_reason == "not-found"
    assert {s: n for s, (n, _) in manager.index.seal_failures().items()} == {(0, 1): 1}


def test_a_streamed_prefix_that_does_not_open_is_noted_against_its_satellites():
    from skymemory.kv.store import MemoryBlockStore
    from skymemory.kv.transfer.streaming import StreamFailed, evict_after_failure
    from skymemory.store.contract import BlockRecord

    index = RadixIndex()
    record = BlockRecord(b"\5" * 32, 100, 6144, 1, 0, "explicit", 4, (0, 0))
    index.insert(b"\0" * 32, record)
    manager = SimpleNamespace(index=index, store=MemoryBlockStore(), orbit=None)
    result = SimpleNamespace(cache=None, blocks=[record.block_hash], prefix_tokens=16, miss_reason=None)
    failure = StreamFailed("seal", "from satellite (2, 5) do not open", satellites=((2, 5),))
    evict_after_failure(manager, result, failure)
    assert result.miss_reason == "stream failed: seal" and record.block_hash not in index
    assert index.seal_failures().keys() == {(2, 5)}
    evict_after_failure(manager, SimpleNamespace(cache=None, blocks=[], prefix_tokens=0, miss_reason=None),
                        StreamFailed("timeout", "late"))  # a failure of another kind: nothing noted
    assert index.seal_failures()[(2, 5)][0] == 1
    assert StreamFailed("corrupt", "x").satellites == ()


def test_a_failed_load_costs_only_what_failed_and_follows_the_one_rule_per_request():
    """kv.paged.page_loads (the vLLM worker's loads): one stream for two requests fails at layer 1."""
    import torch

    from skymemory.kv.paged.page_loads import PageLoad, PageLoads, _Active
    from skymemory.kv.transfer.streaming import StreamFailed
    from skymemory.store.contract import BlockRecord

    def record(k: int) -> BlockRecord:
        return BlockRecord(bytes([k]) * 32, 100, 6144, 1, 0, "explicit", 4, (0, 0))

    index = RadixIndex()
    first, second = [record(1), record(2)], [record(3), record(4), record(5)]
    for chain in (first, second):
        parent = b"\0" * 32
        for r in chain:
            index.insert(parent, r)
            parent = r.block_hash
    # every block whole but the second request's second, which did not open: found out at layer 1
    failure = StreamFailed("seal", "do not open", satellites=((1, 3), (1, 4)), block=second[1].block_hash)

    def layer_blocks(layer):
        if layer == 1:
            raise failure
        return torch.full((5, 1), float(layer))

    stream = SimpleNamespace(close=lambda: None, layer_blocks=layer_blocks,
                             intact_blocks=lambda failure: [True, True, True, False, True],
                             layer_blocks_of=lambda layer, rows: torch.full((len(rows), 1), float(layer)))
    evicted, written, used = [], [], []
    loads = PageLoads(None, index, SimpleNamespace(layers=3), "fp16", dtype=torch.float32, landing=None,
                      evict=evicted.append)
    loads._active.append(_Active([PageLoad("a", first, [11, 12]), PageLoad("b", second, [13, 14, 15])], stream,
                                 torch.tensor([11, 12, 13, 14, 15])))  # as start() would, without a constellation
    index.touch = lambda hashes: used.append(list(hashes))

    def write(layer, pages, kv):
        written.append((layer, pages.tolist(), kv[:, 0].tolist()))

    loads.layer(0, write)
    loads.layer(1, write)
    loads.layer(2, write)  # the failed load writes nothing more
    # only request b's pages from its failed block on are load errors
    assert [(f.req_id, f.pages, f.why) for f in loads.take_failed()] == [("b", [14, 15], "seal: do not open")]
    # request a, and b's block before the failed one, get the layers not yet written (1 and 2) and count as used
    assert written == [(0, [11, 12, 13, 14, 15], [0.0] * 5), (1, [11, 12, 13], [1.0] * 3), (2, [11, 12, 13], [2.0] * 3)]
    assert used == [[first[0].block_hash, first[1].block_hash, second[0].block_hash]]
    assert evicted == [second[1:]]
    assert {s: n for s, (n, _) in index.seal_failures().items()} == {(1, 3): 1, (1, 4): 1}  # once, by its request
    # the failed block and the one after it leave the index; the blocks before it, and the other request's, stay
    assert [r.block_hash in index for r in first + second] == [True, True, True, False, False]
    assert loads.finish().transfers == [] and loads.take_failed() == []


def test_a_layer_the_engine_did_not_wait_for_fails_every_page_of_its_load():
    import torch

    from skymemory.kv.paged.page_loads import PageLoad, PageLoads, _Active
    from skymemory.store.contract import BlockRecord

    r = BlockRecord(b"\1" * 32, 100, 6144, 1, 0, "explicit", 4, (0, 0))
    loads = PageLoads(None, RadixIndex(), SimpleNamespace(layers=3), "fp16", dtype=torch.float32, landing=None)
    loads._active.append(_Active([PageLoad("a", [r], [7]), PageLoad("b", [r], [8])],
                                 SimpleNamespace(close=lambda: None), torch.tensor([7, 8]), written={0, 1}))
    loads.finish()  # layer 2 was never asked for: the forward read those pages unloaded
    why = "not-waited: layers [2] were not waited for"
    assert [(f.req_id, f.pages, f.why) for f in loads.take_failed()] == [("a", [7], why), ("b", [8], why)]
