"""The live migration driver: keeps every block's chunks in line of sight while the constellation turns.

Mission time runs at `time_scale` × wall time (launch manifest), and every
rotation step (orbital period / satellites per plane) the satellite overhead
the ground host moves one column west.  For each indexed block the driver
remembers the step whose layout its chunks are in; whenever the current step
is ahead, it plans the next transition with `migration.plan_block` (the same
function family that locates chunks, so the two cannot disagree) and sends
the planned MIGRATE commands through the client, all in parallel.

A block advances one step only when every MIGRATE of that transition is
confirmed.  Failures are re-planned on the next tick: a timeout or a refusal
(BUSY, MIGRATE_FAILED) leaves the block where it was and the same
transition is planned again; a MIGRATE that moved fewer chunks than asked is
checked chunk by chunk (PROBE at the target, then at the source) — a chunk in
neither place means the block is broken, and it goes to `on_broken` (the lazy
eviction of skymemory.store.eviction).  A late driver catches up transition by
transition, in order.

Per transition it counts MIGRATE messages, chunks and bytes moved, re-plans
and broken blocks (`StepStats`), printed by `table()` and `skymemory rotate`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Awaitable, Callable

from skymemory.link.client import SkyMemoryClient
from skymemory.orbit import migration, placement
from skymemory.orbit.constellation import Constellation
from skymemory.protocol import wire
from skymemory.protocol.errors import NakError, SkyMemoryError
from skymemory.store.contract import BlockRecord
from skymemory.store.placed import BlockIndex, rotation_of


@dataclass
class StepStats:
    """What one rotation step transition (`step` -> `step + 1`) cost."""

    step: int
    blocks: int = 0  # blocks moved to the new layout
    ops: int = 0  # MIGRATE operations planned (first time)
    messages: int = 0  # MIGRATE commands sent (ops + re-planned ones)
    chunks: int = 0  # chunks confirmed at their new satellite
    bytes: int = 0  # chunk data bytes confirmed moved
    replans: int = 0  # operations that failed and were planned again
    broken: int = 0  # blocks found missing a chunk (handed to on_broken)
    last_done_wall_s: float = 0.0  # wall seconds after the step boundary when the last op completed


class MigrationDriver:
    def __init__(
        self,
        client: SkyMemoryClient,
        constellation: Constellation,
        index: BlockIndex,
        *,
        on_broken: Callable[[BlockRecord], Awaitable[object]] | None = None,
        concurrency: int = 64,
        poll_s: float = 0.05,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if not poll_s > 0:
            raise ValueError(f"poll period must be > 0, got {poll_s}")
        self.client = client
        self.constellation = constellation
        self.rotation = rotation_of(constellation)
        self.index = index
        self.on_broken = on_broken
        self.poll_s = poll_s
        self.steps: dict[int, StepStats] = {}
        self.counters: Counter[str] = Counter()
        self._slots = asyncio.Semaphore(concurrency)
        self._layout_step: dict[bytes, int] = {}  # block -> step whose layout its chunks are in
        self._tasks: dict[bytes, asyncio.Task] = {}
        self._planned: set[tuple[bytes, int, int]] = set()  # (block, server, step) already sent once

    # ---- clock -------------------------------------------------------------------------
    def current_step(self) -> int:
        return placement.rotation_step_index(self.constellation.mission_ms(), self.rotation.step_ms)

    def _wall_s_since_boundary(self, step: int) -> float:
        """Wall seconds since the boundary that ended `step` (mission time runs time_scale times faster)."""
        boundary_ms = (step + 1) * self.rotation.step_ms
        return (self.constellation.mission_ms() - boundary_ms) / 1000.0 / self.constellation.time_scale

    def layout_step(self, block_hash: bytes) -> int | None:
        return self._layout_step.get(block_hash)

    def stats(self, step: int) -> StepStats:
        if step not in self.steps:
            self.steps[step] = StepStats(step)
        return self.steps[step]

    # ---- driving -------------------------------------------------------------------------
    def tick(self) -> int:
        """Start catching up every block behind the current step; returns how many started."""
        now_step = self.current_step()
        for gone in set(self._layout_step) - {r.block_hash for r in self.index.records()}:
            self._layout_step.pop(gone, None)  # evicted or dropped meanwhile
        started = 0
        for record in self.index.records():
            h = record.block_hash
            if h not in self._layout_step:
                self._layout_step[h] = placement.rotation_step_index(record.created_ms, self.rotation.step_ms)
            task = self._tasks.get(h)
            if self._layout_step[h] < now_step and (task is None or task.done()):
                self._tasks[h] = asyncio.ensure_future(self._catch_up(record, now_step))
                started += 1
        return started

    async def run(self, stop: asyncio.Event) -> None:
        """Drive migrations until `stop` is set, then wait for the operations in flight."""
        while not stop.is_set():
            self.tick()
            try:
                await asyncio.wait_for(stop.wait(), self.poll_s)
            except asyncio.TimeoutError:
                pass
        await self.drain()

    async def drain(self) -> None:
        tasks = [t for t in self._tasks.values() if not t.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _catch_up(self, record: BlockRecord, target_step: int) -> None:
        h = record.block_hash
        while h in self.index and self._layout_step.get(h, target_step) < target_step:
            step = self._layout_step[h]
            ops = migration.plan_block(record, step, self.rotation)
            st = self.stats(step)
            results = await asyncio.gather(*(self._execute(record, op, st) for op in ops))
            if results.count("broken"):
                st.broken += 1
                self._layout_step.pop(h, None)
                if self.on_broken is not None:
                    await self.on_broken(record)
                return
            if not all(r == "ok" for r in results):
                return  # planned again on a later tick
            self._layout_step[h] = step + 1
            st.blocks += 1
            if ops:
                st.last_done_wall_s = max(st.last_done_wall_s, self._wall_s_since_boundary(step))

    async def _execute(self, record: BlockRecord, op: migration.MigrateOp, st: StepStats) -> str:
        """Send one MIGRATE; 'ok', 'retry' (re-plan later) or 'broken' (a chunk is nowhere)."""
        key = (op.block_hash, op.server, st.step)
        if key not in self._planned:
            self._planned.add(key)
            st.ops += 1
        else:
            st.replans += 1
        st.messages += 1
        via = self.constellation.overhead()
        moved = None
        async with self._slots:
            try:
                moved = await self.client.migrate(op.source, op.block_hash, op.first, op.count, op.target,
                                                  stride=op.stride, via=via)
            except NakError as exc:
                if exc.reason != wire.SKYMEM_NAK_MIGRATE_FAILED:
                    self.counters[f"nak_{exc.reason_name.lower()}"] += 1
                    return "retry"
                self.counters["migrate_failed"] += 1
            except SkyMemoryError as exc:
                self.counters[type(exc).__name__] += 1
                return "retry"
            if moved != op.count:  # fewer than asked (or refused): find out where each chunk is
                outcome = await self._verify(op, via)
                if outcome != "ok":
                    return outcome
        st.chunks += op.count
        st.bytes += op.n_bytes
        return "ok"

    async def _verify(self, op: migration.MigrateOp, via: tuple[int, int]) -> str:
        self.counters["verifications"] += 1
        try:
            for cid in op.chunk_ids():
                if await self.client.probe(op.target, op.block_hash, cid, via=via) is not None:
                    continue  # arrived (perhaps by an earlier attempt whose answer was lost)
                if await self.client.probe(op.source, op.block_hash, cid, via=via) is not None:
                    return "retry"  # still at the source: move it again later
                return "broken"
        except SkyMemoryError:
            return "retry"
        return "ok"

    # ---- reporting -------------------------------------------------------------------------
    def totals(self) -> StepStats:
        t = StepStats(step=-1)
        for s in self.steps.values():
            for f in ("blocks", "ops", "messages", "chunks", "bytes", "replans", "broken"):
                setattr(t, f, getattr(t, f) + getattr(s, f))
            t.last_done_wall_s = max(t.last_done_wall_s, s.last_done_wall_s)
        return t

    def table(self, first_step: int | None = None) -> str:
        """Per-transition table; steps numbered from `first_step` (default the first one seen)."""
        if not self.steps:
            return "no rotation step boundary passed"
        base = min(self.steps) if first_step is None else first_step
        rows = [("step", "blocks", "MIGRATE msgs", "ops", "re-plans", "chunks", "bytes", "broken", "done after (s)")]
        for s in sorted(self.steps):
            st = self.steps[s]
            rows.append((f"{s - base}->{s - base + 1}", st.blocks, st.messages, st.ops, st.replans, st.chunks,
                         st.bytes, st.broken, f"{st.last_done_wall_s:.2f}"))
        t = self.totals()
        rows.append(("total", t.blocks, t.messages, t.ops, t.replans, t.chunks, t.bytes, t.broken,
                     f"{t.last_done_wall_s:.2f}"))
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(str(c).rjust(w) for c, w in zip(r, widths)) for r in rows)
