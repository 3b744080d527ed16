"""What a cache lookup found: `CacheResult` (what get_cache returns) and `PrefixLookup` (its first half).

Its own module so that the manager and the streaming path, which both build results, do not
import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from ..decide.costmodel import Decision
from ..store import BlockRecord


@dataclass
class CacheResult:
    """What get_cache found. `cache` is single-use: generate() appends to it."""

    cache: DynamicCache
    input_ids: torch.Tensor  # [1, n] the whole prompt, on the model's device
    prefix_tokens: int  # tokens covered by `cache`
    blocks: list[bytes]  # hashes of the blocks in `cache`, in order
    usable_blocks: int  # full blocks the prompt could have used
    miss_reason: str | None  # None: every usable block was found
    source: str  # "index", "orbit" (another ground host stored it), "probe" or "none"
    lookup_s: float = 0.0
    retrieval_s: float = 0.0
    # a split (decision "split"): the first `recomputed_tokens` of `cache` were computed here, taking
    # `recompute_s`, while the rest was retrieved (the two overlap; 0 for every other decision)
    recomputed_tokens: int = 0
    recompute_s: float = 0.0
    decode_s: float = 0.0  # check + copy to the device + relayout (+ a split's join)
    bytes_retrieved: int = 0
    decision: Decision | None = None  # fetch / split / partial / recompute, its inputs (None: nothing was cached)
    # blocks of `cache` per origin: device, host, store (kv.transfer.tiers)
    sources: dict[str, int] = field(default_factory=dict)

    @property
    def hit(self) -> bool:
        return self.prefix_tokens > 0

    def describe(self) -> str:
        """What get_cache did, for a log or a table: the decision ('fetch 6/6', 'split 2+4/6') when the
        cache holds every block it planned, else what came in and why the rest did not ('fetch 6/6
        planned, 2 loaded: not-found, 4 recomputed'). A decision alone is a plan, not an outcome."""
        if self.decision is None:
            return "nothing cached"
        planned = self.decision.describe()
        computed = self.decision.split_at  # a split's first blocks, computed here (0 for any other action)
        wanted = computed + self.decision.fetch_blocks
        covered = len(self.blocks)
        if covered >= wanted:
            return planned
        return (f"{planned} planned, {covered - computed} loaded: {self.miss_reason or 'failed'}, "
                f"{wanted - covered} recomputed")

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.ones_like(self.input_ids)


@dataclass
class PrefixLookup:
    """A prompt's tokens and the records of its longest cached prefix (nothing fetched yet)."""

    input_ids: torch.Tensor  # [1, n] the whole prompt, on the model's device
    usable_blocks: int  # full blocks the prompt could use
    records: list[BlockRecord]  # the longest cached prefix, in order
    source: str  # "index", "orbit" (another ground host stored it), "probe" or "none"
    lookup_s: float
    tenant: str | None = None  # the cache salt the blocks are keyed to (kv.naming.extra_keys): whose blocks they are
