"""The KV engine's face for a serving engine's adapter (integrations/): what an adapter builds and calls.

A paged engine (vLLM) runs the cache in two sides that talk in plain data each step: a scheduler that
decides which of a request's cached blocks to load and which of its pages to save (PagedScheduler, deciding
through the same kv.index.lookup as KVCManager), and a worker that loads into and saves from the engine's pages
(PagedWorker, through kv.paged.page_loads and kv.index.saving, as KVCManager saves). An adapter names its model with
ServedModel, builds the two sides, and translates its engine's calls and objects; it imports nothing else
from kv/.

  ServedModel        a served model as the cache names its blocks: geometry, format, chain root
  open_index         the ground index (KVCManager's, unless a folder is named)
  OrbitRecords       the index's records in orbit (kv.index.orbit_records): what other ground hosts stored
  PagedScheduler, PagedWorker, PagedLayout         the two sides, and an engine's page layout
  StepPlan, SavePlan, WorkerReport                 what they tell each other
  RequestKeys, Media, Unkeyable, adapter_dir_fingerprint, embeds_hashes
                     what a request's blocks are keyed by besides their tokens (kv.naming.extra_keys)
  KV_FORMATS, check_format, POLICIES, check_policy settings an adapter takes from its users
  UnsupportedModel, check_servable
                     a model the cache cannot serve on a paged engine (ServedModel.of says why, in one sentence)
  PageGroups, CacheLayout, AttentionLayer, StateTensor, FULL, WINDOW, LINEAR
                     an engine with several page tables (a hybrid allocator), and the model's layout on it
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .decide.policy import POLICIES, check_policy
from .format import group_codec
from .format.codec import KV_FORMATS, BlockGeometry, block_bytes, check_format, layout_name
from .format.groups import FULL, LINEAR, WINDOW, AttentionLayer, CacheLayout, StateTensor, UnsupportedModel, layer_kinds
from .index.orbit_records import OrbitRecords
from .index.radix import RadixIndex
from .index.saving import BlockFormat
from .model.device import dtype_name
from .model.models import cache_dir
from .naming.extra_keys import Media, RequestKeys, Unkeyable, adapter_dir_fingerprint, embeds_hashes
from .naming.identity import model_identity
from .paged.page_groups import PageGroups
from .paged.paged import PagedLayout
from .paged.paged_scheduler import PagedScheduler
from .paged.paged_steps import SavePlan, StepPlan, WorkerReport
from .paged.paged_worker import PagedWorker

__all__ = ["AttentionLayer", "CacheLayout", "FULL", "KV_FORMATS", "LINEAR", "Media", "OrbitRecords", "POLICIES",
           "PageGroups", "PagedLayout", "PagedScheduler", "PagedWorker", "RequestKeys", "SavePlan", "ServedModel",
           "StateTensor", "StepPlan", "Unkeyable", "UnsupportedModel", "WINDOW", "WorkerReport",
           "adapter_dir_fingerprint", "check_format", "check_policy", "check_servable", "embeds_hashes",
           "open_index"]


@dataclass(frozen=True)
class ServedModel:
    """A served model's blocks as the cache names them, the same names KVCManager gives them.

    name: the model KVCManager users load (kv.model.models: a local path or an embedded model); its weights and
    tokenizer make the chain root, kept on disk (kv.naming.identity). hf_config: the model's transformers config.
    On an engine that keeps its layers' pages in several tables (groups), the blocks are grouped ones of the
    model's layout on that engine (cache_layout: kv.format.group_codec), named apart from any other layout's.
    """

    name: str
    geometry: BlockGeometry  # of its attention layers' pages
    form: BlockFormat
    sealed: bool  # its blocks are sealed (the stores seal): they are named apart from plain ones
    groups: PageGroups | None = None
    cache_layout: CacheLayout | None = None

    @classmethod
    def of(cls, name: str, hf_config, *, block_tokens: int, kv_format: str, sealed: bool,
           groups: PageGroups | None = None, cache_layout: CacheLayout | None = None) -> "ServedModel":
        """Raises UnsupportedModel, in one sentence, for a model whose layers keep what a paged engine's pages
        cannot carry: recurrent state (Mamba, gated delta-net) on an engine that keeps one page table for every
        layer, or a kind kv.format.groups refuses."""
        check_servable(name, hf_config, hybrid_allocator=groups is not None and groups.hybrid)
        check_format(kv_format)
        if cache_layout is not None and groups is not None:
            first = cache_layout.attention[0] if cache_layout.attention else None
            geometry = BlockGeometry(len(cache_layout.attention), first.k_heads if first else 0,
                                     first.k_dim if first else 0, block_tokens)
            return cls(name, geometry, BlockFormat(kv_format, group_codec.layout_name(cache_layout, sealed=sealed),
                                                   block_tokens), sealed, groups, cache_layout)
        return cls(name, BlockGeometry.from_config(hf_config, block_tokens),
                   BlockFormat(kv_format, layout_name(sealed=sealed), block_tokens), sealed, groups)

    @property
    def block_bytes(self) -> int:
        if self.cache_layout is not None:
            return group_codec.block_bytes(self.cache_layout, self.form.block_tokens, self.form.kv_format)
        return block_bytes(self.geometry, self.form.kv_format)

    @property
    def state_block_bytes(self) -> int | None:
        """The size of a block that carries the recurrent layers' state (None: the model has none)."""
        if self.cache_layout is None or not self.cache_layout.states:
            return None
        return group_codec.block_bytes(self.cache_layout, self.form.block_tokens, self.form.kv_format, state=True)

    def root(self, dtype) -> bytes:
        """The chain root of this model's blocks when it runs in `dtype` (a torch dtype)."""
        return model_identity(self.name, dtype_name(dtype)).root(
            kv_format=self.form.kv_format, block_tokens=self.form.block_tokens, sealed=self.sealed,
            layout=self.form.layout if self.cache_layout is not None else None)

    def scheduler(self, dtype, index: RadixIndex, policy: str, orbit: OrbitRecords | None = None, *,
                  loads: bool = True, saves: bool = True, prefilled_wait_s: float = 10.0) -> PagedScheduler:
        return PagedScheduler(root=self.root(dtype), block_tokens=self.form.block_tokens,
                              block_bytes=self.block_bytes, layers=self.geometry.layers, index=index, policy=policy,
                              orbit=orbit, groups=self.groups, state_block_bytes=self.state_block_bytes,
                              loads=loads, saves=saves, prefilled_wait_s=prefilled_wait_s)


def check_servable(name: str, hf_config, *, hybrid_allocator: bool) -> None:
    """Raises UnsupportedModel, in one sentence, for a layer kind kv.format.groups refuses, or for recurrent layers
    on an engine without a hybrid allocator (one page table for every layer cannot keep their state apart)."""
    recurrent = [i for i, (kind, _) in enumerate(layer_kinds(hf_config, name)) if kind == LINEAR]
    if recurrent and not hybrid_allocator:
        raise UnsupportedModel(
            f"SkyMemory cannot cache {name} on this engine: {len(recurrent)} of its layers keep recurrent state "
            "(Mamba / gated delta-net), which needs the engine's hybrid KV cache allocator (vLLM: on unless "
            "disable_hybrid_kv_cache_manager is set) to keep apart from their attention pages")


def open_index(directory: str | Path | None = None) -> RadixIndex:
    """The ground index in `directory`, or KVCManager's default one (so the two engines share it)."""
    return RadixIndex(directory or cache_dir() / "index")
