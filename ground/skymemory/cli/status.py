"""`skymemory status`: one row per satellite from a STATS request (counters, chunks, memory), then,
when the satellites run on several machines (ssh hosts, namespaces, containers), one line per
machine saying how many of its satellites answered, so an unhealthy machine is named.

Its "seal fail" column is the ground's, not the satellite's: how many KV blocks that satellite served
did not open under the ground's key (altered on it, or another block's), from the seal-failure ledger
of the ground index every process of this host shares (skymemory.kv.index.radix; --index-dir, default
$SKYMEMORY_CACHE/index). Reading it creates nothing."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from skymemory.argtypes import positive_float
from skymemory.cli._common import add_manifest_arg, client_bind, load_manifest, table
from skymemory.kv.index.radix import default_directory, seal_failures_in
from skymemory.launcher.machines import group_by_machine
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol.auth import signer_for_manifest
from skymemory.protocol.errors import SkyMemoryError
from skymemory.store.routes import add_route_arg, via_for_route


def register(subparsers) -> None:
    p = subparsers.add_parser("status", help="table of every satellite's STATS (counters, chunks, memory)")
    add_manifest_arg(p)
    p.add_argument("--timeout", type=positive_float, default=0.5, help="seconds per attempt (default 0.5)")
    route = p.add_mutually_exclusive_group()
    add_route_arg(route, "the STATS requests")
    route.add_argument("--via-overhead", action="store_true",
                       help="deprecated: the same as --route relay")
    p.add_argument("--index-dir", type=Path, default=None,
                   help="the ground KV index whose seal-failure ledger the 'seal fail' column shows (a folder, or "
                        "its kv-index.sqlite; default $SKYMEMORY_CACHE/index, i.e. ~/.cache/skymemory/index)")
    p.set_defaults(func=run)


async def _collect(m, args):
    c = m.constellation()
    via = via_for_route(args.route, m)
    async with SkyMemoryClient(m.ground_addresses(), via=via, timeout=args.timeout, retries=2, window=128,
                               bind=client_bind(m), signer=signer_for_manifest(m)) as client:
        async def one(s):
            try:
                return s, await client.stats(s)
            except SkyMemoryError as exc:
                return s, exc

        return await asyncio.gather(*(one((e.plane, e.sat)) for e in m.satellites)), c.overhead()


def run(args) -> int:
    try:
        m = load_manifest(args)
    except (FileNotFoundError, ValueError) as exc:
        print(f"skymemory status: {exc}", file=sys.stderr)
        return 1
    if args.via_overhead:
        print("skymemory status: --via-overhead is deprecated; use --route relay", file=sys.stderr)
        args.route = "relay"
    results, overhead = asyncio.run(_collect(m, args))
    index_dir = args.index_dir if args.index_dir is not None else default_directory()
    ledger = seal_failures_in(index_dir)
    print(table(status_rows(results, ledger)))
    for line in machine_lines(m, {s for s, st in results if not isinstance(st, Exception)}):
        print(line)
    ok = [st for _, st in results if not isinstance(st, Exception)]
    print(f"{len(ok)}/{len(results)} satellites answered; overhead now {overhead}; chunks stored "
          f"{sum(s.chunks for s in ok)}, memory used {sum(s.bytes_used for s in ok) / 2**20:.1f} MiB")
    line = seal_line(ledger, index_dir)
    if line:
        print(line)
    return 0 if len(ok) == len(results) else 1


def status_rows(results, ledger: dict) -> list[tuple]:
    """The table: a header, then per satellite its STATS (or why it did not answer) and, from the ground's
    ledger, how many KV blocks it served did not open ("seal fail")."""
    rows = [("plane", "sat", "chunks", "used KiB", "budget KiB", "cmds", "errs", "seal fail", "rx", "tx", "fwd",
             "drop", "inval", "lru", "purged", "mig out", "mig in", "up s")]
    for (p, s), st in results:
        sealed = ledger.get((p, s), (0, 0.0))[0]
        if isinstance(st, Exception):
            rows.append((p, s, "-", "-", "-", "-", "-", sealed, "-", "-", "-", "-", "-", "-", "-", "-", "-",
                         type(st).__name__))
            continue
        rows.append((p, s, st.chunks, st.bytes_used // 1024, st.bytes_budget // 1024, st.cmd_count, st.err_count,
                     sealed, st.rx_packets, st.tx_packets, st.forwarded, st.dropped, st.invalid, st.lru_evictions,
                     st.blocks_purged, st.migrated_out, st.migrated_in, st.uptime_s))
    return rows


def seal_line(ledger: dict, index_dir, now: float | None = None) -> str | None:
    """One line naming the satellites whose KV blocks did not open, worst first; None when there are none."""
    if not ledger:
        return None
    now = time.time() if now is None else now
    worst = sorted(ledger.items(), key=lambda item: (-item[1][0], item[0]))
    named = ", ".join(f"{p}-{s} x{n}" for (p, s), (n, _) in worst[:8]) + (", ..." if len(worst) > 8 else "")
    last = max(t for _, t in ledger.values())
    return (f"seal failures (KV blocks that did not open, ground index {index_dir}): "
            f"{sum(n for n, _ in ledger.values())} from {named}; the last {max(0.0, now - last):.0f} s ago")


MACHINES_LISTED = 12  # beyond this many machines (95 containers), only the unhealthy ones get a line


def machine_lines(m, answered: set) -> list[str]:
    groups = group_by_machine(m)
    if len(groups) < 2:
        return []
    lines, healthy = [], 0
    for machine, entries in groups.items():
        missing = [f"{e.plane}-{e.sat}" for e in entries if (e.plane, e.sat) not in answered]
        line = f"  {machine}: {len(entries) - len(missing)}/{len(entries)} answered"
        if missing:
            line += f"; UNHEALTHY, silent: {', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}"
        else:
            healthy += 1
        if missing or len(groups) <= MACHINES_LISTED:
            lines.append(line)
    if len(groups) > MACHINES_LISTED and healthy:
        lines.append(f"  {healthy}{' other' if healthy < len(groups) else ''} machines: every satellite answered")
    return [f"by machine ({len(groups)}; {len(groups) - healthy} unhealthy):"] + lines
