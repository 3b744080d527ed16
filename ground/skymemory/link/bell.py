"""ProgressBell: how a streamed get wakes the one reader waiting for its first chunks.

A stream's reader (a forward waiting for layer i) needs every block's first
chunks. Polling the blocks' prefixes every fraction of a millisecond wakes a
thread hundreds of times per transfer, and on a host of few cores the wake-ups
take CPU from the transfer itself (BENCHMARKS.md, "A stream's reader asleep on
a bell"). Instead the reader says how many chunks it waits for
(`arm`), and the C get (skymem_bulk_get's `progress_want`) writes an eventfd
once every prefix has reached it: the reader sleeps in the kernel and wakes
once per wait. The transfer's own thread `ring`s it when the call ends
(success or failure), so a reader never sleeps past the end.

Linux only (eventfd), like the fast path's sendmmsg/recvmmsg.
"""

from __future__ import annotations

import math
import os
import select
import weakref

import numpy as np

from .fastpath import require_native


class ProgressBell:
    """An eventfd and the chunk count its one reader waits for (see the module docstring)."""

    def __init__(self) -> None:
        self._ffi, self._lib = require_native()
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._closer = weakref.finalize(self, os.close, self.fd)  # a stream dropped mid-transfer closes it too
        self.want = np.zeros(1, dtype=np.uint32)  # read by the C get while it runs
        self._want_buf = self._ffi.from_buffer(self.want, require_writable=True)  # kept: the pointer's memory
        self._want_ptr = self._ffi.cast("uint32_t *", self._want_buf)

    def arm(self, chunks: int) -> None:
        """Ring once every block's prefix has reached `chunks` (0: nothing wanted). Read the prefixes after
        this, and wait only if they fall short: the store is a full barrier, so no ring is missed."""
        self._lib.skymem_bulk_want(self._want_ptr, chunks)

    def wait(self, timeout_s: float) -> None:
        """Until the transfer rings (or `timeout_s` passes); the ring is consumed, so the caller reads again."""
        # poll, not select: select refuses a descriptor past 1023, and an engine's process may hold that many
        waiting = select.poll()
        waiting.register(self.fd, select.POLLIN)
        if waiting.poll(max(0, math.ceil(timeout_s * 1000))):
            try:
                os.eventfd_read(self.fd)
            except BlockingIOError:  # another wake-up took it: nothing to consume
                pass

    def ring(self) -> None:
        """Wake the reader: the transfer ended (its thread calls this last)."""
        os.eventfd_write(self.fd, 1)

    def opts(self) -> tuple:
        """(progress_want, progress_fd) for skymem_bulk_opts_t."""
        return self._want_ptr, self.fd

    def close(self) -> None:
        self._closer()
