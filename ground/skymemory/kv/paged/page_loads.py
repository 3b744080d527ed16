"""Cached blocks into an engine's own pages, layer by layer: the engine-neutral half of a paged engine's loads.

An engine that keeps its KV in pages (vLLM: the connector's worker is one) hands a step's loads to `PageLoads`:
per request (a `PageLoad`: its id, its blocks' records in prefix order, the pages they go into, its tenant) the
leading blocks the host tier holds come from it (kv.transfer.tier_load), the rest from the constellation in one
PrefixStream per tenant (kv.transfer.streaming: a stream opens what it lands under one tenant's key). What a stream
brings enters the host tier once every block of it is in and checked, so the next load of it is local. As the engine
reaches layer l it calls `layer(l, write)`, and `write(l, pages, kv)` puts layer l of those blocks into its
pages (kv.paged.paged does it for vLLM's layout). `finish()` ends the step.

A failure costs only what failed. Per request, its first block that did not arrive whole or check (or that the
failure names; never read from its message) and the blocks after it are load errors (`take_failed`), which
the engine recomputes. They follow the one rule (kv.index.lost): out of the ground index at once, off the
constellation through `evict` (the engine's saver thread: a step never waits for an eviction). The request's
blocks before that one, and every other request's, are written all the same. A layer the engine did not wait
for makes every page of its load an error: those pages were read before their KV was in.

What loaded is noted as used (kv.index.saving.note_use). What the step measured (its transfers, and the page
writes of what landed) is in `finish()`'s outcome: the engine's fetch-or-recompute decisions are made on
them (kv.decide.policy).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..format import codec
from ..index.lost import forget_from
from ..index.radix import RadixIndex
from ..index.saving import note_use
from ..store import BlockRecord
from ..transfer.landing import LandingBuffers
from ..transfer.streaming import PrefixStream, StreamFailed
from ..transfer.tier_load import TierLoad
from ..transfer.tiers import BlockTiers

log = logging.getLogger(__name__)

ENGINE_FAULTS = ("not-waited",)  # load failures that say nothing of the blocks themselves

Write = Callable[[int, torch.Tensor, torch.Tensor], None]  # (layer, pages, kv [m, 2, heads, tokens, head_dim])


@dataclass
class PageLoad:
    """One request's cached blocks to load."""

    req_id: str
    records: list[BlockRecord]  # in prefix order
    block_ids: list[int]  # the engine's pages they go into, one per record
    tenant: str | None = None  # the request's cache salt: its blocks are sealed under that tenant's key


@dataclass
class LoadFailure:
    req_id: str
    pages: list[int]  # the request's pages whose KV did not load: the engine recomputes them
    why: str


@dataclass
class StepOutcome:
    transfers: list[tuple[int, float, float]] = field(default_factory=list)  # bytes, seconds, first reply s
    page_writes: list[tuple[int, float]] = field(default_factory=list)  # bytes landed -> pages, seconds


@dataclass
class _Active:
    """One stream (or tier load) of the step and the requests it carries."""

    loads: list[PageLoad]
    stream: PrefixStream | TierLoad
    pages: torch.Tensor  # one per block of the stream, in its order
    written: set[int] = field(default_factory=set)  # layers already in the pages
    write_s: float = 0.0
    failure: str | None = None


