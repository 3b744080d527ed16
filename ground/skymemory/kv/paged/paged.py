"""A serving engine's paged KV cache, read and written one block (page) at a time in the codec's order.

Engines keep KV in pages of `block_tokens` tokens: per layer one tensor whose
first dimension is the page number. Inside a page every engine and kernel has
its own order (vLLM's CPU backend: per KV head, K transposed [head_dim,
tokens], then V [tokens, head_dim]; its CUDA backends: [tokens, heads,
head_dim]; AMX and NEON kernels their own). Rather than knowing each,
`PagedLayout.probe` asks the engine's own cache-write function to fill a
scratch page in which every K and V element carries its own number, and reads
back where each one landed. The numbers go in base-128 digits, one write per
digit (1..128 are exact in bf16 and fp16). The result, `order`, lists for
every element of a block in the codec's order [2 (K, V), kv_heads, tokens,
head_dim] its offset in the flattened page.

`read(cache, block_ids)` is then one gather of whole pages and one of their
elements; `write(cache, block_ids, kv)` one gather of the elements and one
copy of whole pages into the cache. No loop over tokens or heads.
`copy_out(caches, block_ids, dtype)` reads pages of every layer to the host
for saving; from a GPU asynchronously (pinned memory, an event to wait on),
so that the engine's step does not wait for the copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

DIGIT = 128  # values 1..DIGIT are exact in every cache dtype probed (fp32, fp16, bf16)

# write(keys, values, cache, slots): the engine's cache write. keys, values: [tokens, kv_heads, head_dim] in the
# cache's dtype; cache: [pages, *page_shape]; slots: int64 [tokens], page * block_tokens + position in the page.
CacheWrite = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


@dataclass
class CopiedPages:
    """Pages copied out of every layer's cache, on the host: `layers[l]` is [m, 2, kv_heads, block_tokens,
    head_dim]. Until `ready` (a torch.cuda.Event; None when the copies are done already) has completed they
    may still be filling: call wait() before reading them."""
    layers: list[torch.Tensor]
    ready: object = None

    def wait(self) -> None:
        if self.ready is not None:
            self.ready.synchronize()


class LayoutError(RuntimeError):
    """The engine's pages are not a layout this module can read and write."""


