"""A paged KV cache's layout learnt from the engine's own cache write, then read and written block by block.

The engines' writes (tests/paged_support.py) are written out in torch the way the engines lay pages out
(vLLM's CPU "vec" kernel: per head K transposed then V; its CUDA flash layout: tokens, heads, K|V), plus a
padded one.
"""

import pytest
import torch

from skymemory.kv.paged.paged import LayoutError, PagedLayout

from paged_support import cpu_vec_write, flash_write, padded_write

H, N, D = 2, 32, 16  # kv heads, tokens per page, head dim


LAYOUTS = {"cpu-vec": (cpu_vec_write, (H, N, 2 * D)), "flash": (flash_write, (N, H, 2 * D)),
           "padded": (padded_write, (2, N, H, D + 3))}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_probed_layout_reads_what_the_engine_wrote_and_writes_what_it_would(name, dtype):
    write, page_shape = LAYOUTS[name]
    layout = PagedLayout.probe(write, page_shape, dtype, kv_heads=H, block_tokens=N, head_dim=D)
    gen = torch.Generator().manual_seed(0)
    pages = 6
    # the engine writes two blocks' tokens into pages 4 and 1
    kv = torch.randn(2, 2, H, N, D, generator=gen).to(dtype)  # codec order: [block, K/V, head, token, dim]
    engine_cache = torch.zeros((pages, *page_shape), dtype=dtype)
    for block, page in enumerate((4, 1)):
        slots = page * N + torch.arange(N)
        write(kv[block, 0].permute(1, 0, 2).contiguous(), kv[block, 1].permute(1, 0, 2).contiguous(), engine_cache,
              slots)
    ids = torch.tensor([4, 1])
    assert torch.equal(layout.read(engine_cache, ids), kv)
    # the layout's write puts the same values where the engine would have
    ours = torch.zeros_like(engine_cache)
    layout.write(ours, ids, kv.float())
    assert torch.equal(ours, engine_cache)


def test_a_write_that_loses_values_is_refused():
    def half(keys, values, cache, slots):  # keeps only the keys
        cache.view(cache.shape[0], N, H, 2 * D)[0, :, :, :D] = keys

    with pytest.raises(LayoutError, match="filled"):
        PagedLayout.probe(half, (N, H, 2 * D), torch.float32, kv_heads=H, block_tokens=N, head_dim=D)

    def collide(keys, values, cache, slots):  # K and V into the same places
        flash_write(keys, values, cache, slots)
        cache[..., D:] = cache[..., :D]

    with pytest.raises(LayoutError):
        PagedLayout.probe(collide, (N, H, 2 * D), torch.float32, kv_heads=H, block_tokens=N, head_dim=D)


def test_a_cache_of_other_pages_is_refused():
    layout = PagedLayout.probe(flash_write, (N, H, 2 * D), torch.float32, kv_heads=H, block_tokens=N, head_dim=D)
    with pytest.raises(LayoutError, match="not made of pages"):
        layout.read(torch.zeros(3, N, H, D), torch.tensor([0]))
    with pytest.raises(ValueError, match="for 1 pages"):
        layout.write(torch.zeros(3, N, H, 2 * D), torch.tensor([0]), torch.zeros(2, 2, H, N, D))


def _engine_cache(layout_name, dtype, device, gen):
    """Six pages of one layer written by the engine, and the two blocks it wrote into pages 4 and 1."""
    write, page_shape = LAYOUTS[layout_name]
    kv = torch.randn(2, 2, H, N, D, generator=gen).to(dtype)
    cache = torch.zeros((6, *page_shape), dtype=dtype)
    for block, page in enumerate((4, 1)):
        write(kv[block, 0].permute(1, 0, 2).contiguous(), kv[block, 1].permute(1, 0, 2).contiguous(), cache,
              page * N + torch.arange(N))
    return cache.to(device), kv


def _copy_out_reads_every_layer(device):
    write, page_shape = LAYOUTS["flash"]
    layout = PagedLayout.probe(write, page_shape, torch.float16, kv_heads=H, block_tokens=N, head_dim=D,
                               device=device)
    gen = torch.Generator().manual_seed(1)
    caches, blocks = zip(*(_engine_cache("flash", torch.float16, device, gen) for _ in range(3)))
    copied = layout.copy_out(list(caches), torch.tensor([4, 1]), torch.float32)
    for cache in caches:  # the engine reuses the pages at once: the copies were taken before
        cache.zero_()
    copied.wait()
    assert [tuple(t.shape) for t in copied.layers] == [(2, 2, H, N, D)] * 3
    for host, kv in zip(copied.layers, blocks):
        assert host.device.type == "cpu" and host.dtype == torch.float32
        assert torch.equal(host, kv.float())
    return copied


def test_copy_out_reads_the_pages_of_every_layer_to_the_host():
    assert _copy_out_reads_every_layer("cpu").ready is None  # nothing to wait for on the host


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_copy_out_from_a_gpu_is_queued_into_pinned_memory_behind_an_event():
    copied = _copy_out_reads_every_layer("cuda")
    assert isinstance(copied.ready, torch.cuda.Event) and copied.ready.query()
    assert all(t.is_pinned() for t in copied.layers)
