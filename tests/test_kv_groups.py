"""Today's model families on Hugging Face (issue 52): sliding window, sliding window + full, Mamba-2 hybrid,
gated delta-net hybrid and MLA models cached by KVCManager, each with prompts longer than any window: the whole
prefix a hit, the tokens those of no cache, a sliding-window model fetching its window only."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import MistralConfig

from kv_support import FailingStore, MemoryBlockStore, random_prompt
from skymemory.kv.format import codec, group_codec
from skymemory.kv.format.groups import CacheLayout, UnsupportedModel, layer_kinds
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.model.models import FAMILIES, load_model
from skymemory.kv.hf.report import compare_generation

BLOCK = 16  # the windows of the tiny family models are 32 and 64 tokens: a prompt of 300 is far past them
PROMPT = 300

_MODELS: dict = {}


def family(name: str):
    """(model, tokenizer) of one tiny family model, fp32 on the CPU, built once per session."""
    if name not in _MODELS:
        _MODELS[name] = load_model(name, device="cpu", dtype="fp32")
    return _MODELS[name]


def _manager(tmp_path, name, store=None, **kwargs):
    model, tokenizer = family(name)
    kwargs.setdefault("policy", "fetch")
    return KVCManager(model, tokenizer, store if store is not None else MemoryBlockStore(), block_tokens=BLOCK,
                      kv_dtype="auto", index_dir=tmp_path, **kwargs)


@pytest.mark.parametrize("name", sorted(FAMILIES.values()))
def test_each_family_hits_its_whole_prefix_with_the_tokens_of_no_cache(tmp_path, name):
    manager = _manager(tmp_path, name)
    assert manager.grouped is not None  # none of them is a dense Llama: grouped blocks
    for run in range(2):  # the same in every run
        prompt = random_prompt(PROMPT, seed=52 + run)
        added = manager.add_blocks(prompt)
        assert added.error is None and added.blocks_stored == PROMPT // BLOCK
        comparison = compare_generation(manager, prompt, new_tokens=8)
        assert comparison.prefix_tokens == (PROMPT - 1) // BLOCK * BLOCK  # every usable block
        assert comparison.cached == comparison.reference
        assert len(set(comparison.reference)) > 1  # the model's output depends on its context


def test_a_sliding_window_model_fetches_only_the_blocks_inside_its_window(tmp_path):
    manager = _manager(tmp_path, FAMILIES["sliding window"])
    window = manager.cache_layout.widest_window  # 64: the last 63 cached tokens are what the model attends
    prompt = random_prompt(PROMPT, seed=7)
    manager.add_blocks(prompt)
    result = manager.get_cache(prompt)
    blocks = result.prefix_tokens // BLOCK
    needed = blocks - (blocks * BLOCK - (window - 1)) // BLOCK  # blocks holding one of the last W - 1 tokens
    assert result.prefix_tokens == 18 * BLOCK and needed == 4
    assert result.bytes_retrieved == needed * manager.block_bytes  # 4 of 18 blocks
    # never more than the window can span: ceil((W - 1) / block) blocks, one more when it straddles a boundary
    assert result.bytes_retrieved <= ((window - 1 + BLOCK - 1) // BLOCK + 1) * manager.block_bytes


def test_a_window_with_a_full_attention_layer_fetches_the_whole_prefix(tmp_path):
    manager = _manager(tmp_path, FAMILIES["sliding window + full"])
    prompt = random_prompt(PROMPT, seed=8)
    manager.add_blocks(prompt)
    result = manager.get_cache(prompt)
    assert result.bytes_retrieved == result.prefix_tokens // BLOCK * manager.block_bytes


@pytest.mark.parametrize("name", [FAMILIES["Mamba-2 hybrid"], FAMILIES["gated delta-net hybrid"]])
def test_a_recurrent_model_resumes_only_where_a_stored_block_carries_the_state(tmp_path, name):
    manager = _manager(tmp_path, name)
    first = random_prompt(200, seed=9)  # 12 full blocks: block 11 carries the state after token 192
    assert manager.add_blocks(first).blocks_stored == 12
    records = [manager.index.get(h).record for h in manager.add_blocks(first).hashes]
    assert [r.n_bytes for r in records].count(manager.grouped.state_block_bytes) == 1
    assert records[-1].n_bytes == manager.grouped.state_block_bytes

    # a prompt sharing the first 8 blocks only: no block of it carries a state, so nothing is loaded
    rng = random.Random(10)
    diverging = first[:8 * BLOCK] + [rng.randrange(3, 259) for _ in range(60)]
    comparison = compare_generation(manager, diverging, new_tokens=6)
    assert comparison.prefix_tokens == 0 and comparison.cached == comparison.reference

    # a prompt that continues the first: its 12 blocks load and the state resumes after them
    longer = first + [rng.randrange(3, 259) for _ in range(50)]
    comparison = compare_generation(manager, longer, new_tokens=6)
    assert comparison.prefix_tokens == 12 * BLOCK and comparison.cached == comparison.reference
    # stored in turn, its last block carries the state too; both states stay usable
    assert manager.add_blocks(longer).blocks_stored == 3
    assert compare_generation(manager, longer + [5] * 20, new_tokens=6).prefix_tokens == 15 * BLOCK


@pytest.mark.parametrize("name", [FAMILIES["Mamba-2 hybrid"], FAMILIES["sliding window + full"]])
def test_a_grouped_models_tiers_serve_its_blocks_of_both_sizes_with_the_tokens_of_no_cache(tmp_path, name):
    """The host tier (and the device tier, here on the CPU) keep a grouped model's blocks, the state-carrying one
    included, in rows of its largest block's size: a second get takes them all from there, not the store."""
    store = MemoryBlockStore()
    manager = _manager(tmp_path, name, store=store, host_tier_bytes=64 << 20, device_tier_bytes=8 << 20)
    prompt = random_prompt(PROMPT, seed=11)
    manager.add_blocks(prompt)  # written through to both tiers
    gets = store.gets
    comparison = compare_generation(manager, prompt, new_tokens=6)
    assert comparison.prefix_tokens == (PROMPT - 1) // BLOCK * BLOCK and comparison.cached == comparison.reference
    assert store.gets == gets  # not one block from the store
    assert manager.get_cache(prompt).sources["device"] > 0

    cold = _manager(tmp_path, name, store=store, host_tier_bytes=64 << 20)  # another host: its tier is empty
    first = cold.get_cache(prompt)
    assert first.sources["store"] > 0 and "host" not in first.sources
    again = cold.get_cache(prompt)  # what the store sent entered the tier
    assert again.sources == {"host": first.sources["store"], "store": 0}


