"""Small one-chunk blocks kept in copies on home satellites (store.contract.RecordKeeping), for the block store.

A record (kv.index.orbit_records: what the ground index says of one KV block) is one chunk, kept on the R home
satellites of its block hash (store.object_homes: in different planes, on different hosts where the
constellation has them; the same choice as named objects' metadata). Every copy is written at once, and read
at once: the first copy the caller accepts wins, so a dead home costs nothing while one answers, and a home
whose copy does not open (altered) is outvoted by any other.

Mixed into ConstellationBlockStore and RotatingBlockStore, whose asyncio client and loop carry the requests
(signed as every other request; routed as the store routes: ConstellationBlockStore by its route, the rotating
store through the satellite overhead now, so a record is reached however far the constellation has turned).
The homes come from the launch manifest (ConstellationBlockStore: `homes=`, set by from_manifest; a store built
without one keeps no records, record_homes is None).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from skymemory.protocol.errors import ChunkNotFound, SkyMemoryError
from skymemory.store.contract import RecordKeeping, Sat

# A record every home of which answered without a copy is absent. Once one home has answered so, the others get
# a grace of a few times that answer's time (at least GRACE_MIN_S), not the whole timeout: a dead home must not
# make every lookup of a block no one stored wait out the timeout.
GRACE_TIMES = 3.0
GRACE_MIN_S = 0.02
# A read's timeout stretches to this many of the client's resend timers when that is longer: on a loaded host or
# link the round trips the client measures grow, and a record that is there must not look absent for it.
RTO_TIMES = 4.0


class RecordCopies(RecordKeeping):
    """RecordKeeping over the store's client: needs self.client, self._run (its loop) and self._homes."""

    _homes: Callable[[bytes], list[Sat]] | None = None

    def _record_via(self) -> Sat | None:
        """The satellite a record request goes up to (None: as the client routes it)."""
        return None

    def record_homes(self, key: bytes) -> list[Sat] | None:
        return None if self._homes is None else self._homes(key)

    def _homes_of(self, key: bytes) -> list[Sat]:
        homes = self.record_homes(key)
        if homes is None:
            raise RuntimeError("this store keeps no records: build it with from_manifest (the homes come from the "
                               "constellation's manifest)")
        return homes

    def put_copies(self, items: Sequence[tuple[bytes, bytes]], timeout_s: float) -> list[list[Sat]]:
        """Store each (key, chunk) as a one-chunk block on every home of key, all at once; for each item, the
        homes that took it by `timeout_s`."""
        placed = [(key, blob, self._homes_of(key)) for key, blob in items]
        via = self._record_via()

        async def one(key: bytes, blob: bytes, home: Sat) -> bool:
            try:
                await asyncio.wait_for(self.client.set_chunk(home, key, 0, 1, blob, via=via), timeout_s)
                return True
            except (TimeoutError, SkyMemoryError):
                return False

        async def every() -> list[list[Sat]]:
            took = await asyncio.gather(*(one(key, blob, h) for key, blob, homes in placed for h in homes))
            out, i = [], 0
            for _, _, homes in placed:
                out.append([h for h, ok in zip(homes, took[i:i + len(homes)]) if ok])
                i += len(homes)
            return out

        return self._run(every())

    def first_copies(self, keys: Sequence[bytes], accept: Callable[[bytes, Sat, bytes], object],
                     timeout_s: float) -> list:
        """For each key, its homes asked at once; the first copy `accept(key, home, chunk)` turns into a value (not
        None) wins. In key order: that value; or None when the homes answered without one (none holds a copy,
        or none it accepts; once one had, the silent ones get GRACE_TIMES its time); or a TimeoutError when no
        home had answered by `timeout_s` (or RTO_TIMES the client's resend timer, when longer)."""
        via = self._record_via()

        async def ask(home: Sat, key: bytes) -> object:
            try:
                return accept(key, home, await self.client.get_chunk(home, key, 0, via=via))
            except (ChunkNotFound, SkyMemoryError):
                return None

        async def first(key: bytes) -> object:
            pending = {asyncio.ensure_future(ask(h, key)) for h in self._homes_of(key)}
            start, end = time.monotonic(), None  # end: once a home answered without a copy, the others' grace
            try:
                while pending:
                    wait = None if end is None else max(0.0, end - time.monotonic())
                    done, pending = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                    if not done:
                        break  # the grace ran out: a home that is silent now is taken to hold nothing
                    for task in done:
                        if task.result() is not None:
                            return task.result()
                    if end is None:
                        end = time.monotonic() + max(GRACE_MIN_S, GRACE_TIMES * (time.monotonic() - start))
                return None
            finally:
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)

        async def bounded(key: bytes, limit_s: float) -> object:
            try:
                return await asyncio.wait_for(first(key), limit_s)
            except TimeoutError:
                return TimeoutError(f"no home of record {key.hex()[:16]} answered within {limit_s:g} s")

        async def every() -> list:  # the client exists once the store's loop runs (a rotating store starts it)
            limit_s = max(timeout_s, RTO_TIMES * self.client.rto)
            return list(await asyncio.gather(*(bounded(key, limit_s) for key in keys)))

        return self._run(every())

    def evict_copies(self, keys: Sequence[bytes], timeout_s: float) -> int:
        """Drop every copy of these keys' blocks, at once and best effort; how many homes dropped one."""
        via = self._record_via()

        async def one(key: bytes, home: Sat) -> int:
            try:
                return 1 if await asyncio.wait_for(self.client.evict_block(home, key, via=via), timeout_s) else 0
            except (TimeoutError, SkyMemoryError):
                return 0

        async def every() -> int:
            return sum(await asyncio.gather(*(one(key, h) for key in keys for h in self._homes_of(key))))

        return self._run(every())
