"""link.loop_thread: the stores' private event loop, and what stopping it does to calls still waiting on it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from skymemory.link.loop_thread import LoopThread


def test_a_call_still_waiting_when_the_loop_stops_is_told_at_once():
    loop = LoopThread("test-loop")
    assert loop.run(asyncio.sleep(0, result=7), 5) == 7
    outcome: list[BaseException] = []
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    def caller() -> None:  # as a worker thread's store call (an orbit record's removal) waits on the loop
        try:
            loop.run(forever(), 600)
        except BaseException as exc:  # noqa: BLE001 - what it was told is the test
            outcome.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    assert started.wait(30)
    loop.stop()
    thread.join(30)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], concurrent.futures.CancelledError)
    assert loop.loop.is_closed()
