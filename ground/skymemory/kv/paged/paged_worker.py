"""A paged engine's worker side: cached blocks into its pages layer by layer, new blocks out in the background.

Engine-neutral (the engine's per-layer caches and their kv.paged.paged layout in, kv.paged.paged_steps' plans): vLLM's
connector (integrations.vllm) is an adapter that maps vLLM's worker calls onto it, and opens its stores.

Loads are kv.paged.page_loads' (engine-neutral): a step's blocks of one tenant (a
cache salt) come in one PrefixStream, the leading ones the host tier holds
from it. `wait_layer(l)`, called by the engine just before layer l's
attention, waits for layer l of every block only and writes it into the
pages the scheduler chose (kv.paged.paged). A load that fails costs only what
failed: those pages are the engine's load errors (it recomputes them), and
what failed leaves the index at once and the constellation on the saver's
thread (kv.index.lost, the one rule).

Saves: after a step's forward, the pages of the prompt blocks it completed
are copied out (one gather per layer: the pages may be reused as soon as the
request ends; on a GPU into pinned host memory, asynchronously, behind an
event the saver waits on, so the step does not wait for the copy) and handed
to a saver thread, which encodes them as KVCManager
does (kv.format.codec: the same bytes for the same KV), stores them on the
constellation and indexes them. Decoding never waits for the network: a full
save queue drops blocks (logged), and shutdown waits for the queue a bounded
time.

An engine with several page tables (kv.paged.page_groups: a hybrid allocator) loads a request's blocks
whole before it runs instead (kv.paged.whole_loads), and saves each attention layer's pages from its own
table, with the recurrent layers' state pages in the block that carries them (kv.format.group_codec).

Two stores, one for loads and one for saves: on a constellation, two ground-station
ids (each has its own socket; a satellite answers a station at the address it last
heard it from).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

import torch
from skymemory.store.contract import BlockRecord, BlockStore

from ..format import codec, group_codec
from ..format.groups import CacheLayout
from ..index.lost import evict
from ..index.orbit_records import OrbitRecords
from ..index.radix import RadixIndex
from ..index.saving import BlockFormat, BlockSave, save_blocks
from ..transfer.affinity import unpin_current_thread
from ..transfer.landing import LandingBuffers
from ..transfer.tiers import BlockTiers
from . import state_pages
from .page_groups import PageGroups
from .page_loads import PageLoad, PageLoads
from .paged import CopiedPages, PagedLayout
from .paged_steps import LoadPlan, SavePlan, StepPlan, WorkerReport
from .whole_loads import WholeLoads, WholeOutcome

log = logging.getLogger(__name__)

SAVE_QUEUE_BLOCKS = 64  # blocks copied out and waiting to be stored, at most
SHUTDOWN_SAVE_WAIT_S = 60.0


@dataclass
class SaveJob:
    plans: list[SavePlan]
    pages: CopiedPages  # their pages, per layer [m, 2, kv_heads, tokens, head_dim] on the host, once waited for
    states: list[torch.Tensor | None] | None = None  # per plan: its recurrent layers' state pages (uint8 rows)


@dataclass
class EvictJob:
    records: list[BlockRecord]  # blocks that failed to load, and those after them (kv.index.lost)


class BlockSaver:
    """Encodes, stores and indexes copied-out blocks on a thread of its own (and publishes their records in orbit,
    kv.index.orbit_records, when `orbit` is given); evicts failed ones there too (their records with them)."""

    def __init__(self, store: BlockStore, index: RadixIndex, form: BlockFormat,
                 tiers: BlockTiers | None = None, orbit: OrbitRecords | None = None,
                 cache_layout: CacheLayout | None = None) -> None:
        self.store, self.index, self.form, self.orbit = store, index, form, orbit
        self.cache_layout = cache_layout  # a hybrid model's: its blocks are grouped ones (kv.format.group_codec)
        self.tiers = tiers  # the worker's host tier: what is saved is kept there too (write-through)
        self._queue: queue.Queue[SaveJob | EvictJob | None] = queue.Queue()
        self._pending = 0  # blocks queued or being stored
        self._lock = threading.Lock()
        self.saved = self.dropped = self.failed = 0
        self._thread = threading.Thread(target=self._run, name="skymemory-saver", daemon=True)
        self._thread.start()

    def submit(self, job: SaveJob) -> bool:
        with self._lock:
            if self._pending + len(job.plans) > SAVE_QUEUE_BLOCKS:
                self.dropped += len(job.plans)
                log.warning("SkyMemory: %d blocks not saved: %d are waiting for the constellation already",
                            len(job.plans), self._pending)
                return False
            self._pending += len(job.plans)
        self._queue.put(job)
        return True

    def evict(self, records: list[BlockRecord]) -> None:
        """Evict `records` from the constellation on this thread: the engine's step never waits for it."""
        self._queue.put(EvictJob(list(records)))

    def _run(self) -> None:
        unpin_current_thread()  # made by vLLM's pinned compute thread: run where vLLM reserved CPUs for us
        while (job := self._queue.get()) is not None:
            if isinstance(job, EvictJob):
                evict(self.store, job.records)  # best effort: never raises
                if self.orbit is not None:
                    self.orbit.forget([r.block_hash for r in job.records])  # never raises either
                continue
            try:
                self._store(job)
                self.saved += len(job.plans)
            except Exception as exc:  # noqa: BLE001 - a failed save loses a cache entry, never a request
                self.failed += len(job.plans)
                log.warning("SkyMemory: saving %d blocks failed: %s", len(job.plans), exc)
            finally:
                with self._lock:
                    self._pending -= len(job.plans)

    def _store(self, job: SaveJob) -> None:
        job.pages.wait()  # the step's copy out of the device pages: this thread waits, not the step
        saves = [(plan.tenant, BlockSave(plan.block_hash, plan.parent, plan.position, self._encode(job, i)))
                 for i, plan in enumerate(job.plans)]
        for tenant in dict.fromkeys(t for t, _ in saves):  # one put per tenant: under its own key
            save_blocks(self.store.for_tenant(tenant), self.index, [s for t, s in saves if t == tenant], self.form,
                        self.tiers, self.orbit, tenant)

    def _encode(self, job: SaveJob, i: int) -> bytes:
        """Block i of the job as kv.format.codec encodes it (KVCManager's bytes for the same KV), or a hybrid
        model's as kv.format.group_codec does, with its recurrent layers' state when it carries it."""
        kv = [(layer[i, 0], layer[i, 1]) for layer in job.pages.layers]
        if self.cache_layout is None:
            return codec.encode_block(kv, self.form.kv_format)
        states = job.states[i] if job.states else None
        return group_codec.encode_block(self.cache_layout, kv, self.form.kv_format,
                                        states=None if states is None else list(states))

    def close(self, timeout_s: float = SHUTDOWN_SAVE_WAIT_S) -> None:
        """Store what is queued (up to `timeout_s`), then stop."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("SkyMemory: %d blocks were still being saved after %.0f s: not saved", self._pending,
                        timeout_s)


class PagedWorker:
    """load_store, save_store: the stores blocks are loaded from and saved to (a tenant's through for_tenant
    where they seal: store.contract.TenantSealing). host_tier_bytes: a host tier (kv.transfer.tiers, LRU) in front of
    them, 0 for none: saves write through it, loads of the blocks it holds come from it. load_timeout_s: how
    long a step's loads may take before what has not arrived is a failure. orbit: publish the saved blocks'
    records in orbit (kv.index.orbit_records), for other ground hosts to find, when the save store can keep them."""

    def __init__(self, load_store: BlockStore, save_store: BlockStore, *, geometry: codec.BlockGeometry,
                 index: RadixIndex, form: BlockFormat, host_tier_bytes: int = 0, load_timeout_s: float,
                 orbit: bool = True, groups: PageGroups | None = None, cache_layout: CacheLayout | None = None) -> None:
        """groups, cache_layout: for an engine with several page tables (kv.paged.page_groups), and the model's
        layout on it: its blocks are grouped ones (kv.format.group_codec), loaded whole before the request runs
        (kv.paged.whole_loads)."""
        self.geometry = geometry
        self.index = index
        self.form = form
        self.groups = groups or PageGroups.one_table(geometry.layers)
        self.cache_layout = cache_layout if self.groups.hybrid else None
        if self.groups.hybrid and cache_layout is None:
            raise ValueError("an engine with several page tables needs the model's cache layout on it")
        if self.groups.hybrid and host_tier_bytes:
            raise ValueError("a host tier holds blocks of one size: it is not kept for a model whose layers are "
                             "in several page tables (set host_tier_bytes to 0)")
        self.block_bytes = codec.block_bytes(geometry, form.kv_format)
        self.load_store = load_store
        self.load_timeout_s = load_timeout_s
        # journal: the scheduler hears what the tier holds (take_report), to price its blocks' loads as near
        self.tiers = (BlockTiers(self.block_bytes, "cpu", host_bytes=host_tier_bytes, journal=True)
                      if host_tier_bytes else None)
        self.saver = BlockSaver(save_store, index, form, self.tiers,
                                OrbitRecords.for_store(save_store) if orbit else None, self.cache_layout)
        self.caches: list[torch.Tensor] = []
        self.state_caches: list = []
        self.layout: PagedLayout | None = None
        self.loads: PageLoads | None = None  # made when the engine's caches are known (register)
        self.whole: WholeLoads | None = None  # a hybrid engine's loads instead
        self._errors: set[int] = set()
        self._report = WorkerReport()
        self._step_started = time.perf_counter()

    def register(self, caches: list[torch.Tensor], layout: PagedLayout, state_caches: list | None = None) -> None:
        """The engine's per-layer caches, in layer order, and the layout of their pages; `state_caches`: its
        recurrent layers' (kv.paged.state_pages), in layer order."""
        if len(caches) != self.geometry.layers:
            raise ValueError(f"the engine has {len(caches)} attention layers, the model {self.geometry.layers}")
        state_caches = list(state_caches or ())
        if len(state_caches) != len(self.groups.recurrent):
            raise ValueError(f"the engine has {len(state_caches)} recurrent layers, the model "
                             f"{len(self.groups.recurrent)}")
        self.caches, self.layout, self.state_caches = caches, layout, state_caches
        landing = LandingBuffers(pin=caches[0].device.type == "cuda")
        if self.groups.hybrid:
            self.whole = WholeLoads(self.load_store, self.index, self.cache_layout, self.groups,
                                    kv_format=self.form.kv_format, block_tokens=self.form.block_tokens,
                                    caches=caches, layout=layout, state_caches=state_caches,
                                    landing_buffers=landing, evict=self.saver.evict)
            return
        self.loads = PageLoads(self.load_store, self.index, self.geometry, self.form.kv_format,
                               dtype=caches[0].dtype, landing=landing, tiers=self.tiers, evict=self.saver.evict,
                               deadline_s=self.load_timeout_s)

    def load_whole(self, plans: list[LoadPlan]) -> WholeOutcome:
        """A hybrid engine's loads: every request's blocks whole into its pages, now (kv.paged.whole_loads)."""
        outcome = self.whole.load(plans)
        self._report.transfers += outcome.transfers
        self._report.page_writes += outcome.page_writes
        self._report.failed_loads += outcome.failed
        return outcome

    # ---- loads ----------------------------------------------------------------------------------
    def begin_step(self) -> None:
        self._step_started = time.perf_counter()

    def start_loads(self, plans: list[LoadPlan]) -> None:
        """The step's loads (kv.paged.page_loads: the host tier first, one stream per tenant)."""
        self.loads.start([PageLoad(p.req_id, p.records, [row[0] for row in p.rows], p.tenant) for p in plans])

    def wait_layer(self, layer: int) -> None:
        """Layer `layer` of this step's loads into their pages (the engine is about to run its attention)."""
        if self.loads is not None:  # (none before the first load or save made the caches known)
            self.loads.layer(layer, self._write)
            self._take_failed()

    def _write(self, layer: int, pages: torch.Tensor, kv: torch.Tensor) -> None:
        self.layout.write(self.caches[layer], pages, kv)

    def _take_failed(self) -> None:
        """The pages that did not load are the engine's load errors now; the scheduler hears why at the step's end."""
        for failure in self.loads.take_failed():
            self._errors.update(failure.pages)
            self._report.failed_loads.append((failure.req_id, failure.why))

    def take_load_errors(self) -> set[int]:
        errors, self._errors = self._errors, set()
        return errors

    # ---- end of a step: loads checked, timings, saves --------------------------------------------
    def end_step(self, plan: StepPlan) -> None:
        if self.loads is not None:
            outcome = self.loads.finish()
            self._take_failed()
            self._report.transfers += outcome.transfers
            self._report.page_writes += outcome.page_writes
        if plan.single is not None and not plan.loads:
            if self.caches and self.caches[0].device.type == "cuda":
                torch.cuda.synchronize(self.caches[0].device)
            self._report.forwards.append((*plan.single, time.perf_counter() - self._step_started))
        if plan.saves:
            self._copy_out(plan.saves)

    def _copy_out(self, saves: list[SavePlan]) -> None:
        """The saved blocks' pages out of the engine's caches, now (the pages may be reused once the request
        ends). On a GPU the copies are asynchronous (kv.paged.paged's copy_out) and the saver waits for them: the step
        never does. A hybrid engine's are copied layer by layer from each layer's table, with the recurrent
        layers' state pages of the blocks that carry it."""
        dtype = codec.source_dtype(self.form.kv_format)
        if not self.groups.hybrid:
            pages = torch.tensor([s.pages[0] for s in saves], dtype=torch.int64)
            self.saver.submit(SaveJob(saves, self.layout.copy_out(self.caches, pages, dtype)))
            return
        layers = [self.layout.read(cache, torch.tensor([s.pages[table] for s in saves], dtype=torch.int64))
                  .to(device="cpu", dtype=dtype) for cache, table in zip(self.caches, self.groups.attention)]
        states = [[state_pages.read(cache, torch.tensor([s.pages[table]], dtype=torch.int64))[0]
                   for cache, table in zip(self.state_caches, self.groups.recurrent)] if s.state else None
                  for s in saves]
        self.saver.submit(SaveJob(saves, CopiedPages(layers), states))

    def take_report(self) -> WorkerReport | None:
        if self.tiers is not None:  # (the saver's thread writes through it too: taken under the tiers' lock)
            self._report.host_tier.update(self.tiers.take_host_changes())
        report, self._report = self._report, WorkerReport()
        return report if report else None

    def close(self) -> None:
        """Store what is queued (a bounded wait), then stop saving. The stores are the caller's to close."""
        self.saver.close()
