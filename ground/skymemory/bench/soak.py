"""Soak: a full constellation under mixed load for a fixed time, with rotation.

Starts planes x sats real skymem_node processes (default 19 x 5 = 95), then
`--clients` ground client processes (each its own station id, socket and event
loop) run a mix of block SETs (4 chunks striped over 4 satellites of a plane),
whole-block GETs (checked byte for byte), EVICTs (radius 1) and, every
`--step-s` seconds, a rotation step: every chunk a client holds is MIGRATEd one
satellite west along its plane, as the overhead satellite moves (PROTOCOL.md).
Node RSS is sampled every `--sample-s` seconds. Memory budget is small so the
satellites' LRU eviction runs too.

It stops by itself after `--minutes`, prints operations done, outcomes and
errors by kind, wrong results (must be 0), nodes that died (must be none) and
RSS per node at start and end; exits 1 on a wrong result or a dead node.

    skymemory bench soak --minutes 10
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import multiprocessing as mp
import os
import random
import time
from collections import Counter

from skymemory.argtypes import float_range, int_range
from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import wire
from skymemory.protocol.errors import NakError

CHUNKS = 4
CHUNK_BYTES = 6144


def error_kind(exc: BaseException) -> str:
    if isinstance(exc, NakError):
        return f"NAK {wire.nak_name(exc.reason)}"
    return type(exc).__name__


def chunk_data(block_hash: bytes, k: int) -> bytes:
    seed = hashlib.sha256(block_hash + bytes([k])).digest()
    return (seed * (CHUNK_BYTES // 32))[:CHUNK_BYTES]


async def client_loop(addresses, planes: int, sats: int, station: int, deadline: float, step_s: float,
                      seed: int) -> Counter:
    rng = random.Random(seed)
    n = Counter()
    blocks: dict[bytes, list[tuple[int, int]]] = {}  # block hash -> holder of each chunk
    evicted: set[bytes] = set()
    sem = asyncio.Semaphore(16)
    next_step = time.monotonic() + step_s

    async def op_set():
        h = hashlib.sha256(os.urandom(16)).digest()
        p, s = rng.randrange(planes), rng.randrange(sats)
        holders = [(p, (s + k) % sats) for k in range(CHUNKS)]
        ok = True
        for k, sat in enumerate(holders):
            try:
                await c.set_chunk(sat, h, k, CHUNKS, chunk_data(h, k), via=(p, s), gossip_radius=1)
            except Exception as exc:  # noqa: BLE001
                n[f"error set: {error_kind(exc)}"] += 1
                ok = False
        n["set ok" if ok else "set failed"] += 1
        blocks[h] = holders
        if len(blocks) > 3000:  # forget the oldest
            del blocks[next(iter(blocks))]

    async def op_get():
        if not blocks:
            return
        h = rng.choice(list(blocks))
        holders = blocks[h]
        missing = False
        for k, sat in enumerate(holders):
            try:
                data = await c.get_chunk(sat, h, k, via=holders[0])
            except Exception as exc:  # noqa: BLE001
                kind = error_kind(exc)
                n[f"miss get: {kind}"] += 1
                missing = True
                continue
            if h in evicted:
                n["WRONG: data after acknowledged evict"] += 1
            elif data != chunk_data(h, k):
                n["WRONG: bytes differ"] += 1
        n["get miss" if missing else "get exact"] += 1

    async def op_evict():
        if not blocks:
            return
        h = rng.choice(list(blocks))
        holders = blocks.pop(h)
        try:
            for sat in sorted(set(holders)):
                await c.evict_block(sat, h, radius=1, via=holders[0])
            evicted.add(h)
            n["evict ok"] += 1
        except Exception as exc:  # noqa: BLE001
            n[f"error evict: {error_kind(exc)}"] += 1
            n["evict failed"] += 1

    async def migrate_chunk(h, k, sat):
        west = (sat[0], (sat[1] - 1) % sats)
        try:
            await c.migrate(sat, h, k, 1, west, via=sat)
            n["migrate ok"] += 1
        except Exception as exc:  # noqa: BLE001
            n[f"error migrate: {error_kind(exc)}"] += 1
            n["migrate failed"] += 1
        # acknowledged or not, follow the rotation: a chunk that did not move becomes a clean miss
        if h in blocks:
            blocks[h][k] = west

    async def guarded(coro):
        async with sem:
            try:
                await asyncio.wait_for(coro, 120)
            except asyncio.TimeoutError:
                n["WRONG: operation hung"] += 1

    async with SkyMemoryClient(addresses, station_id=station, timeout=0.5, retries=5, window=64) as c:
        while time.monotonic() < deadline:
            if time.monotonic() >= next_step:
                next_step += step_s
                n["rotation steps"] += 1
                moves = [(h, k, sat) for h, holders in list(blocks.items()) for k, sat in enumerate(holders)]
                await asyncio.gather(*(guarded(migrate_chunk(h, k, sat)) for h, k, sat in moves))
                continue
            batch = []
            for _ in range(16):
                r = rng.random()
                batch.append(guarded(op_set() if r < 0.35 else op_get() if r < 0.9 else op_evict()))
            await asyncio.gather(*batch)
        n["evicted notices"] = len(c.evicted)
        n.update({f"client {k}": v for k, v in c.counters.items() if k in ("retries", "timeouts", "crc_failures")})
    return n


def client_process(q, addresses, planes, sats, station, deadline_wall, step_s, seed) -> None:
    deadline = time.monotonic() + max(0.0, deadline_wall - time.time())
    try:
        q.put(asyncio.run(client_loop(addresses, planes, sats, station, deadline, step_s, seed)))
    except BaseException as exc:  # noqa: BLE001 -- report, never hang the parent
        q.put(Counter({f"WRONG: client crashed: {exc!r}": 1}))


async def all_stats(cl: Cluster) -> dict:
    """STATS of every live satellite (bytes_used against the budget, LRU evictions)."""
    out = {}
    async with SkyMemoryClient(cl.ground_addresses(), station_id=99, timeout=0.5, retries=5) as c:
        for sat in cl.satellites:
            try:
                out[sat] = await c.stats(sat)
            except Exception:  # noqa: BLE001 -- reported as missing below
                pass
    return out


def rss_table(start: dict, mid: dict, end: dict) -> str:
    lines, row = [], []
    for sat in sorted(start):
        row.append(f"{sat[0]:2d},{sat[1]}: {start[sat] / 1024:3.1f} {mid.get(sat, 0) / 1024:3.1f} "
                   f"{end.get(sat, 0) / 1024:3.1f}")
        if len(row) == 5:
            lines.append("   ".join(row))
            row = []
    if row:
        lines.append("   ".join(row))
    return "\n".join(lines)


def _arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--planes", type=int_range(1, 1024), default=19)
    p.add_argument("--sats", type=int_range(1, 1024), default=5)
    p.add_argument("--clients", type=int_range(1, 64), default=3)
    seconds = float_range(0, 86_400, open_minimum=True)
    p.add_argument("--minutes", type=float_range(0, 100_000, open_minimum=True), default=10.0)
    p.add_argument("--step-s", type=seconds, default=30.0, help="rotation step period, seconds")
    p.add_argument("--sample-s", type=seconds, default=30.0, help="RSS sampling period, seconds")
    p.add_argument("--memory-budget", type=int_range(4096, 1 << 40), default=2 << 20, help="per satellite, bytes")
    p.add_argument("--loss", type=float_range(0, 1), default=0.0)
    return p


def register(subparsers) -> None:
    p = subparsers.add_parser('soak', help='a full constellation under mixed load and rotation for a fixed time',
                               description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p).set_defaults(func=lambda a: _main(a, p))


def _main(a, p: argparse.ArgumentParser) -> int:
    if a.planes < 1 or a.sats < 2 or a.clients < 1 or a.minutes <= 0 or a.step_s <= 0 or a.sample_s <= 0:
        p.error("need planes >= 1, sats >= 2, clients >= 1 and positive times")
    if not 0 <= a.loss < 1:
        p.error("--loss must be in [0, 1)")
    t0 = time.time()
    with Cluster(a.planes, a.sats, ["--memory-budget", str(a.memory_budget), "--loss", str(a.loss)]) as cl:
        rss_start = cl.rss_kib()
        deadline = time.time() + a.minutes * 60
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        procs = [ctx.Process(target=client_process, daemon=True,
                             args=(q, cl.ground_addresses(), a.planes, a.sats, 10 + i, deadline, a.step_s, i))
                 for i in range(a.clients)]
        for pr in procs:
            pr.start()
        samples = []
        rss_mid = None
        while time.time() < deadline:
            time.sleep(min(a.sample_s, max(0.1, deadline - time.time())))
            rss = cl.rss_kib()
            if rss_mid is None and time.time() >= deadline - a.minutes * 30:  # half-way: stores long full
                rss_mid = rss
            samples.append((time.time() - t0, sum(rss.values()) / 1024, max(rss.values(), default=0) / 1024))
            print(f"[{samples[-1][0]:6.0f} s] nodes alive {sum(cl.alive().values())}/{len(cl.satellites)}, "
                  f"RSS total {samples[-1][1]:.0f} MiB, max node {samples[-1][2]:.1f} MiB", flush=True)
        totals = Counter()
        for _ in procs:
            try:
                totals.update(q.get(timeout=300))
            except Exception:  # noqa: BLE001 -- queue.Empty: a client never reported
                totals["WRONG: client did not report"] += 1
        for pr in procs:
            pr.join(timeout=10)
            if pr.is_alive():
                pr.kill()
        rss_end = cl.rss_kib()
        dead = [sat for sat, ok in cl.alive().items() if not ok]
        node_stats = asyncio.run(all_stats(cl))
        codes = cl.close()
    bad_exit = {sat: code for sat, code in codes.items() if code not in (0, None)}
    ops = sum(v for k, v in totals.items() if k.split(" ")[0] in ("set", "get", "evict", "migrate")
              and k.split(" ")[-1] in ("ok", "failed", "exact", "miss"))
    print(f"\nsoak: {a.planes}x{a.sats} satellites, {a.clients} clients, {a.minutes:g} min, "
          f"budget {a.memory_budget} B/node, loss {a.loss}")
    print(f"operations done: {ops} ({ops / (a.minutes * 60):.0f}/s)")
    for k in sorted(totals):
        print(f"  {k}: {totals[k]}")
    wrong = sum(v for k, v in totals.items() if k.startswith("WRONG"))
    print(f"wrong: {wrong}; nodes died: {dead or 'none'}; bad exit codes: {bad_exit or 'none'}")
    over = [sat for sat, st in node_stats.items() if st.bytes_used > st.bytes_budget]
    print(f"node stats ({len(node_stats)}/{a.planes * a.sats} answered): bytes_used max "
          f"{max((st.bytes_used for st in node_stats.values()), default=0)} of budget {a.memory_budget}, "
          f"over budget: {over or 'none'}; lru_evictions {sum(st.lru_evictions for st in node_stats.values())}, "
          f"migrated_in {sum(st.migrated_in for st in node_stats.values())}, "
          f"invalid {sum(st.invalid for st in node_stats.values())}, "
          f"dropped {sum(st.dropped for st in node_stats.values())}")
    rss_mid = rss_mid or rss_end
    print("RSS per node, MiB (start, half-way, end):")
    print(rss_table(rss_start, rss_mid, rss_end))
    grow = [rss_end.get(s, 0) - rss_start[s] for s in rss_start]
    late = [rss_end.get(s, 0) - rss_mid.get(s, 0) for s in rss_start]
    print(f"RSS growth per node start->end: min {min(grow) / 1024:.2f} MiB, max {max(grow) / 1024:.2f} MiB; "
          f"second half: min {min(late) / 1024:.2f} MiB, max {max(late) / 1024:.2f} MiB; total start "
          f"{sum(rss_start.values()) / 1024:.0f} MiB, half-way {sum(rss_mid.values()) / 1024:.0f} MiB, end "
          f"{sum(rss_end.values()) / 1024:.0f} MiB")
    return 1 if wrong or dead or bad_exit or over else 0