def test_the_state_and_the_window_are_bytes_of_the_block_that_ends_a_prompt_only(tmp_path):
    manager = _manager(tmp_path, FAMILIES["Mamba-2 hybrid"])
    layout = manager.cache_layout
    assert manager.grouped.state_block_bytes == manager.block_bytes + sum(-(-s.bytes // 16) * 16 for s in layout.states)
    assert {s.role for s in layout.states} == {"conv", "recurrent"}


@pytest.mark.parametrize("mode,reason", [("corrupt", "corrupt"), ("truncate", "incomplete"), ("miss", "not-found")])
def test_a_failed_grouped_block_is_a_clean_miss_evicted_and_the_tokens_stay_right(tmp_path, mode, reason):
    store = FailingStore()
    manager = _manager(tmp_path, FAMILIES["Mamba-2 hybrid"], store=store)
    prompt = random_prompt(5 * BLOCK + 3, seed=11)
    hashes = manager.add_blocks(prompt).hashes
    store.fail[hashes[2]] = mode
    comparison = compare_generation(manager, prompt, new_tokens=6)
    assert comparison.prefix_tokens == 0 and comparison.cached == comparison.reference
    assert store.evicted == hashes[2:] and hashes[1] in manager.index and hashes[2] not in manager.index


def test_another_layout_is_never_taken_for_this_one(tmp_path):
    """The chain root names the layout (a dense model's blocks keep their name); a block's header names it
    too, so a block of another layout under this name is refused, never rebuilt."""
    mistral = _manager(tmp_path / "a", FAMILIES["sliding window"])
    gemma = _manager(tmp_path / "b", FAMILIES["sliding window + full"])
    assert mistral.layout.startswith("grouped-v3-") and mistral.layout != gemma.layout
    prompt = random_prompt(3 * BLOCK, seed=12)
    mistral.add_blocks(prompt)
    stored = mistral.store.get_block(mistral.index.get(mistral.block_hashes(prompt)[0]).record)
    with pytest.raises(codec.CodecError, match="another cache layout"):
        group_codec.check_block(stored, gemma.cache_layout, tokens=BLOCK, kv_format="fp32")
    dense_model, _ = load_model("embedded-tiny", device="cpu", dtype="fp32")
    assert CacheLayout.of_model(dense_model).dense  # the Llama family keeps today's blocks and names


def test_int8_transport_of_a_grouped_model_rounds_the_kv_never_the_state(tmp_path):
    exact = _manager(tmp_path / "fp32", FAMILIES["gated delta-net hybrid"])
    int8 = KVCManager(exact.model, exact.tokenizer, MemoryBlockStore(), block_tokens=BLOCK, kv_dtype="int8",
                      index_dir=tmp_path / "int8", policy="fetch")
    prompt = random_prompt(6 * BLOCK + 4, seed=13)
    states = []
    for manager in (exact, int8):
        last = manager.add_blocks(prompt).hashes[-1]
        row = torch.frombuffer(bytearray(manager.store.get_block(manager.index.get(last).record)), dtype=torch.uint8)
        states.append(group_codec.decode_blocks([row], manager.cache_layout, BLOCK, manager.kv_format,
                                                torch.float32)[1])
    assert int8.get_cache(prompt).prefix_tokens == 6 * BLOCK
    assert int8.grouped.block_bytes < exact.grouped.block_bytes  # the K/V shrank
    assert all(torch.equal(a, b) for a, b in zip(*states)) and len(states[0]) == len(exact.cache_layout.states)


def test_an_unsupported_layer_kind_is_refused_in_one_sentence():
    config = MistralConfig(num_hidden_layers=2, layer_types=["full_attention", "indexed_attention"])
    with pytest.raises(UnsupportedModel) as refused:
        layer_kinds(config, "my-model")
    message = str(refused.value)
    assert message == ("SkyMemory cannot cache my-model: its layer 1 keeps a DynamicIndexedLayer cache (attention "
                       "with a sparse-attention indexer), which SkyMemory does not rebuild")


def test_auto_prices_what_a_grouped_prefix_fetches_not_every_block(tmp_path):
    """A sliding-window model's 18 cached blocks cost 4 blocks' bytes: the decision is priced so
    (kv.decide.throughput)."""
    from skymemory.kv.decide.calibration import DeviceRates
    from skymemory.kv.decide.costmodel import PrefillModel, RebuildModel
    from skymemory.kv.decide.throughput import prefix_fetch_bytes

    rates = DeviceRates(PrefillModel(0.0, 1e-3, 0.0, "given"), RebuildModel(0.0, 1e12), [], {}, 0.0)
    manager = _manager(tmp_path, FAMILIES["sliding window"], policy="auto", device_rates=rates)
    manager.link.observe(manager.block_bytes, 0.01, 0.001)
    prompt = random_prompt(PROMPT, seed=14)
    manager.add_blocks(prompt)
    decision = manager.plan(manager.find_prefix(prompt))
    window_bytes = prefix_fetch_bytes(manager.cache_layout, 18 * BLOCK, BLOCK, manager.kv_format)
    assert window_bytes == 4 * manager.block_bytes
    assert decision.inputs["block_bytes"] == -(-window_bytes // 18)


def test_the_kv_packages_face_names_what_a_hugging_face_user_starts_from():
    import skymemory.kv as kv
    from skymemory.kv.hf.manager import KVCManager as manager_class

    assert kv.KVCManager is manager_class and kv.load_model is load_model
    with pytest.raises(AttributeError):
        kv.no_such_name  # noqa: B018
