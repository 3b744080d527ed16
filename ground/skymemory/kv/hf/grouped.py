"""KVCManager's blocks for a grouped model (kv.format.groups): cut from a prompt, fetched, rebuilt into its cache.

Dense models keep kv.format.codec's layer-major path (rebuild, streaming, splits). A grouped model's
blocks (kv.format.group_codec) go through here:

- storing: one forward over the prompt's full blocks into `groups.full_storage_cache` (every
  sliding-window layer keeps all its tokens, so each block's K/V is there to cut), each new block
  encoded with every attention layer's K/V, the last one with the recurrent state after it;
- which prefix is usable: with recurrent layers, the longest found prefix whose last block carries
  the state (its record's size says so: no round trip);
- fetching: only the blocks the prefix needs (`CacheLayout.first_needed`: a sliding-window model
  its window, not its prefix), those the device and host tiers hold from them (kept in rows of
  the largest block's size: kv.transfer.tiers), the rest landed in one host buffer, each checked
  (CRC32C of its bytes as they arrived, or the seal) before any is used, and kept in the tiers;
- rebuilding: the cache transformers builds for the model, each layer given what it keeps: a full
  layer every token, a window layer the last W - 1 (with the prefix's length), a recurrent layer
  its state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from ..format import group_codec
from ..format.groups import FULL, LINEAR, WINDOW, CacheLayout, full_storage_cache
from ..model.cache_arg import cache_arg
from ..store import BlockRecord, BlockStore
from ..transfer import landing
from ..transfer.tiers import BlockTiers


@dataclass
class GroupedFetch:
    """What `GroupedBlocks.fetch` brought: the cache (None when a block failed), where and why it failed."""

    cache: DynamicCache | None
    miss: tuple[int, str, object] | None  # (position among the fetched records, reason, detail)
    bytes: int  # bytes of the blocks that arrived
    retrieval_s: float
    decode_s: float
    first_reply_s: float | None
    sources: dict[str, int] | None = None  # blocks from each of "device", "host" (the tiers) and "store"


class GroupedBlocks:
    """One grouped model's block format: sizes, encoding a prompt's blocks, fetching and rebuilding a prefix."""

    def __init__(self, layout: CacheLayout, *, block_tokens: int, kv_format: str, sha256: bool):
        if layout.dense:
            raise ValueError("a dense layout keeps kv.format.codec's blocks")
        self.layout = layout
        self.block_tokens = block_tokens
        self.kv_format = kv_format
        self.sha256 = sha256
        self.block_bytes = group_codec.block_bytes(layout, block_tokens, kv_format)
        self.state_block_bytes = group_codec.block_bytes(layout, block_tokens, kv_format, state=bool(layout.states))

    def usable(self, records: list[BlockRecord]) -> int:
        """How many of the found records form a usable prefix: all of them without recurrent layers; else up to
        the last whose block carries the state (a record of unknown size, -1, cannot say: not used)."""
        if not self.layout.states:
            return len(records)
        for end in range(len(records), 0, -1):
            if records[end - 1].n_bytes == self.state_block_bytes:
                return end
        return 0

    # ------------------------------------------------------------------ store

    def encode_prompt(self, model, token_ids: list[int], first: int, blocks: int) -> list[bytes]:
        """Blocks first .. blocks-1 of the prompt, computed in one forward over its `blocks` full blocks; the
        last carries the recurrent state after it."""
        cache = full_storage_cache(model.config)
        ids = torch.tensor([token_ids[:blocks * self.block_tokens]], dtype=torch.long, device=model.device)
        with torch.no_grad():
            model(input_ids=ids, **cache_arg(model, cache), use_cache=True, logits_to_keep=1)
        states = None
        if self.layout.states:
            states = []
            for spec in self.layout.states:
                held = cache.layers[spec.layer].conv_states if spec.role == "conv" else \
                    cache.layers[spec.layer].recurrent_states
                states.append(held[spec.slot][0])
        out = []
        for position in range(first, blocks):
            start, stop = position * self.block_tokens, (position + 1) * self.block_tokens
            kv = [(cache.layers[a.layer].keys[0, :, start:stop], cache.layers[a.layer].values[0, :, start:stop])
                  for a in self.layout.attention]
            out.append(group_codec.encode_block(self.layout, kv, self.kv_format, sha256=self.sha256,
                                                states=states if position == blocks - 1 else None))
        return out

    # ------------------------------------------------------------------ load

    def fetch(self, store: BlockStore, records: list[BlockRecord], buffers: landing.LandingBuffers, *,
              prefix_blocks: int, model, workers: int = 4, tiers: BlockTiers | None = None) -> GroupedFetch:
        """Land `records` (the last blocks of a prefix of `prefix_blocks`, as first_needed chose), check every
        one, and rebuild the model's cache of the whole prefix from them. The blocks `tiers` holds come from
        there (checked when they entered it); what the store sends enters them."""
        sizes = [r.n_bytes if r.n_bytes >= 0 else self.block_bytes for r in records]
        near, where = tiers.gather([r.block_hash for r in records]) if tiers is not None and tiers.enabled \
            else (None, [None] * len(records))
        far = [i for i, w in enumerate(where) if w is None]  # what the store sends
        lease = buffers.lease(1, max(1, sum(sizes[i] for i in far)))
        flat = lease.raw[0]
        views, offsets, at = flat.numpy(), {}, 0
        for i in far:
            offsets[i] = at
            at += sizes[i]
        far_records = [records[i] for i in far]
        arrival, failed = landing.land_checked(
            store, far_records, [views[offsets[i]:offsets[i] + sizes[i]] for i in far],
            lambda view, crc, sealed: group_codec.check_block(
                view, self.layout, tokens=self.block_tokens, kv_format=self.kv_format, block_crc32c=crc,
                verify_sha256=self.sha256, authenticated=sealed), workers=workers)
        started = time.perf_counter()
        # (position among the records asked for; a corrupt block's detail in words, a miss's its BlockMiss)
        miss = None if failed is None else (far[failed[0]], failed[1],
                                            str(failed[2]) if failed[1] == "corrupt" else failed[2])
        cache = None
        event = None
        if miss is None:
            if tiers is not None and tiers.enabled and far:  # write-through of what the store sent (checked)
                tiers.put([r.block_hash for r in far_records], host_rows=[flat[offsets[i]:offsets[i] + sizes[i]]
                                                                          for i in far])
            device = torch.device(model.device)
            on_device = flat[:at] if device.type == "cpu" else flat[:at].to(device, non_blocking=flat.is_pinned())
            if on_device.device.type == "cuda":
                event = torch.cuda.Event()
                event.record()
            rows = [near[i][:sizes[i]].to(device) if where[i] is not None else
                    on_device[offsets[i]:offsets[i] + sizes[i]] for i in range(len(records))]
            kv, states = group_codec.decode_blocks(rows, self.layout, self.block_tokens, self.kv_format, model.dtype)
            if self.layout.states and states is None:
                miss = (len(records) - 1, "incomplete", "the prefix's last block carries no recurrent state")
            else:
                cache = self.to_cache(model.config, kv, states, prefix_blocks * self.block_tokens)
        buffers.give_back(lease, event)
        sources = {name: sum(1 for w in where if w == name) for name in ("device", "host")}
        return GroupedFetch(cache, miss, arrival.bytes, arrival.seconds, time.perf_counter() - started,
                            arrival.landed.first_reply_s, {**{k: n for k, n in sources.items() if n},
                                                           "store": len(far)})

    def to_cache(self, config, kv: list[tuple[torch.Tensor, torch.Tensor]], states: list[torch.Tensor] | None,
                 prefix_tokens: int) -> DynamicCache:
        """The model's own cache holding a prefix of `prefix_tokens`: `kv` per attention layer (its last tokens:
        every one for a full layer), `states` (the state after the prefix) for the recurrent layers."""
        cache = DynamicCache(config=config)
        attention = iter(kv)
        for (kind, window), layer in zip(self.layout.kinds, cache.layers):
            if kind == LINEAR:
                continue
            keys, values = next(attention)
            if kind == WINDOW and keys.shape[-2] > window - 1:  # the layer keeps its last W - 1 tokens
                keys, values = keys[..., -(window - 1):, :], values[..., -(window - 1):, :]
            elif kind == FULL and keys.shape[-2] != prefix_tokens:
                raise ValueError(f"a full-attention layer needs all {prefix_tokens} tokens, {keys.shape[-2]} came")
            layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
            if kind == WINDOW:
                layer.cumulative_length = prefix_tokens
        for spec, tensor in zip(self.layout.states, states or ()):
            layer = cache.layers[spec.layer]
            if spec.role == "conv":
                layer.lazy_initialization(conv_states=tensor, state_idx=spec.slot)
                layer.conv_states[spec.slot].copy_(tensor)
            else:
                layer.lazy_initialization(recurrent_states=tensor, state_idx=spec.slot)
                layer.recurrent_states[spec.slot].copy_(tensor)
            layer.has_previous_state[spec.slot] = True
            layer.cumulative_length_linear.fill_(prefix_tokens)
        return cache

