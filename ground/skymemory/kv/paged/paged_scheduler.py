"""A paged engine's scheduler side: which of a request's blocks to load, which of its pages to save.

Engine-neutral (plain token lists, page numbers and request ids in; kv.paged.paged_steps' plans out): vLLM's
connector (integrations.vllm) is an adapter that maps vLLM's scheduler calls onto it.

It never waits on the network: a request's cached prefix is named, found in
the ground index (one SQLite query) and priced by the same PrefixFinder as
KVCManager's (kv.index.lookup; the model identity is kv.naming.identity's). Blocks past
what the index holds are looked up in orbit (kv.index.orbit_records: what other
ground hosts stored) on a worker thread: until that lookup is in (bounded by
its timeout), `match` answers None, "not yet", and the engine asks again. The
fetch-or-recompute decision runs on rates this engine measured:
the transfers and page writes its worker timed, and its own forwards (a
step that runs one request is a sample of T(new, context)). Until the
worker has measured both, "auto" fetches, and says so. Blocks the worker's
host tier holds (its reports say what enters and leaves it) are priced as
copies, not as a transfer over the link.

Rules the engine sets: only whole blocks; never the prompt's last token (it
must be computed for the first output token); what the engine's own prefix
cache already holds (num_computed_tokens) is not loaded again.

Saves: a prompt block is saved in the step that completes it (the worker
copies its pages after the forward), unless the index already has it or
another request is saving it.

Roles (vLLM's kv_role): an engine that only stores (a prefill site, kv_producer) never loads, and one that only
loads (a decode site, kv_consumer) never saves. A decode site told that a prefill site stored a request's first
n blocks (`prefilled_blocks`, from the router) asks the orbit again while fewer of them are found, as their
uploads may still be under way, but never for longer than recomputing the prompt is predicted to take here
(this engine's measured forwards; before it has measured any, the connector's load timeout): then it goes on
with what it found.

Keys: a request's block hashes fold in what vLLM's own prefix cache keys it
by (the cache salt, the LoRA adapter, media, prompt embeddings: kv.naming.extra_keys).
They are taken once, when the request is first matched, and its saves use
those same hashes; a request whose keys cannot be formed is neither loaded
nor stored, and neither is one the scheduler never matched (its keys are
unknown).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from skymemory.store.contract import BlockRecord

from ..decide.costmodel import FREE_REBUILD, RebuildModel
from ..decide.policy import EngineRates, ForwardEstimate, check_policy
from ..index.lookup import PrefixFinder
from ..index.orbit_records import OrbitRecords
from ..index.radix import RadixIndex
from ..naming.extra_keys import RequestKeys, Unkeyable, say_once
from .page_groups import PageGroups, Row
from .paged_steps import LoadPlan, SavePlan, StepPlan, WorkerReport

log = logging.getLogger(__name__)

PLACEMENT = "explicit"  # the strategy of the records the worker's store writes and can read (store.nearest_when_set)
PREFILLED_ASK_EVERY_S = 0.05  # a request waiting on a prefill site's blocks asks the orbit this often
SAVING_FORGOTTEN_S = 60.0  # a block another request began saving is not saved again for this long


def _rows(pages) -> list[Row]:
    """Rows of pages (kv.paged.page_groups); an engine with one table may give plain pages (or None)."""
    return [page if isinstance(page, tuple) else (page,) for page in pages]


def _findable(record: BlockRecord) -> bool:
    """Whether the worker's store can read the block from its record (it was placed as that store places)."""
    return record.strategy == PLACEMENT


@dataclass
class TrackedRequest:
    prompt: list[int]
    hashes: list[bytes]  # of every full block of the prompt, with its extra keys (empty when unkeyed)
    tenant: str | None = None  # the cache salt its blocks are keyed to (RequestKeys.tenant)
    unkeyed: str | None = None  # why its blocks cannot be named: nothing is loaded or stored for it
    cached: int = 0  # leading blocks the index had when the request was matched (not saved again)
    local: int = 0  # leading blocks the engine's own cache had
    to_load: list[BlockRecord] = field(default_factory=list)  # the blocks after those that were decided fetched
    loaded: int | None = None  # of those, the ones given a page to load into (None: no pages given yet)
    # the request's pages, a row per block (kv.paged.page_groups): None where a table keeps no page for it
    rows: list[Row] = field(default_factory=list)
    next_save: int = 0  # first block not yet considered for saving
    # recurrent layers: the pages the engine offered this step with their state after `tokens` (table -> page, per
    # tokens); an offer holds for the step that made it only
    offered: dict[int, dict[int, int]] = field(default_factory=dict)
    orbit_asked: bool = False  # its lookup in orbit answered: matched again, it asks this host's index only
    # a prefill site stored this many of its first blocks (the router says so): found fewer, the orbit is asked
    # again until `wait_until` (monotonic), while they may still be uploading
    prefilled: int = 0
    wait_from: float | None = None  # when it was first found short of them (monotonic)
    wait_s: float = 0.0  # how long it may wait, and why that long
    wait_bound: str = ""
    waited: float | None = None  # how long it waited, once it stopped
    next_ask: float = 0.0  # the orbit is asked again no sooner than this (monotonic): a step is milliseconds


