"""`skymemory rotate`: store blocks, let the launched constellation turn, keep them in reach.

Stores `--blocks` blocks with a placement strategy, then for `--duration`
seconds runs the migration driver (skymemory.store.rotation) while a reader keeps
getting random blocks and a writer keeps adding new ones; at the end every
block is read back and compared byte for byte, and the most ISL hops any get
took (reply route header) is compared with the layout's bound.  Prints the
per-step MIGRATE table and a summary; exit code 1 if a block was lost, a
byte differed or a get needed more hops than the bound.

    skymemory rotate --manifest run/manifest.json --duration 40

A step is one satellite of a plane passing overhead (orbital period / sats per
plane: 1,146 s on a 19x5 constellation at 550 km), so at the launcher's default
time scale (1) a short run sees none; launch with --time-scale 60 (a step every
19 s) to watch migrations within a minute. The command says so before it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import time
from dataclasses import dataclass, field

from skymemory.argtypes import float_range, int_range, positive_float
from skymemory.cli._common import add_manifest_arg, load_manifest
from skymemory.orbit import placement
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest
from skymemory.protocol.errors import SkyMemoryError
from skymemory.store.contract import BlockMiss, BlockRecord
from skymemory.store.eviction import Evictions
from skymemory.store.placed import BlockIndex, HopCountingClient, PlacedStore, block_hash_of
from skymemory.store.rotation import MigrationDriver


@dataclass
class RotationReport:
    """What a rotation run saw; `ok` when nothing was lost and no hop bound was exceeded."""

    steps_passed: int = 0
    blocks_stored: int = 0
    blocks_verified: int = 0  # read back byte-exact at the end
    lost: list[str] = field(default_factory=list)  # why blocks could not be read back at the end
    gets_during: int = 0
    get_misses_during: int = 0
    get_mismatches: int = 0
    puts_during: int = 0
    put_failures: int = 0
    # placement.max_hops of each layout, for the migrating strategies only: a static layout (hop,
    # baseline) stays where it was set and drifts out of the ground host's view as the constellation turns
    hop_bound: dict[str, int] = field(default_factory=dict)  # keyed "strategy:servers"
    max_hops: dict[str, int] = field(default_factory=dict)  # "strategy:servers" -> most hops a DATA reply took
    hop_violations: list[str] = field(default_factory=list)
    migrated_in_satellites: int = 0  # sum of the satellites' migrated_in counters over the run
    table: str = ""
    driver_totals: dict = field(default_factory=dict)
    store_counters: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (not self.lost and not self.hop_violations and self.get_mismatches == 0
                and self.blocks_verified == self.blocks_stored)


def _payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


async def _migrated_in_total(client, sats) -> int:
    totals = await asyncio.gather(*(client.stats(s, via=s) for s in sats))
    return sum(t.migrated_in for t in totals)


async def run_rotation(manifest: Manifest, duration_s: float, *, blocks: int = 12, block_bytes: int = 100_000,
                       layouts: list[tuple[str, int]] | None = None, put_interval_s: float = 1.0,
                       readers: int = 2, log=None) -> RotationReport:
    """The experiment behind `skymemory rotate` (also run by tests/integration/test_rotation.py)."""
    layouts = layouts or [("rotation-hop", 9)]
    c = manifest.constellation()
    for strategy, n in layouts:
        placement.check_fits(strategy, n, c.planes, c.sats)
    report = RotationReport(hop_bound={f"{s}:{n}": placement.max_hops(s, n) for s, n in layouts
                                       if s in placement.MIGRATING_STRATEGIES})
    expected: dict[bytes, bytes] = {}
    index = BlockIndex()
    sats = c.all_satellites()
    say = log or (lambda _msg: None)
    async with HopCountingClient(manifest.ground_addresses(), station_id=manifest.ground_station,
                                 mission_ms=c.mission_ms, bind=(manifest.ground_host, 0), window=256,
                                 signer=signer_for_manifest(manifest)) as client:
        evictions = Evictions(client, c, index)
        driver = MigrationDriver(client, c, index, on_broken=evictions.evict_everywhere)
        evictions.layout_step = driver.layout_step
        store = PlacedStore(client, c, strategy=layouts[0][0], n_servers=layouts[0][1],
                            chunk_bytes=manifest.chunk_size, index=index, on_miss=evictions.evict_everywhere,
                            layout_step=driver.layout_step)
        migrated_before = await _migrated_in_total(client, sats)

        async def put(k: int) -> BlockRecord:
            strategy, n = layouts[k % len(layouts)]
            h = block_hash_of(f"rotation-block-{k}-{manifest.epoch_ms}")
            data = _payload(k, block_bytes + 97 * k)  # sizes differ, last chunks are partial
            rec = await store.put(h, data, strategy=strategy, n_servers=n)
            expected[h] = data
            return rec

        await asyncio.gather(*(put(k) for k in range(blocks)))
        first_step = driver.current_step()
        say(f"stored {blocks} blocks at step {first_step}; turning for {duration_s:g} s "
            f"(one step = {c.step_ms / 1000 / c.time_scale:.2f} s wall)")
        stop = asyncio.Event()

        async def reader(seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set():
                records = index.records()
                if not records:
                    await asyncio.sleep(0.05)
                    continue
                rec = rng.choice(records)
                try:
                    data = await store.get(rec)
                except (BlockMiss, SkyMemoryError) as exc:
                    report.get_misses_during += 1
                    say(f"get during rotation failed: {exc}")
                    continue
                report.gets_during += 1
                if data != expected[rec.block_hash]:
                    report.get_mismatches += 1

        async def writer() -> None:
            k = blocks
            while put_interval_s > 0 and not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), put_interval_s)
                    return
                except asyncio.TimeoutError:
                    pass
                try:
                    await put(k)
                    report.puts_during += 1
                except SkyMemoryError as exc:
                    report.put_failures += 1
                    say(f"put during rotation failed: {exc}")
                k += 1

        stop_driver = asyncio.Event()
        driving = [asyncio.ensure_future(driver.run(stop_driver)), asyncio.ensure_future(evictions.listen(stop_driver))]
        load = [asyncio.ensure_future(writer())] + [asyncio.ensure_future(reader(s)) for s in range(readers)]
        t0 = time.monotonic()
        last_step = first_step
        while time.monotonic() - t0 < duration_s:
            await asyncio.sleep(min(0.2, max(0.0, duration_s - (time.monotonic() - t0))))
            step = driver.current_step()
            if step != last_step:
                say(f"step {step - first_step} began ({time.monotonic() - t0:.1f} s)")
                last_step = step
        stop.set()  # readers and writer first: a put still retrying must finish while the driver runs
        await asyncio.gather(*load)
        # then let the driver bring every block to the current step's layout
        deadline = time.monotonic() + 30.0
        while any(driver.layout_step(r.block_hash) != driver.current_step() for r in index.records()):
            if time.monotonic() > deadline:
                say("some blocks did not reach the current layout within 30 s")
                break
            await asyncio.sleep(0.05)
        stop_driver.set()
        await asyncio.gather(*driving)
        report.steps_passed = driver.current_step() - first_step

        # final check: every block, byte for byte
        records = index.records()
        report.blocks_stored = len(expected)
        lost_from_index = set(expected) - {r.block_hash for r in records}
        report.lost += [f"{h.hex()[:16]}: evicted from the index" for h in lost_from_index]
        for rec in records:
            try:
                data = await store.get(rec)
            except (BlockMiss, SkyMemoryError) as exc:
                report.lost.append(f"{rec.block_hash.hex()[:16]}: {exc}")
                continue
            if data == expected[rec.block_hash]:
                report.blocks_verified += 1
            else:
                report.lost.append(f"{rec.block_hash.hex()[:16]}: bytes differ")
        # hop bound: every DATA reply of a block, measured from the satellite it came down through
        for rec in records:
            hops = client.max_hops_by_block.get(rec.block_hash, 0)
            layout = f"{rec.strategy}:{rec.n_servers}"
            bound = report.hop_bound.get(layout)
            report.max_hops[layout] = max(report.max_hops.get(layout, 0), hops)
            if bound is not None and hops > bound:
                report.hop_violations.append(f"{rec.block_hash.hex()[:16]} ({rec.strategy}, {rec.n_servers} "
                                             f"servers): {hops} hops > bound {bound}")
        report.migrated_in_satellites = await _migrated_in_total(client, sats) - migrated_before
        report.table = driver.table(first_step)
        t = driver.totals()
        report.driver_totals = {"messages": t.messages, "chunks": t.chunks, "bytes": t.bytes, "replans": t.replans,
                                "broken": t.broken, **driver.counters}
        report.store_counters = dict(store.counters)
    return report


def format_report(r: RotationReport, manifest: Manifest) -> str:
    c = manifest.constellation()
    lines = [
        f"constellation {c.planes}x{c.sats}, time scale {c.time_scale:g}: one step = "
        f"{c.step_ms / 1000:.1f} s mission = {c.step_ms / 1000 / c.time_scale:.2f} s wall; "
        f"{r.steps_passed} steps passed",
        r.table,
        f"satellites' migrated_in counters over the run: {r.migrated_in_satellites} chunks "
        f"(driver confirmed {r.driver_totals.get('chunks', 0)})",
        f"gets during rotation: {r.gets_during} ok, {r.get_misses_during} failed, {r.get_mismatches} wrong bytes; "
        f"puts during rotation: {r.puts_during} ok, {r.put_failures} failed",
        f"store: {r.store_counters}",
        "hops of gets (most seen / layout bound): " + ", ".join(
            f"{s} {h}/{r.hop_bound[s] if s in r.hop_bound else 'none, static layout drifts'}"
            for s, h in sorted(r.max_hops.items())),
        f"end: {r.blocks_verified}/{r.blocks_stored} blocks read back byte-exact",
    ]
    lines += [f"LOST {x}" for x in r.lost] + [f"HOPS {x}" for x in r.hop_violations]
    lines.append("OK" if r.ok else "FAILED")
    return "\n".join(lines)


def _layout(text: str) -> tuple[str, int]:
    try:
        strategy, n = text.rsplit(":", 1)
        n_servers = int(n)
        placement.check_strategy(strategy)
        placement.check_n_servers(n_servers)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--layout wants STRATEGY:SERVERS (e.g. rotation-hop:9): {exc}") from None
    return strategy, n_servers


def register(subparsers) -> None:
    p = subparsers.add_parser("rotate", help="turn a launched constellation with blocks stored; report MIGRATE per step",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_manifest_arg(p)
    p.add_argument("--duration", type=positive_float, required=True, help="wall seconds to keep turning")
    p.add_argument("--blocks", type=int_range(1, 10_000), default=12, help="blocks stored before turning (default 12)")
    p.add_argument("--block-bytes", type=int_range(1, 50_000_000), default=100_000,
                   help="size of block 0 (block k is 97*k bytes larger), default 100000")
    p.add_argument("--layout", type=_layout, action="append", default=None,
                   help="STRATEGY:SERVERS, repeatable; blocks cycle through them (default rotation-hop:9)")
    p.add_argument("--put-interval", type=float_range(0, 3600), default=1.0,
                   help="seconds between new blocks during the run, 0 = none (default 1)")
    p.add_argument("--readers", type=int_range(0, 64), default=2, help="concurrent readers during the run (default 2)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=main)


def steps_ahead(manifest: Manifest, duration_s: float) -> str | None:
    """None when a rotation step boundary falls within the next `duration_s` wall seconds, else why not."""
    c = manifest.constellation()
    now = c.mission_ms()
    if c.step_index(now + duration_s * 1000 * c.time_scale) > c.step_index(now):
        return None
    step_wall_s = c.step_ms / 1000 / c.time_scale
    next_s = (c.next_step_ms(now) - now) / 1000 / c.time_scale
    scale = math.ceil(3 * c.step_ms / 1000 / duration_s)  # three steps in the run
    return (f"no rotation step falls in the next {duration_s:g} s, so nothing will migrate: one step of this "
            f"{c.planes}x{c.sats} constellation is {c.step_ms / 1000:,.0f} s of mission time, {step_wall_s:,.1f} s "
            f"wall at its time scale {c.time_scale:g}, and the next one is {next_s:,.0f} s away; relaunch with "
            f"--time-scale {scale} (a step every {c.step_ms / 1000 / scale:.1f} s) or give --duration "
            f"{math.ceil(next_s) + 1}")


def main(args: argparse.Namespace) -> int:
    try:
        manifest = load_manifest(args)
        log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
        why_still = steps_ahead(manifest, args.duration)
        if why_still:
            print(f"skymemory rotate: note: {why_still}", file=sys.stderr, flush=True)
        report = asyncio.run(run_rotation(manifest, args.duration, blocks=args.blocks, block_bytes=args.block_bytes,
                                          layouts=args.layout, put_interval_s=args.put_interval,
                                          readers=args.readers, log=log))
    except (FileNotFoundError, ValueError, SkyMemoryError) as exc:
        print(f"skymemory rotate: {exc}", file=sys.stderr)
        return 1
    print(format_report(report, manifest))
    if report.steps_passed == 0 and why_still:
        print(f"skymemory rotate: {why_still}", file=sys.stderr)
    return 0 if report.ok else 1
