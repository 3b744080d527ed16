"""Fault-injection matrix: does every operation end exact, cleanly missed, or
cleanly failed -- never with wrong bytes, never hanging -- under link and node faults?

For each cell a fresh constellation of real skymem_node processes runs with the
cell's link emulation (--loss/--dup/--reorder/--corrupt apply to every packet a
node sends: ISL hops and the ground downlink). A workload of chunk SETs, GETs,
EVICTs (then GETs that must miss) and MIGRATEs (then GETs from the target or
the old holder) goes through `SkyMemoryClient`, half the requests over one
ground link and relayed over ISL, half straight to the satellite. The `kill`
cell SIGKILLs and restarts satellites while gets, migrations and evictions run.
With `--auth on` (the default, as the launcher starts a constellation) every
cell's satellites hold a fresh key file and every request and reply is signed:
duplicated datagrams become replays, corrupted ones fail their tag.

Outcomes:
  set/evict/migrate: acked, or failed (timeout / NAK reported to the caller)
  get:   exact (the bytes set), clean miss (not found / timeout / NAK), or
         WRONG (other bytes, or bytes after an acknowledged eviction)
  any op not finished within its bound counts as hung (also wrong).

    skymemory bench faults [--cells loss1,kill] [--blocks 24]

prints one table row per cell; exits 1 if any cell has wrong > 0.

The cells `dead` and `slow10x` are whole blocks in coded stripes against uncoded ones, through the C fast
path: m (--parity) satellites killed, or one satellite ten times slower (bench.stripe_faults).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from skymemory.argtypes import int_range, nonnegative_int
from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import auth, wire

from . import stripe_faults

# name -> node flags
CELLS: dict[str, list[str]] = {
    "none": [],
    "loss1": ["--loss", "0.01"],
    "loss5": ["--loss", "0.05"],
    "loss10": ["--loss", "0.10"],
    "dup10": ["--dup", "0.10"],
    "reorder20": ["--reorder", "0.20"],
    "corrupt5": ["--corrupt", "0.05"],
    "mixed": ["--loss", "0.05", "--dup", "0.05", "--reorder", "0.05", "--corrupt", "0.05"],
    "kill": ["--loss", "0.01"],
}
OP_BOUND_S = 60.0  # an operation still running after this is "hung"


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    client: dict = field(default_factory=dict)
    wrong_examples: list[str] = field(default_factory=list)

    def add(self, what: str, detail: str = "") -> None:
        self.counts[what] += 1
        if what in ("wrong", "hung") and len(self.wrong_examples) < 5:
            self.wrong_examples.append(detail)

    @property
    def attempted(self) -> int:
        return sum(self.counts.values())

    @property
    def wrong(self) -> int:
        return self.counts["wrong"] + self.counts["hung"]


def chunk_bytes(block: int, chunk: int, size: int, salt: bytes) -> bytes:
    seed = hashlib.sha256(salt + f"{block}:{chunk}".encode()).digest()
    return (seed * (size // 32 + 1))[:size]


async def bounded(coro, tally: Tally, label: str):
    try:
        return await asyncio.wait_for(coro, OP_BOUND_S)
    except asyncio.TimeoutError:
        tally.add("hung", label)
        return None


class Workload:
    """Chunks striped over the grid; remembers what was acknowledged."""

    def __init__(self, cl: Cluster, client: SkyMemoryClient, blocks: int, chunks: int, size: int, seed: int):
        self.cl, self.c = cl, client
        self.rng = random.Random(seed)
        self.salt = os.urandom(8)
        self.blocks, self.chunks, self.size = blocks, chunks, size
        self.hashes = [hashlib.sha256(self.salt + b"block%d" % b).digest() for b in range(blocks)]
        sats = cl.satellites
        # chunk (b, k) lives on this satellite; relayed over ISL through (0,0) for odd blocks
        self.home = {(b, k): sats[(b * 7 + k) % len(sats)] for b in range(blocks) for k in range(chunks)}
        self.evicted_acked: set[int] = set()
        self.moved: dict[tuple[int, int], tuple[int, int]] = {}  # (b, k) -> migration target

    def via(self, b: int):
        return (0, 0) if b % 2 else None

    async def set_one(self, t: Tally, b: int, k: int) -> None:
        try:
            await self.c.set_chunk(self.home[b, k], self.hashes[b], k, self.chunks,
                                   chunk_bytes(b, k, self.size, self.salt), via=self.via(b))
            t.add("set_acked")
        except Exception:  # noqa: BLE001 -- any reported failure is a clean failure
            t.add("set_failed")

    async def get_one(self, t: Tally, b: int, k: int) -> None:
        want = chunk_bytes(b, k, self.size, self.salt)
        places = [self.moved[b, k], self.home[b, k]] if (b, k) in self.moved else [self.home[b, k]]
        got = None
        for sat in places:
            try:
                got = await self.c.get_chunk(sat, self.hashes[b], k, via=self.via(b))
                break
            except Exception:  # noqa: BLE001 -- not found, timeout, NAK: a miss at this place
                continue
        if got is None:
            t.add("get_miss")
        elif b in self.evicted_acked:
            t.add("wrong", f"block {b} chunk {k} returned after an acknowledged eviction")
        elif got != want:
            t.add("wrong", f"block {b} chunk {k}: {len(got)} bytes differ from the {len(want)} set")
        else:
            t.add("get_exact")

    async def evict_one(self, t: Tally, b: int) -> None:
        ok = True
        for sat in sorted({self.home[b, k] for k in range(self.chunks)} |
                          {self.moved[b, k] for k in range(self.chunks) if (b, k) in self.moved}):
            try:
                await self.c.evict_block(sat, self.hashes[b], radius=0, via=self.via(b))
            except Exception:  # noqa: BLE001
                ok = False
        if ok:
            self.evicted_acked.add(b)
            t.add("evict_acked")
        else:
            t.add("evict_failed")

    async def migrate_one(self, t: Tally, b: int, k: int) -> None:
        src = self.home[b, k]
        sats = self.cl.satellites
        dst = sats[(sats.index(src) + 1) % len(sats)]
        self.moved[b, k] = dst  # whatever the outcome, the chunk is at one of the two
        try:
            await self.c.migrate(src, self.hashes[b], k, 1, dst, via=self.via(b))
            t.add("migrate_acked")
        except Exception:  # noqa: BLE001
            t.add("migrate_failed")


async def gather_bounded(coros, limit: int) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(c):
        async with sem:
            await c

    await asyncio.gather(*(one(c) for c in coros))


async def run_cell(cl: Cluster, name: str, blocks: int, chunks: int, size: int, seed: int,
                   signer: auth.Signer | None = None) -> Tally:
    t = Tally()
    async with SkyMemoryClient(cl.ground_addresses(), timeout=0.4, min_timeout=0.05, retries=4,
                               backoff=1.5, station_id=1, signer=signer) as c:
        w = Workload(cl, c, blocks, chunks, size, seed)
        keys = [(b, k) for b in range(blocks) for k in range(chunks)]
        B = lambda coro, label: bounded(coro, t, label)  # noqa: E731
        await gather_bounded([B(w.set_one(t, b, k), f"set {b}/{k}") for b, k in keys], 32)
        await gather_bounded([B(w.get_one(t, b, k), f"get {b}/{k}") for b, k in keys], 32)
        migrate_keys = [(b, 0) for b in range(0, blocks, 3)]
        evict_blocks = list(range(1, blocks, 3))
        busy = [B(w.migrate_one(t, b, k), f"migrate {b}/{k}") for b, k in migrate_keys]
        busy += [B(w.evict_one(t, b), f"evict {b}") for b in evict_blocks]
        if name == "kill":
            # satellites die mid-migration / mid-eviction / mid-get and come back empty
            victims = [cl.satellites[len(cl.satellites) // 2], cl.satellites[-1]]

            async def chaos():
                for v in victims:
                    await asyncio.sleep(0.05)
                    cl.kill(v)
                await asyncio.sleep(0.3)
                for v in victims:
                    await asyncio.get_running_loop().run_in_executor(None, cl.restart, v)

            busy.append(chaos())
            busy += [B(w.get_one(t, b, k), f"get {b}/{k}") for b, k in keys if b % 3 == 2]
        await gather_bounded(busy, 32)
        await gather_bounded([B(w.get_one(t, b, k), f"get {b}/{k}") for b, k in keys], 32)
        t.client = dict(c.counters)  # evidence the faults happened: resends, CRC failures, duplicates
    return t


async def _auth_failures(cl: Cluster, signer: auth.Signer) -> int:
    async with SkyMemoryClient(cl.ground_addresses(), timeout=0.5, retries=6, station_id=2, signer=signer) as c:
        return sum([(await c.stats(sat)).auth_failures for sat in cl.satellites])


def run_matrix(cells: list[str], planes: int, sats: int, blocks: int, chunks: int, size: int,
               seed: int = 1, authenticated: bool = True) -> dict[str, tuple[Tally, float]]:
    results = {}
    for name in cells:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            env, signer, key_dir = {}, None, None
            if authenticated:
                keys = auth.write_key_files(tmp, [(p, s) for p in range(planes) for s in range(sats)])
                key_dir, signer = Path(tmp), auth.Signer(1, keys.masters[1])
            with Cluster(planes, sats, ["--memory-budget", str(16 << 20), *CELLS[name]], env=env,
                         keys=key_dir) as cl:
                tally = asyncio.run(run_cell(cl, name, blocks, chunks, size, seed, signer))
                if signer is not None:  # the satellites' count; the client counts the replies it refused
                    tally.client["sat_auth_failures"] = asyncio.run(_auth_failures(cl, signer))
                codes = cl.close()
        if any(code not in (0, None) for code in codes.values()):
            tally.add("wrong", f"a node exited with {codes}")
        results[name] = (tally, time.monotonic() - t0)
    return results


COLUMNS = ["attempted", "exact", "miss", "wrong", "hung", "set ok", "set fail", "evict ok", "evict fail",
           "migr ok", "migr fail", "resends", "crc fail", "dup/late", "auth fail sat/gnd", "secs"]


def table(results: dict[str, tuple[Tally, float]]) -> str:
    rows = [["cell", *COLUMNS]]
    for name, (t, secs) in results.items():
        c = t.counts
        rows.append([name, t.attempted, c["get_exact"], c["get_miss"], c["wrong"], c["hung"], c["set_acked"],
                     c["set_failed"], c["evict_acked"], c["evict_failed"], c["migrate_acked"], c["migrate_failed"],
                     t.client.get("retries", 0), t.client.get("crc_failures", 0), t.client.get("duplicates", 0),
                     f"{t.client.get('sat_auth_failures', '-')}/{t.client.get('auth_failures', 0)}", f"{secs:.1f}"])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(v).rjust(w) for v, w in zip(r, widths)) for r in rows)


ALL_CELLS = (*CELLS, *stripe_faults.CELLS)


def _arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--cells", default=",".join(ALL_CELLS), help=f"comma-separated, from {','.join(ALL_CELLS)}")
    p.add_argument("--planes", type=int_range(1, 1024), default=3)
    p.add_argument("--sats", type=int_range(1, 1024), default=3)
    p.add_argument("--blocks", type=int_range(1, 100_000), default=24)
    p.add_argument("--chunks", type=int_range(1, 4096), default=4)
    p.add_argument("--chunk-bytes", type=int_range(1, 60000), default=6144)
    p.add_argument("--seed", type=nonnegative_int, default=1)
    p.add_argument("--parity", type=int_range(1, 8), default=2,
                   help="dead and slow10x: parity chunks per stripe of the coded blocks (and satellites killed in dead)")
    p.add_argument("--block-bytes", type=int_range(1, 64 << 20), default=2_000_000,
                   help="dead and slow10x: bytes of each block (--blocks of them)")
    p.add_argument("--repeats", type=int_range(1, 1000), default=5, help="slow10x: reads of every block")
    p.add_argument("--auth", choices=("on", "off"), default="on",
                   help="every cell with its satellites keyed and every request and reply signed (default on, as "
                        "the launcher starts a constellation)")
    return p


def register(subparsers) -> None:
    p = subparsers.add_parser('faults', help='fault-injection matrix: every operation exact, a clean miss or a clean failure, never wrong',
                               description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p).set_defaults(func=lambda a: _main(a, p))


def _main(a, p: argparse.ArgumentParser) -> int:
    cells = [c for c in a.cells.split(",") if c]
    unknown = [c for c in cells if c not in ALL_CELLS]
    if unknown:
        p.error(f"unknown cells {unknown}; choose from {list(ALL_CELLS)}")
    if a.parity >= a.planes * a.sats:
        p.error(f"--parity {a.parity} needs more than {a.parity} satellites; the constellation has "
                f"{a.planes * a.sats}")
    for name, v in (("--planes", a.planes), ("--sats", a.sats), ("--blocks", a.blocks), ("--chunks", a.chunks)):
        if v < 1:
            p.error(f"{name} must be >= 1")
    if not 1 <= a.chunk_bytes <= wire.SKYMEM_DEFAULT_CHUNK_DATA:
        p.error(f"--chunk-bytes must be 1..{wire.SKYMEM_DEFAULT_CHUNK_DATA}")
    chunk_cells = [c for c in cells if c in CELLS]
    results = run_matrix(chunk_cells, a.planes, a.sats, a.blocks, a.chunks, a.chunk_bytes, a.seed, a.auth == "on")
    bad = {n: t.wrong_examples for n, (t, _) in results.items() if t.wrong}
    if chunk_cells:
        print(f"authentication {a.auth} in every cell")
        print(table(results))
    for n, ex in bad.items():
        print(f"{n}: WRONG: {ex}")
    rows = []
    for cell in (c for c in cells if c in stripe_faults.CELLS):  # always keyed and sealed, as stores are
        rows += stripe_faults.run_cell(cell, a.planes, a.sats, a.blocks, a.block_bytes, a.parity, a.repeats)
        print(f"{cell}: done", flush=True)
    if rows:
        print(f"\nblocks of {a.block_bytes} bytes striped over all {a.planes * a.sats} satellites, uncoded and "
              f"in stripes of {a.planes * a.sats - a.parity} + {a.parity} (sealed, signed):\n")
        print(stripe_faults.table(rows))
    return 1 if bad or any(r.wrong or r.hung for r in rows) else 0

