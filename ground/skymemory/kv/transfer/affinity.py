"""A transfer thread runs on any CPU this process may use, not only where the thread that made it was pinned.

A thread starts with its creator's CPU mask. vLLM's CPU worker pins its compute thread (and so every thread it
starts) to the CPUs it computes on, keeping the others (VLLM_CPU_NUM_OF_RESERVED_CPU) for the scheduler and a
KV connector's threads. Left pinned, a layer stream's receive loop (which checks CRCs and opens sealed chunks)
shares the compute CPU with OpenMP threads that spin while they wait, and its packets wait for a time slice.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def unpin_current_thread() -> None:
    """Let the calling thread run on every CPU of this machine its cgroup allows (a no-op where it already may, or
    where the platform has no CPU masks)."""
    if not hasattr(os, "sched_setaffinity"):
        return
    wanted = set(range(os.cpu_count() or 1))
    try:
        if os.sched_getaffinity(0) != wanted:
            os.sched_setaffinity(0, wanted)  # the kernel keeps it within the cgroup's cpuset
    except OSError as exc:  # a cpuset that allows none of them: stay where we are
        log.debug("transfer thread stays on CPUs %s: %s", sorted(os.sched_getaffinity(0)), exc)
