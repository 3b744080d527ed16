"""Health check: every satellite must answer a data-plane NOOP on its ground port."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Callable

from skymemory.link.client import SkyMemoryClient
from skymemory.protocol.errors import SkyMemoryError

Sat = tuple[int, int]


async def _check_all(addresses: dict[Sat, tuple[str, int]], bind_host: str, deadline: float,
                     on_progress: Callable[[int, int], None], abort: Callable[[], str | None]) -> set[Sat]:
    healthy: set[Sat] = set()
    async with SkyMemoryClient(addresses, timeout=0.2, retries=0, window=256, bind=(bind_host, 0)) as client:
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
                 abort: Callable[[], str | None] = lambda: None) -> set[Sat]:
    """Poll until every satellite answers or timeout_s passes; returns the healthy ones.

    `abort` is asked between rounds and may return a reason to give up (e.g. a node exited).
    """
    tty = sys.stderr.isatty()
    last = [-1]

    def progress(done: int, total: int) -> None:
        if quiet or done == last[0]:
            return
        last[0] = done
        end = "\r" if tty and done < total else "\n"
        print(f"  healthy {done}/{total}", end=end, file=sys.stderr, flush=True)

    return asyncio.run(_check_all(addresses, bind_host, time.monotonic() + timeout_s, progress, abort))
