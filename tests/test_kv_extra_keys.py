"""Blocks keyed by more than their tokens (kv.naming.extra_keys, issue 34): tenants' salts, adapters, media, embeddings.

The hashing (kv.naming.blocks.chain_hashes with extra keys), where each key goes (as vLLM's prefix cache puts it),
KVCManager's `cache_salt=`, and the connector's scheduler side given keys. PEFT adapters: test_kv_adapters.py;
vLLM's own Request objects and engines: vllm_engine/test_vllm_keys.py.
"""

from __future__ import annotations

import hashlib
import logging

import pytest
import torch

from skymemory.kv.naming import extra_keys
from skymemory.kv.naming.blocks import chain_hashes, extra_key_bytes, split_blocks, token_bytes
from skymemory.kv.naming.extra_keys import Media, RequestKeys, Unkeyable, embeds_hashes
from skymemory.kv.hf.manager import KVCManager, generate_with_cache
from skymemory.kv.paged.paged_scheduler import PagedScheduler
from skymemory.kv.index.radix import RadixIndex
from skymemory.kv.store import BlockRecord, MemoryBlockStore
from skymemory.protocol import native

from fakesat import FakeSatellite
from kv_support import random_prompt, tiny

BLOCK = 16
ROOT = hashlib.sha256(b"root").digest()


# ---- hashing ---------------------------------------------------------------------------------------------

def test_a_block_without_extra_keys_hashes_as_it_always_has():
    blocks = split_blocks(random_prompt(3 * BLOCK, seed=1), BLOCK)
    previous, want = ROOT, []
    for block in blocks:  # the paper's chain, written out
        previous = hashlib.sha256(previous + token_bytes(block)).digest()
        want.append(previous)
    assert chain_hashes(ROOT, blocks) == want
    assert chain_hashes(ROOT, blocks, [None, (), None]) == want
    assert chain_hashes(ROOT, blocks, []) == want  # a short list: the blocks after it have none
    assert RequestKeys().per_block(3, BLOCK) is None  # nothing to key: the plain chain


def test_extra_keys_change_their_block_and_every_block_after_it():
    blocks = split_blocks(random_prompt(3 * BLOCK, seed=2), BLOCK)
    plain = chain_hashes(ROOT, blocks)
    salted = chain_hashes(ROOT, blocks, [(("cache_salt", "tA"),), None, None])
    assert all(a != b for a, b in zip(plain, salted))  # the salt on block 0 reaches every block through the chain
    other = chain_hashes(ROOT, blocks, [(("cache_salt", "tB"),), None, None])
    assert all(a != b for a, b in zip(salted, other))
    late = chain_hashes(ROOT, blocks, [None, None, (("media", "img", 3),)])
    assert late[:2] == plain[:2] and late[2] != plain[2]


def test_the_encoding_of_extra_keys_is_unambiguous():
    pairs = [((("s", "ab"),), (("s", "a"), ("b",))),  # where one key ends and the next begins
             ((("k", "1"),), (("k", 1),)),  # a str and an int
             ((("k", b"x"),), (("k", "x"),)),  # bytes and a str
             ((("k", "a", "b"),), (("k", "ab"),)),  # two fields and one
             ((("cache_salt", "t"),), (("cache_salt", "t"), ("cache_salt", "t")))]  # one key and the same twice
    for left, right in pairs:
        assert extra_key_bytes(left) != extra_key_bytes(right), (left, right)
    for bad in [("cache_salt", "t"), (("cache_salt", True),), (("k", 1.5),), ((1, "x"),)]:
        with pytest.raises(TypeError):
            extra_key_bytes(bad)


def test_each_key_goes_where_vllm_puts_it():
    adapter = hashlib.sha256(b"adapter").digest()
    embeds = tuple(hashlib.sha256(bytes([i])).digest() for i in range(4))
    # an image over tokens 10..29 (blocks 0 and 1), another at 40..47 (block 2)
    keys = RequestKeys(cache_salt="tA", adapter=adapter, media=(Media("img1", 10, 20), Media("img2", 40, 8)),
                       embeds=embeds)
    per_block = keys.per_block(4, BLOCK)
    assert per_block[0] == (("adapter", adapter), ("media", "img1", 10), ("cache_salt", "tA"),
                            ("prompt_embeds", embeds[0]))
    assert per_block[1] == (("adapter", adapter), ("media", "img1", -6), ("prompt_embeds", embeds[1]))
    assert per_block[2] == (("adapter", adapter), ("media", "img2", 8), ("prompt_embeds", embeds[2]))
    assert per_block[3] == (("adapter", adapter), ("prompt_embeds", embeds[3]))
    assert RequestKeys(cache_salt="tA").per_block(3, BLOCK) == [(("cache_salt", "tA"),), None, None]
    assert RequestKeys(cache_salt="").per_block(3, BLOCK) is None  # an empty salt is none (as vLLM's)
    assert RequestKeys(cache_salt="tA").tenant == "tA" and RequestKeys().tenant is None
    with pytest.raises(ValueError, match="prompt-embedding hashes"):
        RequestKeys(embeds=embeds[:2]).per_block(4, BLOCK)


