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
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
