"""Health checks: every satellite must answer a data-plane NOOP on its ground port (wait_healthy);
and, where satellites run on several emulated hosts, neighbours on different hosts must reach each
other over their ISL (crossing_pairs, isl_failures: a firewall may drop the bridged traffic)."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Callable

from skymemory.link.client import SkyMemoryClient
from skymemory.protocol.auth import Signer
from skymemory.protocol.errors import SkyMemoryError

Sat = tuple[int, int]


async def _check_all(addresses: dict[Sat, tuple[str, int]], bind_host: str, deadline: float,
                     on_progress: Callable[[int, int], None], abort: Callable[[], str | None],
                     signer: Signer | None) -> set[Sat]:
    healthy: set[Sat] = set()
    async with SkyMemoryClient(addresses, timeout=0.2, retries=0, window=256, bind=(bind_host, 0),
                               signer=signer) as client:
        waiting = set(addresses)
        while waiting and time.monotonic() < deadline:
            why = abort()
            if why:
                raise RuntimeError(why)

            async def one(s: Sat) -> Sat | None:
                try:
                    await client.noop(s)
                    return s
                except SkyMemoryError:
                    return None

            for s in await asyncio.gather(*(one(s) for s in sorted(waiting))):
                if s is not None:
                    healthy.add(s)
                    waiting.discard(s)
            on_progress(len(healthy), len(addresses))
            if waiting:
                await asyncio.sleep(0.1)
    return healthy


def wait_healthy(addresses: dict[Sat, tuple[str, int]], bind_host: str, timeout_s: float, quiet: bool = False,
                 abort: Callable[[], str | None] = lambda: None, signer: Signer | None = None) -> set[Sat]:
    """Poll until every satellite answers or timeout_s passes; returns the healthy ones.

    `abort` is asked between rounds and may return a reason to give up (e.g. a node exited);
    `signer`: the constellation's ground key (a keyed satellite answers only signed NOOPs).
    """
    tty = sys.stderr.isatty()
    last = [-1]

    def progress(done: int, total: int) -> None:
        if quiet or done == last[0]:
            return
        last[0] = done
        end = "\r" if tty and done < total else "\n"
        print(f"  healthy {done}/{total}", end=end, file=sys.stderr, flush=True)

    return asyncio.run(_check_all(addresses, bind_host, time.monotonic() + timeout_s, progress, abort, signer))


def crossing_pairs(entries, planes: int, sats: int, host_of) -> list[tuple[Sat, Sat]]:
    """One pair of +GRID neighbours (src, dst) for every two hosts that share an ISL."""
    pairs: dict[tuple[str, str], tuple[Sat, Sat]] = {}
    host = {(e.plane, e.sat): host_of(e) for e in entries}
    for (p, s), h in host.items():
        for q, t in (((p + 1) % planes, s), ((p - 1) % planes, s), (p, (s + 1) % sats), (p, (s - 1) % sats)):
            if host[(q, t)] != h:
                pairs.setdefault((h, host[(q, t)]), ((p, s), (q, t)))
    return list(pairs.values())


def isl_failures(addresses: dict[Sat, tuple[str, int]], bind_host: str, pairs: list[tuple[Sat, Sat]],
                 signer: Signer | None = None) -> list[tuple[Sat, Sat]]:
    """The pairs (src, dst) for which a NOOP sent to dst through src (one ISL hop) gets no answer."""

    async def check() -> list[tuple[Sat, Sat]]:
        async with SkyMemoryClient(addresses, timeout=0.3, retries=3, bind=(bind_host, 0), signer=signer) as client:
            async def one(src: Sat, dst: Sat) -> tuple[Sat, Sat] | None:
                try:
                    await client.noop(dst, via=src)
                    return None
                except SkyMemoryError:
                    return src, dst

            return [f for f in await asyncio.gather(*(one(a, b) for a, b in pairs)) if f is not None]

    return asyncio.run(check())
