"""KV block serialisation: layout, sizes, digest, int8."""

import pytest
import torch
from transformers import DynamicCache

from skymemory.kv import codec


def _layers(n_layers=3, heads=4, tokens=16, dim=8, seed=0, scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(heads, tokens, dim, generator=generator) * scale, torch.randn(heads, tokens, dim, generator=generator) * scale)
        for _ in range(n_layers)
    ]


@pytest.mark.parametrize("fmt", codec.KV_FORMATS)
def test_round_trip_and_size(fmt):
    layers = _layers()
    data = codec.encode_block(layers, fmt)
    geometry = codec.BlockGeometry(3, 4, 8, 16)
    assert len(data) == codec.block_bytes(geometry, fmt)
    block = codec.decode_block(data, geometry)
    assert block.header.kv_format == fmt
    tolerance = {"fp32": 0.0, "fp16": 2e-3, "bf16": 2e-2, "int8": 3e-2}[fmt]
    for (k, v), (k2, v2) in zip(layers, block.layers):
        assert (k - k2).abs().max().item() <= tolerance * k.abs().max().item()
        assert (v - v2).abs().max().item() <= tolerance * v.abs().max().item()


def test_fp16_is_exact_for_fp16_values():
    layers = [(k.half().float(), v.half().float()) for k, v in _layers()]
    block = codec.decode_block(codec.encode_block(layers, "fp16"))
    assert all(torch.equal(k, k2) and torch.equal(v, v2) for (k, v), (k2, v2) in zip(layers, block.layers))


def test_layout_is_layer_major_k_then_v():
    layers = [(k.half(), v.half()) for k, v in _layers()]
    data = codec.encode_block(layers, "fp16")
    geometry = codec.BlockGeometry(3, 4, 8, 16)
    size = 4 * 16 * 8 * 2
    for layer, (k, v) in enumerate(layers):
        start = codec.layer_offset(geometry, "fp16", layer)
        assert data[start : start + size] == k.numpy().tobytes()
        assert data[start + size : start + 2 * size] == v.numpy().tobytes()


def test_int8_about_halves_the_bytes():
    geometry = codec.BlockGeometry(22, 4, 64, 128)  # TinyLlama, 128 tokens
    fp16, int8 = codec.block_bytes(geometry, "fp16"), codec.block_bytes(geometry, "int8")
    assert fp16 == 64 + 22 * 2 * 4 * 128 * 64 * 2  # 2,883,648: the paper's "about 2.9 MB"
    assert 0.5 < int8 / fp16 < 0.53


def test_int8_uses_per_channel_key_scales():
    keys, values = _layers(n_layers=1)[0]
    keys[:, :, 0] *= 100.0  # an outlier channel must not wreck the other channels
    block = codec.decode_block(codec.encode_block([(keys, values)], "int8"))
    k2 = block.layers[0][0]
    assert (keys[:, :, 1:] - k2[:, :, 1:]).abs().max().item() < 0.05


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-1],  # truncated
        lambda d: d[:27] + bytes([d[27] ^ 0x01]) + d[28:],  # payload length field
        lambda d: d[:40] + bytes([d[40] ^ 0x01]) + d[41:],  # stored digest
        lambda d: d[:-1] + bytes([d[-1] ^ 0x01]),  # one payload bit
        lambda d: b"XXXX" + d[4:],  # magic
        lambda d: d[:20],  # shorter than the header
    ],
)
def test_damaged_blocks_are_rejected(damage):
    data = codec.encode_block(_layers(), "fp16")
    with pytest.raises(codec.CodecError):
        codec.decode_block(damage(data))


def test_geometry_mismatch_is_rejected():
    data = codec.encode_block(_layers(), "fp16")
    with pytest.raises(codec.CodecError):
        codec.decode_block(data, codec.BlockGeometry(3, 4, 8, 32))


def test_values_out_of_fp16_range_are_refused():
    layers = _layers(scale=1e6)
    with pytest.raises(codec.CodecError):
        codec.encode_block(layers, "fp16")


def test_blocks_concatenate_into_one_dynamic_cache():
    first, second = _layers(seed=1), _layers(seed=2)
    decoded = [codec.decode_block(codec.encode_block(b, "fp32")) for b in (first, second)]
    cache = codec.blocks_to_cache(decoded, config=None, dtype=torch.float32)
    assert isinstance(cache, DynamicCache)
    assert cache.get_seq_length() == 32
    assert torch.equal(cache.layers[2].keys[0, :, 16:], second[2][0])
    assert torch.equal(cache.layers[0].values[0, :, :16], first[0][1])
