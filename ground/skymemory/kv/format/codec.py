"""KV cache <-> bytes, one token block at a time.

A block's bytes are a 64-byte header followed by the payload:

    header (big-endian):
      magic "SKKV" | version u16 | layers u16 | kv_heads u16 | head_dim u16
      tokens u32 | dtype code u8 | quantisation code u8 | flags u16
      payload length u64 | CRC32C of the payload u32
      SHA-256 of the payload (32 bytes; zero unless flags has FLAG_SHA256)

    payload, layer-major: layer 0 (K then V), layer 1 (K then V), ...
      fp16 / bf16 / fp32: K [heads, tokens, head_dim] then V, little-endian
      int8 (optimum-quanto qint8, symmetric absmax):
        K int8 [heads, tokens, head_dim] | K scales fp16 [heads, head_dim]   (per channel)
        V int8 [heads, tokens, head_dim] | V scales fp16 [heads, tokens]     (per token)

Every layer has the same size, so layer L starts at 64 + L * layer_bytes: the
first chunks to arrive from the constellation hold the first layers, which
the model needs first. Per-channel keys / per-token values is the usual
KV-quantisation choice (keys have outlier channels, values do not).

Integrity costs less than a copy of the bytes. The header carries the
payload's CRC32C; a reader checks it against the CRC of the block *as it
arrived*, which the fast path already knows: every chunk's CRC32C was
verified in C on receipt, and the chunks' CRCs fold into the block's
without reading the block again (skymem_crc32c_fold). `check_block` then
removes the header's share with CRC algebra (a few microseconds a block).
Blocks from elsewhere are checked with a CRC32C pass over their bytes (the
CPU's CRC instruction). SHA-256 of the payload stays available
(`sha256=True` when encoding, `verify_sha256` when checking), off the hot
path. Version 1 blocks (SHA-256 only) are refused as unsupported: an old
block is a clean miss, never a wrong cache (the chain root also names the
version, so they are not even looked up).

Decoding bytes into tensors is `skymemory.kv.format.rebuild` (with `decode_block`,
the one-block convenience for tools and tests).
"""

from __future__ import annotations

import contextlib
import hashlib
import struct
from dataclasses import dataclass

import torch
from skymemory.protocol import native

MAGIC = b"SKKV"
VERSION = 2
HEADER = struct.Struct("!4sHHHHIBBHQI32s")
HEADER_BYTES = HEADER.size  # 64
FLAG_SHA256 = 0x0001  # the header's last 32 bytes are the payload's SHA-256

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
    crc32c: int  # of the payload
    sha256: bytes | None  # of the payload, when the encoder wrote one


def layout_name(sha256: bool = False, sealed: bool = False) -> str:
    """The block layout as chain roots name it (blocks.root_hash): every engine that writes blocks of this
    codec version, with or without a SHA-256 in the header, sealed or not, names them alike (a sealed block
    and a plain one are never taken for each other)."""
    return f"layer-major-v{VERSION}" + ("+sha256" if sha256 else "") + ("+sealed" if sealed else "")


def check_format(kv_format: str) -> str:
    if kv_format not in KV_FORMATS:
        raise ValueError(f"unknown KV format {kv_format!r}; choose one of {', '.join(KV_FORMATS)}")
    return kv_format


def source_dtype(kv_format: str) -> torch.dtype:
    """The dtype a block of `kv_format` is encoded from without loss: its own (int8: quantised from fp32)."""
    return _TORCH.get(check_format(kv_format), torch.float32)


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


def encode_keys(keys: torch.Tensor, kv_format: str) -> bytes:
    """One layer's K [heads, tokens, dim] on the CPU: raw in kv_format, or int8 with one fp16 scale per
    (head, channel) (keys have outlier channels)."""
    if kv_format != "int8":
        return _raw_checked(keys, kv_format)
    heads, tokens, dim = keys.shape
    data, scale = _quantize_rows(keys.permute(0, 2, 1).reshape(heads * dim, tokens))
    return _raw(data.reshape(heads, dim, tokens).permute(0, 2, 1)) + _raw(scale)


