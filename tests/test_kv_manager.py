"""KVCManager on the small embedded model: exactness, misses, fingerprints, lookups."""

import copy

import pytest
import torch

from kv_support import FailingStore, MemoryBlockStore, random_prompt, tiny
from skymemory.kv.model.cache_arg import cache_arg, cache_of
from skymemory.kv.decide.calibration import DeviceRates
from skymemory.kv.decide.costmodel import PrefillModel, RebuildModel
from skymemory.kv.hf.manager import KVCManager, generate_with_cache
from skymemory.kv.hf.report import compare_generation
from skymemory.kv.store import BlockMiss
from skymemory.kv.model.tokenizer import build_byte_tokenizer

BLOCK = 16  # small blocks keep the parametrised tests fast; one test below uses 128


def _manager(tmp_path, dtype="fp32", kv="fp32", store=None, block=BLOCK, **kwargs):
    """A manager that always fetches what is cached: these tests are about the fetch, not the decision."""
    model, tokenizer = tiny(dtype)
    store = store if store is not None else MemoryBlockStore()
    kwargs.setdefault("policy", "fetch")
    return KVCManager(model, tokenizer, store, block_tokens=block, kv_dtype=kv, index_dir=tmp_path, **kwargs)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("n_blocks", range(1, 9))
@pytest.mark.parametrize("suffix", [1, 9, 33, 64])
def test_cached_generation_is_token_identical(tmp_path, dtype, n_blocks, suffix):
    """KV in the model's own precision: greedy tokens equal generation without the cache."""
    manager = _manager(tmp_path, dtype=dtype, kv=dtype)
    prompt = random_prompt(n_blocks * BLOCK + suffix, seed=100 * n_blocks + suffix)
    added = manager.add_blocks(prompt[: n_blocks * BLOCK])
    assert added.blocks_stored == n_blocks
    comparison = compare_generation(manager, prompt, new_tokens=8)
    assert comparison.prefix_tokens == n_blocks * BLOCK
    assert comparison.cached == comparison.reference


def test_cached_generation_at_128_token_blocks(tmp_path):
    manager = _manager(tmp_path, kv="fp32", block=128)
    prompt = random_prompt(2 * 128 + 20, seed=7)
    manager.add_blocks(prompt)
    comparison = compare_generation(manager, prompt, new_tokens=12)
    assert comparison.prefix_tokens == 256
    assert comparison.cached == comparison.reference


def test_fp16_transport_of_an_fp32_model_moves_the_logits_only_slightly(tmp_path):
    """fp16 rounding of fp32 KV: not bit-exact (an argmax near-tie can flip), but the logits barely move."""
    manager = _manager(tmp_path, kv="fp16")
    prompt = random_prompt(4 * BLOCK + 5, seed=3)
    manager.add_blocks(prompt)
    comparison = compare_generation(manager, prompt, new_tokens=12)
    assert comparison.prefix_tokens == 4 * BLOCK
    assert comparison.agree >= 1
    assert 0 < comparison.max_abs_logit_diff < 0.05


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_auto_kv_format_follows_the_model(tmp_path, dtype):
    assert _manager(tmp_path, dtype=dtype, kv="auto").kv_format == dtype


