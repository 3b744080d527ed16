"""The vLLM connector's engine-neutral parts, without vLLM: its settings, the model identity, the scheduler's rules
(kv.paged.paged_scheduler)."""

from __future__ import annotations

import hashlib
import logging
from types import SimpleNamespace

import pytest

from skymemory.integrations.vllm.block_table import pages
from skymemory.integrations.vllm.config import ConfigError, ConnectorConfig
from skymemory.kv.naming import identity as identity_module
from skymemory.kv.naming.blocks import chain_hashes, split_blocks
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.model.models import load_model
from skymemory.kv.paged.page_groups import PageGroups
from skymemory.kv.paged.paged_scheduler import PagedScheduler
from skymemory.kv.paged.paged_steps import WorkerReport
from skymemory.kv.index.radix import RadixIndex
from skymemory.kv.store import BlockRecord, MemoryBlockStore



BLOCK = 4
ROOT = hashlib.sha256(b"root").digest()


# ---- settings ------------------------------------------------------------------------------------------

def test_settings_are_checked_one_line_each(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    config = ConnectorConfig.from_extra({"manifest": str(manifest), "policy": "recompute", "servers": 4},
                                        served_model="/models/tiny")
    assert (config.model, config.policy, config.servers, config.kv_format) == ("/models/tiny", "recompute", 4, "fp16")
    bad = [({"polcy": "auto"}, "unknown SkyMemory connector setting"), ({"policy": "often"}, "fetch policy"),
           ({"servers": 0}, "servers must be a whole number"), ({"servers": "3"}, "servers must be a whole number"),
           ({"kv_format": "fp8"}, "KV format"), ({"route": "up"}, "route must be"),
           ({"load_timeout_s": -1}, "load_timeout_s must be"), ({"station_id": 70000}, "station_id")]
    for extra, message in bad:
        with pytest.raises(ConfigError, match=message):
            ConnectorConfig.from_extra({"manifest": str(manifest), **extra}, served_model="m")
    with pytest.raises(ConfigError, match="no constellation manifest at"):
        ConnectorConfig.from_extra({"manifest": str(tmp_path / "none.json")}, served_model="m")


def test_seal_is_a_setting_true_by_default_and_a_bool_only(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    assert ConnectorConfig.from_extra({"manifest": str(manifest)}, served_model="m").seal is True
    assert ConnectorConfig.from_extra({"manifest": str(manifest), "seal": True}, served_model="m").seal is True
    assert ConnectorConfig.from_extra({"manifest": str(manifest), "seal": False}, served_model="m").seal is False
    for bad in ("false", "no", 0, 1, None, [True]):
        with pytest.raises(ConfigError, match=r"^SkyMemory connector: seal must be true or false, got "):
            ConnectorConfig.from_extra({"manifest": str(manifest), "seal": bad}, served_model="m")


@pytest.mark.parametrize("seal", [True, False])
def test_the_workers_stores_seal_as_the_setting_says(tmp_path, monkeypatch, seal):
    from skymemory.integrations.vllm import worker
    from skymemory.store.constellation import ConstellationBlockStore

    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    config = ConnectorConfig.from_extra({"manifest": str(manifest), "seal": seal, "servers": 3}, served_model="m")
    opened = {}
    monkeypatch.setattr(ConstellationBlockStore, "nearest_from_manifest",
                        classmethod(lambda cls, manifest, n, **kw: opened.update(kw, n=n) or "store"))
    sky = SimpleNamespace(planes=2, sats=2)
    assert worker.open_store(config, sky, 77) == "store"
    assert opened["seal"] is seal and opened["n"] == 3 and opened["client_options"] == {"station_id": 77}
    assert opened["parity"] == 2  # the default: stripes of 1 + 2 over 3 satellites
    config = ConnectorConfig.from_extra({"manifest": str(manifest), "parity": 0}, served_model="m")
    worker.open_store(config, SimpleNamespace(planes=1, sats=2), 77)
    assert opened["parity"] == 0 and opened["n"] == 10  # asked: none (the store stripes over the 2 there are)
    assert worker.SEALED is True  # the default, for code that names blocks without a connector's config


# ---- the model identity ---------------------------------------------------------------------------------

def test_the_identity_names_blocks_as_kvcmanager_and_is_kept_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYMEMORY_CACHE", str(tmp_path))
    model, tokenizer = load_model("embedded-tiny", "cpu", "fp32")  # fresh: other tests change the shared one
    manager = KVCManager(model, tokenizer, MemoryBlockStore(), block_tokens=16, kv_dtype="fp16", index=RadixIndex())
    first = identity_module.model_identity("embedded-tiny", "fp32")
    assert first.root(kv_format="fp16", block_tokens=16) == manager.root
    assert first.root(kv_format="fp32", block_tokens=16) != manager.root

    def no_loading(*args, **kwargs):
        raise AssertionError("the saved identity should have been read")

    monkeypatch.setattr("skymemory.kv.model.models.load_model", no_loading)
    assert identity_module.model_identity("embedded-tiny", "float32") == first
    with pytest.raises(AssertionError, match="should have been read"):  # another dtype is another identity
        identity_module.model_identity("embedded-tiny", "fp16")


# ---- the scheduler's rules ----------------------------------------------------------------------------

def _indexed(index: RadixIndex, prompt: list[int], blocks: int) -> list[bytes]:
    hashes = chain_hashes(ROOT, split_blocks(prompt, BLOCK))[:blocks]
    index.insert_chain(ROOT, [(BlockRecord(h, 1000, 6144, 1, 0, "explicit", 5, (0, 0)), None) for h in hashes])
    return hashes


def _scheduler(index: RadixIndex, policy: str = "fetch") -> PagedScheduler:
    return PagedScheduler(root=ROOT, block_tokens=BLOCK, block_bytes=1000, layers=2, index=index, policy=policy)


def test_whole_blocks_never_the_last_token_and_never_what_the_engine_has():
    index = RadixIndex()
    prompt = list(range(10, 22))  # 12 tokens: 3 blocks
    _indexed(index, prompt, 3)
    scheduler = _scheduler(index)
    assert scheduler.match("a", prompt, 0) == 2 * BLOCK  # the third block holds the last token
    assert scheduler.match("a", prompt + [1], 0) == 3 * BLOCK
    assert scheduler.match("c", prompt + [1], 3 * BLOCK) == 0
    assert scheduler.match("b", [9] + prompt, 0) == 0  # another prefix: nothing
    assert scheduler.match("a", prompt + [1], BLOCK) == 2 * BLOCK  # the engine's own cache has the first
    scheduler.allocated("a", [7, 3, 5, 8], 2 * BLOCK)  # the pages of blocks 1 and 2 are loaded
    plan = scheduler.step([], [], {})
    assert [(p.req_id, p.rows, len(p.records)) for p in plan.loads] == [("a", [(3,), (5,)], 2)]
    assert scheduler.step([], [], {}).loads == []  # a load is planned once


def test_blocks_placed_by_a_rotating_layout_are_not_claimed():
    index = RadixIndex()
    prompt = list(range(10, 23))
    hashes = chain_hashes(ROOT, split_blocks(prompt, BLOCK))
    strategies = ["explicit", "rotation-hop", "explicit"]  # the worker's store cannot locate the second
    index.insert_chain(ROOT, [(BlockRecord(h, 1000, 6144, 1, 0, s, 5, (0, 0)), None)
                              for h, s in zip(hashes, strategies)])
    assert _scheduler(index).match("a", prompt, 0) == BLOCK


def test_a_request_may_choose_its_policy_and_a_wrong_one_is_said(caplog):
    index = RadixIndex()
    prompt = list(range(10, 23))
    _indexed(index, prompt, 3)
    scheduler = _scheduler(index)
    assert scheduler.match("a", prompt, 0, policy="recompute") == 0
    assert "recompute 0/3" in scheduler.finished("a")["decision"]
    with caplog.at_level(logging.WARNING):
        assert scheduler.match("b", prompt, 0, policy="sometimes") == 3 * BLOCK
    assert "unknown fetch policy 'sometimes'" in caplog.text


def test_auto_fetches_until_this_engine_is_measured_then_decides_from_its_rates():
    index = RadixIndex()
    prompt = list(range(10, 23))
    _indexed(index, prompt, 3)
    scheduler = _scheduler(index, policy="auto")
    assert scheduler.match("a", prompt, 0) == 3 * BLOCK
    assert "no transfer measured" in scheduler.finished("a")["decision"]
    scheduler.observe(WorkerReport(transfers=[(3000, 0.001, 0.0005)]))
    assert scheduler.match("a", prompt, 0) == 3 * BLOCK
    assert "compute rate is not measured yet" in scheduler.finished("a")["decision"]
    scheduler.observe(WorkerReport(forwards=[(16, 0, 0.001), (64, 0, 0.002)]))  # two steps: too few to fit
    assert scheduler.match("a", prompt, 0) == 3 * BLOCK
    # this engine computes fast and the link is slow: recomputing wins
    scheduler.observe(WorkerReport(transfers=[(3000, 10.0, 5.0)] * 5,
                                   forwards=[(1, 64, 0.0005)]))
    assert scheduler.match("a", prompt, 0) == 0
    assert scheduler.finished("a")["decision"].startswith("recompute 0/3")
    # the worker's host tier holds every block: loading them crosses no link, and beats recomputing
    hashes = chain_hashes(ROOT, split_blocks(prompt, BLOCK))[:3]
    scheduler.observe(WorkerReport(host_tier=dict.fromkeys(hashes, True)))
    assert scheduler.match("a", prompt, 0) == 3 * BLOCK
    assert scheduler.finished("a")["decision"].startswith("fetch 3/3")
    scheduler.observe(WorkerReport(host_tier={hashes[2]: False}))  # one left the tier: the link again
    assert scheduler.match("a", prompt, 0) == 0


def test_each_completed_prompt_block_is_saved_once():
    index = RadixIndex()
    prompt = list(range(10, 23))  # 13 tokens: 3 full blocks
    cached = _indexed(index, prompt, 1)
    scheduler = _scheduler(index)
    assert scheduler.match("a", prompt, 0) == BLOCK
    # a first chunk of the prefill completes block 1 (block 0 is cached already)
    plan = scheduler.step([("a", prompt, [4, 6, 2, 9], BLOCK)], [], {"a": 5})
    assert [(s.position, s.pages[0], s.parent) for s in plan.saves] == [(1, 6, cached[0])]
    # the rest, in a later step: block 2, then nothing more (the partial block is never saved)
    plan = scheduler.step([], [("a", None, False, 9)], {"a": 4})
    assert [(s.position, s.pages[0]) for s in plan.saves] == [(2, 2)]
    assert scheduler.step([], [("a", [11], False, 13)], {"a": 1}).saves == []
    assert scheduler.step([], [("a", None, False, 14)], {"a": 1}).single == (1, 14)


def test_a_block_behind_a_sliding_window_has_no_page_and_is_neither_loaded_nor_saved():
    """vLLM gives a sliding-window request its null block (0) where the window has passed: the connector passes
    None there (block_table.pages), so nothing is loaded into or saved from vLLM's shared null page."""
    index = RadixIndex()
    prompt = list(range(10, 23))  # 13 tokens: 3 full blocks
    _indexed(index, prompt, 3)
    scheduler = _scheduler(index)
    assert scheduler.match("a", prompt + [1], 0) == 3 * BLOCK
    assert pages([0, 4, 5]) == [None, 4, 5]
    scheduler.allocated("a", pages([0, 4, 5, 9]), 3 * BLOCK)  # block 0 is behind the window: no page
    plan = scheduler.step([], [], {})
    assert [(p.rows, len(p.records)) for p in plan.loads] == [([(4,), (5,)], 2)]
    assert scheduler.finished("a")["fetched_blocks"] == 2  # what crossed the link: 2 of the 3 matched

    fresh = _scheduler(RadixIndex())
    fresh.match("b", prompt, 0)
    saves = fresh.step([("b", prompt, pages([0, 6, 2, 9]), 0)], [], {"b": 13}).saves
    assert [(s.position, s.pages[0]) for s in saves] == [(1, 6), (2, 2)]  # block 0 has no page to save from


# ---- a hybrid engine: several page tables (kv.paged.page_groups) -----------------------------------------

PLAIN, WITH_STATE = 1000, 5000  # a recurrent hybrid's blocks: the one ending a stored prompt carries the state
HYBRID = PageGroups(3, attention=(2,), recurrent=(0, 1))  # two Mamba layers' tables, then the attention layer's


def _hybrid(index: RadixIndex, policy: str = "fetch") -> PagedScheduler:
    return PagedScheduler(root=ROOT, block_tokens=BLOCK, block_bytes=PLAIN, layers=1, index=index, policy=policy,
                          groups=HYBRID, state_block_bytes=WITH_STATE)


def _indexed_sizes(index: RadixIndex, prompt: list[int], sizes: list[int]) -> list[bytes]:
    hashes = chain_hashes(ROOT, split_blocks(prompt, BLOCK))[:len(sizes)]
    index.insert_chain(ROOT, [(BlockRecord(h, size, 6144, 1, 0, "explicit", 5, (0, 0)), None)
                              for h, size in zip(hashes, sizes)])
    return hashes


def test_page_rows_are_one_page_per_table_with_none_where_a_table_keeps_none():
    assert HYBRID.rows([[None, 5, None], [None, 6, 3], [7, 8, 9]]) == [(None, None, 7), (5, 6, 8), (None, 3, 9)]
    assert HYBRID.loads_into((None, None, 7)) and not HYBRID.loads_into((5, 6, None))
    assert HYBRID.saves_from((None, None, 7)) and HYBRID.hybrid and not PageGroups.one_table(2).hybrid
    with pytest.raises(ValueError, match="2 page tables for a model whose layers are in 3"):
        HYBRID.rows([[1], [2]])


def test_a_recurrent_hybrid_resumes_only_from_a_block_that_carries_the_state_and_loads_all_or_nothing():
    index = RadixIndex()
    prompt = list(range(10, 27))  # 17 tokens: 4 whole blocks
    _indexed_sizes(index, prompt, [PLAIN, WITH_STATE, PLAIN, PLAIN])  # a stored prompt of 2 blocks, then a longer
    scheduler = _hybrid(index)
    assert scheduler.match("a", prompt, 0) == 2 * BLOCK  # blocks 2 and 3 carry no state: no prefix ends there
    # vLLM's pages: a Mamba table keeps one page, at the prefix's last block (the state goes there)
    scheduler.allocated("a", HYBRID.rows([[None, 5], [None, 6], [7, 8]]), 2 * BLOCK)
    plan = scheduler.step([], [], {})
    assert [(p.rows, len(p.records)) for p in plan.loads] == [([(None, None, 7), (5, 6, 8)], 2)]
    assert scheduler.match("b", prompt, BLOCK) == BLOCK  # the engine has block 0: block 1 and its state

    bare = RadixIndex()
    _indexed_sizes(bare, prompt, [PLAIN, PLAIN, PLAIN])
    assert _hybrid(bare).match("c", prompt, 0) == 0  # no block carries a state: nothing to resume from
    # a decision to fetch part of the prefix and compute the rest: nothing (the state is after the whole prefix)
    split = _hybrid(index, policy="auto")
    split.finder.decide = lambda *args, **kwargs: SimpleNamespace(fetch_blocks=1, describe=lambda: "split 1/2")
    assert split.match("d", prompt, 0) == 0
    assert split.finished("d")["decision"] == ("split 1/2; recomputed: a recurrent state is cached after the whole "
                                               "prefix only")


def test_a_recurrent_hybrids_prompt_is_saved_up_to_its_last_state_with_the_state_pages_the_engine_offered():
    scheduler = _hybrid(RadixIndex())
    prompt = list(range(10, 24))  # 14 tokens: its last state the engine keeps is after block 2 (12 tokens)
    scheduler.match("a", prompt, 0)
    rows = HYBRID.rows([[11, 12, 13, 14], [21, 22, 23, 24], [1, 2, 3, 4]])
    plan = scheduler.step([("a", prompt, rows[:2], 0)], [], {"a": 8})  # blocks 0 and 1: no state in them
    assert [(s.position, s.pages, s.state) for s in plan.saves] == [(0, (11, 21, 1), False), (1, (12, 22, 2), False)]
    # block 2 is complete, but the state after it is not offered yet: it waits for it
    assert scheduler.step([], [("a", rows[2:3], False, 8)], {"a": 4}).saves == []
    # an offer of only one of the two Mamba tables' pages, then none: the pages of a past step's offer are not used
    assert scheduler.step([], [], {"a": 1}, offered={"a": [(0, 31, 3 * BLOCK)]}).saves == []
    assert scheduler.step([], [], {"a": 1}, offered={"a": [(1, 32, 3 * BLOCK)]}).saves == []
    plan = scheduler.step([], [], {"a": 2}, offered={"a": [(0, 33, 3 * BLOCK), (1, 34, 3 * BLOCK)]})
    assert [(s.position, s.pages, s.state) for s in plan.saves] == [(2, (33, 34, 3), True)]
    # and nothing past it: a block no state ends could never be loaded
    assert scheduler.step([], [("a", rows[3:], False, 14)], {"a": 1}).saves == []


def test_a_model_with_recurrent_layers_is_refused_on_an_engine_with_one_page_table_in_one_sentence():
    """Mamba-2 / gated delta-net state needs vLLM's hybrid allocator (the connector supports it: SupportsHMA); with
    it turned off, said in one sentence when vLLM sets its attention up, instead of vLLM's "Failed to promote local
    KV cache specs"."""
    from skymemory.kv.engine import PageGroups, ServedModel, UnsupportedModel
    from skymemory.kv.model.models import load_config

    for name in ("embedded-tiny-granite-hybrid", "embedded-tiny-qwen3-next"):
        _, config = load_config(name)
        with pytest.raises(UnsupportedModel) as refused:
            ServedModel.of(name, config, block_tokens=BLOCK, kv_format="fp16", sealed=True)
        assert str(refused.value).startswith(f"SkyMemory cannot cache {name} on this engine: 3 of its layers "
                                             "keep recurrent state (Mamba / gated delta-net), which needs the "
                                             "engine's hybrid KV cache allocator")
        assert ServedModel.of(name, config, block_tokens=BLOCK, kv_format="fp16", sealed=True,
                              groups=PageGroups(2, (1,), (0,)))  # with the allocator on: its layout decides
    _, config = load_config("embedded-tiny-mistral")  # a sliding window is served
    assert ServedModel.of("embedded-tiny-mistral", config, block_tokens=BLOCK, kv_format="fp16", sealed=True)
