"""`skymemory bench index`: the ground KV index (kv.index.radix) at 10k, 100k and 1M blocks, one process and several.

For each size the index is filled (chains of --prompt-blocks blocks, random
hashes, as KVCManager indexes prompts), then three phases run, each timed per
call after a warm-up:

  insert   a new prompt's blocks, one insert_chain (one transaction) per prompt
  lookup   the longest cached prefix of an indexed prompt (all its blocks hit)
  remove   a prompt's first block and so every block after it (the prompts the
           insert phase added: the index stays at its size)

with one process, then with --processes at once on the same file (each its
own prompts; the phases start together). The concurrent run also checks what
the index must guarantee: after the writers, every block each of them
inserted is found (none lost), and a reader process looking prefixes up all
through the writes never fails.

    skymemory bench index --sizes 10000,100000,1000000 --processes 8
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from skymemory.argtypes import output_dir

from .options import positive_int
from .report import run_and_write

PHASES = ("insert", "lookup", "remove")
ROOT = hashlib.sha256(b"skymemory bench index root").digest()
FILL_BATCH = 50_000
WARM_UP = 50


def _record(block_hash: bytes):
    from skymemory.store.contract import BlockRecord

    # TinyLlama's fp16 block, striped as the demo stripes it; created now, as blocks are (the newest last)
    return BlockRecord(block_hash, 2_883_584, 6144, 470, time.time_ns() // 1_000_000, "rotation-hop", 9, (9, 2))


def _chain_hashes(label: str, blocks: int) -> list[bytes]:
    hashes, previous = [], ROOT
    for b in range(blocks):
        previous = hashlib.sha256(previous + f"{label}/{b}".encode()).digest()
        hashes.append(previous)
    return hashes


def _blocks(hashes: list[bytes]) -> list[tuple]:
    return [(_record(h), {"kv_format": "fp16", "tokens": 128, "position": p}) for p, h in enumerate(hashes)]


def fill(index, size: int, prompt_blocks: int, log) -> int:
    """Bring the index to `size` blocks of prompts "fill/<i>"; returns the number of prompts."""
    from skymemory.kv.index.radix import IndexEntry

    prompts = size // prompt_blocks
    have = len(index) // prompt_blocks
    started = time.perf_counter()
    for first in range(have, prompts, FILL_BATCH // prompt_blocks):
        entries = []
        for p in range(first, min(prompts, first + FILL_BATCH // prompt_blocks)):
            parent = ROOT
            for position, h in enumerate(_chain_hashes(f"fill/{p}", prompt_blocks)):
                entries.append(IndexEntry(h, parent, _record(h), {"kv_format": "fp16", "position": position}))
                parent = h
        index.insert_entries(entries)
        log(f"    filled {min(prompts, first + len(entries) // prompt_blocks) * prompt_blocks:,} / {size:,} blocks "
            f"({time.perf_counter() - started:.0f} s)")
    return prompts


def _timed(call, items) -> list[float]:
    times = []
    for item in items:
        t = time.perf_counter_ns()
        call(item)
        times.append((time.perf_counter_ns() - t) / 1e9)
    return times


def run_phases(directory: str, label: str, ops: int, prompt_blocks: int, fill_prompts: int, seed: int,
               barrier=None) -> dict:
    """The three phases in one process: {phase: {"times": [...], "start": t, "end": t}}; checks its own hits."""
    from skymemory.kv.index.radix import RadixIndex

    index = RadixIndex(directory, busy_timeout_s=120)
    rng = random.Random(seed)
    new = [_chain_hashes(f"{label}/{i}", prompt_blocks) for i in range(ops + WARM_UP)]
    probes = [_chain_hashes(f"fill/{rng.randrange(fill_prompts)}", prompt_blocks) for _ in range(ops + WARM_UP)]

    def lookup(hashes):
        if len(index.longest_prefix(ROOT, hashes)) != prompt_blocks:
            raise AssertionError("an indexed prompt was not found whole")

    calls = {"insert": lambda hashes: index.insert_chain(ROOT, _blocks(hashes)), "lookup": lookup,
             "remove": lambda hashes: index.remove(hashes[0])}
    items = {"insert": new, "lookup": probes, "remove": new}
    out = {}
    for phase in PHASES:
        _timed(calls[phase], items[phase][ops:])  # warm-up: the prompts after the measured ones
        if barrier is not None:
            barrier.wait(300)
        start = time.time()
        times = _timed(calls[phase], items[phase][:ops])
        out[phase] = {"times": times, "start": start, "end": time.time()}
        if phase == "insert" and barrier is not None:
            barrier.wait(300)  # every writer done: the parent counts the blocks before anyone removes
            barrier.wait(300)
    index.close()
    return out


def _worker(directory, label, ops, prompt_blocks, fill_prompts, seed, barrier, results) -> None:
    try:
        results.put((label, run_phases(directory, label, ops, prompt_blocks, fill_prompts, seed, barrier)))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        results.put((label, {"error": f"{type(exc).__name__}: {exc}"}))
        barrier.abort()


def _reader(directory, prompt_blocks, fill_prompts, stop, results) -> None:
    """Prefix lookups all through the writes: how many, and how many failed."""
    from skymemory.kv.index.radix import RadixIndex

    index, rng = RadixIndex(directory, busy_timeout_s=120), random.Random(7)
    reads = failures = 0
    first_failure = None
    while not stop.is_set():
        try:
            hashes = _chain_hashes(f"fill/{rng.randrange(fill_prompts)}", prompt_blocks)
            if len(index.longest_prefix(ROOT, hashes)) != prompt_blocks:
                raise AssertionError("an indexed prompt was not found whole")
            reads += 1
        except Exception as exc:  # noqa: BLE001 - counted: the check is that there are none
            failures += 1
            first_failure = first_failure or f"{type(exc).__name__}: {exc}"
    results.put(("reader", {"reads": reads, "failures": failures, "first_failure": first_failure}))


def _summary(times: list[float], wall_s: float, ops: int, blocks_per_op: int) -> dict:
    times = sorted(times)
    return {"median_ms": statistics.median(times) * 1e3, "p99_ms": times[int(len(times) * 0.99) - 1] * 1e3,
            "ops_per_s": ops / wall_s, "blocks_per_s": ops * blocks_per_op / wall_s, "ops": ops}


def concurrent(directory: str, processes: int, ops: int, prompt_blocks: int, fill_prompts: int, log) -> dict:
    """The phases in `processes` processes at once, with a reader; checks that no insert was lost."""
    from skymemory.kv.index.radix import RadixIndex

    ctx = multiprocessing.get_context("spawn")
    barrier, results, stop = ctx.Barrier(processes + 1), ctx.Queue(), ctx.Event()
    labels = [f"p{n}" for n in range(processes)]
    workers = [ctx.Process(target=_worker, args=(directory, label, ops, prompt_blocks, fill_prompts, n, barrier,
                                                 results)) for n, label in enumerate(labels)]
    reader = ctx.Process(target=_reader, args=(directory, prompt_blocks, fill_prompts, stop, results))
    index = RadixIndex(directory)
    before = len(index)
    for p in workers + [reader]:
        p.start()
    check = {}
    try:
        barrier.wait(600)  # insert starts
        barrier.wait(600)  # every insert done
        after = len(index)
        expected = processes * (ops + WARM_UP) * prompt_blocks  # the warm-up's prompts are inserted too
        missing = sum(prompt_blocks - len(index.longest_prefix(ROOT, _chain_hashes(f"{label}/{i}", prompt_blocks)))
                      for label in labels for i in range(ops + WARM_UP))
        check = {"blocks_before": before, "blocks_after": after, "inserted": expected, "missing": missing,
                 "lost": before + expected - after}
        log(f"    {processes} writers inserted {expected:,} blocks: {after - before:,} more in the index, "
            f"{missing} not found")
        barrier.wait(600)  # lookups may start
        barrier.wait(600)  # removals may start
        barrier.wait(600)
    except Exception as exc:  # noqa: BLE001 - a worker failed: its message follows
        log(f"    a phase did not finish together: {exc!r}")
    finally:
        stop.set()
    got = dict(results.get(timeout=600) for _ in range(processes + 1))
    for p in workers + [reader]:
        p.join(60)
    errors = {k: v["error"] for k, v in got.items() if "error" in v}
    if errors:
        raise RuntimeError(f"benchmark processes failed: {errors}")
    check["reader"] = got.pop("reader")
    rows = {}
    for phase in PHASES:
        runs = [got[label][phase] for label in labels]
        wall = max(r["end"] for r in runs) - min(r["start"] for r in runs)
        rows[phase] = _summary([t for r in runs for t in r["times"]], wall, processes * ops, prompt_blocks)
    return {"phases": rows, "check": check}


def measure_size(directory: Path, size: int, args, log) -> dict:
    from skymemory.kv.index.radix import RadixIndex

    index = RadixIndex(directory)
    fill_prompts = fill(index, size, args.prompt_blocks, log)
    file_mb = sum(p.stat().st_size for p in directory.iterdir()) / 1e6
    index.close()
    row = {"size": size, "file_mb": file_mb, "prompt_blocks": args.prompt_blocks}
    single = run_phases(str(directory), "single", args.ops, args.prompt_blocks, fill_prompts, seed=1)
    row["single"] = {phase: _summary(single[phase]["times"], single[phase]["end"] - single[phase]["start"],
                                     args.ops, args.prompt_blocks) for phase in PHASES}
    log("    1 process:   " + _line(row["single"]))
    if args.processes > 1:
        row["concurrent"] = concurrent(str(directory), args.processes, args.ops, args.prompt_blocks, fill_prompts,
                                       log)
        log(f"    {args.processes} processes: " + _line(row["concurrent"]["phases"]))
    return row


def _line(phases: dict) -> str:
    return "  ".join(f"{p} {phases[p]['median_ms']:.3f} ms ({phases[p]['ops_per_s']:,.0f}/s)" for p in PHASES)


def markdown(result: dict) -> str:
    n = result["processes"]
    lines = [f"Per call, median [p99] ms, and calls per second (a call: one prompt of {result['prompt_blocks']} "
             f"blocks); {n} processes at once: every call of all of them, over the phase's wall time.", "",
             "| blocks | file MB | processes | insert ms | inserts/s | lookup ms | lookups/s | remove ms | removals/s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        runs = [("1", row["single"])] + ([(str(n), row["concurrent"]["phases"])] if "concurrent" in row else [])
        for who, phases in runs:
            cells = " | ".join(f"{phases[p]['median_ms']:.3f} [{phases[p]['p99_ms']:.2f}] | {phases[p]['ops_per_s']:,.0f}"
                               for p in PHASES)
            lines.append(f"| {row['size']:,} | {row['file_mb']:.0f} | {who} | {cells} |")
    checks = [r for r in result["rows"] if "concurrent" in r]
    if checks:
        lines += ["", f"{n} writers at once, and a reader during their inserts:", "",
                  "| blocks | inserted by the writers | found after | lost | reader lookups | reader failures |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for row in checks:
            c = row["concurrent"]["check"]
            lines.append(f"| {row['size']:,} | {c['inserted']:,} | {c['inserted'] - c['missing']:,} | {c['lost']} | "
                         f"{c['reader']['reads']:,} | {c['reader']['failures']} |")
    return "\n".join(lines)


def run(args, log=print) -> dict:
    import sqlite3

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="skymemory-bench-index-"))
    log(f"SQLite {sqlite3.sqlite_version}, {os.cpu_count()} CPUs; index files under {work}")
    rows = []
    try:
        for size in args.sizes:
            log(f"  {size:,} blocks:")
            directory = work / f"index-{size}"
            directory.mkdir(parents=True, exist_ok=True)
            rows.append(measure_size(directory, size, args, log))
    finally:
        if not args.work_dir:
            for directory in work.glob("index-*"):
                for p in directory.iterdir():
                    p.unlink()
                directory.rmdir()
            work.rmdir()
    return {"benchmark": "index", "sqlite": sqlite3.sqlite_version, "cpus": os.cpu_count(),
            "processes": args.processes, "prompt_blocks": args.prompt_blocks, "ops": args.ops, "rows": rows}


def _sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v.replace("_", ""), 10) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated block counts like 10000,100000, got {text!r}") from None
    if any(not 1 <= v <= 100_000_000 for v in values):
        raise argparse.ArgumentTypeError(f"block counts must be 1..100000000, got {text}")
    return values


def register(subparsers) -> None:
    parser = subparsers.add_parser("index", help="the ground KV index: inserts, lookups, removals at 10k-1M blocks, "
                                                "one process and several", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=_sizes, default=(10_000, 100_000, 1_000_000),
                        help="index sizes in blocks, comma-separated (default 10000,100000,1000000)")
    parser.add_argument("--processes", type=positive_int, default=8,
                        help="processes at once in the concurrent run (default 8; 1: no concurrent run)")
    parser.add_argument("--ops", type=positive_int, default=1250,
                        help="prompts each process inserts, looks up and removes (default 1250: 10,000 blocks each)")
    parser.add_argument("--prompt-blocks", type=positive_int, default=8, help="blocks per prompt (default 8)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="keep the index files here (default: a temporary folder, removed after)")
    parser.add_argument("--out", type=output_dir, default=Path("out/bench-index"), help="output directory")
    parser.set_defaults(func=_main)


def _main(args) -> int:
    return run_and_write(args, "index", run, markdown)
