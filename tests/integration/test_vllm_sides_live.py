"""The vLLM connector's two sides against real satellites, with an engine's paged cache played by tensors.

No vLLM here (tests/vllm_engine runs the real engine): the scheduler side is fed what vLLM would
pass it, and the worker side writes into per-layer page tensors laid out as vLLM's CUDA
backends lay them (tests/paged_support.py). What is checked is what both engines share: the
blocks a KVCManager stored are loaded into the right pages, and the blocks the worker saves
are ones a KVCManager hits, with the tokens of no cache at all.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from skymemory.integrations.vllm.config import ConnectorConfig
from skymemory.integrations.vllm.worker import SEALED, open_worker
from skymemory.kv.format import codec
from skymemory.kv.model.cache_arg import cache_arg
from skymemory.kv.engine import ServedModel
from skymemory.kv.naming.identity import model_identity
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.model.models import load_model
from skymemory.kv.paged.paged import PagedLayout
from skymemory.kv.paged.paged_scheduler import PagedScheduler
from skymemory.kv.index.radix import RadixIndex
from skymemory.kv.index.saving import BlockFormat
from skymemory.store.constellation import ConstellationBlockStore

from kv_support import random_prompt
from live import launched
from paged_support import flash_write

BLOCK = 16
PAGES = 12
KV = "fp32"
FORM = BlockFormat(KV, codec.layout_name(sealed=SEALED), BLOCK)  # what the connector's worker is given


def _served(manager: KVCManager) -> ServedModel:
    """The model as the connector names it (kv.engine), with the manager's geometry."""
    return ServedModel("embedded-tiny", manager.geometry, FORM, SEALED)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYMEMORY_CACHE", str(tmp_path / "cache"))  # the model identity is kept there


def _config(manifest_path, index_dir, station_id, timeout_s=10.0) -> ConnectorConfig:
    return ConnectorConfig(manifest=manifest_path, model="embedded-tiny", kv_format=KV, servers=5,
                           index_dir=index_dir, station_id=station_id, load_timeout_s=timeout_s)


def _engine_pages(geometry: codec.BlockGeometry):
    """Per-layer caches [pages, tokens, kv heads, 2 * head dim] and their layout, as an engine would have them."""
    shape = (BLOCK, geometry.kv_heads, 2 * geometry.head_dim)
    caches = [torch.zeros((PAGES, *shape)) for _ in range(geometry.layers)]
    layout = PagedLayout.probe(flash_write, shape, torch.float32, kv_heads=geometry.kv_heads, block_tokens=BLOCK,
                               head_dim=geometry.head_dim)
    return caches, layout


def _scheduler(manager: KVCManager, index: RadixIndex) -> PagedScheduler:
    identity = model_identity("embedded-tiny", "fp32")  # as the connector names blocks (its store seals: LAYOUT)
    root = identity.root(kv_format=KV, block_tokens=BLOCK, sealed=SEALED)
    assert root == manager.root  # the engine names blocks as the transformers side does
    return PagedScheduler(root=root, block_tokens=BLOCK, block_bytes=manager.block_bytes,
                         layers=manager.geometry.layers, index=index, policy="fetch")


def _prompt_kv(model, prompt: list[int], blocks: int) -> list[torch.Tensor]:
    """The model's own KV of the prompt's first blocks, per layer as [blocks, 2, heads, tokens, dim]."""
    with torch.no_grad():
        cache = model(torch.tensor([prompt[:blocks * BLOCK]]), use_cache=True).past_key_values
    out = []
    for layer in cache.layers:
        kv = torch.stack((layer.keys[0], layer.values[0]))  # [2, heads, tokens, dim]
        out.append(kv.view(2, kv.shape[1], blocks, BLOCK, kv.shape[-1]).permute(2, 0, 1, 3, 4))
    return out


def test_blocks_a_kvcmanager_stored_land_in_the_engines_pages(constellation, tmp_path):
    model, tokenizer = load_model("embedded-tiny", "cpu", "fp32")  # fresh: other tests change the shared one
    manifest_path = constellation.save(tmp_path / "manifest.json")  # the connector reads it from a file
    index = RadixIndex(tmp_path / "index")
    with ConstellationBlockStore.nearest_from_manifest(constellation, 5, client_options={"station_id": 41}) as store:
        manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype=KV, index=index, policy="fetch")
        prompt = random_prompt(3 * BLOCK + 5, seed=7)
        assert manager.add_blocks(prompt).blocks_stored == 3
    scheduler = _scheduler(manager, index)
    # vLLM asks with what its own cache has (one block here): the other two are loaded, never the last token
    assert scheduler.match("r1", prompt, computed_tokens=BLOCK) == 2 * BLOCK
    assert scheduler.match("r2", prompt[:3 * BLOCK], computed_tokens=0) == 2 * BLOCK  # 3 blocks, the last token
    scheduler.allocated("r1", [9, 4, 7, 2], 2 * BLOCK)  # pages: the local block's, then the loaded ones
    plan = scheduler.step([("r1", prompt, [9, 4, 7, 2], 3 * BLOCK)], [], {"r1": 5})
    assert [(p.req_id, p.rows) for p in plan.loads] == [("r1", [(4,), (7,)])] and plan.saves == []

    # every block "last used" long ago, so the load's note shows
    index.insert_entries([dataclasses.replace(index.get(h), last_used_ms=1) for h in manager.block_hashes(prompt)])
    worker = open_worker(_config(manifest_path, tmp_path / "index", 0x0C00), _served(manager), index)
    try:
        caches, layout = _engine_pages(manager.geometry)
        worker.register(caches, layout)
        worker.begin_step()
        worker.start_loads(plan.loads)
        for layer in range(manager.geometry.layers):
            worker.wait_layer(layer)
        worker.end_step(plan)
        assert worker.take_load_errors() == set()
        want = _prompt_kv(model, prompt, 3)
        for layer, cache in enumerate(caches):
            got = layout.read(cache, torch.tensor([4, 7]))
            torch.testing.assert_close(got, want[layer][1:3], rtol=1e-5, atol=1e-5)
        report = worker.take_report()
        assert len(report.transfers) == 1 and report.transfers[0][0] == 2 * manager.block_bytes
        # the loaded blocks' last use is the load (as a KVCManager fetch notes it); the local one's is untouched
        assert [index.get(h).last_used_ms > 1 for h in manager.block_hashes(prompt)] == [False, True, True]
        scheduler.observe(report)
        assert scheduler.link.samples == 1
    finally:
        worker.close()