class PageLoads:
    """A paged engine's loads, step after step (one instance per engine worker)."""

    def __init__(self, store, index: RadixIndex, geometry: codec.BlockGeometry, kv_format: str, *,
                 dtype: torch.dtype, landing: LandingBuffers, tiers: BlockTiers | None = None,
                 evict: Callable[[Sequence[BlockRecord]], None] = lambda records: None,
                 deadline_s: float | None = None) -> None:
        self.store, self.index, self.geometry, self.kv_format = store, index, geometry, kv_format
        self.dtype, self.landing, self.tiers, self.evict, self.deadline_s = dtype, landing, tiers, evict, deadline_s
        self._active: list[_Active] = []
        self._failed: list[LoadFailure] = []

    def start(self, loads: Sequence[PageLoad]) -> None:
        """Start the step's loads: one stream per tenant; the leading blocks of each the host tier holds from it."""
        if self.tiers is not None:
            loads = self._from_tier(loads)
        for tenant in dict.fromkeys(load.tenant for load in loads):
            mine = [load for load in loads if load.tenant == tenant]
            pages = torch.tensor([b for load in mine for b in load.block_ids], dtype=torch.int64)
            keep = None if self.tiers is None else lambda hashes, raw: self.tiers.put(hashes, host_rows=raw)
            try:
                stream = PrefixStream(self.store.for_tenant(tenant), [r for load in mine for r in load.records],
                                      self.geometry, self.kv_format, dtype=self.dtype, device="cpu",
                                      landing=self.landing, deadline_s=self.deadline_s, on_landed=keep).start()
            except (StreamFailed, ValueError) as exc:
                self._failed_pages(mine, pages, f"{type(exc).__name__}: {exc}")
                continue
            self._active.append(_Active(mine, stream, pages))

    def _from_tier(self, loads: Sequence[PageLoad]) -> list[PageLoad]:
        """Load each request's leading blocks that the host tier holds from it (one gather); what is left to fetch.
        (A block's hash names its tenant's chain: a tier hit is always the request's own block.)"""
        raw, where = self.tiers.gather([r.block_hash for load in loads for r in load.records])
        if raw is None:
            return list(loads)
        near, rows, far, at = [], [], [], 0
        for load in loads:
            held = next((i for i, w in enumerate(where[at:at + len(load.records)]) if w is None), len(load.records))
            if held:
                near.append(PageLoad(load.req_id, load.records[:held], load.block_ids[:held], load.tenant))
                rows += range(at, at + held)
            if held < len(load.records):
                far.append(PageLoad(load.req_id, load.records[held:], load.block_ids[held:], load.tenant))
            at += len(load.records)
        if near:
            pages = torch.tensor([b for load in near for b in load.block_ids], dtype=torch.int64)
            tier = TierLoad(raw[torch.tensor(rows, dtype=torch.int64)], self.geometry, self.kv_format, self.dtype)
            self._active.append(_Active(near, tier, pages))
        return far

    def layer(self, layer: int, write: Write) -> None:
        """Layer `layer` of the step's loads into their pages (the engine is about to run its attention)."""
        for active in self._active:
            if active.failure is not None:
                continue
            try:
                kv = active.stream.layer_blocks(layer)
            except StreamFailed as exc:
                self._fail(active, exc, write)
                continue
            started = time.perf_counter()
            write(layer, active.pages, kv)
            active.write_s += time.perf_counter() - started
            active.written.add(layer)

    def _fail(self, active: _Active, exc: StreamFailed, write: Write | None) -> None:
        active.failure = f"{exc.reason}: {exc}"
        if exc.reason in ENGINE_FAULTS or write is None:  # the forward read pages before their KV was in
            active.stream.close()
            self._failed_pages(active.loads, active.pages, active.failure)
            return
        intact = active.stream.intact_blocks(exc)  # (waits for the transfer's end)
        records = [r for load in active.loads for r in load.records]  # the stream's rows
        kept, start = [], 0  # the rows whose pages stand
        for load in active.loads:
            stop = start + len(load.records)
            position = next((i for i in range(start, stop) if not intact[i]), stop)
            kept += range(start, position)
            if position < stop:
                lost = position - start
                self._failed_pages([load], active.pages[position:stop], active.failure)
                named = exc.block in {r.block_hash for r in load.records}  # the block the failure names is here
                forget_from(None, self.index, load.records, lost, exc.reason, exc.satellites if named else ())
                self.evict(load.records[lost:])
            start = stop
        if kept:
            rows = torch.tensor(kept, dtype=torch.int64)
            for layer in sorted(set(range(self.geometry.layers)) - active.written):
                write(layer, active.pages[rows], active.stream.layer_blocks_of(layer, kept))
            note_use(self.index, (records[i].block_hash for i in kept))
        active.stream.close()

    def _failed_pages(self, loads: Sequence[PageLoad], pages: torch.Tensor, why: str) -> None:
        log.warning("SkyMemory: loading %d blocks failed (%s): the engine recomputes them", len(pages), why)
        pages, at = pages.tolist(), 0
        for load in loads:  # the loads' pages in order: each request's share of them
            share = pages[at:at + len(load.block_ids)]
            at += len(share)
            self._failed.append(LoadFailure(load.req_id, share, why))

    def take_failed(self) -> list[LoadFailure]:
        """The requests whose pages did not load since the last call (their pages: load errors)."""
        failed, self._failed = self._failed, []
        return failed

    def finish(self) -> StepOutcome:
        """End the step: its loads checked (a layer not waited for fails its load), their use noted, their timings."""
        active, self._active = self._active, []
        outcome = StepOutcome()
        for load in active:
            if load.failure is not None:
                continue
            missing = sorted(set(range(self.geometry.layers)) - load.written)
            if missing:  # the forward read these layers' pages before their KV was in
                self._fail(load, StreamFailed("not-waited", f"layers {missing} were not waited for"), None)
                continue
            stats = load.stream.stats
            if not getattr(load.stream, "from_tier", False):  # a tier hit is no sample of the link
                outcome.transfers.append((stats.bytes, stats.transfer_s, stats.first_reply_s))
            outcome.page_writes.append((stats.bytes, load.write_s))
            note_use(self.index, (r.block_hash for each in load.loads for r in each.records))
        return outcome
