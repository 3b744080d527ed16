"""A recurrent layer's state pages (Mamba, gated delta-net) read and written as bytes.

A paged engine keeps a recurrent layer's state in pages of its own table (kv.paged.page_groups): page p holds
the layer's whole state at some point of a request (vLLM: its conv state, then its SSM or delta-net state).
The cache never interprets those bytes: it carries a page's bytes from the engine that saved it to the
engine that loads it, bit for bit (a state is carried forward through every later token: never rounded). The
layout the block is named by (kv.format.groups.CacheLayout, built from the engine's own description of the
page) is what guarantees the loading engine reads them as the saving one wrote them.

A layer's cache is one tensor whose first dimension is the page (vLLM's CPU build: int8 [pages, 1, 1, bytes]),
or several such tensors (one per part of the state): a page's bytes are then the parts' bytes in order.
"""

from __future__ import annotations

import math

import torch


def _parts(cache) -> list[torch.Tensor]:
    return list(cache) if isinstance(cache, (list, tuple)) else [cache]


def page_bytes(cache) -> int:
    """Bytes of one page of this layer's state."""
    return sum(math.prod(part.shape[1:]) * part.element_size() for part in _parts(cache))


def read(cache, pages: torch.Tensor) -> torch.Tensor:
    """Pages `pages` of a recurrent layer's cache as uint8 [m, page_bytes] on the host (a copy)."""
    rows = []
    for part in _parts(cache):
        gathered = part.index_select(0, pages.to(part.device)).reshape(len(pages), -1).contiguous()
        rows.append(gathered.view(torch.uint8).cpu())
    return torch.cat(rows, dim=1) if len(rows) > 1 else rows[0].clone()


def write(cache, page: int, state: torch.Tensor) -> None:
    """Put `state` (uint8 [page_bytes], as `read` gave it) into page `page` of the layer's cache."""
    if state.numel() != page_bytes(cache):
        raise ValueError(f"a state of {state.numel()} bytes for a page of {page_bytes(cache)}")
    at = 0
    for part in _parts(cache):
        size = math.prod(part.shape[1:]) * part.element_size()
        chunk = state[at:at + size].contiguous().view(part.dtype).view(part.shape[1:])
        part[page].copy_(chunk.to(part.device))
        at += size