def test_a_wrong_prefix_changes_the_output(tmp_path):
    """The equality checks above can fail: KV of another prefix gives other tokens."""
    manager = _manager(tmp_path)
    prompt, other = random_prompt(4 * BLOCK + 5, seed=1), random_prompt(4 * BLOCK + 5, seed=2)
    manager.add_blocks(other)
    wrong = manager.get_cache(other).cache
    model = manager.model
    ids = torch.tensor([prompt])
    with torch.no_grad():
        reference = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, min_new_tokens=8, do_sample=False)
        spoiled = model.generate(ids, attention_mask=torch.ones_like(ids), **cache_arg(model, wrong),
                                 max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert not torch.equal(reference, spoiled)


def test_int8_transport_halves_the_bytes_and_is_measured(tmp_path):
    fp16 = _manager(tmp_path / "a", kv="fp16")
    int8 = _manager(tmp_path / "b", kv="int8")
    prompt = random_prompt(4 * BLOCK + 5, seed=11)
    bytes16 = fp16.add_blocks(prompt).bytes_stored
    bytes8 = int8.add_blocks(prompt).bytes_stored
    assert 0.5 < bytes8 / bytes16 < 0.6
    lossy = compare_generation(int8, prompt, new_tokens=8)
    exact_enough = compare_generation(fp16, prompt, new_tokens=8)
    assert lossy.prefix_tokens == exact_enough.prefix_tokens == 4 * BLOCK
    # int8 moves the logits more than fp16 does, but stays close (measured ~0.25 at most on this model)
    assert exact_enough.max_abs_logit_diff < lossy.max_abs_logit_diff < 1.0


def test_exact_multiple_leaves_the_last_block_to_the_model(tmp_path):
    manager = _manager(tmp_path)
    prompt = random_prompt(3 * BLOCK, seed=5)
    assert manager.add_blocks(prompt).blocks_stored == 3  # all full blocks are stored...
    result = manager.get_cache(prompt)
    assert result.prefix_tokens == 2 * BLOCK  # ...but at most k-1 serve as prefix
    assert result.miss_reason is None and result.usable_blocks == 2


def test_add_blocks_stores_only_new_blocks(tmp_path):
    store = MemoryBlockStore()
    manager = _manager(tmp_path, store=store)
    prompt = random_prompt(5 * BLOCK + 3, seed=8)
    assert manager.add_blocks(prompt[: 2 * BLOCK]).blocks_stored == 2
    again = manager.add_blocks(prompt)
    assert (again.blocks_cached_before, again.blocks_stored) == (2, 3)
    assert store.puts == 5 and len(store) == 5


def test_no_cache_gives_an_empty_cache_that_generate_accepts(tmp_path):
    manager = _manager(tmp_path)
    result = manager.get_cache(random_prompt(3 * BLOCK + 1, seed=9))
    assert (result.prefix_tokens, result.miss_reason, result.cache.get_seq_length()) == (0, "not-cached", 0)
    with torch.no_grad():
        out = manager.model.generate(result.input_ids, attention_mask=result.attention_mask,
                                     **cache_arg(manager.model, result.cache), max_new_tokens=3, do_sample=False)
    assert out.shape[1] == result.input_ids.shape[1] + 3


@pytest.mark.parametrize("mode,reason", [("miss", "not-found"), ("timeout", "TimeoutError"),
                                         ("truncate", "incomplete"), ("corrupt", "corrupt")])
def test_a_failed_block_shortens_the_prefix_evicts_and_corrects_the_index(tmp_path, mode, reason):
    store = FailingStore()
    manager = _manager(tmp_path, store=store)
    prompt = random_prompt(4 * BLOCK + 2, seed=12)
    hashes = manager.add_blocks(prompt).hashes
    store.fail[hashes[2]] = mode
    result = manager.get_cache(prompt)
    assert result.prefix_tokens == 2 * BLOCK
    assert result.miss_reason == reason
    # what is reported says the fetch fell short, never the plan alone
    assert result.describe() == f"{result.decision.describe()} planned, 2 loaded: {reason}, 2 recomputed"
    assert store.evicted == hashes[2:]  # lazy eviction of the failed block and those after it
    assert hashes[1] in manager.index and hashes[2] not in manager.index and hashes[3] not in manager.index
    # the shorter cache still generates exactly what the full computation does
    comparison = compare_generation(manager, prompt, new_tokens=6)
    assert comparison.prefix_tokens == 2 * BLOCK and comparison.cached == comparison.reference


def test_strict_mode_raises(tmp_path):
    store = FailingStore()
    manager = _manager(tmp_path, store=store, strict=True)
    prompt = random_prompt(2 * BLOCK + 2, seed=13)
    hashes = manager.add_blocks(prompt).hashes
    store.fail[hashes[0]] = "miss"
    with pytest.raises(BlockMiss):
        manager.get_cache(prompt)


def test_a_changed_weight_never_hits(tmp_path):
    store = MemoryBlockStore()
    manager = _manager(tmp_path, store=store)
    prompt = random_prompt(3 * BLOCK + 2, seed=14)
    manager.add_blocks(prompt)
    assert manager.get_cache(prompt).prefix_tokens == 3 * BLOCK
    changed = copy.deepcopy(manager.model)
    with torch.no_grad():
        changed.model.layers[2].self_attn.v_proj.weight[5, 5] += 1e-4
    other = KVCManager(changed, manager.tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                       policy="fetch")
    result = other.get_cache(prompt)
    assert result.prefix_tokens == 0 and store.gets == 3  # no block was fetched for the changed model


def test_a_changed_tokenizer_never_hits(tmp_path):
    store = MemoryBlockStore()
    manager = _manager(tmp_path, store=store)
    prompt = random_prompt(3 * BLOCK + 2, seed=15)
    manager.add_blocks(prompt)
    tokenizer = build_byte_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<tool>"]})
    other = KVCManager(manager.model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                       policy="fetch")
    assert other.get_cache(prompt).prefix_tokens == 0


def test_cold_index_finds_the_prefix_by_binary_search_over_probes(tmp_path):
    store = MemoryBlockStore()
    writer = _manager(tmp_path / "writer", store=store)
    prompt = random_prompt(8 * BLOCK + 1, seed=16)
    writer.add_blocks(prompt[: 5 * BLOCK])
    reader = _manager(tmp_path / "reader", store=store)  # an empty index, same constellation
    result = reader.get_cache(prompt)
    assert (result.prefix_tokens, result.source) == (5 * BLOCK, "probe")
    assert store.probes <= 3 + 5  # log2(8) searches, then the remaining records of the prefix
    probes = store.probes
    assert reader.get_cache(prompt).source == "index" and store.probes == probes  # index warmed


def test_probed_records_of_unknown_size_are_fetched_and_learnt(tmp_path):
    store = FailingStore(probe_knows_size=False)
    prompt = random_prompt(3 * BLOCK + 4, seed=19)
    hashes = _manager(tmp_path / "writer", store=store).add_blocks(prompt).hashes
    reader = _manager(tmp_path / "reader", store=store)
    result = reader.get_cache(prompt)
    assert (result.prefix_tokens, result.source, result.miss_reason) == (3 * BLOCK, "probe", None)
    stored_sizes = [len(store.get_block(reader.index.get(h).record)) for h in hashes]
    assert [reader.index.get(h).record.n_bytes for h in hashes] == stored_sizes  # -1 replaced by the real size


def test_index_survives_a_restart(tmp_path):
    store = MemoryBlockStore()
    prompt = random_prompt(3 * BLOCK + 4, seed=17)
    _manager(tmp_path, store=store).add_blocks(prompt)
    restarted = _manager(tmp_path, store=store, probe=False)
    result = restarted.get_cache(prompt)
    assert (result.prefix_tokens, result.source) == (3 * BLOCK, "index")


def test_generate_with_cache_stores_the_prompt_from_the_generation_cache(tmp_path):
    store = MemoryBlockStore()
    manager = _manager(tmp_path, store=store)
    prompt = random_prompt(3 * BLOCK + 4, seed=18)
    forwards = []
    hook = manager.model.register_forward_hook(lambda *args: forwards.append(1))
    try:
        first = generate_with_cache(manager, prompt, max_new_tokens=6, min_new_tokens=6)
    finally:
        hook.remove()
    assert first.lookup.prefix_tokens == 0 and first.added.blocks_stored == 3
    assert len(forwards) == 6  # prefill + 5 decode steps: the blocks came from generate's cache, no extra pass
    second = generate_with_cache(manager, prompt, max_new_tokens=6, min_new_tokens=6)
    assert second.lookup.prefix_tokens == 3 * BLOCK
    assert second.new_tokens == first.new_tokens


@pytest.mark.parametrize("mode", ["timeout", "corrupt"])
def test_strict_mode_evicts_then_raises_for_any_failure(tmp_path, mode):
    store = FailingStore()
    manager = _manager(tmp_path, store=store, strict=True)
    prompt = random_prompt(3 * BLOCK + 2, seed=20)
    hashes = manager.add_blocks(prompt).hashes
    store.fail[hashes[1]] = mode
    with pytest.raises(BlockMiss):
        manager.get_cache(prompt)
    assert store.evicted == hashes[1:] and hashes[1] not in manager.index


class _PutFailsAt(MemoryBlockStore):
    """Stores blocks one by one, refusing the n-th put (a satellite out of space, say)."""

    def __init__(self, fail_at: int):
        super().__init__()
        self.fail_at = fail_at

    def put_block(self, block_hash, payload):
        if self.puts == self.fail_at:
            self.puts += 1
            raise TimeoutError("SET_CHUNK not acknowledged")
        return super().put_block(block_hash, payload)


def test_blocks_stored_before_a_failed_put_stay_indexed(tmp_path):
    store = _PutFailsAt(fail_at=2)
    manager = _manager(tmp_path, store=store)
    prompt = random_prompt(4 * BLOCK + 2, seed=21)
    added = manager.add_blocks(prompt)
    assert added.blocks_stored == 2 and "TimeoutError" in added.error
    assert added.hashes[1] in manager.index and added.hashes[2] not in manager.index
    assert manager.get_cache(prompt).prefix_tokens == 2 * BLOCK


def _splitting_manager(tmp_path, store):
    """An "auto" manager whose rates make a split of 4 blocks at 2 the fastest: a block takes 16 ms to
    recompute (1 ms a token, no fixed cost) and 16 ms to load (the link estimate seeded so)."""
    model, tokenizer = tiny("fp32")
    rates = DeviceRates(PrefillModel(0.0, 1e-3, 0.0, "given"), RebuildModel(0.0, 1e12), [], {}, 0.0)
    manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                         device_rates=rates)
    for _ in range(16):  # the whole window: the real (fast) fetches of the test do not move its median
        manager.link.observe(4 * manager.block_bytes, 4 * 0.016, 0.0)
    return manager


