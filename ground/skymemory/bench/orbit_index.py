"""`skymemory bench orbit-index`: what the KV index in orbit (kv.index.orbit_records) costs a ground host.

On a local constellation per link profile (sealed and signed, as every store runs), prompts' block records are
published to their home satellites, then timed per call:

  publish      a prompt's records (--prompt-blocks of them) to their homes, at once
  hit          a prompt none of whose blocks this host's index has, every record in orbit: what the lookup adds
               to a prompt another host stored (the local index's lookup is ~0.1 ms: BENCHMARKS, "index")
  miss         a prompt no host stored: what the lookup adds to every new prompt's time to first token (its
               homes all answer that they hold nothing; remembered absent after, so only its first lookup pays)

each from a fresh OrbitRecords (nothing remembered absent). Then --threads threads look hits up at once for
--seconds: the lookups per second one ground host sustains.

    skymemory bench orbit-index --profiles none,laser,rf --prompts 40 --prompt-blocks 8
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from skymemory.argtypes import float_range, output_dir

from .options import existing_file, grid_size, positive_int, profile_list
from .report import run_and_write

ROOT = hashlib.sha256(b"skymemory bench orbit-index root").digest()


def _chain(label: str, blocks: int) -> list[bytes]:
    hashes, parent = [], ROOT
    for i in range(blocks):
        parent = hashlib.sha256(parent + label.encode() + i.to_bytes(4, "big")).digest()
        hashes.append(parent)
    return hashes


def _entries(hashes: list[bytes]):
    from skymemory.kv.index.radix import IndexEntry
    from skymemory.store.contract import BlockRecord

    entries, parent = [], ROOT
    for position, h in enumerate(hashes):  # TinyLlama's fp16 block in stripes of 8 + 2, as the connector stores it
        record = BlockRecord(h, 2_883_648, 6144, 590, time.time_ns() // 1_000_000, "explicit", 10, (0, 0), 2)
        entries.append(IndexEntry(h, parent, record, {"kv_format": "fp16", "layout": "sealed", "tokens": 128,
                                                      "position": position}))
        parent = h
    return entries


def _ms(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"p50_ms": 1000 * statistics.median(ordered), "p99_ms": 1000 * ordered[min(len(ordered) - 1,
                                                                                        int(0.99 * len(ordered)))],
            "n": len(ordered)}


def measure(store, args, log) -> dict:
    from skymemory.kv.index.orbit_records import OrbitRecords

    prompts = [_chain(f"p{i}-{os.getpid()}-{time.time_ns()}", args.prompt_blocks) for i in range(args.prompts)]
    publish, hit, miss = [], [], []
    for hashes in prompts:
        started = time.perf_counter()
        placed = OrbitRecords(store).publish(_entries(hashes))
        publish.append(time.perf_counter() - started)
        if placed != len(hashes):
            raise RuntimeError(f"{len(hashes) - placed} of {len(hashes)} records reached no home")
    for i, hashes in enumerate(prompts):
        started = time.perf_counter()
        found = OrbitRecords(store).find(ROOT, hashes)
        hit.append(time.perf_counter() - started)
        if len(found) != len(hashes):
            raise RuntimeError(f"prompt {i}: {len(found)} of {len(hashes)} records found")
        fresh = _chain(f"new{i}-{time.time_ns()}", args.prompt_blocks)
        started = time.perf_counter()
        if OrbitRecords(store).find(ROOT, fresh):
            raise RuntimeError("a record no one published was found")
        miss.append(time.perf_counter() - started)
    log(f"    publish p50 {_ms(publish)['p50_ms']:.1f} ms, hit {_ms(hit)['p50_ms']:.1f} ms, "
        f"miss {_ms(miss)['p50_ms']:.1f} ms")
    return {"publish": _ms(publish), "hit": _ms(hit), "miss": _ms(miss),
            "lookups_per_s": throughput(store, prompts, args.threads, args.seconds)}


def throughput(store, prompts: list[list[bytes]], threads: int, seconds: float) -> float:
    """Hit lookups per second, `threads` at once through one OrbitRecords (one host's store)."""
    from skymemory.kv.index.orbit_records import OrbitRecords

    orbit = OrbitRecords(store)
    done, failures = [0] * threads, []
    end = time.monotonic() + seconds

    def work(t: int) -> None:
        i = t
        while time.monotonic() < end:
            hashes = prompts[i % len(prompts)]
            if len(orbit.find(ROOT, hashes)) != len(hashes):
                failures.append(i)
                return
            done[t] += 1
            i += threads

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if failures:
        raise RuntimeError(f"{len(failures)} lookups under load found less than was published")
    return sum(done) / (time.monotonic() - started)


def run(args, log=print) -> dict:
    from skymemory.store.constellation import ConstellationBlockStore

    from .launch import LocalConstellation, free_port_offset

    rows = []
    with tempfile.TemporaryDirectory(prefix="skymemory-bench-orbit-index-") as work:
        for profile in args.profiles:
            log(f"profile {profile.name} ({profile.description}): {args.planes}x{args.sats} satellites, "
                f"{args.prompts} prompts of {args.prompt_blocks} blocks")
            n = args.planes * args.sats
            with LocalConstellation(planes=args.planes, sats=args.sats, profile=profile,
                                    run_dir=Path(work) / profile.name, port_offset=free_port_offset(n),
                                    node=args.node) as sky:
                with ConstellationBlockStore.nearest_from_manifest(sky.manifest, 10) as store:
                    rows.append({"profile": profile.name, **measure(store, args, log)})
    return {"benchmark": "orbit-index", "planes": args.planes, "sats": args.sats, "prompts": args.prompts,
            "prompt_blocks": args.prompt_blocks, "threads": args.threads, "rows": rows}


def markdown(result: dict) -> str:
    lines = [f"Records of {result['prompt_blocks']}-block prompts on a {result['planes']}x{result['sats']} "
             f"constellation; lookups/s with {result['threads']} threads of one host.", "",
             "| profile | publish p50 ms | hit p50 ms | hit p99 ms | miss p50 ms | miss p99 ms | lookups/s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        lines.append(f"| {r['profile']} | {r['publish']['p50_ms']:.1f} | {r['hit']['p50_ms']:.1f} | "
                     f"{r['hit']['p99_ms']:.1f} | {r['miss']['p50_ms']:.1f} | {r['miss']['p99_ms']:.1f} | "
                     f"{r['lookups_per_s']:.0f} |")
    return "\n".join(lines)


def register(subparsers) -> None:
    parser = subparsers.add_parser("orbit-index", help="the KV index in orbit: publish, hit and miss lookups per "
                                                      "link profile, lookups/s", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", type=profile_list, default="none,laser,rf",
                        help="link profiles, comma-separated (none, laser, rf); default all three")
    parser.add_argument("--prompts", type=positive_int, default=40, help="prompts published and looked up (40)")
    parser.add_argument("--prompt-blocks", type=positive_int, default=8, help="blocks per prompt (8)")
    parser.add_argument("--threads", type=positive_int, default=4, help="threads of the lookups/s run (4)")
    parser.add_argument("--seconds", type=float_range(0.1, 600), default=5.0, help="length of the lookups/s run (5)")
    parser.add_argument("--planes", type=grid_size, default=5)
    parser.add_argument("--sats", type=grid_size, default=5)
    parser.add_argument("--node", type=existing_file, default=None,
                        help="skymem_node binary (default: SKYMEM_NODE or build/)")
    parser.add_argument("--out", type=output_dir, default=Path("out/bench-orbit-index"), help="output directory")
    parser.set_defaults(func=_main)


def _main(args) -> int:
    return run_and_write(args, "orbit-index", run, markdown)
