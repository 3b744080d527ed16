"""A prefix's blocks served from a host tier, with a PrefixStream's face: layer by layer, no network.

The vLLM worker keeps the blocks it saved in a host tier (kv.transfer.tiers, LRU) when its connector is given one
("host_tier_bytes"): a later load of those blocks copies them out of the tier in one gather and hands each layer
to the engine's pages as a stream would (`layer_blocks`), without asking a satellite. Bytes entered the tier
once they were encoded or checked, so a tier hit is not checked again (kv.transfer.tiers).
"""

from __future__ import annotations

import time

import torch

from ..format import codec, rebuild
from .streaming import StreamFailed, StreamStats


class TierLoad:
    """Rows of `raw` ([m, block_bytes], the tier's bytes of m blocks) as the layers of those blocks."""

    from_tier = True  # not a transfer: its timing says nothing of the link

    def __init__(self, raw: torch.Tensor, geometry: codec.BlockGeometry, kv_format: str, dtype: torch.dtype) -> None:
        self.geometry, self.dtype = geometry, dtype
        self._views = rebuild.payload_views(raw, geometry, kv_format)
        self.stats = StreamStats(started=time.perf_counter(), transfer_s=0.0, bytes=int(raw.numel()))

    def layer_blocks(self, layer: int) -> torch.Tensor:
        """Layer `layer` block by block, [m, 2, kv_heads, tokens, head_dim] in the load's dtype (kv.paged.paged)."""
        return rebuild.block_layer(self._views, layer, self.dtype)

    def close(self) -> None:
        pass  # the rows are the load's own copy: nothing to give back

    def intact_blocks(self, failure: StreamFailed) -> list[bool]:
        return [True] * self._views.m  # a tier's blocks do not fail to arrive

    def layer_blocks_of(self, layer: int, rows: list[int]) -> torch.Tensor:
        return self.layer_blocks(layer)[torch.tensor(rows, dtype=torch.int64)]
