"""A grouped model's KV block <-> bytes (the format of kv.format.groups' non-dense layouts).

A block's bytes are an 80-byte header and the payload:

    header (big-endian):
      magic "SKKV" | version u16 (3) | attention layers u16 | state tensors u16 | tokens u32
      dtype code u8 | quantisation code u8 | flags u16 | payload length u64 | CRC32C of the payload u32
      layout digest (16 bytes: kv.format.groups.CacheLayout.digest) | SHA-256 of the payload (32 bytes, or zero)
      2 bytes of padding

    payload:
      per attention layer, in layer order: K [k_heads, tokens, k_dim], then V [v_heads, tokens, v_dim],
        each encoded as kv.format.codec encodes a dense layer's (fp16 / bf16 / fp32 raw; int8 with K's scales
        per channel and V's per token), each padded to 16 bytes
      with FLAG_STATE only: every recurrent state tensor of the layout, raw in its own dtype (a state is
        never rounded: it is carried forward through every later token), each padded to 16 bytes

The state is in the block that ends a stored prompt, not in every block: a Mamba-2 layer's state is
hundreds of times one token's K/V, so one snapshot per stored prompt, read only with the prefix's
last block, is what keeps a hybrid model's bytes small. The header names the layout by its digest:
a block of another layout, or of another version, is refused as a clean miss (the chain root names
the layout too, so such blocks are not even looked up).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import torch
from skymemory.protocol import native

from . import codec
from .groups import CacheLayout
from .rebuild import _typed

VERSION = 3
HEADER = struct.Struct("!4sHHHIBBHQI16s32s2x")
HEADER_BYTES = HEADER.size  # 80
FLAG_SHA256 = codec.FLAG_SHA256
FLAG_STATE = 0x0002  # the payload ends with the recurrent state after the block's last token
ALIGN = 16

_STATE_DTYPES = {torch.float32, torch.float16, torch.bfloat16, torch.float64}


def _padded(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def layout_name(layout: CacheLayout, sha256: bool = False, sealed: bool = False) -> str:
    """The block layout as chain roots name it: this format's version and the model's cache layout."""
    return f"grouped-v{VERSION}-{layout.digest.hex()}" + ("+sha256" if sha256 else "") + ("+sealed" if sealed else "")


def _sections(layout: CacheLayout, tokens: int, kv_format: str) -> list[int]:
    """The padded size of every K and V part of one block, in payload order."""
    sizes = []
    for a in layout.attention:
        sizes.append(_padded(codec.part_bytes(a.k_heads, tokens, a.k_dim, kv_format, keys=True)))
        sizes.append(_padded(codec.part_bytes(a.v_heads, tokens, a.v_dim, kv_format, keys=False)))
    return sizes


def block_bytes(layout: CacheLayout, tokens: int, kv_format: str, *, state: bool = False) -> int:
    """A whole block's size, header included (`state`: the block that carries the recurrent state)."""
    payload = sum(_sections(layout, tokens, kv_format))
    if state:
        payload += sum(_padded(s.bytes) for s in layout.states)
    return HEADER_BYTES + payload


def _pad(data: bytes) -> bytes:
    return data + bytes(_padded(len(data)) - len(data))


