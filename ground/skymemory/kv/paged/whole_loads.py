"""Cached blocks into a hybrid engine's pages, whole, before the request runs.

An engine whose layers keep different state (kv.paged.page_groups: several page tables) runs a request whose
prefix is loaded only once the load is over: a recurrent layer resumes from the state in its page before any
layer runs (vLLM copies it into the request's running page first thing in a step), so it cannot be loaded
layer by layer during the forward as a dense model's blocks are (kv.paged.page_loads). And vLLM names a failed
load of such an engine only by its request, not by its pages.

So a request's blocks land together (kv.transfer.landing), each checked (its CRC32C, or its seal), are decoded
(kv.format.group_codec), and every attention layer's K/V goes into its own table's pages, every recurrent
layer's state, carried by the prefix's last block, into its table's page there. A load is whole or nothing: a
recurrent state is only valid after the whole prefix. What failed follows the one rule (kv.index.lost): out
of the ground index at once, off the constellation through `evict`; the engine recomputes the request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..format import group_codec
from ..format.groups import CacheLayout
from ..index.lost import forget_from
from ..index.radix import RadixIndex
from ..index.saving import note_use
from ..store import BlockRecord
from ..transfer import landing
from . import state_pages
from .page_groups import PageGroups
from .paged import PagedLayout
from .paged_steps import LoadPlan

log = logging.getLogger(__name__)


@dataclass
class WholeOutcome:
    loaded: set[str] = field(default_factory=set)  # requests whose blocks are all in their pages
    failed: list[tuple[str, str]] = field(default_factory=list)  # request id, why: the engine recomputes it
    transfers: list[tuple[int, float, float]] = field(default_factory=list)  # bytes, seconds, first reply s
    page_writes: list[tuple[int, float]] = field(default_factory=list)  # bytes landed -> pages, seconds


class _Failed(Exception):
    def __init__(self, position: int, reason: str, detail, satellites=()) -> None:
        super().__init__(str(detail))
        self.position, self.reason, self.satellites = position, reason, satellites


class WholeLoads:
    """A hybrid engine's loads (one instance per engine worker). `caches`: the attention layers' caches in layer
    order, `layout` their pages' (kv.paged.paged); `state_caches`: the recurrent layers' (kv.paged.state_pages)."""

    def __init__(self, store, index: RadixIndex, cache_layout: CacheLayout, groups: PageGroups, *, kv_format: str,
                 block_tokens: int, caches: list[torch.Tensor], layout: PagedLayout, state_caches: list,
                 landing_buffers: landing.LandingBuffers,
                 evict: Callable[[Sequence[BlockRecord]], None] = lambda records: None) -> None:
        self.store, self.index, self.cache_layout, self.groups = store, index, cache_layout, groups
        self.kv_format, self.block_tokens = kv_format, block_tokens
        self.caches, self.layout, self.state_caches = caches, layout, state_caches
        self.landing, self.evict = landing_buffers, evict
        self.plain_bytes = group_codec.block_bytes(cache_layout, block_tokens, kv_format)

    def load(self, plans: Sequence[LoadPlan]) -> WholeOutcome:
        outcome = WholeOutcome()
        for plan in plans:
            try:
                n_bytes, seconds, first_reply_s, write_s = self._load(plan)
            except _Failed as failed:
                why = f"{failed.reason}: {failed}"
                log.warning("SkyMemory: loading request %s's %d blocks failed (%s): the engine recomputes it",
                            plan.req_id, len(plan.records), why)
                forget_from(None, self.index, plan.records, failed.position, failed.reason, failed.satellites)
                self.evict(plan.records[failed.position:])
                outcome.failed.append((plan.req_id, why))
                continue
            except Exception as exc:  # noqa: BLE001 - the engine waits for every load's end: never leave one open
                why = f"{type(exc).__name__}: {exc}"  # not the blocks' fault: they stay cached
                log.warning("SkyMemory: loading request %s's %d blocks failed (%s): the engine recomputes it",
                            plan.req_id, len(plan.records), why)
                outcome.failed.append((plan.req_id, why))
                continue
            outcome.loaded.add(plan.req_id)
            outcome.transfers.append((n_bytes, seconds, first_reply_s))
            outcome.page_writes.append((n_bytes, write_s))
            note_use(self.index, (r.block_hash for r in plan.records))
        return outcome

    def _load(self, plan: LoadPlan) -> tuple[int, float, float, float]:
        sizes = [r.n_bytes if r.n_bytes >= 0 else self.plain_bytes for r in plan.records]
        lease = self.landing.lease(1, max(1, sum(sizes)))
        try:
            flat = lease.raw[0]
            views, offsets, at = flat.numpy(), [], 0
            for size in sizes:
                offsets.append(at)
                at += size
            arrival, failed = landing.land_checked(
                self.store.for_tenant(plan.tenant), plan.records, [views[o:o + s] for o, s in zip(offsets, sizes)],
                lambda view, crc, sealed: group_codec.check_block(
                    view, self.cache_layout, tokens=self.block_tokens, kv_format=self.kv_format, block_crc32c=crc,
                    authenticated=sealed))
            if failed is not None:
                position, reason, detail = failed
                raise _Failed(position, reason, detail, getattr(detail, "satellites", ()))
            started = time.perf_counter()
            self._write(plan, [flat[o:o + s] for o, s in zip(offsets, sizes)])
            return arrival.bytes, arrival.seconds, arrival.landed.first_reply_s or 0.0, time.perf_counter() - started
        finally:
            self.landing.give_back(lease)

    def _write(self, plan: LoadPlan, rows: list[torch.Tensor]) -> None:
        """The checked blocks' K/V into each attention layer's pages, the last one's state into the recurrent
        layers' pages."""
        dtype = self.caches[0].dtype if self.caches else torch.float32
        kv, states = group_codec.decode_blocks(rows, self.cache_layout, self.block_tokens, self.kv_format, dtype)
        if self.cache_layout.states and states is None:
            raise _Failed(len(rows) - 1, "incomplete", "the prefix's last block carries no recurrent state")
        m, tokens = len(rows), self.block_tokens
        for cache, table, (keys, values) in zip(self.caches, self.groups.attention, kv):
            kept = [j for j, row in enumerate(plan.rows) if row[table] is not None]
            if not kept:
                continue  # every block of it behind this layer's window
            # [1, heads, m * tokens, dim] -> [m, 2, heads, tokens, dim]: the blocks as the page layout takes them
            blocks = torch.stack([keys[0], values[0]]).unflatten(2, (m, tokens)).permute(2, 0, 1, 3, 4)
            pick = torch.tensor(kept, dtype=torch.int64)
            pages = torch.tensor([plan.rows[j][table] for j in kept], dtype=torch.int64)
            self.layout.write(cache, pages, blocks.index_select(0, pick))
        last = plan.rows[-1]
        for cache, table, state in zip(self.state_caches, self.groups.recurrent, states or ()):
            if last[table] is None:
                raise _Failed(len(rows) - 1, "incomplete", "the engine kept no page for a recurrent layer's state")
            state_pages.write(cache, last[table], state.reshape(-1))