def _greedy(model, input_ids, cache=None, new_tokens: int = 6) -> list[int]:
    """Greedy tokens after the prompt, with the prefix KV in `cache` (None: the whole prompt computed)."""
    with torch.no_grad():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **cache_arg(model, cache),
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    return out[0, input_ids.shape[1]:].tolist()


def test_a_split_recomputes_the_first_blocks_loads_the_rest_and_generates_the_same_tokens(tmp_path):
    store = MemoryBlockStore()
    manager = _splitting_manager(tmp_path, store)
    prompt = random_prompt(4 * BLOCK + 5, seed=22)
    manager.add_blocks(prompt)
    gets = store.gets
    result = manager.get_cache(prompt)
    assert result.decision.describe() == result.describe() == "split 2+2/4"  # all it planned came in
    assert store.gets - gets == 2  # only blocks 2 and 3 came from the store
    assert result.prefix_tokens == result.cache.get_seq_length() == 4 * BLOCK and result.miss_reason is None
    assert result.recomputed_tokens == 2 * BLOCK and result.recompute_s > 0
    assert result.bytes_retrieved == 2 * manager.block_bytes and len(result.blocks) == 4
    # the computed blocks come first, the loaded ones after them: the KV of one forward over the whole prefix
    # (generation alone would not see the order: attention over a fully visible prefix ignores it)
    with torch.no_grad():
        whole = cache_of(manager.model(input_ids=result.input_ids[:, :4 * BLOCK], use_cache=True))
    for joined, computed in zip(result.cache.layers, whole.layers, strict=True):
        torch.testing.assert_close(joined.keys, computed.keys, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(joined.values, computed.values, rtol=1e-4, atol=1e-5)
    assert _greedy(manager.model, result.input_ids, result.cache) == _greedy(manager.model, result.input_ids)


def test_a_miss_in_the_loaded_part_of_a_split_keeps_what_is_contiguous(tmp_path):
    store = FailingStore()
    manager = _splitting_manager(tmp_path, store)
    prompt = random_prompt(4 * BLOCK + 5, seed=23)
    hashes = manager.add_blocks(prompt).hashes
    store.fail[hashes[3]] = "miss"  # the second loaded block
    result = manager.get_cache(prompt)
    assert result.decision.describe() == "split 2+2/4" and result.miss_reason == "not-found"
    assert result.describe() == "split 2+2/4 planned, 1 loaded: not-found, 1 recomputed"
    assert result.prefix_tokens == result.cache.get_seq_length() == 3 * BLOCK  # 2 computed + 1 loaded
    assert result.blocks == hashes[:3] and store.evicted == hashes[3:]
    assert hashes[2] in manager.index and hashes[3] not in manager.index
    assert _greedy(manager.model, result.input_ids, result.cache) == _greedy(manager.model, result.input_ids)


def test_a_model_with_sliding_window_layers_is_never_split(tmp_path):
    """A split joins K/V by concatenation, which a sliding-window layer's cache does not take: auto loads instead."""
    model, tokenizer = tiny("fp32")
    model = copy.deepcopy(model)  # the shared test model keeps its config
    model.config.sliding_window = 4 * BLOCK
    model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers
    rates = DeviceRates(PrefillModel(0.0, 1e-3, 0.0, "given"), RebuildModel(0.0, 1e12), [], {}, 0.0)
    manager = KVCManager(model, tokenizer, MemoryBlockStore(), block_tokens=BLOCK, kv_dtype="fp32",
                         index_dir=tmp_path, device_rates=rates)
    for _ in range(16):  # the rates of _splitting_manager, where a split of 4 blocks at 2 is the fastest
        manager.link.observe(4 * manager.block_bytes, 4 * 0.016, 0.0)
    prompt = random_prompt(4 * BLOCK + 5, seed=24)
    manager.add_blocks(prompt)
    assert not manager.can_split
    assert manager.get_cache(prompt).decision.action in ("partial", "fetch", "recompute")


def test_the_cache_goes_in_by_the_name_the_installed_transformers_takes():
    """cache_arg / cache_of: `cache` on transformers 5 (past_key_values warns there), past_key_values before."""
    import inspect

    from skymemory.kv.model.cache_arg import cache_of

    model, _ = tiny("fp32")
    name = "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"
    ids = torch.tensor([random_prompt(BLOCK, seed=4)])
    with torch.no_grad():
        first = model(input_ids=ids, use_cache=True)
        cache = cache_of(first)
        assert cache is not None and cache.get_seq_length() == BLOCK
        assert list(cache_arg(model, cache)) == [name]
        nxt = model(input_ids=ids[:, -1:], **cache_arg(model, cache), use_cache=True)
    assert cache_of(nxt).get_seq_length() == BLOCK + 1
