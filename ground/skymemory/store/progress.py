"""Progress of a long fast-path transfer, told as it runs (`skymemory put/get -v`).

The C call holds no lock on the jobs' status arrays and releases the GIL, so a thread can count
the chunks done while it runs: every `every_s` seconds `say` gets one line like
"put: 812 of 1628 chunks acknowledged (4.99 MB in 1.0 s)".
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable

import numpy as np

from skymemory.link.fastpath import OK


@contextlib.contextmanager
def watch(store, label: str, verb: str, say: Callable[[str], None] | None, every_s: float = 1.0):
    """While the with-block runs, tell `say` how many chunks of `store.in_flight` are done (no-op without say)."""
    if say is None:
        yield
        return
    stop = threading.Event()
    t0 = time.monotonic()

    def report() -> None:
        while not stop.wait(every_s):
            jobs = store.in_flight
            if not jobs:
                continue
            done = sum(int(np.count_nonzero(j.status == OK)) for j in jobs)
            total = sum(j.chunk_count for j in jobs)
            nbytes = sum(min(int(np.count_nonzero(j.status == OK)) * j.chunk_bytes, j.n_bytes) for j in jobs)
            say(f"{label}: {done} of {total} chunks {verb} ({nbytes / 1e6:.2f} MB in {time.monotonic() - t0:.1f} s)")

    thread = threading.Thread(target=report, name=f"skymemory-{label}-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
