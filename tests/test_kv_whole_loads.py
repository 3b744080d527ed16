"""A hybrid engine's pages (kv.paged.page_groups, state_pages, whole_loads) saved and loaded by a PagedWorker,
without vLLM: an engine with a recurrent layer's table and an attention layer's, in pages laid out as vLLM's CPU
build lays them (K/V per head, a state page of raw bytes)."""

from __future__ import annotations

import hashlib

import torch

from skymemory.kv.format import group_codec
from skymemory.kv.format.codec import BlockGeometry
from skymemory.kv.format.groups import AttentionLayer, CacheLayout, StateTensor
from skymemory.kv.index.radix import RadixIndex
from skymemory.kv.index.saving import BlockFormat
from skymemory.kv.paged import state_pages
from skymemory.kv.paged.page_groups import PageGroups
from skymemory.kv.paged.paged import PagedLayout
from skymemory.kv.paged.paged_steps import LoadPlan, SavePlan, StepPlan
from skymemory.kv.paged.paged_worker import PagedWorker
from skymemory.kv.store import MemoryBlockStore

BLOCK, HEADS, DIM, STATE_BYTES, PAGES = 8, 2, 4, 44, 12
ROOT = hashlib.sha256(b"hybrid root").digest()
LAYOUT = CacheLayout(((("linear", 0)), ("full", 0)), (AttentionLayer(1, 0, HEADS, DIM, HEADS, DIM),),
                     (StateTensor(0, 0, "test page: (11,) float32", (STATE_BYTES,), torch.uint8),))
GROUPS = PageGroups(2, attention=(1,), recurrent=(0,))  # the Mamba layer's table, then the attention layer's
H0, H1 = hashlib.sha256(b"block 0").digest(), hashlib.sha256(b"block 1").digest()


class UnsealedStore(MemoryBlockStore):
    """In this process's memory, in the clear: every tenant's blocks in one place (store.contract.TenantSealing)."""

    sealed = False

    def for_tenant(self, tenant):
        return self


def _write(keys, values, cache, slots):  # the engine's cache write: [page, K/V, head, token, dim]
    for i, slot in enumerate(slots.tolist()):
        cache[slot // BLOCK, 0, :, slot % BLOCK] = keys[i]
        cache[slot // BLOCK, 1, :, slot % BLOCK] = values[i]


def _engine():
    attention = torch.zeros(PAGES, 2, HEADS, BLOCK, DIM)
    states = torch.zeros(PAGES, 1, 1, STATE_BYTES, dtype=torch.int8)  # vLLM's CPU build: raw bytes per page
    layout = PagedLayout.probe(_write, tuple(attention.shape[1:]), attention.dtype, kv_heads=HEADS,
                               block_tokens=BLOCK, head_dim=DIM)
    return attention, states, layout


def _worker(store, index) -> PagedWorker:
    return PagedWorker(store, store, geometry=BlockGeometry(1, HEADS, DIM, BLOCK), index=index,
                       form=BlockFormat("fp32", group_codec.layout_name(LAYOUT), BLOCK), load_timeout_s=5.0,
                       orbit=False, groups=GROUPS, cache_layout=LAYOUT)


def _saved(store, index):
    """An engine saves a two-block prompt: block 1 with the Mamba layer's state after it (page 7)."""
    attention, states, layout = _engine()
    attention.copy_(torch.randn(attention.shape))
    states.copy_(torch.randint(-128, 127, states.shape, dtype=torch.int8))
    saver = _worker(store, index)
    saver.register([attention], layout, [states])
    saver.end_step(StepPlan(saves=[SavePlan("a", (None, 1), H0, ROOT, 0),
                                   SavePlan("a", (7, 2), H1, H0, 1, state=True)]))
    saver.close()
    return attention, states


def test_a_hybrid_prompt_saved_from_its_tables_loads_into_another_engines_pages_bit_for_bit():
    store, index = UnsealedStore(), RadixIndex()
    attention, states = _saved(store, index)
    records = [entry.record for entry in index.longest_prefix(ROOT, [H0, H1])]
    assert [r.n_bytes for r in records] == [group_codec.block_bytes(LAYOUT, BLOCK, "fp32"),
                                            group_codec.block_bytes(LAYOUT, BLOCK, "fp32", state=True)]

    fresh_attention, fresh_states, layout = _engine()  # another engine: other pages
    loader = _worker(store, index)
    loader.register([fresh_attention], layout, [fresh_states])
    outcome = loader.load_whole([LoadPlan("b", records, [(None, 4), (9, 5)])])
    assert outcome.loaded == {"b"} and outcome.failed == []
    assert torch.equal(fresh_attention[4], attention[1]) and torch.equal(fresh_attention[5], attention[2])
    assert torch.equal(fresh_states[9], states[7])  # the state, bit for bit, where the engine resumes from it
    assert state_pages.read(fresh_states, torch.tensor([9])).shape == (1, STATE_BYTES)
    loader.close()


def test_a_corrupt_block_fails_the_whole_request_and_leaves_the_index_from_it_on():
    store, index = UnsealedStore(), RadixIndex()
    _saved(store, index)
    records = [entry.record for entry in index.longest_prefix(ROOT, [H0, H1])]
    held = store.get_block(records[1])
    store.put_block(H1, held[:-1] + bytes([held[-1] ^ 0xFF]))  # one bit of the state's block flipped

    fresh_attention, fresh_states, layout = _engine()
    loader = _worker(store, index)
    loader.register([fresh_attention], layout, [fresh_states])
    outcome = loader.load_whole([LoadPlan("b", records, [(None, 4), (9, 5)])])
    assert outcome.loaded == set() and [(r, why.split(":")[0]) for r, why in outcome.failed] == [("b", "corrupt")]
    assert not fresh_states.any()  # nothing of a failed load is in the pages the engine resumes from
    assert [e.record.block_hash for e in index.longest_prefix(ROOT, [H0, H1])] == [H0]  # block 1 is forgotten
    assert loader.take_report().failed_loads == outcome.failed  # the scheduler hears why it was recomputed
    loader.close()


def test_a_load_that_fails_for_the_engines_reason_is_ended_and_its_blocks_stay_cached():
    """vLLM waits for every asynchronous load to end: one that cannot be written (here, a page the engine's cache
    does not have) still ends, failed, and the blocks it could not write are not the constellation's fault."""
    store, index = UnsealedStore(), RadixIndex()
    _saved(store, index)
    records = [entry.record for entry in index.longest_prefix(ROOT, [H0, H1])]
    fresh_attention, fresh_states, layout = _engine()
    loader = _worker(store, index)
    loader.register([fresh_attention], layout, [fresh_states])
    outcome = loader.load_whole([LoadPlan("b", records, [(None, 4), (9, PAGES + 3)])])
    assert outcome.loaded == set() and [r for r, _ in outcome.failed] == ["b"]
    assert len(index.longest_prefix(ROOT, [H0, H1])) == 2
    loader.close()
