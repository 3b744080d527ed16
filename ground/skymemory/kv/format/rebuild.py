"""Bytes of consecutive KV blocks -> the prefix's K and V per layer, on the model's device, in its dtype.

A prefix's blocks lie back to back in one uint8 tensor `raw` of shape
[m, block_bytes], where the store landed them (kv.transfer.landing). Each block is
layer-major (codec.py); the cache wants, per layer, K and V of shape
[1, kv_heads, m * tokens, head_dim]. Rebuilding a layer is therefore one copy
that moves the block axis inside the head axis and converts the stored dtype
into the model's on the way (fp16 -> fp32 on a CPU host, nothing on a GPU
running fp16); int8 is dequantised like codec's encoder quantised it (in fp32,
then cast). No Python loop over blocks or chunks, no fp32 detour for fp16 data.

Each layer gets its own allocation: allocations of a few MB are recycled by
the allocator, while one prefix-sized allocation is fresh memory every time,
and its page faults cost more than the copy (CPU, 1,024 TinyLlama tokens:
2.8 ms against 10 ms).

On CUDA `to_device` first moves the whole prefix in one non-blocking copy from
pinned memory; the per-layer relayout then runs on the device (streaming
copies one layer at a time instead: kv.transfer.streaming).

`check_blocks` + `prefix_cache` is what KVCManager does with a landed prefix
(and what `skymemory bench rebuild` and kv.decide.calibration time).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from . import codec

__all__ = ["DecodedBlock", "PayloadViews", "block_layer", "check_blocks", "decode_block", "payload_views", "prefix_cache",
           "rebuild_layer", "rebuild_layers", "to_device", "to_cache"]


def _typed(part: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`part` (uint8, last dim contiguous) reinterpreted as `dtype`, without a copy when the strides allow."""
    try:
        return part.view(dtype)
    except RuntimeError:  # an odd offset or stride (tiny test geometries): copy just this part
        return part.contiguous().view(dtype)


@dataclass(frozen=True)
class PayloadViews:
    """Typed views (no copies) of the payloads of m blocks, with the block axis first.

    fp16 / bf16 / fp32: `kv` [m, layers, 2 (K, V), heads, tokens, head_dim].
    int8: `k`, `v` [m, layers, heads, tokens, head_dim] and their scales
    `k_scale` [m, layers, heads, 1, head_dim], `v_scale` [m, layers, heads, tokens, 1].
    """

    geometry: codec.BlockGeometry
    kv_format: str
    blocks: int
    kv: torch.Tensor | None = None
    k: torch.Tensor | None = None
    k_scale: torch.Tensor | None = None
    v: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None


def payload_views(raw: torch.Tensor, geometry: codec.BlockGeometry, kv_format: str) -> PayloadViews:
    """Views of the payloads in `raw` ([m, block_bytes] uint8, on any device)."""
    g = geometry
    size = codec.block_bytes(g, kv_format)
    if raw.dtype != torch.uint8 or raw.dim() != 2 or raw.shape[1] != size:
        raise ValueError(f"raw must be uint8 [blocks, {size}], got {raw.dtype} {tuple(raw.shape)}")
    m, layer = raw.shape[0], codec.layer_bytes(g, kv_format)
    payload = raw[:, codec.HEADER_BYTES:].view(m, g.layers, layer)
    shape = (m, g.layers, g.kv_heads, g.tokens, g.head_dim)
    if kv_format != "int8":
        kv = _typed(payload, codec._TORCH[kv_format]).view(m, g.layers, 2, g.kv_heads, g.tokens, g.head_dim)
        return PayloadViews(g, kv_format, m, kv=kv)
    n = g.kv_heads * g.tokens * g.head_dim
    k_scales = 2 * g.kv_heads * g.head_dim  # bytes of K's fp16 scales; V's scales run to the end
    return PayloadViews(
        g, kv_format, m,
        k=_typed(payload[..., :n], torch.int8).view(shape),
        k_scale=_typed(payload[..., n:n + k_scales], codec.SCALE_DTYPE).view(m, g.layers, g.kv_heads, 1, g.head_dim),
        v=_typed(payload[..., n + k_scales:2 * n + k_scales], torch.int8).view(shape),
        v_scale=_typed(payload[..., 2 * n + k_scales:], codec.SCALE_DTYPE).view(m, g.layers, g.kv_heads, g.tokens, 1),
    )