def encode_block(layout: CacheLayout, kv: list[tuple[torch.Tensor, torch.Tensor]], kv_format: str, *,
                 states: list[torch.Tensor] | None = None, sha256: bool = False) -> bytes:
    """One block: per attention layer of `layout` its K, V ([heads, tokens, dim] each); `states`: every
    state tensor of the layout (batch dimension left out), for the block that ends a stored prompt."""
    codec.check_format(kv_format)
    if len(kv) != len(layout.attention):
        raise ValueError(f"the layout has {len(layout.attention)} attention layers, the block {len(kv)}")
    tokens = kv[0][0].shape[1] if kv else 0
    parts = []
    with codec._one_thread():
        for a, (keys, values) in zip(layout.attention, kv):
            if keys.shape != (a.k_heads, tokens, a.k_dim) or values.shape != (a.v_heads, tokens, a.v_dim):
                raise ValueError(f"layer {a.layer}: K {tuple(keys.shape)} / V {tuple(values.shape)} do not match the "
                                 f"layout's [{a.k_heads}, {tokens}, {a.k_dim}] / [{a.v_heads}, {tokens}, {a.v_dim}]")
            parts.append(_pad(codec.encode_keys(keys.detach().cpu(), kv_format)))
            parts.append(_pad(codec.encode_values(values.detach().cpu(), kv_format)))
    flags = FLAG_SHA256 if sha256 else 0
    if states is not None:
        if len(states) != len(layout.states):
            raise ValueError(f"the layout has {len(layout.states)} state tensors, the block {len(states)}")
        for spec, tensor in zip(layout.states, states):
            if tuple(tensor.shape) != spec.shape or tensor.dtype != spec.dtype:
                raise ValueError(f"layer {spec.layer} {spec.role} state {tuple(tensor.shape)} {tensor.dtype} does not "
                                 f"match the layout's {spec.shape} {spec.dtype}")
            parts.append(_pad(codec._raw(tensor.detach().cpu())))
        flags |= FLAG_STATE
    payload = b"".join(parts)
    quant = codec.QUANT_QUANTO_INT8 if kv_format == "int8" else codec.QUANT_NONE
    header = HEADER.pack(codec.MAGIC, VERSION, len(layout.attention), len(layout.states) if states is not None else 0,
                         tokens, codec._DTYPE_CODE[kv_format], quant, flags, len(payload), native.crc32c(payload),
                         layout.digest, hashlib.sha256(payload).digest() if sha256 else bytes(32))
    return header + payload


@dataclass(frozen=True)
class GroupedHeader:
    tokens: int
    kv_format: str
    state: bool  # the block carries the recurrent state after its last token
    payload_bytes: int
    crc32c: int
    sha256: bytes | None


def check_block(block, layout: CacheLayout, *, tokens: int, kv_format: str, block_crc32c: int | None = None,
                verify_sha256: bool = False, authenticated: bool = False) -> GroupedHeader:
    """Raise codec.CodecError unless `block` is one whole, intact block of this layout, size and format.

    block_crc32c / verify_sha256 / authenticated: as kv.format.codec.check_block (the payload's CRC is checked
    either way: over the opened bytes when the seal authenticated each chunk).
    """
    view = memoryview(block).cast("B")
    if len(view) < HEADER_BYTES:
        raise codec.CodecError(f"block of {len(view)} bytes is shorter than the {HEADER_BYTES}-byte header")
    (magic, version, layers, states, n_tokens, dtype_code, quant, flags, n_payload, crc, digest,
     sha) = HEADER.unpack_from(view, 0)
    if magic != codec.MAGIC:
        raise codec.CodecError("not a SkyMemory KV block (bad magic)")
    if version != VERSION:
        raise codec.CodecError(f"a version {version} block where a grouped (version {VERSION}) one was expected")
    if digest != layout.digest:
        raise codec.CodecError("the block is of another cache layout than the model's")
    if flags & ~(FLAG_SHA256 | FLAG_STATE):
        raise codec.CodecError(f"unknown header flags 0x{flags:04x}")
    if codec._CODE_DTYPE.get(dtype_code) != kv_format:
        raise codec.CodecError(f"block is {codec._CODE_DTYPE.get(dtype_code, dtype_code)}, expected {kv_format}")
    if quant != (codec.QUANT_QUANTO_INT8 if kv_format == "int8" else codec.QUANT_NONE):
        raise codec.CodecError(f"quantisation code {quant} does not match dtype {kv_format}")
    state = bool(flags & FLAG_STATE)
    if n_tokens != tokens or layers != len(layout.attention) or states != (len(layout.states) if state else 0):
        raise codec.CodecError(f"block of {n_tokens} tokens, {layers} attention layers and {states} state tensors; "
                               f"the model's blocks have {tokens}, {len(layout.attention)} and "
                               f"{len(layout.states) if state else 0}")
    expected = block_bytes(layout, tokens, kv_format, state=state)
    if HEADER_BYTES + n_payload != expected or len(view) != expected:
        raise codec.CodecError(f"block is {len(view)} bytes, its header says {HEADER_BYTES + n_payload}, the layout "
                               f"{expected}")
    if not flags & FLAG_SHA256 and any(sha):
        raise codec.CodecError("the SHA-256 field is not zero but the header says there is none")
    header = GroupedHeader(n_tokens, kv_format, state, n_payload, crc, sha if flags & FLAG_SHA256 else None)
    if authenticated:  # the seal binds each chunk to this block, not how they were joined: the CRC all the same
        codec.check_payload(view, HEADER_BYTES, crc, None)
    else:
        codec.check_payload(view, HEADER_BYTES, crc, header.sha256, block_crc32c=block_crc32c,
                            verify_sha256=verify_sha256)
    return header


