"""Where a prefix's bytes land on the ground: one reusable host buffer per request.

`LandingBuffers` lends uint8 host tensors, pinned when the model is on CUDA so
that the copy to the device is one asynchronous DMA. Reuse matters: fresh
memory costs its page faults (more than the copy itself on a CPU host) and a
fresh pinned buffer costs a page-locking call. A buffer comes back with the
CUDA event of the last copy that reads it and is not lent again before that
event has completed.

`land(store, records, raw)` fills raw[i] ([m, block_bytes]) with block i:
through `get_blocks_into` when the store has BulkBlockReads
(skymemory.store.contract: the constellation's C path writes straight into
the buffer and reports each block's CRC32C folded from its chunks' verified
CRCs; the in-process store copies once), otherwise through `get_block` on
worker threads with one CRC32C pass per block.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from skymemory.protocol import native
from skymemory.store.contract import BlockMiss, BlockRecord, BlockStore, BulkBlockReads, Landed

__all__ = ["Arrival", "Landed", "LandingBuffers", "Lease", "land", "land_checked", "land_into"]

KEEP_FREE = 2  # buffers kept for reuse; more in use at once are allocated and dropped


@dataclass
class Lease:
    """A lent buffer: `raw` is its first n bytes viewed as [blocks, block_bytes]."""

    buffer: torch.Tensor  # the whole uint8 buffer
    raw: torch.Tensor


class LandingBuffers:
    """A small pool of reusable host buffers (pinned when `pin`)."""

    def __init__(self, pin: bool = False) -> None:
        self.pin = pin
        self._free: list[tuple[torch.Tensor, object | None]] = []  # buffer, event its last reader recorded
        self._lock = threading.Lock()

    def lease(self, blocks: int, block_bytes: int) -> Lease:
        need = blocks * block_bytes
        with self._lock:
            fitting = [i for i, (buf, _) in enumerate(self._free) if buf.numel() >= need]
            item = self._free.pop(min(fitting, key=lambda i: self._free[i][0].numel())) if fitting else None
        if item is None:
            buffer = torch.empty(need, dtype=torch.uint8, pin_memory=self.pin)
        else:
            buffer, event = item
            if event is not None:
                event.synchronize()  # the device may still be reading the previous request's bytes
        return Lease(buffer, buffer[:need].view(blocks, block_bytes))

    def give_back(self, lease: Lease, event=None) -> None:
        """Return a buffer; `event` (a torch.cuda.Event) marks the last device copy that reads it."""
        with self._lock:
            self._free.append((lease.buffer, event))
            self._free.sort(key=lambda item: item[0].numel())
            del self._free[:-KEEP_FREE]  # keep the largest


@dataclass
class Arrival:
    landed: Landed
    seconds: float  # wall time of the landing (the transfer, as the caller saw it)
    bytes: int  # bytes of the complete blocks


def land(store: BlockStore, records: list[BlockRecord], raw: torch.Tensor, *, workers: int = 4) -> Arrival:
    """Fill raw[i] with records[i]'s block; stop at the first block that does not arrive."""
    views = raw.numpy()  # the store writes through numpy views of the (possibly pinned) host tensor
    return land_into(store, records, [views[i] for i in range(len(records))], workers=workers)


def land_into(store: BlockStore, records: list[BlockRecord], buffers: list, *, workers: int = 4) -> Arrival:
    """Fill buffers[i] (a writable numpy view, records[i].n_bytes long) with records[i]'s block; stop at the
    first block that does not arrive. Blocks of several sizes land this way (a grouped model's last block
    also carries its recurrent state: kv.format.group_codec)."""
    started = time.perf_counter()
    if isinstance(store, BulkBlockReads):
        try:
            landed = store.get_blocks_into(records, buffers)
        except BlockMiss as miss:
            landed = Landed(0, [], miss)
    else:
        landed = _land_block_by_block(store, records, buffers, workers)
    return Arrival(landed, time.perf_counter() - started, sum(len(b) for b in buffers[:landed.complete]))


def _land_block_by_block(store: BlockStore, records, buffers, workers: int) -> Landed:
    """Stores without BulkBlockReads: fetch in parallel, copy in order, CRC each block's bytes."""
    crcs: list[int] = []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(records))), thread_name_prefix="kv-fetch") as pool:
        futures = [pool.submit(store.get_block, record) for record in records]
        for position, future in enumerate(futures):
            miss = None
            try:
                payload = future.result()
                expected = records[position].n_bytes
                if expected >= 0 and len(payload) != expected:
                    miss = BlockMiss("incomplete", f"{len(payload)} of {expected} bytes")
                elif len(payload) != len(buffers[position]):
                    miss = BlockMiss("incomplete", f"{len(payload)} bytes, the model's block is "
                                                   f"{len(buffers[position])}")
            except BlockMiss as exc:
                miss = exc
            except Exception as exc:  # noqa: BLE001 - timeouts, socket errors: all misses
                miss = BlockMiss(type(exc).__name__, str(exc))
            if miss is not None:
                for later in futures[position + 1:]:
                    later.cancel()
                return Landed(len(crcs), crcs, miss)
            buffers[position][:] = np.frombuffer(payload, dtype=np.uint8)
            crcs.append(native.crc32c(payload))
    return Landed(len(crcs), crcs)


def land_checked(store: BlockStore, records: list[BlockRecord], buffers: list, check, *,
                 workers: int = 4) -> tuple[Arrival, tuple[int, str, object] | None]:
    """land_into, then each block that arrived checked by `check(buffer, block_crc32c, sealed)`, which raises
    ValueError (the formats' CodecError) on a block that is not the one stored. Returns the arrival and the first
    failure: (position, reason, detail), reason "corrupt" for a check that failed, else the store's miss (its
    BlockMiss as detail); None when all are in."""
    if not records:
        return Arrival(Landed(0, []), 0.0, 0), None
    arrival = land_into(store, records, buffers, workers=workers)
    landed = arrival.landed
    for position, crc in enumerate(landed.block_crcs):
        try:
            check(buffers[position], crc, landed.sealed)
        except ValueError as exc:
            return arrival, (position, "corrupt", exc)
    if landed.miss is not None:
        return arrival, (landed.complete, landed.miss.reason, landed.miss)
    return arrival, None