def _dequantised(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int8 [m, heads, tokens, dim] times its fp16 scales, in fp32 (as the encoder rounded), as [heads, m, ...]."""
    out = torch.empty((q.shape[1], q.shape[0], q.shape[2], q.shape[3]), dtype=torch.float32, device=q.device)
    out.copy_(q.permute(1, 0, 2, 3))
    out.mul_(scale.permute(1, 0, 2, 3))
    return out if dtype == torch.float32 else out.to(dtype)


def rebuild_layer(views: PayloadViews, layer: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer `layer` of the prefix: K, V as [1, kv_heads, m * tokens, head_dim] in `dtype`, on the views' device."""
    g, m = views.geometry, views.blocks
    prefix_shape = (1, g.kv_heads, m * g.tokens, g.head_dim)
    if views.kv is not None:
        source = views.kv[:, layer]  # [m, 2, heads, tokens, dim]
        out = torch.empty((2, g.kv_heads, m, g.tokens, g.head_dim), dtype=dtype, device=source.device)
        out.copy_(source.permute(1, 2, 0, 3, 4))
        return out[0].view(prefix_shape), out[1].view(prefix_shape)
    keys = _dequantised(views.k[:, layer], views.k_scale[:, layer], dtype)
    values = _dequantised(views.v[:, layer], views.v_scale[:, layer], dtype)
    return keys.view(prefix_shape), values.view(prefix_shape)


def block_layer(views: PayloadViews, layer: int, dtype: torch.dtype) -> torch.Tensor:
    """Layer `layer` of every block, block by block: [m, 2 (K, V), kv_heads, tokens, head_dim] in `dtype`.

    The shape a paged cache takes blocks in (kv.paged.paged); rebuild_layer is the same values laid out as one
    prefix. int8 is dequantised as rebuild_layer does (in fp32, then cast).
    """
    if views.kv is not None:
        return views.kv[:, layer].to(dtype, copy=True)
    keys = views.k[:, layer].to(torch.float32) * views.k_scale[:, layer].to(torch.float32)
    values = views.v[:, layer].to(torch.float32) * views.v_scale[:, layer].to(torch.float32)
    return torch.stack((keys, values), dim=1).to(dtype)


def rebuild_layers(raw: torch.Tensor, geometry: codec.BlockGeometry, kv_format: str,
                   dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer of the prefix in `raw` ([m, block_bytes]), on raw's device."""
    views = payload_views(raw, geometry, kv_format)
    return [rebuild_layer(views, layer, dtype) for layer in range(geometry.layers)]


def to_device(raw: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`raw` on `device`: itself on the CPU; one copy otherwise (asynchronous when raw is pinned)."""
    device = torch.device(device)
    if device.type == "cpu":
        return raw
    return raw.to(device, non_blocking=raw.is_pinned())


def to_cache(layers: list[tuple[torch.Tensor, torch.Tensor]], config) -> DynamicCache:
    """A DynamicCache holding these tensors themselves (no copy), ready for generate(cache=...).

    DynamicCache(data) would copy every layer once more (its update() concatenates onto an
    empty tensor); a plain DynamicLayer is given the tensors instead. Other layer kinds
    (sliding windows) go through update() so that their own bookkeeping is right.
    """
    if config is None:
        return DynamicCache(layers)
    cache = DynamicCache(config=config)
    if len(cache.layers) < len(layers):
        raise ValueError(f"the model has {len(cache.layers)} layers, the prefix {len(layers)}")
    for layer, (keys, values) in zip(cache.layers, layers):
        if type(layer) is DynamicLayer:
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
        else:
            layer.update(keys, values)
    return cache


def check_blocks(raw: torch.Tensor, block_crcs: list[int], geometry: codec.BlockGeometry, kv_format: str, *,
                 verify_sha256: bool = False, authenticated: bool = False) -> tuple[int, str | None]:
    """How many leading blocks of `raw` (host, [m, block_bytes]) are intact, and what is wrong with the next.

    block_crcs: each block's CRC32C as the transport delivered it (kv.transfer.landing); the check
    reads the headers only (and folds the payload's CRC from it), unless verify_sha256 asks for a pass over
    the payloads.
    authenticated: the transport opened the blocks under the ground's key (Landed.sealed): their CRC32C is taken
    over the opened bytes (the ones delivered are the ciphertext's).
    """
    for position, crc in enumerate(block_crcs):
        try:
            codec.check_block(raw[position].numpy(), block_crc32c=crc, expect=geometry, kv_format=kv_format,
                              verify_sha256=verify_sha256 and not authenticated, authenticated=authenticated)
        except codec.CodecError as exc:
            return position, str(exc)
    return len(block_crcs), None


def prefix_cache(raw: torch.Tensor, geometry: codec.BlockGeometry, kv_format: str, dtype: torch.dtype,
                 device: torch.device | str, config):
    """The checked prefix in host buffer `raw` as a DynamicCache on `device`.

    Returns (cache, event): on CUDA the event after which `raw` may be written again
    (the copy to the device is asynchronous); None on the CPU.
    """
    on_device = to_device(raw, device)
    event = None
    if on_device.device.type == "cuda":
        event = torch.cuda.Event()
        event.record()
    return to_cache(rebuild_layers(on_device, geometry, kv_format, dtype), config), event


@dataclass
class DecodedBlock:
    header: codec.BlockHeader
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer K, V: [heads, tokens, head_dim]


def decode_block(
    data: bytes | bytearray | memoryview,
    expect: codec.BlockGeometry | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    verify_sha256: bool = False,
) -> DecodedBlock:
    """Check and decode one block on the CPU (tools and tests; the KV path rebuilds whole prefixes)."""
    header = codec.check_block(data, expect=expect, verify_sha256=verify_sha256)
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(1, -1)
    layers = rebuild_layers(raw, header.geometry, header.kv_format, dtype)
    return DecodedBlock(header, [(k[0], v[0]) for k, v in layers])
