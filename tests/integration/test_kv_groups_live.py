"""Today's model families through real satellite processes (issue 52): a grouped model's blocks (the state in
the block that ends a prompt: a bigger record) stored by one ground host are found by another through their
records in orbit, land sealed, and give the tokens of no cache."""

from __future__ import annotations

import pytest

from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.model.models import FAMILIES
from skymemory.kv.hf.report import compare_generation
from skymemory.store.constellation import ConstellationBlockStore

from kv_support import random_prompt
from test_kv_groups import BLOCK, family


@pytest.mark.parametrize("name", sorted(FAMILIES.values()))
def test_a_second_host_loads_a_grouped_prefix_from_orbit_with_the_tokens_of_no_cache(constellation, tmp_path, name):
    model, tokenizer = family(name)
    servers = constellation.constellation().nearest(5)
    prompt = random_prompt(10 * BLOCK + 5, seed=53)
    with ConstellationBlockStore.from_manifest(constellation, servers) as store:
        assert store.sealed
        first = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="auto", index_dir=tmp_path / "a",
                           policy="fetch")
        assert first.add_blocks(prompt).blocks_stored == 10
        second = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="auto",
                            index_dir=tmp_path / "b", policy="fetch")  # another host: its index knows nothing
        found = second.get_cache(prompt)
        assert found.source == "orbit" and found.prefix_tokens == 10 * BLOCK
        comparison = compare_generation(second, prompt, new_tokens=6)
        assert comparison.prefix_tokens == 10 * BLOCK
        assert comparison.cached == comparison.reference
