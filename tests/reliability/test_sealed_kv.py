"""Sealed KV blocks against a captured satellite (issue 34), on real nodes: what a satellite rewrites is a
clean miss, never a cache.

The attacker is test_sealed_content's: the satellite that holds a chunk of a stored KV block, captured,
serves other bytes for it (random bytes, or the sealed chunk of another block of the same prompt that it
recorded: a swap); rewrite_held puts them in its store, and the ground reads the rewrite back before the
test goes on. The prefix must then end before that block: the block is a
miss ("seal"), evicted and dropped from the index with the blocks after it, the satellite that
served it is counted, the model computes the rest, and the tokens equal those of no cache at all.
"""

from __future__ import annotations

import os

import pytest
import torch

from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.hf.report import compare_generation
from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore

from kv_support import random_prompt, tiny
from test_sealed_content import ground_read, rewrite_held, sky  # noqa: F401 - sky: the module's constellation

BLOCK = 16


@pytest.mark.parametrize("rewrite", ["random", "swap"])
def test_a_rewritten_kv_chunk_is_a_clean_miss_and_the_tokens_equal_no_cache(sky, tmp_path, rewrite):  # noqa: F811
    m = Manifest.load(sky)
    model, tokenizer = tiny("fp32")
    with ConstellationBlockStore.nearest_from_manifest(m, 5) as store:
        assert store.sealed
        manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                             policy="fetch")
        prompt = random_prompt(3 * BLOCK + 5, seed=34 + len(rewrite))
        hashes = manager.add_blocks(prompt).hashes
        assert len(hashes) == 3 and manager.get_cache(prompt).prefix_tokens == 3 * BLOCK
        record = manager.index.get(hashes[1]).record
        holder = store._servers(record, m.constellation().mission_ms())[0]  # chunk 0 of block 1
        honest = ground_read(m, holder, hashes[1], 0)
        if rewrite == "random":
            forged = os.urandom(len(honest))
        else:  # a chunk the ground sealed, of another block: valid ciphertext, the wrong place
            other = manager.index.get(hashes[0]).record
            forged = ground_read(m, store._servers(other, m.constellation().mission_ms())[0], hashes[0], 0)
        assert forged != honest
        rewrite_held(m, holder, hashes[1], 0, record.chunk_count, forged)

        comparison = compare_generation(manager, prompt, new_tokens=6)
        assert comparison.prefix_tokens == BLOCK  # block 0 only: the prefix ends before the rewritten block
        assert comparison.cached == comparison.reference  # the model computed the rest: the tokens of no cache
        assert store.seal_failures == {tuple(holder): 1}  # the satellite that served it, counted
        # and in the ground index's ledger, which every process of this host (status, the dashboard) reads
        assert {sat: n for sat, (n, _) in manager.index.seal_failures().items()} == {tuple(holder): 1}
        assert hashes[0] in manager.index and hashes[1] not in manager.index and hashes[2] not in manager.index
        again = manager.get_cache(prompt)  # the failed block is not claimed again
        assert again.prefix_tokens == BLOCK and again.miss_reason == "not-cached"


def test_a_tenant_opens_only_its_own_blocks(sky, tmp_path):  # noqa: F811
    """Each cache salt seals under its own key: another tenant (or the default one) given the very record
    reads nothing of it, whatever the index says; and a salted prompt is found with its salt only."""
    from skymemory.store.contract import BlockMiss

    m = Manifest.load(sky)
    with ConstellationBlockStore.nearest_from_manifest(m, 5) as store:
        tenant_a, tenant_b = store.for_tenant("tA"), store.for_tenant("tB")
        payload = os.urandom(30_000)
        record = tenant_a.put_block(os.urandom(32), payload)
        assert tenant_a.get_block(record) == payload
        for other in (tenant_b, store):
            with pytest.raises(BlockMiss) as miss:
                other.get_block(record)
            assert miss.value.reason == "seal"

        model, tokenizer = tiny("fp32")
        manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                             policy="fetch")
        prompt = random_prompt(2 * BLOCK + 3, seed=77)
        assert manager.add_blocks(prompt, cache_salt="tA").blocks_stored == 2
        assert manager.get_cache(prompt, cache_salt="tB").prefix_tokens == 0
        assert manager.get_cache(prompt).prefix_tokens == 0
        hit = manager.get_cache(prompt, cache_salt="tA")
        assert hit.prefix_tokens == 2 * BLOCK and hit.sources == {"device": 0, "host": 0, "store": 2}
        streamed = manager.get_cache(prompt, streaming=True, cache_salt="tA")
        assert streamed.prefix_tokens == 2 * BLOCK
        streamed.cache.stream.join(30)
        assert streamed.cache.stream.error is None


