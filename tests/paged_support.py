"""Engines' cache writes, written out in torch (test doubles for kv.paged.paged's probe and the connector's worker).

Each takes keys, values [tokens, kv_heads, head_dim], a cache [pages, *page shape] and slots
(page * tokens per page + position) and writes the way that engine lays its pages out.
"""

import torch


def cpu_vec_write(keys, values, cache, slots):
    """vLLM CPU (AVX2 "vec"): page [H, N, 2*D] viewed as [H, 2N, D]; K stored as [D, N] per head, V as [N, D]."""
    pages, heads, tokens, _ = cache.shape
    dim = keys.shape[-1]
    view = cache.view(pages, heads, 2 * tokens * dim)
    for i, slot in enumerate(slots.tolist()):
        page, t = divmod(slot, tokens)
        for h in range(heads):
            view[page, h, torch.arange(dim) * tokens + t] = keys[i, h]
            view[page, h, tokens * dim + t * dim + torch.arange(dim)] = values[i, h]


def flash_write(keys, values, cache, slots):
    """[pages, N, H, 2*D]: per token and head, K then V."""
    pages, tokens = cache.shape[:2]
    dim = keys.shape[-1]
    for i, slot in enumerate(slots.tolist()):
        page, t = divmod(slot, tokens)
        cache[page, t, :, :dim] = keys[i]
        cache[page, t, :, dim:] = values[i]


def padded_write(keys, values, cache, slots):
    """[pages, 2, N, H, D + 3]: three unused places after every head's values."""
    pages, _, tokens = cache.shape[:3]
    dim = keys.shape[-1]
    for i, slot in enumerate(slots.tolist()):
        page, t = divmod(slot, tokens)
        cache[page, 0, t, :, :dim] = keys[i]
        cache[page, 1, t, :, :dim] = values[i]
