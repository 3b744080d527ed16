"""KV block serialisation: layout, sizes, integrity checks, int8, and the rebuild into a cache."""

import pytest
import torch
from transformers import DynamicCache

from skymemory.kv.format import codec, rebuild
from skymemory.protocol import native


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
    block = rebuild.decode_block(data, geometry)
    assert block.header.kv_format == fmt
    tolerance = {"fp32": 0.0, "fp16": 2e-3, "bf16": 2e-2, "int8": 3e-2}[fmt]
    for (k, v), (k2, v2) in zip(layers, block.layers):
        assert (k - k2).abs().max().item() <= tolerance * k.abs().max().item()
        assert (v - v2).abs().max().item() <= tolerance * v.abs().max().item()


def test_fp16_is_exact_for_fp16_values():
    layers = [(k.half().float(), v.half().float()) for k, v in _layers()]
    block = rebuild.decode_block(codec.encode_block(layers, "fp16"))
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
    block = rebuild.decode_block(codec.encode_block([(keys, values)], "int8"))
    k2 = block.layers[0][0]
    assert (keys[:, :, 1:] - k2[:, :, 1:]).abs().max().item() < 0.05


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-1],  # truncated
        lambda d: d[:27] + bytes([d[27] ^ 0x01]) + d[28:],  # payload length field
        lambda d: d[:29] + bytes([d[29] ^ 0x01]) + d[30:],  # stored CRC32C
        lambda d: d[:40] + bytes([d[40] ^ 0x01]) + d[41:],  # the (absent) SHA-256 field
        lambda d: d[:-1] + bytes([d[-1] ^ 0x01]),  # one payload bit
        lambda d: b"XXXX" + d[4:],  # magic
        lambda d: d[:4] + b"\x00\x01" + d[6:],  # a version 1 block: unsupported, a clean miss
        lambda d: d[:20],  # shorter than the header
    ],
)
def test_damaged_blocks_are_rejected(damage):
    data = codec.encode_block(_layers(), "fp16")
    with pytest.raises(codec.CodecError):
        rebuild.decode_block(damage(data))


def test_the_block_crc_from_the_transport_is_checked_without_reading_the_payload():
    data = codec.encode_block(_layers(), "fp16")
    whole = native.crc32c(data)  # what a receiver folds from the chunks' CRCs
    assert codec.payload_crc32c(whole, data, len(data) - codec.HEADER_BYTES) == native.crc32c(data[64:])
    codec.check_block(data, block_crc32c=whole)
    with pytest.raises(codec.CodecError, match="CRC32C"):
        codec.check_block(data, block_crc32c=whole ^ 1)  # the bytes that arrived were not these


def test_sha256_is_optional_and_checked_when_asked():
    data = codec.encode_block(_layers(), "fp16", sha256=True)
    assert codec.read_header(data).sha256 is not None
    codec.check_block(data, verify_sha256=True)
    with pytest.raises(codec.CodecError, match="SHA-256"):
        codec.check_block(data[:40] + bytes([data[40] ^ 1]) + data[41:], verify_sha256=True)
    with pytest.raises(codec.CodecError, match="no SHA-256"):
        codec.check_block(codec.encode_block(_layers(), "fp16"), verify_sha256=True)


def test_geometry_mismatch_is_rejected():
    data = codec.encode_block(_layers(), "fp16")
    with pytest.raises(codec.CodecError):
        rebuild.decode_block(data, codec.BlockGeometry(3, 4, 8, 32))


def test_values_out_of_fp16_range_are_refused():
    layers = _layers(scale=1e6)
    with pytest.raises(codec.CodecError):
        codec.encode_block(layers, "fp16")


def _landed(*blocks: bytes) -> torch.Tensor:
    """Blocks back to back in one host buffer, as a store lands them: [m, block_bytes]."""
    return torch.frombuffer(bytearray(b"".join(blocks)), dtype=torch.uint8).view(len(blocks), -1)


@pytest.mark.parametrize("fmt", codec.KV_FORMATS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rebuild_concatenates_the_blocks_of_every_layer(fmt, dtype):
    first, second = _layers(seed=1), _layers(seed=2)
    encoded = [codec.encode_block(b, fmt) for b in (first, second)]
    layers = rebuild.rebuild_layers(_landed(*encoded), codec.BlockGeometry(3, 4, 8, 16), fmt, dtype)
    singles = [rebuild.decode_block(e, dtype=torch.float32).layers for e in encoded]
    assert len(layers) == 3
    for i, (keys, values) in enumerate(layers):
        assert keys.shape == values.shape == (1, 4, 32, 8) and keys.dtype == dtype
        # block b's tokens sit at [16 b, 16 (b + 1)), converted straight from the stored values
        for b in range(2):
            assert torch.equal(keys[0, :, 16 * b:16 * (b + 1)], singles[b][i][0].to(dtype))
            assert torch.equal(values[0, :, 16 * b:16 * (b + 1)], singles[b][i][1].to(dtype))


def test_fp32_blocks_rebuild_exactly():
    first, second = _layers(seed=1), _layers(seed=2)
    raw = _landed(codec.encode_block(first, "fp32"), codec.encode_block(second, "fp32"))
    layers = rebuild.rebuild_layers(raw, codec.BlockGeometry(3, 4, 8, 16), "fp32", torch.float32)
    assert torch.equal(layers[2][0][0, :, 16:], second[2][0])
    assert torch.equal(layers[0][1][0, :, :16], first[0][1])


def test_the_cache_holds_the_rebuilt_tensors_without_copying_them():
    from transformers import LlamaConfig

    config = LlamaConfig(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, hidden_size=32,
                         intermediate_size=64, vocab_size=300)
    raw = _landed(codec.encode_block(_layers(seed=1), "fp16"), codec.encode_block(_layers(seed=2), "fp16"))
    layers = rebuild.rebuild_layers(raw, codec.BlockGeometry(3, 4, 8, 16), "fp16", torch.float32)
    cache = rebuild.to_cache(layers, config)
    assert isinstance(cache, DynamicCache) and cache.get_seq_length() == 32
    for layer, (keys, values) in zip(cache.layers, layers):
        assert layer.keys.data_ptr() == keys.data_ptr() and layer.values.data_ptr() == values.data_ptr()
    with pytest.raises(ValueError, match="uint8"):
        rebuild.payload_views(raw[:, :100], codec.BlockGeometry(3, 4, 8, 16), "fp16")