@dataclass(frozen=True)
class PagedLayout:
    kv_heads: int
    block_tokens: int
    head_dim: int
    page_shape: tuple[int, ...]  # the cache tensor's shape without its first (page) dimension
    order: torch.Tensor  # int64 [2 * kv_heads * block_tokens * head_dim]: page offsets in codec order
    inverse: torch.Tensor | None  # int64 [page elements]: codec index of each page offset (None: padded pages)

    @property
    def block_shape(self) -> tuple[int, int, int, int]:
        return 2, self.kv_heads, self.block_tokens, self.head_dim

    @classmethod
    def probe(cls, write: CacheWrite, page_shape: tuple[int, ...], dtype: torch.dtype, *, kv_heads: int,
              block_tokens: int, head_dim: int, device: torch.device | str = "cpu") -> "PagedLayout":
        """Learn the page layout from the engine's cache write (a few writes into a one-page scratch cache)."""
        elements = 2 * kv_heads * block_tokens * head_dim
        page_elements = math.prod(page_shape)
        ids = torch.arange(elements, dtype=torch.int64).view(2, kv_heads, block_tokens, head_dim)
        slots = torch.arange(block_tokens, dtype=torch.int64, device=device)
        passes = max(1, math.ceil(math.log(elements, DIGIT)))
        found = torch.zeros(page_elements, dtype=torch.int64)
        written = None
        for p in range(passes):
            digit = (ids // DIGIT ** p) % DIGIT + 1  # 0 marks a place the write did not touch
            keys = digit[0].permute(1, 0, 2).to(dtype).contiguous().to(device)  # [tokens, heads, dim]
            values = digit[1].permute(1, 0, 2).to(dtype).contiguous().to(device)
            scratch = torch.zeros((1, *page_shape), dtype=dtype, device=device)
            write(keys, values, scratch, slots)
            page = scratch.reshape(-1).to(device="cpu", dtype=torch.float64).round().to(torch.int64)
            touched = page > 0
            if written is None:
                written = touched
            elif not torch.equal(written, touched):
                raise LayoutError("the engine's cache write touched other places in another pass")
            found += (page - 1).clamp(min=0) * DIGIT ** p
        offsets = torch.nonzero(written).view(-1)
        if offsets.numel() != elements:
            raise LayoutError(f"the engine's cache write filled {offsets.numel()} places of a page, "
                              f"a block has {elements} K and V values")
        numbers = found[offsets]
        if not torch.equal(torch.sort(numbers).values, torch.arange(elements)):
            raise LayoutError("the engine's cache write did not put every K and V value in a place of its own")
        order = torch.empty(elements, dtype=torch.int64)
        order[numbers] = offsets
        inverse = numbers if elements == page_elements else None
        return cls(kv_heads, block_tokens, head_dim, tuple(page_shape), order.to(device),
                   inverse.to(device) if inverse is not None else None)

    def _pages(self, cache: torch.Tensor) -> torch.Tensor:
        if tuple(cache.shape[1:]) != self.page_shape or not cache.is_contiguous():
            raise LayoutError(f"a cache of shape {tuple(cache.shape)} (contiguous: {cache.is_contiguous()}) is not "
                              f"made of pages of shape {self.page_shape}")
        return cache.view(cache.shape[0], -1)

    def read(self, cache: torch.Tensor, block_ids: torch.Tensor) -> torch.Tensor:
        """The pages `block_ids` of one layer's cache as [m, 2, kv_heads, block_tokens, head_dim], cache dtype."""
        pages = self._pages(cache).index_select(0, block_ids.to(cache.device))
        return pages.index_select(1, self.order).view(len(block_ids), *self.block_shape)

    def write(self, cache: torch.Tensor, block_ids: torch.Tensor, kv: torch.Tensor) -> None:
        """Put `kv` ([m, 2, kv_heads, block_tokens, head_dim], any float dtype) into pages `block_ids`."""
        flat = self._pages(cache)
        m = len(block_ids)
        if tuple(kv.shape) != (m, *self.block_shape):
            raise ValueError(f"kv of shape {tuple(kv.shape)} for {m} pages of {self.block_shape}")
        block_ids = block_ids.to(cache.device)
        values = kv.reshape(m, -1).to(device=cache.device, dtype=cache.dtype)
        if self.inverse is not None:  # every place of a page is a K or V value: build whole pages
            pages = values.index_select(1, self.inverse)
        else:  # padded pages: keep what the padding holds
            pages = flat.index_select(0, block_ids)
            pages[:, self.order] = values
        flat.index_copy_(0, block_ids, pages)

    def copy_out(self, caches: list[torch.Tensor], block_ids: torch.Tensor, dtype: torch.dtype) -> CopiedPages:
        """The pages `block_ids` of every layer's cache, in `dtype`, on the host.

        From a GPU the copies are queued on the current stream into pinned memory, and one event recorded after
        them: the caller goes on at once, and whoever reads the layers waits on the event (CopiedPages.wait).
        The stream orders them before any later write to those pages, so the pages may be reused right away.
        """
        on_gpu = caches[0].device.type == "cuda"
        layers = []
        for cache in caches:
            gathered = self.read(cache, block_ids).to(dtype=dtype)  # a copy on the cache's device
            if on_gpu:
                host = torch.empty(gathered.shape, dtype=dtype, pin_memory=True)
                host.copy_(gathered, non_blocking=True)
                gathered = host
            layers.append(gathered)
        if not on_gpu:
            return CopiedPages(layers)
        ready = torch.cuda.Event()
        ready.record()
        return CopiedPages(layers, ready)
