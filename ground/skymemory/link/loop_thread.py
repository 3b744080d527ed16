"""An asyncio event loop running on a private daemon thread.

The synchronous stores (ConstellationBlockStore, RotatingBlockStore) keep their
asyncio client on such a loop, so callers without a loop of their own (the KV
layer, CLIs) can use them from any thread.
"""

from __future__ import annotations

import asyncio
import threading


class LoopThread:
    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def run(self, coro, timeout: float | None):
        """Run `coro` on the loop from another thread and wait for its result (bounded)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Cancel what still runs on the loop (a caller waiting on it from another thread is told at once, not
        left to its timeout), then stop and close it."""
        async def cancel_the_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        if self.loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(cancel_the_rest(), self.loop).result(10)
            except (TimeoutError, RuntimeError):  # a task that will not end: the loop stops under it
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
