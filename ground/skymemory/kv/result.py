"""What a cache lookup found: `CacheResult` (what get_cache returns) and `PrefixLookup` (its first half).

Its own module so that the manager and the streaming path, which both build results, do not
import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from .costmodel import Decision
from .store import BlockRecord


@dataclass
class CacheResult:
    """What get_cache found. `cache` is single-use: generate() appends to it."""

    cache: DynamicCache
    input_ids: torch.Tensor  # [1, n] the whole prompt, on the model's device
    prefix_tokens: int  # tokens covered by `cache`
    blocks: list[bytes]  # hashes of the blocks in `cache`, in order
    usable_blocks: int  # full blocks the prompt could have used
    miss_reason: str | None  # None: every usable block was found
    source: str  # "index", "probe" or "none"
    lookup_s: float = 0.0
    retrieval_s: float = 0.0
    # a split (decision "split"): the first `recomputed_tokens` of `cache` were computed here, taking
    # `recompute_s`, while the rest was retrieved (the two overlap; 0 for every other decision)
    recomputed_tokens: int = 0
    recompute_s: float = 0.0
    decode_s: float = 0.0  # check + copy to the device + relayout (+ a split's join)
    bytes_retrieved: int = 0
    decision: Decision | None = None  # fetch / split / partial / recompute, its inputs (None: nothing was cached)
    sources: dict[str, int] = field(default_factory=dict)  # blocks of `cache` per origin: device, host, store (kv.tiers)

    @property
    def hit(self) -> bool:
        return self.prefix_tokens > 0

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.ones_like(self.input_ids)


@dataclass
class PrefixLookup:
    """A prompt's tokens and the records of its longest cached prefix (nothing fetched yet)."""

    input_ids: torch.Tensor  # [1, n] the whole prompt, on the model's device
    usable_blocks: int  # full blocks the prompt could use
    records: list[BlockRecord]  # the longest cached prefix, in order
    source: str  # "index", "probe" or "none"
    lookup_s: float
