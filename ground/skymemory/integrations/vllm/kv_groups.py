"""vLLM's KV cache groups as the cache describes them: which page table each layer's pages are in, and the
model's cache layout on vLLM (its blocks' names and format: kv.format.group_codec).

With its hybrid allocator on (the connector supports it: SupportsHMA), vLLM keeps one page table per group of
layers of one kind: full attention, a sliding window, a Mamba / gated delta-net layer's state. The blocks of
such a model are grouped ones: per attention layer its K/V, and the recurrent layers' state page bytes, as
vLLM lays them out, in the block that ends a stored prompt. The layout names vLLM's description of that page
(its shapes and dtypes), so only an engine that lays it out alike ever reads it.
"""

from __future__ import annotations

import math

import torch
from vllm.model_executor.models.utils import extract_layer_index
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, SlidingWindowSpec, UniformTypeKVCacheSpecs

from skymemory.kv.engine import (
    FULL,
    LINEAR,
    WINDOW,
    AttentionLayer,
    CacheLayout,
    PageGroups,
    StateTensor,
    UnsupportedModel,
)

from .config import ConfigError


def _specs(group) -> list[tuple[str, object]]:
    """(layer name, its spec) of every layer of a group."""
    spec = group.kv_cache_spec
    if isinstance(spec, UniformTypeKVCacheSpecs):
        return [(name, spec.kv_cache_specs[name]) for name in group.layer_names]
    return [(name, spec) for name in group.layer_names]


def _state_role(spec: MambaSpec) -> str:
    """What a recurrent layer's page holds, as vLLM says it: its backend, and the shape and dtype of each part."""
    parts = " + ".join(f"{tuple(shape)} {str(dtype).removeprefix('torch.')}" for shape, dtype in
                       zip(spec.shapes, spec.dtypes))
    return f"vllm {spec.mamba_type.name.lower()} page: {parts}"


def _state_bytes(spec: MambaSpec) -> int:
    return sum(math.prod(shape) * dtype.itemsize for shape, dtype in zip(spec.shapes, spec.dtypes))


def engine_groups(kv_cache_config, model_name: str) -> tuple[PageGroups, CacheLayout | None, list[str], list[str]]:
    """The page groups of vLLM's KV cache config; with several (or a recurrent layer), the model's cache layout
    on vLLM (None otherwise: the dense blocks of kv.format.codec). Also its attention and its recurrent layers'
    names, each in layer order. Raises UnsupportedModel, in one sentence, for a kind of layer a hybrid's blocks do
    not carry (one table of attention layers of any kind keeps the dense path, whose pages are probed)."""
    attention, recurrent = [], []  # (layer index, name, table, spec)
    one_table = len(kv_cache_config.kv_cache_groups) == 1
    for table, group in enumerate(kv_cache_config.kv_cache_groups):
        for name, spec in _specs(group):
            if isinstance(spec, MambaSpec):
                recurrent.append((extract_layer_index(name), name, table, spec))
            elif one_table or type(spec) in (FullAttentionSpec, SlidingWindowSpec):  # (not their MLA or other kinds)
                attention.append((extract_layer_index(name), name, table, spec))
            else:
                raise UnsupportedModel(f"SkyMemory cannot cache {model_name} on vLLM: its layer {name} keeps a "
                                       f"{type(spec).__name__} cache, which the connector does not carry")
    attention.sort(key=lambda item: item[0])
    recurrent.sort(key=lambda item: item[0])
    groups = PageGroups(len(kv_cache_config.kv_cache_groups), tuple(t for _, _, t, _ in attention),
                        tuple(t for _, _, t, _ in recurrent))
    names = [n for _, n, _, _ in attention], [n for _, n, _, _ in recurrent]
    if not groups.hybrid:
        return groups, None, *names
    kinds = {}
    layers = []
    for index, _, _, spec in attention:
        window = int(spec.sliding_window) if isinstance(spec, SlidingWindowSpec) else 0
        kinds[index] = (WINDOW, window) if window else (FULL, 0)
        layers.append(AttentionLayer(index, window, spec.num_kv_heads, spec.head_size, spec.num_kv_heads,
                                     getattr(spec, "head_size_v", None) or spec.head_size))
    states = []
    for index, _, _, spec in recurrent:
        kinds[index] = (LINEAR, 0)
        states.append(StateTensor(index, 0, _state_role(spec), (_state_bytes(spec),), torch.uint8))
    layout = CacheLayout(tuple(kinds[i] for i in sorted(kinds)), tuple(layers), tuple(states))
    return groups, layout, *names


def check_recurrent_serving(vllm_config, kv_cache_config) -> None:
    """Refuse, in one sentence, a vLLM setting under which a recurrent layer's state cannot be cached or served."""
    specs = [spec for group in kv_cache_config.kv_cache_groups for _, spec in _specs(group)
             if isinstance(spec, MambaSpec)]
    if not specs:
        return
    cache = vllm_config.cache_config
    if cache.mamba_cache_mode != "align":
        raise ConfigError("SkyMemory connector: a model with Mamba / gated delta-net layers needs vLLM's prefix "
                          "caching on (enable_prefix_caching=True, --enable-prefix-caching): only then does vLLM "
                          "keep a layer's state at block boundaries, where a cached prefix resumes")
    from vllm.platforms import current_platform

    batched = vllm_config.scheduler_config.max_num_batched_tokens
    checkpoints = any(spec.mamba_type.name == "MAMBA2" and spec.num_prefill_checkpoint_blocks for spec in specs)
    if current_platform.is_cpu() and checkpoints and batched > cache.block_size:
        raise ConfigError(
            "SkyMemory connector: on vLLM's CPU build, a Mamba-2 model with prefix caching on needs "
            f"max_num_batched_tokens <= block_size ({cache.block_size}; it is {batched}): vLLM's CPU Mamba-2 "
            "kernel returns no state inside a longer prefill step, and vLLM fails on it with an IndexError")
