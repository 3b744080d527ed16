"""kv.index.lookup: one PrefixFinder names, finds and prices a prompt's cached prefix for both engines.

The index is a real RadixIndex (SQLite in a temporary folder); the probe store is kv.store's in-process
MemoryBlockStore (the constellation's probe is tested in the store's own tests).
"""

import logging

import pytest

from skymemory.kv.naming.blocks import chain_hashes, split_blocks
from skymemory.kv.naming.extra_keys import RequestKeys
from skymemory.kv.index.lookup import PrefixFinder
from skymemory.kv.index.radix import RadixIndex
from skymemory.kv.index.saving import BlockFormat
from skymemory.kv.store import MemoryBlockStore
from skymemory.store.contract import BlockRecord

ROOT = b"\x01" * 32
BLOCK = 4
FORM = BlockFormat("fp16", "sealed", BLOCK)


def _record(block_hash: bytes, strategy: str = "explicit") -> BlockRecord:
    return BlockRecord(block_hash, 1000, 6144, 1, 0, strategy, 5, (0, 0))


def _finder(tmp_path, **kwargs) -> PrefixFinder:
    index = kwargs.pop("index", None)
    if index is None:  # (an empty index is falsy: it has a length)
        index = RadixIndex(tmp_path / "index")
    return PrefixFinder(index, block_tokens=BLOCK, block_bytes=1000, layers=2, **kwargs)


def test_hashes_are_the_chain_of_full_blocks_with_the_keys_folded_in(tmp_path):
    finder = _finder(tmp_path)
    tokens = list(range(10))  # two full blocks and two tokens
    plain = finder.hashes(ROOT, tokens, RequestKeys())
    assert plain == chain_hashes(ROOT, split_blocks(tokens, BLOCK))
    assert finder.hashes(ROOT, tokens, RequestKeys(), n_blocks=1) == plain[:1]
    salted = finder.hashes(ROOT, tokens, RequestKeys(cache_salt="tA"))
    assert len(salted) == 2 and salted[0] != plain[0]  # the salt goes into the first block, and so into the chain


def test_lookup_finds_the_longest_indexed_prefix_and_stops_at_a_record_the_caller_cannot_read(tmp_path):
    finder = _finder(tmp_path)
    hashes = finder.hashes(ROOT, list(range(16)), RequestKeys())
    finder.index.insert_chain(ROOT, [(_record(hashes[0]), None), (_record(hashes[1]), None),
                                     (_record(hashes[2], "rotating"), None)])
    found = finder.lookup(ROOT, hashes)
    assert (len(found.records), found.source) == (3, "index")
    readable = finder.lookup(ROOT, hashes, readable=lambda r: r.strategy == "explicit")
    assert [r.block_hash for r in readable.records] == hashes[:2]
    assert finder.lookup(ROOT, hashes, readable=lambda r: False).source == "none"
    assert finder.lookup(ROOT, []).records == []


def test_an_index_that_cannot_be_read_is_a_logged_miss_unless_strict(tmp_path, caplog):
    class Broken(RadixIndex):
        def longest_prefix(self, root, hashes):
            raise OSError("disk I/O error")

    finder = _finder(tmp_path, index=Broken(tmp_path / "broken"))
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.index.lookup"):
        found = finder.lookup(ROOT, [b"\x02" * 32], what="request r1's lookup")
    assert found.records == [] and found.source == "none"
    assert "request r1's lookup failed (OSError('disk I/O error')): a miss" in caplog.text
    with pytest.raises(OSError, match="disk I/O"):
        finder.lookup(ROOT, [b"\x02" * 32], strict=True)


def test_a_probe_finds_what_the_index_does_not_know_and_teaches_it(tmp_path):
    store = MemoryBlockStore()
    finder = _finder(tmp_path, probe=store, form=FORM)
    hashes = finder.hashes(ROOT, list(range(20)), RequestKeys())  # five blocks
    for block_hash in hashes[:3]:
        store.put_block(block_hash, b"k" * 1000)
    found = finder.lookup(ROOT, hashes)
    assert ([r.block_hash for r in found.records], found.source) == (hashes[:3], "probe")
    entries = finder.index.longest_prefix(ROOT, hashes)
    assert len(entries) == 3 and entries[2].meta["position"] == 2  # learnt, with the block format's metadata
    assert finder.lookup(ROOT, hashes).source == "index"
    with pytest.raises(ValueError, match="form="):
        _finder(tmp_path, probe=store)


def test_decide_prices_on_the_finders_policy_and_link(tmp_path):
    finder = _finder(tmp_path, policy="recompute")
    decision = finder.decide(None, prompt_tokens=20, cached_blocks=4, streaming=False)
    assert (decision.action, decision.fetch_blocks) == ("recompute", 0)
    forced = finder.decide(None, prompt_tokens=20, cached_blocks=4, streaming=True, mode="fetch")
    assert forced.fetch_blocks == 4
    auto = _finder(tmp_path, policy="auto").decide(None, prompt_tokens=20, cached_blocks=4, streaming=False)
    assert auto.fetch_blocks == 4 and "measures the link" in auto.reason  # nothing measured yet: it fetches
