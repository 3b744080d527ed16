"""KV cache <-> bytes, one token block at a time.

A block's bytes are a 64-byte header followed by the payload:

    header (big-endian):
      magic "SKKV" | version u16 | layers u16 | kv_heads u16 | head_dim u16
      tokens u32 | dtype code u8 | quantisation code u8 | reserved u16
      payload length u64 | reserved u32 | SHA-256 of the payload (32 bytes)

    payload, layer-major: layer 0 (K then V), layer 1 (K then V), ...
      fp16 / bf16 / fp32: K [heads, tokens, head_dim] then V, little-endian
      int8 (optimum-quanto qint8, symmetric absmax):
        K int8 [heads, tokens, head_dim] | K scales fp16 [heads, head_dim]   (per channel)
        V int8 [heads, tokens, head_dim] | V scales fp16 [heads, tokens]     (per token)

Every layer has the same size, so layer L starts at 64 + L * layer_bytes: the
first chunks to arrive from the constellation hold the first layers, which
the model needs first. Per-channel keys / per-token values is the usual
KV-quantisation choice (keys have outlier channels, values do not).

`decode_block` checks the digest before any tensor is built, so corrupted or
truncated bytes never reach the model.
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from dataclasses import dataclass

import torch
from transformers import DynamicCache

MAGIC = b"SKKV"
VERSION = 1
HEADER = struct.Struct("!4sHHHHIBBHQI32s")
HEADER_BYTES = HEADER.size  # 64

KV_FORMATS = ("fp16", "bf16", "fp32", "int8")
_DTYPE_CODE = {"fp16": 1, "bf16": 2, "fp32": 3, "int8": 4}
_CODE_DTYPE = {code: name for name, code in _DTYPE_CODE.items()}
_TORCH = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
QUANT_NONE, QUANT_QUANTO_INT8 = 0, 1
SCALE_DTYPE = torch.float16


class CodecError(ValueError):
    """Bytes that are not a valid block for this model (bad magic, digest, geometry...)."""


@dataclass(frozen=True)
class BlockGeometry:
    """Shape of one block's KV: what a decoder must find in the header."""

    layers: int
    kv_heads: int
    head_dim: int
    tokens: int

    @classmethod
    def from_config(cls, config, tokens: int) -> "BlockGeometry":
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        return cls(config.num_hidden_layers, kv_heads, head_dim, tokens)


@dataclass(frozen=True)
class BlockHeader:
    geometry: BlockGeometry
    kv_format: str
    quantization: int
    payload_bytes: int
    digest: bytes


def check_format(kv_format: str) -> str:
    if kv_format not in KV_FORMATS:
        raise ValueError(f"unknown KV format {kv_format!r}; choose one of {', '.join(KV_FORMATS)}")
    return kv_format


def layer_bytes(geometry: BlockGeometry, kv_format: str) -> int:
    """Bytes of one layer (K and V) of one block."""
    values = geometry.kv_heads * geometry.tokens * geometry.head_dim
    if kv_format == "int8":
        k_scales = geometry.kv_heads * geometry.head_dim
        v_scales = geometry.kv_heads * geometry.tokens
        return 2 * values + 2 * (k_scales + v_scales)
    return 2 * values * _TORCH[check_format(kv_format)].itemsize


def block_bytes(geometry: BlockGeometry, kv_format: str) -> int:
    """Total encoded size of one block, header included."""
    return HEADER_BYTES + geometry.layers * layer_bytes(geometry, kv_format)


def layer_offset(geometry: BlockGeometry, kv_format: str, layer: int) -> int:
    """Where layer `layer` starts in the encoded block (for streaming decoders)."""
    return HEADER_BYTES + layer * layer_bytes(geometry, kv_format)


@contextlib.contextmanager
def _one_thread():
    """Run the codec's many small tensor ops without intra-op threads.

    Blocks are small (a 128-token TinyLlama layer is 64 K values): thread
    start-up costs more than it saves, and on a loaded machine each parallel
    region can stall for tens of milliseconds (measured: int8 encode of one
    2.9 MB block 10 s with 2 threads under load, well under 1 s with one).
    """
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- encode