def encode_values(values: torch.Tensor, kv_format: str) -> bytes:
    """One layer's V [heads, tokens, dim] on the CPU: raw in kv_format, or int8 with one fp16 scale per
    (head, token)."""
    if kv_format != "int8":
        return _raw_checked(values, kv_format)
    heads, tokens, dim = values.shape
    data, scale = _quantize_rows(values.reshape(heads * tokens, dim))
    return _raw(data.reshape(heads, tokens, dim)) + _raw(scale)


def part_bytes(heads: int, tokens: int, dim: int, kv_format: str, *, keys: bool) -> int:
    """Bytes of one layer's encoded K (keys=True) or V of that shape."""
    values = heads * tokens * dim
    if kv_format == "int8":
        return values + 2 * (heads * dim if keys else heads * tokens)
    return values * _TORCH[check_format(kv_format)].itemsize


def _raw_checked(tensor: torch.Tensor, kv_format: str) -> bytes:
    cast = tensor.to(_TORCH[kv_format])
    if not torch.isfinite(cast).all():
        raise CodecError(f"KV values do not fit in {kv_format}")
    return _raw(cast)


def _encode_layer(keys: torch.Tensor, values: torch.Tensor, kv_format: str) -> bytes:
    """keys/values: [heads, tokens, head_dim] on the CPU."""
    return encode_keys(keys, kv_format) + encode_values(values, kv_format)


def encode_block(layers: list[tuple[torch.Tensor, torch.Tensor]], kv_format: str = "fp16", *,
                 sha256: bool = False) -> bytes:
    """One block's KV (per layer: K, V of shape [kv_heads, tokens, head_dim]) -> header + payload.

    `sha256` also writes the payload's SHA-256 into the header (for readers that verify it).
    """
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
        MAGIC, VERSION, geometry.layers, heads, head_dim, tokens, _DTYPE_CODE[kv_format], quant,
        FLAG_SHA256 if sha256 else 0, len(payload), native.crc32c(payload),
        hashlib.sha256(payload).digest() if sha256 else bytes(32),
    )
    return header + payload


def encode_cache_blocks(
    cache, block_tokens: int, first_block: int, n_blocks: int, kv_format: str = "fp16", *, sha256: bool = False
) -> list[bytes]:
    """Encode blocks first_block .. first_block+n_blocks-1 of a batch-1 transformers cache."""
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
        encoded.append(encode_block(layers, kv_format, sha256=sha256))
    return encoded


# --------------------------------------------------------------------------- decode


def read_header(data: bytes | bytearray | memoryview) -> BlockHeader:
    """Parse and sanity-check a block header (nothing about the payload is checked here)."""
    if len(data) < HEADER_BYTES:
        raise CodecError(f"block of {len(data)} bytes is shorter than the {HEADER_BYTES}-byte header")
    magic, version, layers, heads, head_dim, tokens, dtype_code, quant, flags, n_payload, crc, digest = (
        HEADER.unpack_from(data, 0)
    )
    if magic != MAGIC:
        raise CodecError("not a SkyMemory KV block (bad magic)")
    if version != VERSION:
        raise CodecError(f"unsupported KV block version {version} (this reader knows version {VERSION})")
    if dtype_code not in _CODE_DTYPE:
        raise CodecError(f"unknown dtype code {dtype_code}")
    if flags & ~FLAG_SHA256:
        raise CodecError(f"unknown header flags 0x{flags:04x}")
    kv_format = _CODE_DTYPE[dtype_code]
    expected_quant = QUANT_QUANTO_INT8 if kv_format == "int8" else QUANT_NONE
    if quant != expected_quant:
        raise CodecError(f"quantisation code {quant} does not match dtype {kv_format}")
    geometry = BlockGeometry(layers, heads, head_dim, tokens)
    if min(layers, heads, head_dim, tokens) == 0:
        raise CodecError("empty block geometry")
    if n_payload != geometry.layers * layer_bytes(geometry, kv_format):
        raise CodecError("payload length does not match the geometry")
    if not flags & FLAG_SHA256 and any(digest):
        raise CodecError("the SHA-256 field is not zero but the header says there is none")
    return BlockHeader(geometry, kv_format, quant, n_payload, crc, digest if flags & FLAG_SHA256 else None)