def test_two_hosts_with_other_stripe_layouts_read_each_others_kv_blocks_exact_or_a_clean_miss(sky, tmp_path):  # noqa: F811
    """S1 (issue 53), with no attacker: host 1 stripes 9 wide with 2 parity chunks (7 + 2), host 2 5 wide with 1
    (4 + 1, 3 + 1): a block of 7 data chunks is 9 chunks either way, under the same names. Both store a prompt;
    a chunk that is data in one layout is parity in the other. Every host's get is then the stored K/V exactly,
    or a clean miss: the seal binds the layout (a chunk of the other's does not open), and a sealed landing
    checks the payload's CRC32C as a plain one does, so other bytes never reach the model."""
    m = Manifest.load(sky)
    model, tokenizer = tiny("fp32")
    tokens = 24  # 38,464-byte blocks: 7 data chunks of 6,112
    prompt = random_prompt(3 * tokens + 5, seed=153)
    with ConstellationBlockStore.nearest_from_manifest(m, 9, parity=2) as wide, \
            ConstellationBlockStore.nearest_from_manifest(m, 5, parity=1, client_options={"station_id": 41}) as narrow:
        hosts = [KVCManager(model, tokenizer, store, block_tokens=tokens, kv_dtype="fp32", index_dir=tmp_path / name,
                            policy="fetch", orbit=False) for name, store in (("wide", wide), ("narrow", narrow))]
        for host in hosts:
            assert host.add_blocks(prompt).blocks_stored == 3  # its own index: each stores in its own layout
        with torch.no_grad():  # the K/V add_blocks stored: one forward over the prompt's whole blocks
            stored = model(torch.tensor([prompt[:3 * tokens]]), use_cache=True).past_key_values
        outcomes = []
        for host in hosts:
            result = host.get_cache(prompt)
            n = result.prefix_tokens
            for layer, want in zip(result.cache.layers if n else (), stored.layers):
                assert torch.equal(layer.keys, want.keys[:, :, :n]) and torch.equal(layer.values, want.values[:, :, :n])
            assert n == 3 * tokens or result.miss_reason in ("corrupt", "seal", "not-found", "incomplete"), result
            outcomes.append((n // tokens, result.miss_reason))
        print("blocks read exact, miss reason per host:", outcomes)


def test_a_block_stored_in_two_layouts_under_one_name_reads_back_exact_or_a_clean_miss(sky):  # noqa: F811
    """S1 at the store, for any block (a named object's data too): the seal binds the chunk size, k and m, so a
    chunk stored under one layout never opens under another. Host 1 (7 + 2) stores a block, host 2 (4 + 1, 3 + 1)
    stores other content under the same name, over the same satellites; each record then reads back what its host
    stored, or a clean miss ("seal"), never the other's bytes or a mix. A probe (no record: the layout guessed
    from the chunks) finds the layout the chunks were sealed in."""
    from skymemory.store.contract import BlockMiss

    m = Manifest.load(sky)
    name, n_bytes = os.urandom(32), 7 * 6112  # 7 data chunks: 9 on the wire either way
    payloads = [os.urandom(n_bytes), os.urandom(n_bytes)]
    with ConstellationBlockStore.nearest_from_manifest(m, 9, parity=2) as wide, \
            ConstellationBlockStore.nearest_from_manifest(m, 5, parity=1, client_options={"station_id": 41}) as narrow:
        records = [store.put_block(name, payload) for store, payload in zip((wide, narrow), payloads)]
        assert records[0].chunk_count == records[1].chunk_count == 9
        outcomes = []
        for store, record, payload in zip((wide, narrow), records, payloads):
            try:
                got = store.get_block(record)
            except BlockMiss as miss:
                outcomes.append(miss.reason)
                continue
            assert got == payload, "other bytes read back"
            outcomes.append("exact")
        print("per host:", outcomes)
        assert outcomes[1] == "exact"  # the last writer's chunks, all in place
        assert outcomes[0] in ("exact", "seal")  # the first's: its chunks overwritten where the two layouts met
        probed = narrow.probe_block(name)
        assert probed is not None and (probed.parity, probed.stripe_data) == (1, 4)
        assert narrow.get_block(probed) == payloads[1]