def _decode_part(part: torch.Tensor, heads: int, tokens: int, dim: int, kv_format: str, dtype: torch.dtype, *,
                 keys: bool) -> torch.Tensor:
    """One layer's K or V of one block from its bytes (uint8, any device): [heads, tokens, dim] in `dtype`."""
    if kv_format != "int8":
        return _typed(part, codec._TORCH[kv_format]).view(heads, tokens, dim).to(dtype)
    n = heads * tokens * dim
    data = _typed(part[:n], torch.int8).view(heads, tokens, dim).to(torch.float32)
    scales = _typed(part[n:], codec.SCALE_DTYPE).to(torch.float32)
    scales = scales.view(heads, 1, dim) if keys else scales.view(heads, tokens, 1)
    return (data * scales).to(dtype)


def decode_blocks(rows: list[torch.Tensor], layout: CacheLayout, tokens: int, kv_format: str,
                  dtype: torch.dtype) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[torch.Tensor] | None]:
    """Checked blocks (uint8 rows, one per block, on one device) -> per attention layer K and V over all of
    them ([1, heads, blocks * tokens, dim] in `dtype`), and the state tensors of the last block ([1, ...],
    each in its own dtype) when it carries them, else None."""
    sizes = _sections(layout, tokens, kv_format)
    per_layer: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in layout.attention]
    for row in rows:
        offset = HEADER_BYTES
        for i, a in enumerate(layout.attention):
            k_used = codec.part_bytes(a.k_heads, tokens, a.k_dim, kv_format, keys=True)
            v_used = codec.part_bytes(a.v_heads, tokens, a.v_dim, kv_format, keys=False)
            keys = _decode_part(row[offset:offset + k_used], a.k_heads, tokens, a.k_dim, kv_format, dtype, keys=True)
            offset += sizes[2 * i]
            values = _decode_part(row[offset:offset + v_used], a.v_heads, tokens, a.v_dim, kv_format, dtype,
                                  keys=False)
            offset += sizes[2 * i + 1]
            per_layer[i].append((keys, values))
    kv = [(torch.cat([k for k, _ in blocks], dim=1).unsqueeze(0), torch.cat([v for _, v in blocks], dim=1).unsqueeze(0))
          for blocks in per_layer]
    states = None
    last = rows[-1] if rows else None
    if last is not None and len(last) == block_bytes(layout, tokens, kv_format, state=True) and layout.states:
        states, offset = [], block_bytes(layout, tokens, kv_format)
        for spec in layout.states:
            part = last[offset:offset + spec.bytes]
            states.append(_typed(part, spec.dtype).view(1, *spec.shape).clone())
            offset += _padded(spec.bytes)
    return kv, states