def test_pages_the_worker_saves_are_hits_for_a_kvcmanager(constellation, tmp_path):
    model, tokenizer = load_model("embedded-tiny", "cpu", "fp32")  # fresh: other tests change the shared one
    index = RadixIndex(tmp_path / "index")
    prompt = random_prompt(2 * BLOCK + 3, seed=11)
    with ConstellationBlockStore.nearest_from_manifest(constellation, 5, client_options={"station_id": 43}) as store:
        manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype=KV, index=index, policy="fetch")
        scheduler = _scheduler(manager, index)
        assert scheduler.match("r1", prompt, 0) == 0  # nothing cached: computed, then saved
        # the prefill step: two full prompt blocks in pages 5 and 3 (plus a partial one in 8)
        plan = scheduler.step([("r1", prompt, [5, 3, 8], 0)], [], {"r1": len(prompt)})
        assert [(s.position, s.pages[0]) for s in plan.saves] == [(0, 5), (1, 3)]
        assert plan.single == (len(prompt), 0)
        again = scheduler.step([("r2", prompt, [1, 2, 6], 0)], [], {"r2": len(prompt)})
        assert again.saves == []  # another request with the same prompt: being saved already

        manifest_path = constellation.save(tmp_path / "manifest.json")
        # with a host tier: the saves write through it, and the worker's report tells the scheduler
        config = dataclasses.replace(_config(manifest_path, tmp_path / "index", 0x0C10),
                                     host_tier_bytes=4 * manager.block_bytes)
        worker = open_worker(config, _served(manager), index)
        caches, layout = _engine_pages(manager.geometry)
        worker.register(caches, layout)
        for layer, kv in enumerate(_prompt_kv(model, prompt, 2)):  # what the engine's forward wrote
            layout.write(caches[layer], torch.tensor([5, 3]), kv)
        worker.begin_step()
        worker.end_step(plan)
        worker.close()  # waits for the saver
        report = worker.take_report()
        assert worker.saver.saved == 2 and report.forwards[0][:2] == (len(prompt), 0)
        assert report.host_tier == dict.fromkeys((s.block_hash for s in plan.saves), True)
        scheduler.observe(report)
        assert scheduler.near == {s.block_hash for s in plan.saves}  # their loads are priced as copies now

        hit = manager.get_cache(prompt)
        assert hit.source == "index" and hit.prefix_tokens == 2 * BLOCK
        with torch.no_grad():
            cached = model.generate(hit.input_ids, attention_mask=hit.attention_mask, **cache_arg(model, hit.cache),
                                    max_new_tokens=6, do_sample=False)[0, len(prompt):].tolist()
            plain = model.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0, len(prompt):].tolist()
        assert cached == plain


def test_a_load_from_dead_satellites_is_a_load_error_and_leaves_the_index(node_path, tmp_path):
    model, tokenizer = load_model("embedded-tiny", "cpu", "fp32")  # fresh: other tests change the shared one
    index = RadixIndex(tmp_path / "index")
    prompt = random_prompt(2 * BLOCK + 1, seed=13)
    with launched(tmp_path, 3, 3) as manifest_path:
        from skymemory.orbit.manifest import Manifest

        m = Manifest.load(manifest_path)
        with ConstellationBlockStore.nearest_from_manifest(m, 5, client_options={"station_id": 45}) as store:
            manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype=KV, index=index,
                                 policy="fetch")
            assert manager.add_blocks(prompt).blocks_stored == 2
        worker = open_worker(_config(manifest_path, tmp_path / "index", 0x0C20, timeout_s=1.5), _served(manager),
                             index)
    # the constellation is gone now: the load runs into its deadline
    try:
        scheduler = _scheduler(manager, index)
        assert scheduler.match("r1", prompt, 0) == 2 * BLOCK
        scheduler.allocated("r1", [6, 2, 9], 2 * BLOCK)
        plan = scheduler.step([("r1", prompt, [6, 2, 9], 2 * BLOCK)], [], {"r1": 1})
        caches, layout = _engine_pages(manager.geometry)
        worker.register(caches, layout)
        worker.begin_step()
        started = time.monotonic()
        worker.start_loads(plan.loads)
        for layer in range(manager.geometry.layers):
            worker.wait_layer(layer)
        worker.end_step(plan)
        assert time.monotonic() - started < 60  # bounded: the deadline, not a hang
        assert worker.take_load_errors() == {6, 2}
        report = worker.take_report()
        assert [r for r, _ in report.failed_loads] == ["r1"] and "timeout" in report.failed_loads[0][1]
        assert len(index.longest_prefix(manager.root, manager.block_hashes(prompt))) == 0  # not claimed again
        scheduler.observe(report)
        assert "the load failed" in scheduler.finished("r1")["decision"]
    finally:
        worker.close()