def test_embedding_hashes_are_per_block_and_follow_values_and_dtype():
    embeds = torch.randn(2 * BLOCK + 5, 8)
    hashes = embeds_hashes(embeds, BLOCK)
    assert len(hashes) == 2 and hashes[0] != hashes[1]
    changed = embeds.clone()
    changed[BLOCK + 1, 3] += 1
    assert embeds_hashes(changed, BLOCK) == (hashes[0], embeds_hashes(changed, BLOCK)[1]) != hashes
    assert embeds_hashes(embeds.half(), BLOCK) != hashes


# ---- KVCManager: cache_salt ----------------------------------------------------------------------------

@pytest.fixture
def manager(tmp_path):
    model, tokenizer = tiny("fp32")
    return KVCManager(model, tokenizer, MemoryBlockStore(), block_tokens=BLOCK, kv_dtype="fp32",
                      index=RadixIndex(tmp_path / "index"), policy="fetch")


def test_a_salted_prefix_is_found_with_its_salt_only(manager):
    prompt = random_prompt(3 * BLOCK + 4, seed=3)
    assert manager.add_blocks(prompt, cache_salt="tA").blocks_stored == 3
    hit = manager.get_cache(prompt, cache_salt="tA")
    assert hit.prefix_tokens == 3 * BLOCK and hit.source == "index"
    for salt in ("tB", None, ""):
        assert manager.get_cache(prompt, cache_salt=salt).prefix_tokens == 0, salt
    assert manager.find_prefix(prompt, cache_salt="tA").tenant == "tA"
    assert manager.find_prefix(prompt).tenant is None
    # the salted chain hangs below the same root: the other tenant's blocks are its own
    assert manager.add_blocks(prompt, cache_salt="tB").blocks_stored == 3
    assert manager.add_blocks(prompt).blocks_stored == 3
    assert len(manager.index) == 9
    assert manager.block_hashes(prompt, cache_salt="tA") != manager.block_hashes(prompt, cache_salt="tB")
    # the unsalted chain is the one it always was
    assert manager.block_hashes(prompt) == chain_hashes(manager.root, split_blocks(prompt, BLOCK))


def test_generation_with_a_salted_prefix_gives_the_uncached_tokens(manager):
    prompt = random_prompt(2 * BLOCK + 7, seed=4)
    first = generate_with_cache(manager, prompt, max_new_tokens=6, cache_salt="tA")
    assert first.lookup.prefix_tokens == 0 and first.added.blocks_stored == 2
    again = generate_with_cache(manager, prompt, max_new_tokens=6, cache_salt="tA")
    assert again.lookup.prefix_tokens == 2 * BLOCK and again.new_tokens == first.new_tokens
    other = generate_with_cache(manager, prompt, max_new_tokens=6, cache_salt="tB", store_new=False)
    assert other.lookup.prefix_tokens == 0 and other.new_tokens == first.new_tokens


@pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")
def test_a_streamed_lookup_is_keyed_to_its_salt(tmp_path):
    from skymemory.kv.transfer.streaming import StreamingCache
    from skymemory.store.constellation import ConstellationBlockStore

    sats = [FakeSatellite(0, i) for i in range(3)]
    for s in sats:
        s.__enter__()
    store = ConstellationBlockStore({s.me: s.address for s in sats}, [s.me for s in sats], chunk_bytes=700,
                                    client_options={"timeout": 0.2}, fast_options={"rto_s": 0.05, "deadline_s": 10})
    try:
        model, tokenizer = tiny("fp32")
        manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                             policy="fetch")
        prompt = random_prompt(2 * BLOCK + 3, seed=5)
        assert manager.add_blocks(prompt, cache_salt="tA").blocks_stored == 2
        streamed = manager.get_cache(prompt, streaming=True, cache_salt="tA")
        assert isinstance(streamed.cache, StreamingCache) and streamed.prefix_tokens == 2 * BLOCK
        streamed.cache.stream.close()
        assert manager.get_cache(prompt, streaming=True, cache_salt="tB").prefix_tokens == 0
        assert manager.get_cache(prompt, streaming=True).prefix_tokens == 0
    finally:
        store.close()
        for s in sats:
            s.__exit__()


