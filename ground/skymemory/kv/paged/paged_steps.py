"""What a paged engine's two sides tell each other each step (plain data: an engine may pickle it between
processes, as vLLM does).

scheduler -> worker: a StepPlan (the blocks to load into which pages, the pages to save as which blocks,
                     and what the step computes when it is one request's: a timing sample)
worker -> scheduler: a WorkerReport (transfers, forwards and page writes it timed: the fetch-or-recompute
                     decision's inputs, measured on this engine; what entered and left its host tier, whose
                     loads are priced as near copies; and the loads that failed)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from skymemory.store.contract import BlockRecord

from .page_groups import Row


@dataclass
class LoadPlan:
    """One request's cached blocks to load."""

    req_id: str
    records: list[BlockRecord]  # in prefix order
    rows: list[Row]  # the engine's pages they go into, a row per record (kv.paged.page_groups)
    tenant: str | None = None  # the request's cache salt: its blocks are sealed under that tenant's key


@dataclass
class SavePlan:
    req_id: str
    pages: Row  # the engine's pages that hold the block once this step has run, one per table
    block_hash: bytes
    parent: bytes  # the previous block's hash, or the chain's root
    position: int  # the block's place in its prompt
    tenant: str | None = None  # the request's cache salt: the block is sealed under that tenant's key
    state: bool = False  # its recurrent tables' pages hold their state after it: saved with the block


@dataclass
class StepPlan:
    loads: list[LoadPlan] = field(default_factory=list)
    saves: list[SavePlan] = field(default_factory=list)
    single: tuple[int, int] | None = None  # (new tokens, context tokens) when the step runs one request


@dataclass
class WorkerReport:
    transfers: list[tuple[int, float, float]] = field(default_factory=list)  # bytes, seconds, first reply s
    forwards: list[tuple[int, int, float]] = field(default_factory=list)  # new tokens, context tokens, seconds
    page_writes: list[tuple[int, float]] = field(default_factory=list)  # bytes landed -> engine pages, seconds
    failed_loads: list[tuple[str, str]] = field(default_factory=list)  # request id, why its load failed
    host_tier: dict[bytes, bool] = field(default_factory=dict)  # blocks that entered (True) or left its host tier

    def __bool__(self) -> bool:
        return bool(self.transfers or self.forwards or self.page_writes or self.failed_loads or self.host_tier)

    def merged(self, other: "WorkerReport") -> "WorkerReport":
        return WorkerReport(self.transfers + other.transfers, self.forwards + other.forwards,
                            self.page_writes + other.page_writes, self.failed_loads + other.failed_loads,
                            {**self.host_tier, **other.host_tier})
