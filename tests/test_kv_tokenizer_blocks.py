"""Byte tokenizer, block splitting and the chained block hashes."""

import copy
import hashlib

import pytest
import torch

from kv_support import tiny
from skymemory.kv.naming import blocks
from skymemory.kv.model.tokenizer import BOS_ID, EOS_ID, VOCAB_SIZE, build_byte_tokenizer


def test_byte_tokenizer_round_trips_any_text_and_adds_bos():
    tokenizer = build_byte_tokenizer()
    text = "héllo wörld 🚀\n\ttabs and  spaces"
    ids = tokenizer(text).input_ids
    assert ids[0] == BOS_ID
    assert len(ids) == 1 + len(text.encode("utf-8"))
    assert ids[1] == 3 + ord("h")
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.eos_token_id == EOS_ID and len(tokenizer) == VOCAB_SIZE


def test_tokenizer_fingerprint_is_stable_and_sensitive():
    a, b = build_byte_tokenizer(), build_byte_tokenizer()
    assert blocks.tokenizer_fingerprint(a) == blocks.tokenizer_fingerprint(b)
    b.add_tokens(["<extra>"])
    assert blocks.tokenizer_fingerprint(a) != blocks.tokenizer_fingerprint(b)


def test_token_bytes_are_big_endian_u32():
    assert blocks.token_bytes([1, 258, 0x01020304]) == bytes.fromhex("00000001" "00000102" "01020304")
    with pytest.raises(ValueError):
        blocks.token_bytes([-1])


@pytest.mark.parametrize("n_tokens,expected", [(1, 0), (16, 0), (17, 1), (32, 1), (33, 2), (128, 7), (129, 8)])
def test_usable_blocks_always_leave_one_token(n_tokens, expected):
    assert blocks.usable_blocks(n_tokens, 16) == expected


def test_split_blocks_keeps_only_full_blocks():
    assert blocks.split_blocks(list(range(40)), 16) == [list(range(16)), list(range(16, 32))]


def test_chain_hash_is_sha256_of_previous_and_tokens():
    root = bytes(range(32))
    first, second = [1, 2, 3], [4, 5, 6]
    h0, h1 = blocks.chain_hashes(root, [first, second])
    assert h0 == hashlib.sha256(root + blocks.token_bytes(first)).digest()
    assert h1 == hashlib.sha256(h0 + blocks.token_bytes(second)).digest()
    # a block's hash depends on everything before it
    assert blocks.chain_hashes(root, [[9, 9, 9], second])[1] != h1


def test_a_single_changed_weight_changes_the_model_fingerprint():
    model, _ = tiny()
    before = blocks.model_fingerprint(model)
    assert blocks.model_fingerprint(model) == before  # cached, same
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.model.layers[1].mlp.down_proj.weight[3, 7] += 1e-6
    assert blocks.model_fingerprint(changed) != before
    # in place on the same object: the cached digest must not be served
    weight = model.model.layers[0].self_attn.k_proj.weight
    with torch.no_grad():
        original = weight[0, 0].item()
        weight[0, 0] = original + 1e-6
    try:
        assert blocks.model_fingerprint(model) != before
    finally:
        with torch.no_grad():
            weight[0, 0] = original
    assert blocks.model_fingerprint(model) == before


def test_root_binds_encoding_and_block_size():
    m, t = bytes(32), bytes([1]) * 32
    roots = {
        blocks.root_hash(m, t, kv_format=f, block_tokens=n) for f in ("fp16", "int8") for n in (16, 128)
    }
    assert len(roots) == 4


def test_saving_a_model_does_not_change_its_fingerprint(tmp_path):
    from skymemory.kv.model.models import load_model

    model, _ = load_model("embedded-tiny", "cpu", "fp32")
    before = blocks.model_fingerprint(model)
    model.save_pretrained(tmp_path)  # writes config.architectures into the model's own config
    assert blocks.model_fingerprint(model) == before


def test_a_quantised_model_is_watched_without_running_its_tensors_python_code(monkeypatch):
    """The lookup re-checks the weights on every call: for qint8 weights that must cost no Python dispatch
    (quanto's detach and flatten made a qint8 lookup several times dearer than an fp32 one), yet an
    in-place change of a quantised weight's int8 data must still change the fingerprint."""
    from optimum.quanto.tensor.weights.qbytes import WeightQBytesTensor

    from skymemory.kv.model.models import load_model

    model, _ = load_model("embedded-tiny", "cpu", "fp32", quantize="qint8")
    before = blocks.model_fingerprint(model)
    calls = []
    for method in ("__torch_dispatch__", "__torch_function__"):  # classmethods: the original is bound
        def counted(cls, *args, _original=getattr(WeightQBytesTensor, method), _method=method, **kwargs):
            calls.append(_method)
            return _original(*args, **kwargs)

        monkeypatch.setattr(WeightQBytesTensor, method, classmethod(counted))
    flatten = WeightQBytesTensor.__tensor_flatten__
    monkeypatch.setattr(WeightQBytesTensor, "__tensor_flatten__",
                        lambda self: calls.append("__tensor_flatten__") or flatten(self))
    assert blocks.model_fingerprint(model) == before and calls == []
    weight = model.model.layers[0].self_attn.k_proj.weight
    assert isinstance(weight, WeightQBytesTensor)
    monkeypatch.undo()
    data = weight._data
    with torch.no_grad():
        original = data[0, 0].item()
        data[0, 0] = original + 1 if original < 127 else original - 1
    try:
        assert blocks.model_fingerprint(model) != before
    finally:
        with torch.no_grad():
            data[0, 0] = original
    assert blocks.model_fingerprint(model) == before