def _raw(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


def _quantize_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 data and fp16 scales, one scale per row, with optimum-quanto's absmax qint8."""
    from optimum.quanto import absmax_scale, qint8, quantize_weight

    rows = rows.float().contiguous()
    scale = absmax_scale(rows, qint8, axis=0)
    # Round the scale to its stored precision first, so encoder and decoder use the same one;
    # an all-zero row gets the smallest positive scale instead of 0.
    scale = scale.clamp(min=2.0**-24).to(SCALE_DTYPE).float()
    quantized = quantize_weight(rows, qint8, axis=0, scale=scale, shift=None, optimized=False)
    return quantized._data.to(torch.int8), scale.to(SCALE_DTYPE)


def _encode_layer(keys: torch.Tensor, values: torch.Tensor, kv_format: str) -> bytes:
    """keys/values: [heads, tokens, head_dim] on the CPU."""
    heads, tokens, head_dim = keys.shape
    if kv_format != "int8":
        dtype = _TORCH[kv_format]
        k, v = keys.to(dtype), values.to(dtype)
        if not (torch.isfinite(k).all() and torch.isfinite(v).all()):
            raise CodecError(f"KV values do not fit in {kv_format}")
        return _raw(k) + _raw(v)
    # keys: one scale per (head, channel) -> rows are [heads*head_dim, tokens]
    k_data, k_scale = _quantize_rows(keys.permute(0, 2, 1).reshape(heads * head_dim, tokens))
    k_data = k_data.reshape(heads, head_dim, tokens).permute(0, 2, 1)
    # values: one scale per (head, token) -> rows are [heads*tokens, head_dim]
    v_data, v_scale = _quantize_rows(values.reshape(heads * tokens, head_dim))
    return _raw(k_data) + _raw(k_scale) + _raw(v_data.reshape(heads, tokens, head_dim)) + _raw(v_scale)


def encode_block(layers: list[tuple[torch.Tensor, torch.Tensor]], kv_format: str = "fp16") -> bytes:
    """One block's KV (per layer: K, V of shape [kv_heads, tokens, head_dim]) -> header + payload."""
    check_format(kv_format)
    if not layers:
        raise ValueError("a block needs at least one layer")
    heads, tokens, head_dim = layers[0][0].shape
    geometry = BlockGeometry(len(layers), heads, head_dim, tokens)
    parts = []
    with _one_thread():
        for keys, values in layers:
            if keys.shape != (heads, tokens, head_dim) or values.shape != keys.shape:
                raise ValueError("all layers must have K and V of the same [heads, tokens, head_dim] shape")
            parts.append(_encode_layer(keys.detach().cpu(), values.detach().cpu(), kv_format))
    payload = b"".join(parts)
    assert len(payload) == geometry.layers * layer_bytes(geometry, kv_format)
    quant = QUANT_QUANTO_INT8 if kv_format == "int8" else QUANT_NONE
    header = HEADER.pack(
        MAGIC, VERSION, geometry.layers, heads, head_dim, tokens, _DTYPE_CODE[kv_format], quant, 0,
        len(payload), 0, hashlib.sha256(payload).digest(),
    )
    return header + payload


def encode_cache_blocks(
    cache: DynamicCache, block_tokens: int, first_block: int, n_blocks: int, kv_format: str = "fp16"
) -> list[bytes]:
    """Encode blocks first_block .. first_block+n_blocks-1 of a batch-1 cache."""
    encoded = []
    for b in range(first_block, first_block + n_blocks):
        start, stop = b * block_tokens, (b + 1) * block_tokens
        layers = []
        for layer in cache.layers:
            if layer.keys.shape[0] != 1:
                raise ValueError("only batch-1 caches can be cut into blocks")
            if layer.keys.shape[-2] < stop:
                raise ValueError(f"cache holds {layer.keys.shape[-2]} tokens, block {b} needs {stop}")
            layers.append((layer.keys[0, :, start:stop, :], layer.values[0, :, start:stop, :]))
        encoded.append(encode_block(layers, kv_format))
    return encoded


# --------------------------------------------------------------------------- decode


def read_header(data: bytes | bytearray | memoryview) -> BlockHeader:
    if len(data) < HEADER_BYTES:
        raise CodecError(f"block of {len(data)} bytes is shorter than the {HEADER_BYTES}-byte header")
    magic, version, layers, heads, head_dim, tokens, dtype_code, quant, _r1, n_payload, _r2, digest = (
        HEADER.unpack_from(data, 0)
    )
    if magic != MAGIC:
        raise CodecError("not a SkyMemory KV block (bad magic)")
    if version != VERSION:
        raise CodecError(f"unsupported KV block version {version}")
    if dtype_code not in _CODE_DTYPE:
        raise CodecError(f"unknown dtype code {dtype_code}")
    kv_format = _CODE_DTYPE[dtype_code]
    expected_quant = QUANT_QUANTO_INT8 if kv_format == "int8" else QUANT_NONE
    if quant != expected_quant:
        raise CodecError(f"quantisation code {quant} does not match dtype {kv_format}")
    geometry = BlockGeometry(layers, heads, head_dim, tokens)
    if min(layers, heads, head_dim, tokens) == 0:
        raise CodecError("empty block geometry")
    if n_payload != geometry.layers * layer_bytes(geometry, kv_format):
        raise CodecError("payload length does not match the geometry")
    return BlockHeader(geometry, kv_format, quant, n_payload, digest)


@dataclass
class DecodedBlock:
    header: BlockHeader
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer K, V: [heads, tokens, head_dim]


def _tensor(buffer: bytearray, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    count = 1
    for n in shape:
        count *= n
    return torch.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(shape)


def decode_block(
    data: bytes | bytearray | memoryview,
    expect: BlockGeometry | None = None,
    dtype: torch.dtype = torch.float32,
) -> DecodedBlock:
    """Verify and decode one block; tensors come out in `dtype` on the CPU."""
    with _one_thread():
        return _decode_block(data, expect, dtype)


def _decode_block(data, expect: BlockGeometry | None, dtype: torch.dtype) -> DecodedBlock:
    header = read_header(data)
    end = HEADER_BYTES + header.payload_bytes
    if len(data) != end:
        raise CodecError(f"block is {len(data)} bytes, header says {end}")
    buffer = bytearray(data)  # one copy; torch.frombuffer needs a writable buffer
    if hashlib.sha256(memoryview(buffer)[HEADER_BYTES:]).digest() != header.digest:
        raise CodecError("payload digest mismatch")
    g = header.geometry
    if expect is not None and g != expect:
        raise CodecError(f"block geometry {g} does not match the model's {expect}")
    shape = (g.kv_heads, g.tokens, g.head_dim)
    values = g.kv_heads * g.tokens * g.head_dim
    layers, offset = [], HEADER_BYTES
    for _ in range(g.layers):
        if header.kv_format == "int8":
            k = _tensor(buffer, offset, torch.int8, shape)
            offset += values
            k_scale = _tensor(buffer, offset, SCALE_DTYPE, (g.kv_heads, 1, g.head_dim))
            offset += 2 * g.kv_heads * g.head_dim
            v = _tensor(buffer, offset, torch.int8, shape)
            offset += values
            v_scale = _tensor(buffer, offset, SCALE_DTYPE, (g.kv_heads, g.tokens, 1))
            offset += 2 * g.kv_heads * g.tokens
            keys = (k.float() * k_scale.float()).to(dtype)
            vals = (v.float() * v_scale.float()).to(dtype)
        else:
            stored = _TORCH[header.kv_format]
            size = values * stored.itemsize
            keys = _tensor(buffer, offset, stored, shape).to(dtype)
            vals = _tensor(buffer, offset + size, stored, shape).to(dtype)
            offset += 2 * size
        layers.append((keys, vals))
    return DecodedBlock(header, layers)


def blocks_to_cache(
    blocks: list[DecodedBlock], config, dtype: torch.dtype, device: torch.device | str = "cpu"
) -> DynamicCache:
    """Concatenate decoded blocks (in order) into one batch-1 DynamicCache for the prefix."""
    if not blocks:
        return DynamicCache(config=config)
    n_layers = blocks[0].header.geometry.layers
    data = []
    for layer in range(n_layers):
        keys = torch.cat([b.layers[layer][0] for b in blocks], dim=1)
        values = torch.cat([b.layers[layer][1] for b in blocks], dim=1)
        data.append((keys.unsqueeze(0).to(device=device, dtype=dtype), values.unsqueeze(0).to(device=device, dtype=dtype)))
    return DynamicCache(data, config=config)
