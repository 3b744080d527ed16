"""KV throughput: the bytes a cached prefix costs against the time its prefill takes (Prefill-as-a-Service, 003).

Fetching a prefix beats recomputing it when the link moves its bytes faster than the model computes them:
Φkv(l) = KV bytes a prefix of l tokens fetches ÷ prefill time of l tokens is the link rate at which the two
break even (transfer latency and the rebuild aside). A dense 2023 model has a high Φkv (gigabytes of KV for
a prefill of a fraction of a second on a datacenter GPU); a hybrid or sliding-window model a much lower
one, because it fetches only its attention layers' K/V (a window's worth for a window layer) and one
recurrent state, and that is where a cache over a satellite link pays.

What a prefix fetches follows kv.format.groups: a dense model every block; a grouped one the blocks
`first_needed` names, the last with the state snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..format import codec, group_codec
from ..format.groups import CacheLayout


def kv_bytes_per_token(layout: CacheLayout, kv_format: str, block_tokens: int = 128) -> dict[tuple[str, int], float]:
    """(kind, window) -> bytes of K and V per token of that group's layers in `kv_format` (int8 with its scales,
    whose per-channel share depends on the block's size)."""
    out: dict[tuple[str, int], float] = {}
    for a in layout.attention:
        key = layout.kinds[a.layer]
        per_block = codec.part_bytes(a.k_heads, block_tokens, a.k_dim, kv_format, keys=True) + \
            codec.part_bytes(a.v_heads, block_tokens, a.v_dim, kv_format, keys=False)
        out[key] = out.get(key, 0.0) + per_block / block_tokens
    return out


def state_bytes_per_group(layout: CacheLayout) -> dict[tuple[str, int], int]:
    """(kind, window) -> bytes of one snapshot of that group's recurrent state (kept in its own dtype)."""
    out: dict[tuple[str, int], int] = {}
    for s in layout.states:
        key = layout.kinds[s.layer]
        out[key] = out.get(key, 0) + s.bytes
    return out


def block_sizes(layout: CacheLayout, block_tokens: int, kv_format: str) -> tuple[int, int]:
    """(bytes of a block, bytes of the block that also carries the state): equal for a model without recurrent
    layers. A dense model's blocks are kv.format.codec's."""
    if layout.dense:
        first = layout.attention[0]
        geometry = codec.BlockGeometry(len(layout.attention), first.k_heads, first.k_dim, block_tokens)
        size = codec.block_bytes(geometry, kv_format)
        return size, size
    return (group_codec.block_bytes(layout, block_tokens, kv_format),
            group_codec.block_bytes(layout, block_tokens, kv_format, state=bool(layout.states)))


def prefix_fetch_bytes(layout: CacheLayout, tokens: int, block_tokens: int, kv_format: str) -> int:
    """Bytes a prefix of `tokens` (its full blocks) fetches: every block, or only those its groups need."""
    blocks = tokens // block_tokens
    if blocks == 0:
        return 0
    plain, with_state = block_sizes(layout, block_tokens, kv_format)
    first = 0 if layout.dense else layout.first_needed(blocks, block_tokens)
    return (blocks - first - 1) * plain + with_state


def prefill_seconds(model, tokens: int, *, repeats: int = 2) -> float:
    """The fastest of `repeats` forwards over `tokens` tokens on the model's device (after a short warm-up)."""
    from ..model.device import timings

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, min(259, int(model.config.vocab_size)), (1, tokens), generator=generator).to(model.device)
    with torch.no_grad():
        model(input_ids=ids[:, :16], use_cache=True)  # kernels, allocator
        return min(timings(lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1), repeats, model.device))


@dataclass(frozen=True)
class Throughput:
    """One prefix length: what it fetches and what computing it costs here."""

    tokens: int
    fetch_bytes: int
    prefill_s: float

    @property
    def phi_Bps(self) -> float:
        """Φkv: the link rate (bytes/s) at which fetching the prefix takes as long as computing it."""
        return self.fetch_bytes / self.prefill_s if self.prefill_s > 0 else float("inf")


def measure(model, layout: CacheLayout, lengths: list[int], *, block_tokens: int, kv_format: str,
            repeats: int = 2) -> list[Throughput]:
    """Φkv at each prefix length, the prefill timed on the model's device."""
    return [Throughput(n, prefix_fetch_bytes(layout, n, block_tokens, kv_format),
                       prefill_seconds(model, n, repeats=repeats)) for n in lengths]