def payload_crc32c(block_crc32c: int, block: bytes | bytearray | memoryview, payload_bytes: int, *,
                   header_bytes: int = HEADER_BYTES) -> int:
    """The payload's CRC32C from the whole block's, reading only the header.

    crc(header || payload) = crc(header) * x^(8 * payload_bytes) + crc(payload), so
    crc(payload) = crc(block) + crc(header) * x^(8 * payload_bytes) (addition is XOR).
    """
    header_crc = native.crc32c(memoryview(block)[:header_bytes])
    return block_crc32c ^ native.crc32c_combine(header_crc, 0, payload_bytes)


def check_payload(view: memoryview, header_bytes: int, crc32c: int, sha256: bytes | None, *,
                  block_crc32c: int | None = None, verify_sha256: bool = False) -> None:
    """Raise CodecError unless the payload after a `header_bytes` header has the CRC32C (and, asked, the SHA-256)
    its header gives: every block format's integrity check (this module's, kv.format.group_codec's)."""
    if block_crc32c is None:
        crc = native.crc32c(view[header_bytes:])
    else:
        crc = payload_crc32c(block_crc32c, view, len(view) - header_bytes, header_bytes=header_bytes)
    if crc != crc32c:
        raise CodecError("payload CRC32C mismatch")
    if verify_sha256:
        if sha256 is None:
            raise CodecError("block carries no SHA-256 (written without sha256=True)")
        if hashlib.sha256(view[header_bytes:]).digest() != sha256:
            raise CodecError("payload SHA-256 digest mismatch")


def check_block(block: bytes | bytearray | memoryview, *, block_crc32c: int | None = None,
                expect: BlockGeometry | None = None, kv_format: str | None = None,
                verify_sha256: bool = False, authenticated: bool = False) -> BlockHeader:
    """Raise CodecError unless `block` is one whole, intact block of the expected geometry and format.

    block_crc32c   the CRC32C of the whole block as it arrived, when the transport knows it
                   (folded from the chunks' verified CRCs); None: computed here, one pass over the bytes
    verify_sha256  also check the payload's SHA-256 (the block must carry one)
    authenticated  the transport opened the block under the ground's key (sealed: skymemory.protocol.seal):
                   each chunk is one the ground sealed for this block, but the seal does not bind how the
                   chunks were joined (a chunk of another stripe layout of the same block opens too), so the
                   payload's CRC32C is checked all the same, over the opened bytes (block_crc32c, the wire's
                   ciphertext's, says nothing of them); its SHA-256 would say nothing more
    """
    view = memoryview(block).cast("B")
    header = read_header(view)
    end = HEADER_BYTES + header.payload_bytes
    if len(view) != end:
        raise CodecError(f"block is {len(view)} bytes, header says {end}")
    if expect is not None and header.geometry != expect:
        raise CodecError(f"block geometry {header.geometry} does not match the model's {expect}")
    if kv_format is not None and header.kv_format != kv_format:
        raise CodecError(f"block is {header.kv_format}, expected {kv_format}")
    if authenticated:
        check_payload(view, HEADER_BYTES, header.crc32c, None)
    else:
        check_payload(view, HEADER_BYTES, header.crc32c, header.sha256, block_crc32c=block_crc32c,
                      verify_sha256=verify_sha256)
    return header