class PagedScheduler:
    def __init__(self, *, root: bytes, block_tokens: int, block_bytes: int, layers: int, index: RadixIndex,
                 policy: str = "auto", orbit: OrbitRecords | None = None, groups: PageGroups | None = None,
                 state_block_bytes: int | None = None, loads: bool = True, saves: bool = True,
                 prefilled_wait_s: float = 10.0) -> None:
        """groups: the engine's page tables (one for every layer when None). state_block_bytes: for a model with
        recurrent layers, the size of the block that carries their state (kv.format.group_codec): a prefix is
        loaded only whole, up to a block that carries it. loads / saves: what this engine's role does (vLLM's
        kv_role). prefilled_wait_s: the longest wait for blocks a prefill site stored before this engine has
        measured its own forwards (after, the predicted recompute time bounds it)."""
        if not (loads or saves):
            raise ValueError("an engine that neither loads nor saves has no use for the cache")
        self.loads, self.saves = loads, saves
        self.prefilled_wait_s = prefilled_wait_s
        self.root = root
        self.groups = groups or PageGroups.one_table(layers)
        self.state_block_bytes = state_block_bytes
        self.block_tokens = block_tokens
        self.block_bytes = block_bytes
        self.layers = layers
        self.index = index
        # naming, finding and pricing a prefix: kv.index.lookup, as KVCManager does it
        self.finder = PrefixFinder(index, block_tokens=block_tokens, block_bytes=block_bytes, layers=layers,
                                   policy=policy, orbit=orbit)
        self.policy, self.link = self.finder.policy, self.finder.link
        self.forwards = ForwardEstimate()
        self.near: set[bytes] = set()  # blocks the worker's host tier holds (its reports): loads priced as copies
        self._page_writes: deque[tuple[int, float]] = deque(maxlen=16)
        self._requests: dict[str, TrackedRequest] = {}
        self._loads: list[LoadPlan] = []
        self._saving: dict[bytes, float] = {}
        self._offered_to: set[str] = set()  # requests the engine offered recurrent states to in the last step
        self.decisions: dict[str, str] = {}  # request id -> what was decided for it ("fetch 8/8 (...)")

    # ---- matching ------------------------------------------------------------------------------
    def _tracked(self, req_id: str, prompt: list[int],
                 keys: RequestKeys | Callable[[], RequestKeys] | None) -> TrackedRequest:
        """The request's hashes, taken once (a request is matched again each time the engine tries it)."""
        tracked = self._requests.get(req_id)
        if tracked is None or tracked.prompt != prompt:
            try:
                keys = (keys() if callable(keys) else keys) or RequestKeys()
                hashes = self.finder.hashes(self.root, prompt, keys)
                tracked = TrackedRequest(list(prompt), hashes, tenant=keys.tenant)
            except Unkeyable as exc:
                say_once(exc, "a request with ")
                tracked = TrackedRequest(list(prompt), [], unkeyed=str(exc))
            self._requests[req_id] = tracked
        return tracked

    def match(self, req_id: str, prompt: list[int], computed_tokens: int, policy: str | None = None,
              keys: RequestKeys | Callable[[], RequestKeys] | None = None,
              prefilled_blocks: int = 0) -> int | None:
        """Tokens past `computed_tokens` to load for this request: whole cached blocks worth fetching; None while
        the blocks past the index's prefix are being looked up in orbit (ask again).

        keys: what its blocks are keyed by besides their tokens (None: nothing), or a function that says it
        (called once per request; it may raise Unkeyable: then the request is neither loaded nor stored).
        prefilled_blocks: how many of its first blocks a prefill site stored for it (0: none said).
        """
        tracked = self._tracked(req_id, prompt, keys)
        if tracked.unkeyed:
            tracked.to_load = []
            return 0
        usable = max(0, (len(prompt) - 1) // self.block_tokens)
        if self.loads and prefilled_blocks > 0 and not tracked.prefilled and tracked.wait_from is None:
            tracked.prefilled = min(prefilled_blocks, usable)
        # the worker's store finds a block from its record only when it was placed as that store places
        # blocks (a RotatingBlockStore's rotating layouts are not): the prefix ends before any other
        # the orbit is asked once per request: one waiting for KV memory is matched again every step, and asking
        # again once the absences it learnt expire (NEGATIVE_S) would skip it a step each time
        found = self.finder.lookup(self.root, tracked.hashes[:usable], readable=_findable, tenant=tracked.tenant,
                                   wait=False, orbit=not tracked.orbit_asked,
                                   what=f"SkyMemory: request {req_id}'s lookup")
        if found.pending:
            return None
        tracked.orbit_asked = True  # what it found is in this host's index now (PrefixFinder._learn)
        entries = found.records
        if self._wait_for_prefilled(req_id, tracked, len(entries)):
            return None
        tracked.cached = len(entries)
        if not self.loads:
            tracked.to_load = []
            return 0
        if self.state_block_bytes is not None:  # a recurrent layer resumes only from a block carrying its state
            entries = entries[:next((end for end in range(len(entries), 0, -1)
                                     if entries[end - 1].n_bytes == self.state_block_bytes), 0)]
        tracked.local = local = computed_tokens // self.block_tokens
        tracked.to_load = []
        if len(entries) <= local:
            return 0
        if policy is not None:
            try:
                policy = check_policy(policy)
            except ValueError as exc:
                log.warning("SkyMemory: request %s: %s (its own policy): the engine's policy %s decides",
                            req_id, exc, self.policy.mode)
                policy = None
        # the prompt less what the engine has as if it were the whole prompt: its context term is then
        # slightly low, which only matters when the engine's own cache has some of the prefix
        # every block to load in the worker's host tier: no link is crossed (a load takes the tier's blocks first)
        near = all(record.block_hash in self.near for record in entries[local:])
        decision = self.finder.decide(
            self.rates(), prompt_tokens=len(prompt) - local * self.block_tokens, cached_blocks=len(entries) - local,
            streaming=True, mode=policy, near=near)
        fetch = decision.fetch_blocks
        said = decision.describe()
        if tracked.wait_from is not None:
            said += f"; {tracked.prefilled} blocks from a prefill site, waited on {self._waited(tracked):.2f} s"
        if self.state_block_bytes is not None and fetch < len(entries) - local:
            fetch, said = 0, f"{said}; recomputed: a recurrent state is cached after the whole prefix only"
        self.decisions[req_id] = said
        log.info("SkyMemory: request %s: %d cached blocks after %d local: %s", req_id, len(entries) - local, local,
                 said)
        tracked.to_load = entries[local:local + fetch]
        return len(tracked.to_load) * self.block_tokens

    def _wait_for_prefilled(self, req_id: str, tracked: TrackedRequest, found: int) -> bool:
        """Whether to ask the orbit again for blocks a prefill site stored that are not found yet: until they are,
        or until recomputing the prompt would have been quicker than waiting on (its predicted prefill here)."""
        now = time.monotonic()
        if found >= tracked.prefilled:
            if tracked.wait_from is not None and tracked.waited is None:
                tracked.waited = now - tracked.wait_from
                log.info("SkyMemory: request %s: the %d blocks a prefill site stored were in orbit after %.2f s",
                         req_id, tracked.prefilled, tracked.waited)
            return False
        if tracked.wait_from is None:
            prefill = self.forwards.model()
            tracked.wait_from = now
            if prefill is not None:
                tracked.wait_s, tracked.wait_bound = prefill.compute_s(len(tracked.prompt), 0), "its recompute here"
            else:
                tracked.wait_s = self.prefilled_wait_s
                tracked.wait_bound = "the load timeout: this engine has not timed its own forwards yet"
        waited = self._waited(tracked)
        if waited >= tracked.wait_s:
            log.warning("SkyMemory: request %s: %d of the %d blocks a prefill site stored are in orbit after %.2f s "
                        "(the bound: %s, %.2f s): the rest is recomputed", req_id, found, tracked.prefilled, waited,
                        tracked.wait_bound, tracked.wait_s)
            tracked.prefilled, tracked.waited = found, waited  # not waited on again
            return False
        if now >= tracked.next_ask:  # the ones not found were remembered absent: forget that, and ask again
            self.finder.forget_absent(tracked.hashes[found:tracked.prefilled])
            tracked.orbit_asked, tracked.next_ask = False, now + PREFILLED_ASK_EVERY_S
        return True

    @staticmethod
    def _waited(tracked: TrackedRequest) -> float:
        if tracked.waited is not None:
            return tracked.waited
        return time.monotonic() - tracked.wait_from if tracked.wait_from is not None else 0.0

    def rates(self) -> EngineRates | None:
        """This engine's compute and page-write rates, once measured (None before)."""
        prefill = self.forwards.model()
        if prefill is None:
            return None
        if self._page_writes:
            rate = statistics.median(n / max(s, 1e-9) for n, s in self._page_writes)
            return EngineRates(prefill, RebuildModel(0.0, rate))
        return EngineRates(prefill, FREE_REBUILD)  # no load seen yet: the transfer is all there is to it

    def allocated(self, req_id: str, rows: list[Row | int | None], external_tokens: int) -> None:
        """The engine gave the request its pages (a row per block: kv.paged.page_groups): plan the load of the
        blocks matched for it. A block no attention layer keeps a page of (it lies behind every sliding window)
        is not loaded; a recurrent layer's state goes into the page its table keeps at the prefix's last block."""
        tracked = self._requests.get(req_id)
        if tracked is None or external_tokens <= 0:
            return
        count = external_tokens // self.block_tokens
        if count != len(tracked.to_load):
            raise RuntimeError(f"request {req_id}: the engine loads {count} blocks, {len(tracked.to_load)} were "
                               "matched")
        given = _rows(rows[tracked.local:tracked.local + count])
        pairs = [(record, row) for record, row in zip(tracked.to_load, given) if self.groups.loads_into(row)]
        tracked.loaded = len(pairs)
        if pairs:
            self._loads.append(LoadPlan(req_id, [r for r, _ in pairs], [row for _, row in pairs], tracked.tenant))

    # ---- each step ------------------------------------------------------------------------------
    def step(self, new: list[tuple[str, list[int] | None, list[Row | int | None], int]],
             running: list[tuple[str, list[Row | int | None] | None, bool, int]], scheduled: dict[str, int],
             offered: dict[str, list[tuple[int, int, int]]] | None = None) -> StepPlan:
        """The plan of one engine step.

        new:       (request id, prompt (None: as matched), its page rows (with one table: its pages), tokens computed
                   before this step) of newly
                   scheduled requests; one that was not matched with this prompt has no saves (its keys are unknown)
        running:   (request id, rows added (None: none), resumed (its pages are given anew), tokens computed)
        scheduled: tokens each request computes in this step
        offered:   recurrent layers' states this step leaves in pages, per request: (table, page, after how many
                   tokens); a page so offered holds that state at the step's end only
        """
        for req_id in self._offered_to:  # an offer holds for the step that made it only
            if req_id in self._requests:
                self._requests[req_id].offered = {}
        self._offered_to = set()
        for req_id, states in (offered or {}).items():
            tracked = self._requests.get(req_id)
            if tracked is not None:
                self._offered_to.add(req_id)
                for table, page, tokens in states:
                    tracked.offered.setdefault(tokens, {})[table] = page
        plan = StepPlan(loads=self._loads)
        self._loads = []
        for req_id, prompt, rows, computed in new:
            tracked = self._requests.get(req_id)
            if tracked is None or (prompt is not None and tracked.prompt != list(prompt)):
                say_once(Unkeyable("a request scheduled without being matched",
                                   "its cache salt and adapter are unknown here"))
                continue
            tracked.rows = _rows(rows)
            plan.saves += self._saves(req_id, tracked, computed + scheduled.get(req_id, 0))
        for req_id, added, resumed, computed in running:
            tracked = self._requests.get(req_id)
            if tracked is None:
                continue
            if resumed:
                tracked.rows = _rows(added or [])
            elif added:
                tracked.rows += _rows(added)
            plan.saves += self._saves(req_id, tracked, computed + scheduled.get(req_id, 0))
        stepped = {r for r, *_ in new} | {r for r, *_ in running}
        for req_id, states in (offered or {}).items():  # offered while not scheduled: its blocks up to the state
            tracked = self._requests.get(req_id)
            if tracked is not None and req_id not in stepped:
                plan.saves += self._saves(req_id, tracked, max(tokens for _, _, tokens in states))
        if len(scheduled) == 1:
            ((req_id, tokens),) = scheduled.items()
            computed = next((c for r, _, _, c in new if r == req_id), None)
            if computed is None:
                computed = next((c for r, _, _, c in running if r == req_id), 0)
            plan.single = (tokens, computed)
        return plan

    def _saves(self, req_id: str, tracked: TrackedRequest, computed_after: int) -> list[SavePlan]:
        """The prompt blocks this step completes that no one has cached or is caching.

        With recurrent layers, the blocks up to the prompt's last state the engine keeps (after its last whole
        block before its last token: the engine's own prefix cache keeps the same) and no further: a later
        prefix resumes from a state, so blocks past the last one saved with it could never be loaded. That
        block is saved in the step the engine offers its state, with it."""
        full = min(computed_after, len(tracked.prompt)) // self.block_tokens
        state_at = None
        if self.state_block_bytes is not None:
            state_at = (len(tracked.prompt) - 1) // self.block_tokens - 1  # the block that ends with the state
            full = min(full, state_at + 1)
            if full == state_at + 1 and not self._state_offered(tracked, state_at):
                full = state_at  # its state is not in a page yet: saved in the step that leaves it there
        first = max(tracked.next_save, tracked.cached)
        if full <= first or tracked.unkeyed or not self.saves:
            return []
        tracked.next_save = full
        # an unreadable index: nothing is known to be saved, so the blocks are saved anyway
        indexed = len(self.finder.lookup(self.root, tracked.hashes[:full], orbit=False,
                                         what=f"SkyMemory: request {req_id}'s lookup before saving").records)
        now = time.monotonic()
        for block_hash, started in list(self._saving.items()):
            if now - started > SAVING_FORGOTTEN_S:
                del self._saving[block_hash]
        saves = []
        for position in range(max(first, indexed), full):
            block_hash = tracked.hashes[position]
            if block_hash in self._saving or position >= len(tracked.rows):
                continue
            row, state = tracked.rows[position], position == state_at
            if state:  # its recurrent tables' pages: the ones the engine offered with the state in them
                pages = tracked.offered[(position + 1) * self.block_tokens]
                row = tuple(pages.get(table, page) for table, page in enumerate(row))
            if not self.groups.saves_from(row):
                continue  # some layer keeps no page of it (behind a sliding window): it cannot be saved from here
            self._saving[block_hash] = now
            parent = self.root if position == 0 else tracked.hashes[position - 1]
            saves.append(SavePlan(req_id, row, block_hash, parent, position, tracked.tenant, state=state))
        return saves

    def _state_offered(self, tracked: TrackedRequest, position: int) -> bool:
        """Whether every recurrent layer's state after block `position` is in a page the engine offered."""
        pages = tracked.offered.get((position + 1) * self.block_tokens, {})
        return all(table in pages for table in self.groups.recurrent)

    def finished(self, req_id: str) -> dict | None:
        """Forget the request; what it should be told of its cached prefix (None: nothing was cached), or why it
        could not be cached (its keys could not be formed)."""
        tracked = self._requests.pop(req_id, None)
        decision = self.decisions.pop(req_id, None)
        if tracked is not None and tracked.unkeyed:
            return {"decision": f"not cached: {tracked.unkeyed}", "cached_blocks": 0, "fetched_blocks": 0}
        if tracked is None or decision is None:
            return None
        fetched = len(tracked.to_load) if tracked.loaded is None else tracked.loaded  # behind a window: not fetched
        return {"decision": decision, "cached_blocks": tracked.cached, "fetched_blocks": fetched}

    # ---- what the worker measured ------------------------------------------------------------------
    def observe(self, report: WorkerReport) -> None:
        for n_bytes, seconds, first_reply_s in report.transfers:
            self.link.observe(n_bytes, seconds, first_reply_s or None)
        for new_tokens, context_tokens, seconds in report.forwards:
            self.forwards.observe(new_tokens, context_tokens, seconds)
        self._page_writes.extend(report.page_writes)
        for block_hash, held in report.host_tier.items():
            if held:
                self.near.add(block_hash)
            else:
                self.near.discard(block_hash)
        for req_id, reason in report.failed_loads:
            if req_id in self.decisions:
                self.decisions[req_id] += f"; the load failed ({reason}): recomputed"
