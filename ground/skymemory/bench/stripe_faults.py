"""Coded stripes under dead and slow satellites: the block-level cells of `skymemory bench faults`.

Each cell runs a fresh constellation of real skymem_node processes and stores the same blocks twice through
the C fast path (ConstellationBlockStore, sealed, every request signed): uncoded (parity 0) and in coded
stripes (parity m, `--parity`, default 2), striped over every satellite. Then:

  dead      the m satellites holding the first chunks of every block are killed (SIGKILL), and every block
            is read back once;
  slow10x   one data satellite sends at a tenth of the others' rate (--bandwidth-mbps), and every block is read
            back `--repeats` times, alternating uncoded and coded.

A get ends exact (the bytes stored), a clean miss (BlockMiss), wrong (other bytes) or hung (past its bound).
Each row gives the get times' median and 99th percentile; the slow cell's closing line gives the coded
p99 as a share of the uncoded one (same run, same satellites).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from skymemory.launcher.cluster import Cluster
from skymemory.protocol import auth
from skymemory.protocol.seal import ContentKeys
from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import BlockMiss

FAST_LINK_MBPS = 800.0  # every satellite's downlink in the slow cell...
SLOW_FACTOR = 10.0  # ... and the slow one's, this many times slower
OP_BOUND_S = 60.0  # a get still running after this is hung


@dataclass
class StripeRow:
    cell: str
    parity: int
    gets: int = 0
    exact: int = 0
    miss: int = 0
    wrong: int = 0
    hung: int = 0
    rebuilt: int = 0
    times_s: list[float] = field(default_factory=list)

    def p(self, q: float) -> float:
        """The q-quantile of the get times (nearest rank), seconds."""
        ordered = sorted(self.times_s)
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else 0.0


CELLS = ("dead", "slow10x")


def _store(cl: Cluster, servers, parity: int, signer, keys: ContentKeys) -> ConstellationBlockStore:
    # the fast path's own resend timer and retries, as every store has them (a shorter timer would resend into
    # a slow satellite's queue and give up on it sooner than a store does)
    return ConstellationBlockStore(cl.ground_addresses(), servers, chunk_bytes=6144, content_keys=keys,
                                   client_options={"signer": signer, "timeout": 0.3, "retries": 3},
                                   fast_options={"deadline_s": 20}, parity=parity)


def _get(store: ConstellationBlockStore, record, want: bytes, row: StripeRow) -> None:
    started = time.perf_counter()
    try:
        got = store.get_block(record)
    except BlockMiss:
        got = None
    took = time.perf_counter() - started
    row.gets += 1
    row.times_s.append(took)
    row.rebuilt += store.last_transfer.rebuilt if store.last_transfer is not None else 0
    if took > OP_BOUND_S:
        row.hung += 1
    elif got is None:
        row.miss += 1
    elif got != want:
        row.wrong += 1
    else:
        row.exact += 1


def run_cell(cell: str, planes: int, sats: int, blocks: int, block_bytes: int, parity: int,
             repeats: int) -> list[StripeRow]:
    """One cell: the same blocks uncoded and coded, one row each."""
    with tempfile.TemporaryDirectory() as tmp:
        satellites = [(p, s) for p in range(planes) for s in range(sats)]
        key_files = auth.write_key_files(tmp, satellites)
        signer = auth.Signer(1, key_files.masters[1])
        slow = satellites[0]  # holds the first data chunk of every stripe
        node_args, per_sat = ["--memory-budget", str(256 << 20)], {}
        if cell == "slow10x":
            node_args += ["--bandwidth-mbps", str(FAST_LINK_MBPS)]
            per_sat[slow] = ["--bandwidth-mbps", str(FAST_LINK_MBPS / SLOW_FACTOR)]
        with Cluster(planes, sats, node_args, keys=Path(tmp), node_args_for=per_sat) as cl:
            keys = ContentKeys.new()
            data = [os.urandom(block_bytes) for _ in range(blocks)]
            rows, stored = [], []
            for p in (0, parity):
                store = _store(cl, satellites, p, signer, keys)
                records = [store.put_block(hashlib.sha256(b"%d/%d" % (p, i) + d[:64]).digest(), d)
                           for i, d in enumerate(data)]
                rows.append(StripeRow(cell, p))
                stored.append((store, records))
            try:
                if cell == "dead":
                    for victim in satellites[:parity]:
                        cl.kill(victim)
                    rounds = 1
                else:
                    rounds = repeats
                for r in range(rounds):
                    order = range(len(rows)) if r % 2 == 0 else reversed(range(len(rows)))
                    for i in order:  # uncoded and coded alternate, so a drifting load hits both alike
                        store, records = stored[i]
                        for record, want in zip(records, data):
                            _get(store, record, want, rows[i])
            finally:
                for store, _ in stored:
                    store.close()
    return rows


def table(rows: list[StripeRow]) -> str:
    lines = ["| cell | parity | gets | exact | miss | wrong | hung | rebuilt chunks | get p50 ms | get p99 ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r.cell} | {r.parity} | {r.gets} | {r.exact} | {r.miss} | {r.wrong} | {r.hung} | "
                     f"{r.rebuilt} | {r.p(0.5) * 1e3:.1f} | {r.p(0.99) * 1e3:.1f} |")
    for cell in dict.fromkeys(r.cell for r in rows):
        uncoded = next((r for r in rows if r.cell == cell and r.parity == 0), None)
        coded = [r for r in rows if r.cell == cell and r.parity]
        if uncoded is not None and coded and uncoded.p(0.99) > 0 and cell == "slow10x":
            lines.append(f"\n{cell}: get p99 coded / uncoded = {coded[0].p(0.99) / uncoded.p(0.99):.2f}x "
                         f"(median {statistics.median(coded[0].times_s) / statistics.median(uncoded.times_s):.2f}x)")
    return "\n".join(lines)
