"""A transfer thread made by a pinned thread runs on every CPU again (kv/transfer/affinity.py): vLLM's CPU worker
pins its compute thread, and the threads it starts inherit that pin."""

from __future__ import annotations

import os
import threading

import pytest

from skymemory.kv.transfer.affinity import unpin_current_thread

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                                reason="needs CPU masks and two CPUs")


def _in_thread(fn):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("value", fn()))
    t.start()
    t.join(30)
    return out["value"]


def test_a_thread_started_by_a_pinned_thread_is_unpinned():
    everything = set(range(os.cpu_count()))
    if not everything <= os.sched_getaffinity(0):
        pytest.skip("this process may not use every CPU (a cpuset): nothing to compare against")

    def pinned_creator():
        os.sched_setaffinity(0, {0})  # as vLLM pins its compute thread
        seen = {}

        def transfer():
            seen["inherited"] = os.sched_getaffinity(0)
            unpin_current_thread()
            seen["after"] = os.sched_getaffinity(0)

        t = threading.Thread(target=transfer)
        t.start()
        t.join(30)
        return seen, os.sched_getaffinity(0)

    seen, creator = _in_thread(pinned_creator)
    assert seen["inherited"] == {0}  # the pin is inherited: what the fix is for
    assert seen["after"] == everything
    assert creator == {0}  # the creator's own pin is left alone


def test_an_unpinned_thread_is_left_as_it_is():
    assert _in_thread(lambda: (unpin_current_thread(), os.sched_getaffinity(0))[1]) == os.sched_getaffinity(0)