# ---- the connector's scheduler side -----------------------------------------------------------------------

def _index_chain(index: RadixIndex, hashes: list[bytes]) -> None:
    index.insert_chain(ROOT, [(BlockRecord(h, 1000, 6144, 1, 0, "explicit", 5, (0, 0)), None) for h in hashes])


def _scheduler(index: RadixIndex) -> PagedScheduler:
    return PagedScheduler(root=ROOT, block_tokens=4, block_bytes=1000, layers=2, index=index, policy="fetch")


def test_the_scheduler_matches_and_saves_under_the_requests_keys():
    index = RadixIndex()
    prompt = list(range(10, 23))  # 13 tokens: 3 blocks
    tenant_a = RequestKeys(cache_salt="tA")
    _index_chain(index, chain_hashes(ROOT, split_blocks(prompt, 4), tenant_a.per_block(3, 4)))
    scheduler = _scheduler(index)
    assert scheduler.match("a", prompt, 0, keys=tenant_a) == 3 * 4
    assert scheduler.match("b", prompt, 0, keys=RequestKeys(cache_salt="tB")) == 0
    assert scheduler.match("c", prompt, 0) == 0  # no salt: the plain chain, not tenant A's
    calls = []

    def tenant_b() -> RequestKeys:
        calls.append(1)
        return RequestKeys(cache_salt="tB")

    assert scheduler.match("d", prompt, 0, keys=tenant_b) == 0
    assert scheduler.match("d", prompt, 0, keys=tenant_b) == 0  # matched again: the keys are not taken again
    assert calls == [1]
    # d's saves are its own chain's: block 0 hashed with tenant B's salt, below the model's root
    plan = scheduler.step([("d", None, [5, 6, 7, 8], 0)], [], {"d": len(prompt)})
    want = chain_hashes(ROOT, split_blocks(prompt, 4), RequestKeys(cache_salt="tB").per_block(3, 4))
    assert [(s.block_hash, s.parent) for s in plan.saves] == [(want[0], ROOT), (want[1], want[0]),
                                                               (want[2], want[1])]
    assert scheduler._requests["d"].tenant == "tB"


def test_a_request_that_cannot_be_keyed_is_neither_loaded_nor_saved_and_said_once(caplog, monkeypatch):
    monkeypatch.setattr(extra_keys, "_said", set())
    index = RadixIndex()
    prompt = list(range(10, 23))
    _index_chain(index, chain_hashes(ROOT, split_blocks(prompt, 4)))
    scheduler = _scheduler(index)

    def cannot() -> RequestKeys:
        raise Unkeyable("a 'hologram' input", "vLLM keys blocks by it; SkyMemory does not know it")

    with caplog.at_level(logging.WARNING):
        assert scheduler.match("a", prompt, 0, keys=cannot) == 0  # the plain chain is cached: still not loaded
        assert scheduler.match("b", prompt, 0, keys=cannot) == 0
    assert caplog.text.count("'hologram' input cannot be keyed") == 1
    assert scheduler.step([("a", None, [1, 2, 3, 4], 0)], [], {"a": len(prompt)}).saves == []
    assert scheduler.finished("a")["decision"].startswith("not cached: a 'hologram' input")


def test_a_request_scheduled_without_being_matched_is_not_saved():
    scheduler = _scheduler(RadixIndex())
    prompt = list(range(10, 23))
    assert scheduler.step([("x", prompt, [1, 2, 3, 4], 0)], [], {"x": len(prompt)}).saves == []
    assert scheduler.match("y", prompt, 0) == 0
    assert scheduler.step([("y", prompt[:-1] + [99], [1, 2, 3, 4], 0)], [], {"y": 12}).saves == []  # another prompt
    assert len(scheduler.step([("y", prompt, [1, 2, 3, 4], 0)], [], {"y": 12}).saves) == 3
