"""LoRA adapters key blocks by their weights (kv.naming.extra_keys, issue 34), on the Hugging Face side (PEFT models).

A PeftModel's chain root is its base model's; its active adapter is folded into every block by a fingerprint
of the adapter's configuration and tensors, the same whether the adapter is in memory, saved as PEFT saves it
(the folder vLLM loads), loaded back, or saved under another name. Needs PEFT (the dev extra).
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
from peft import LoraConfig, PeftModel, PrefixTuningConfig, get_peft_model
from safetensors.torch import load_file, save_file

from skymemory.kv.naming import extra_keys
from skymemory.kv.naming.blocks import model_fingerprint
from skymemory.kv.model.cache_arg import cache_arg
from skymemory.kv.naming.extra_keys import Unkeyable, active_adapter, adapter_dir_fingerprint, base_model
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.model.models import load_model
from skymemory.kv.index.radix import RadixIndex
from skymemory.kv.store import MemoryBlockStore

from kv_support import random_prompt

BLOCK = 16
LORA = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)


def fresh():
    """embedded-tiny, a model object of its own (adapters are injected into it in place)."""
    return load_model("embedded-tiny", "cpu", "fp32")


def with_adapter(seed: int, **config):
    model, tokenizer = fresh()
    torch.manual_seed(seed)  # init_lora_weights=False: random A and B, so the adapter changes the outputs
    return get_peft_model(model, LoraConfig(**{**LORA, **config})), tokenizer


def save(model, directory) -> None:
    """As PEFT saves an adapter (without asking the Hub whether the vocabulary was resized: it was not)."""
    model.save_pretrained(directory, save_embedding_layers=False)


def manager_on(model, tokenizer, store, index) -> KVCManager:
    return KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index=index, policy="fetch")


def generate(model, prompt, n=6):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


def test_the_root_is_the_base_models_and_the_adapter_is_named_by_its_weights(tmp_path):
    plain, _ = fresh()
    adapted, _ = with_adapter(1)
    assert model_fingerprint(base_model(adapted)) == model_fingerprint(plain)
    fingerprint = active_adapter(adapted)
    assert fingerprint is not None and active_adapter(plain) is None
    save(adapted, tmp_path / "a1")
    assert adapter_dir_fingerprint(tmp_path / "a1") == fingerprint  # the folder vLLM would load
    model, _ = fresh()
    loaded = PeftModel.from_pretrained(model, tmp_path / "a1", adapter_name="renamed")
    assert active_adapter(loaded) == fingerprint  # loaded back, under another name
    assert model_fingerprint(base_model(loaded)) == model_fingerprint(plain)
    other, _ = with_adapter(2)
    assert active_adapter(other) != fingerprint  # other weights
    scaled, _ = with_adapter(1, lora_alpha=16)
    assert active_adapter(scaled) != fingerprint  # the same weights, scaled otherwise
    with loaded.disable_adapter():
        assert active_adapter(loaded) is None  # the base model runs: its blocks are the base model's


def test_a_saved_adapters_fingerprint_follows_its_files_not_its_name_nor_its_dtype(tmp_path):
    adapted, _ = with_adapter(3)
    save(adapted, tmp_path / "a")
    fingerprint = adapter_dir_fingerprint(tmp_path / "a")
    # the same adapter in fp16 (values that fp16 holds exactly) and under another folder name: the same adapter
    tensors = {k: v.half().float() for k, v in load_file(tmp_path / "a" / "adapter_model.safetensors").items()}
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    save_file(tensors, tmp_path / "b" / "adapter_model.safetensors")
    save_file({k: v.half() for k, v in tensors.items()}, tmp_path / "c" / "adapter_model.safetensors")
    for name in ("b", "c"):
        (tmp_path / name / "adapter_config.json").write_text((tmp_path / "a" / "adapter_config.json").read_text())
    assert adapter_dir_fingerprint(tmp_path / "b") == adapter_dir_fingerprint(tmp_path / "c")
    # a changed file is read again (kept per size and modification time)
    config = json.loads((tmp_path / "c" / "adapter_config.json").read_text())
    config["lora_alpha"] = 32
    config["lora_dropout"] = 0.3  # dropout does not change what an adapter computes at inference
    (tmp_path / "c" / "adapter_config.json").write_text(json.dumps(config))
    assert adapter_dir_fingerprint(tmp_path / "c") != adapter_dir_fingerprint(tmp_path / "b")
    with pytest.raises(Unkeyable, match="no adapter_config.json"):
        adapter_dir_fingerprint(tmp_path / "missing")
    assert fingerprint == active_adapter(adapted)


def test_blocks_stored_with_an_adapter_are_hits_for_that_adapter_only(tmp_path):
    store, index = MemoryBlockStore(), RadixIndex(tmp_path / "index")
    a1, tokenizer = with_adapter(1)
    a2, _ = with_adapter(2)
    plain, _ = fresh()
    m1, m2, m0 = (manager_on(m, tokenizer, store, index) for m in (a1, a2, plain))
    assert m1.root == m2.root == m0.root  # one model: its adapters are keyed per block
    prompt = random_prompt(3 * BLOCK + 5, seed=9)
    assert m1.add_blocks(prompt).blocks_stored == 3
    assert m2.get_cache(prompt).prefix_tokens == 0  # another adapter's KV is not this one's
    assert m0.get_cache(prompt).prefix_tokens == 0  # nor the base model's
    assert m1.get_cache(prompt, cache_salt="tA").prefix_tokens == 0  # nor another tenant's
    hit = m1.get_cache(prompt)
    assert hit.prefix_tokens == 3 * BLOCK
    with torch.no_grad():
        out = a1.generate(hit.input_ids, attention_mask=hit.attention_mask, **cache_arg(base_model(a1), hit.cache),
                          max_new_tokens=6, do_sample=False)
    assert out[0, len(prompt):].tolist() == generate(a1, prompt) != generate(plain, prompt)
    # the same adapter loaded from its folder into another model object: the same blocks
    save(a1, tmp_path / "a1")
    model, _ = fresh()
    again = manager_on(PeftModel.from_pretrained(model, tmp_path / "a1"), tokenizer, store, index)
    assert again.get_cache(prompt).prefix_tokens == 3 * BLOCK
    with again.model.disable_adapter():  # adapters off: the base model's chain (empty here)
        assert again.get_cache(prompt).prefix_tokens == 0
        assert again.add_blocks(prompt).blocks_stored == 3
    assert m0.get_cache(prompt).prefix_tokens == 3 * BLOCK


def test_an_adapter_that_cannot_be_keyed_is_neither_loaded_nor_stored(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(extra_keys, "_said", set())
    model, tokenizer = fresh()
    prefix = get_peft_model(model, PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4))
    manager = manager_on(prefix, tokenizer, MemoryBlockStore(), RadixIndex(tmp_path / "index"))
    prompt = random_prompt(2 * BLOCK + 3, seed=10)
    with caplog.at_level(logging.WARNING):
        added = manager.add_blocks(prompt)
        assert added.blocks_stored == 0 and added.error.startswith("not keyed: a PREFIX_TUNING adapter")
        assert manager.get_cache(prompt).prefix_tokens == 0
    assert caplog.text.count("cannot be keyed") == 1
    assert len(manager.index) == 0
    strict = KVCManager(prefix, tokenizer, MemoryBlockStore(), block_tokens=BLOCK, kv_dtype="fp32",
                        index=RadixIndex(), strict=True)
    with pytest.raises(Unkeyable):
        strict.get_cache(prompt)
