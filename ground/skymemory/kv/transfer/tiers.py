"""Where a cached block's bytes are kept near the model: a device tier and a pinned host tier.

The block store (the constellation) is the far, shared tier; these two keep copies close to
the model, nearest first, in the way LMCache keeps GPU -> pinned CPU -> remote:

  DeviceTier   block hash -> its encoded bytes as one uint8 tensor [block_bytes] on the model's
               device; at most capacity_bytes // block_bytes blocks, the least recently used
               evicted whole. A hit needs no host copy at all (kv.format.rebuild works on a uint8
               [m, block_bytes] tensor on any device).
  HostTier     one uint8 slab [slots, block_bytes] allocated up front, pinned when the model is
               on CUDA (registered once: a request never pays for pinning fresh memory), plus a
               hash -> slot map in LRU order. A hit is one copy to the device per run of
               consecutive slots (asynchronous from pinned memory). On a CPU there is nothing to
               pin and the "copy to the device" is a memcpy.
  BlockTiers   both behind one lock. gather(hashes) fills one device buffer [m, block_bytes]
               from whichever tier holds each block and promotes host hits to the device tier;
               put() is the write-through (a block stored or fetched enters both); discard()
               follows the store's evictions; stats() counts hits, misses, evictions and bytes;
               with journal=True, take_host_changes() says what entered and left the host tier
               (a paged engine's worker tells its scheduler, which prices those loads as near).

A tier is a copy: the radix index (kv.index.radix) stays the authority on which blocks exist, so a
block is only ever looked up here after the index found it. Bytes enter a tier only after they
were checked (encoded on this host by add_blocks, or landed from the store and checked against
their CRC32C), so a tier hit is not checked again.

Thread safety: every BlockTiers call holds its lock (get_cache may fetch on a background thread
while add_blocks writes through). On CUDA a slot is not overwritten before the last asynchronous
copy out of the slab has completed (an event recorded after each gather).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

__all__ = ["BlockTiers", "DeviceTier", "HostTier", "TierStats", "check_tier_bytes"]


@dataclass
class TierStats:
    """One tier's counters (for reports): lookups that hit or missed, blocks evicted to make room."""

    capacity_bytes: int
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    blocks: int = 0  # held now
    bytes: int = 0  # held now


def check_tier_bytes(name: str, capacity_bytes, block_bytes: int) -> int:
    """capacity_bytes as an int of at least one block, or a ValueError naming `name` and the block size."""
    if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, (int, np.integer)):
        raise ValueError(f"{name} must be a whole number of bytes, got {capacity_bytes!r}")
    if block_bytes <= 0:
        raise ValueError(f"block size must be positive, got {block_bytes} bytes")
    if capacity_bytes < block_bytes:
        raise ValueError(f"{name}={capacity_bytes} is below one block ({block_bytes} bytes of this model's KV); "
                         f"give at least {block_bytes}, or 0 to turn the tier off")
    return int(capacity_bytes)


def _host_row(data, block_bytes: int, padded: bool = False) -> torch.Tensor:
    """A block as a uint8 tensor: a tensor as it is, bytes copied once into a fresh host tensor. `padded`: a
    model whose blocks differ in size (kv.format.group_codec: the one ending a prompt carries a state) keeps each
    in a row of its largest block's size, zeros after it (its record says its size)."""
    if isinstance(data, torch.Tensor):
        row = data.reshape(-1)
    else:
        row = torch.empty(len(data), dtype=torch.uint8)
        row.numpy()[:] = np.frombuffer(data, dtype=np.uint8)
    if padded and row.dtype == torch.uint8 and row.numel() < block_bytes:
        row = torch.cat([row, torch.zeros(block_bytes - row.numel(), dtype=torch.uint8, device=row.device)])
    if row.dtype != torch.uint8 or row.numel() != block_bytes:
        raise ValueError(f"a block of this model is {block_bytes} uint8 bytes{' at most' if padded else ''}, got "
                         f"{row.numel()} {row.dtype}")
    return row


class DeviceTier:
    """Blocks as tensors on the model's device, bounded, least recently used evicted first (not locked: BlockTiers)."""

    def __init__(self, capacity_bytes: int, block_bytes: int, device: torch.device | str, *, padded: bool = False):
        capacity_bytes = check_tier_bytes("device_tier_bytes", capacity_bytes, block_bytes)
        self.block_bytes, self.padded = block_bytes, padded
        self.device = torch.device(device)
        self.capacity_blocks = capacity_bytes // block_bytes
        self.counts = TierStats(capacity_bytes)
        self._blocks: OrderedDict[bytes, torch.Tensor] = OrderedDict()  # oldest use first

    def get(self, block_hash: bytes) -> torch.Tensor | None:
        """The block's bytes on the device (now the most recently used), or None."""
        row = self._blocks.get(block_hash)
        if row is None:
            self.counts.misses += 1
            return None
        self._blocks.move_to_end(block_hash)
        self.counts.hits += 1
        return row

    def put(self, block_hash: bytes, data) -> None:
        """Keep a copy of `data` (a uint8 tensor on any device, or bytes), evicting the oldest blocks to fit."""
        if block_hash in self._blocks:  # a chain hash names its bytes: the copy held is the same
            self._blocks.move_to_end(block_hash)
            return
        row = _host_row(data, self.block_bytes, self.padded)
        # a copy of its own: a view would keep the whole buffer it came from alive
        copy = torch.empty(self.block_bytes, dtype=torch.uint8, device=self.device)
        copy.copy_(row)
        while len(self._blocks) >= self.capacity_blocks:
            self._blocks.popitem(last=False)
            self.counts.evictions += 1
        self._blocks[block_hash] = copy

    def discard(self, block_hash: bytes) -> bool:
        return self._blocks.pop(block_hash, None) is not None

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._blocks

    def stats(self) -> TierStats:
        held = len(self._blocks)
        return TierStats(**{**asdict(self.counts), "blocks": held, "bytes": held * self.block_bytes})


class HostTier:
    """Blocks in the slots of one host slab allocated up front (pinned for CUDA), LRU (not locked: BlockTiers)."""

    def __init__(self, capacity_bytes: int, block_bytes: int, *, pin: bool = False, journal: bool = False,
                 padded: bool = False):
        capacity_bytes = check_tier_bytes("host_tier_bytes", capacity_bytes, block_bytes)
        self.block_bytes, self.padded = block_bytes, padded
        slots = capacity_bytes // block_bytes
        try:
            self.slab = torch.empty((slots, block_bytes), dtype=torch.uint8, pin_memory=pin)
        except RuntimeError as exc:
            raise MemoryError(f"host_tier_bytes={capacity_bytes}: allocating {slots} blocks"
                              f"{' of pinned memory' if pin else ''} failed ({exc})") from exc
        self.pinned = pin
        self.counts = TierStats(slots * block_bytes)
        self._slots: OrderedDict[bytes, int] = OrderedDict()  # hash -> slot, oldest use first
        self._free = list(range(slots - 1, -1, -1))  # popped from the end: slot 0 first
        self._readers = None  # CUDA event after the last copy out of the slab (None: nothing in flight)
        # journal=True: what entered (True) and left (False) since take_changes, for whoever prices loads elsewhere
        self._changes: dict[bytes, bool] | None = {} if journal else None

    def _changed(self, block_hash: bytes, held: bool) -> None:
        if self._changes is not None:
            self._changes[block_hash] = held

    def take_changes(self) -> dict[bytes, bool]:
        """Blocks that entered (True) or left (False) the tier since the last call (empty without a journal)."""
        if self._changes is None:
            return {}
        changes, self._changes = self._changes, {}
        return changes

    def slot(self, block_hash: bytes) -> int | None:
        """The block's slot (now the most recently used), or None."""
        slot = self._slots.get(block_hash)
        if slot is None:
            self.counts.misses += 1
            return None
        self._slots.move_to_end(block_hash)
        self.counts.hits += 1
        return slot

    def put(self, block_hash: bytes, data) -> None:
        """Copy `data` (a uint8 tensor on any device, or bytes) into a slot, evicting the oldest block if full."""
        if block_hash in self._slots:  # a chain hash names its bytes: the copy held is the same
            self._slots.move_to_end(block_hash)
            return
        if self._free:
            slot = self._free.pop()
        else:
            evicted, slot = self._slots.popitem(last=False)
            self._changed(evicted, False)
            self.counts.evictions += 1
        self.wait_for_readers()  # the device may still be copying the slot's old bytes
        self.slab[slot].copy_(_host_row(data, self.block_bytes, self.padded))
        self._slots[block_hash] = slot
        self._changed(block_hash, True)

    def copy_out(self, slots: Sequence[int], positions: Sequence[int], out: torch.Tensor) -> None:
        """out[positions[i]] = slab[slots[i]]: one copy per run consecutive in both (asynchronous from pinned)."""
        start = 0
        for end in range(1, len(slots) + 1):
            if end < len(slots) and slots[end] == slots[end - 1] + 1 and positions[end] == positions[end - 1] + 1:
                continue
            n = end - start
            out[positions[start]:positions[start] + n].copy_(self.slab[slots[start]:slots[start] + n],
                                                               non_blocking=self.pinned)
            start = end
        if out.device.type == "cuda":
            self._readers = torch.cuda.Event()
            self._readers.record()

    def wait_for_readers(self) -> None:
        if self._readers is not None:
            self._readers.synchronize()
            self._readers = None

    def discard(self, block_hash: bytes) -> bool:
        slot = self._slots.pop(block_hash, None)
        if slot is None:
            return False
        self._free.append(slot)
        self._changed(block_hash, False)
        return True

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._slots

    def stats(self) -> TierStats:
        held = len(self._slots)
        return TierStats(**{**asdict(self.counts), "blocks": held, "bytes": held * self.block_bytes})


class BlockTiers:
    """The device and host tiers of one model (either may be off: 0 bytes), nearest first, behind one lock."""

    def __init__(self, block_bytes: int, device: torch.device | str, *, device_bytes: int = 0, host_bytes: int = 0,
                 journal: bool = False, padded: bool = False):
        """padded: blocks of several sizes, each kept in a row of `block_bytes` (the largest: _host_row)."""
        self.block_bytes = block_bytes
        self.device = torch.device(device)
        self.device_tier = DeviceTier(device_bytes, block_bytes, self.device, padded=padded) if device_bytes else None
        # pinned only for a CUDA model: the copy to the device is then one asynchronous DMA
        self.host_tier = (HostTier(host_bytes, block_bytes, pin=self.device.type == "cuda", journal=journal,
                                   padded=padded) if host_bytes else None)
        self._lock = threading.RLock()

    @property
    def enabled(self) -> bool:
        return self.device_tier is not None or self.host_tier is not None

    def gather(self, hashes: Sequence[bytes]) -> tuple[torch.Tensor | None, list[str | None]]:
        """The blocks the tiers hold, in one device buffer [len(hashes), block_bytes] (None if no tier holds any).

        Returns (buffer, where): where[i] is "device", "host" or None (row i not filled: fetch it
        from the store). Host hits are promoted to the device tier.
        """
        with self._lock:
            where: list[str | None] = [None] * len(hashes)
            device_rows: dict[int, torch.Tensor] = {}
            host_slots: list[tuple[int, int]] = []  # (position, slot)
            for position, block_hash in enumerate(hashes):
                row = self.device_tier.get(block_hash) if self.device_tier is not None else None
                if row is not None:
                    device_rows[position] = row
                    where[position] = "device"
                    continue
                slot = self.host_tier.slot(block_hash) if self.host_tier is not None else None
                if slot is not None:
                    host_slots.append((position, slot))
                    where[position] = "host"
            if not device_rows and not host_slots:
                return None, where
            out = torch.empty((len(hashes), self.block_bytes), dtype=torch.uint8, device=self.device)
            for position, row in device_rows.items():
                out[position].copy_(row)
            if host_slots:
                self.host_tier.copy_out([s for _, s in host_slots], [p for p, _ in host_slots], out)
                if self.device_tier is not None:  # promotion: the next request finds these on the device
                    for position, _ in host_slots:
                        self.device_tier.put(hashes[position], out[position])
            return out, where

    def put(self, hashes: Sequence[bytes], host_rows: Sequence | None = None,
            device_rows: Sequence | None = None) -> None:
        """Write-through: each block into both tiers, from the rows given (host and/or device; bytes or tensors).

        Each tier copies from the rows nearest to it, so a caller that has the blocks on both
        sides (a fetch: landed on the host, copied to the device) costs no extra transfer.
        """
        if host_rows is None and device_rows is None:
            raise ValueError("put needs the blocks' rows on the host or on the device")
        for rows in (host_rows, device_rows):
            if rows is not None and len(rows) != len(hashes):
                raise ValueError(f"{len(hashes)} hashes but {len(rows)} rows")
        with self._lock:
            for i, block_hash in enumerate(hashes):
                if self.host_tier is not None:
                    self.host_tier.put(block_hash, host_rows[i] if host_rows is not None else device_rows[i])
                if self.device_tier is not None:
                    self.device_tier.put(block_hash, device_rows[i] if device_rows is not None else host_rows[i])

    def discard(self, block_hash: bytes) -> None:
        """Drop the block from every tier (the store evicted it)."""
        with self._lock:
            for tier in (self.device_tier, self.host_tier):
                if tier is not None:
                    tier.discard(block_hash)

    def take_host_changes(self) -> dict[bytes, bool]:
        """What entered (True) or left (False) the host tier since the last call (journal=True; else empty)."""
        with self._lock:
            return self.host_tier.take_changes() if self.host_tier is not None else {}

    def where(self, block_hash: bytes) -> str | None:
        """The nearest tier holding the block ("device", "host") or None; counts nothing, moves nothing."""
        with self._lock:
            if self.device_tier is not None and block_hash in self.device_tier:
                return "device"
            if self.host_tier is not None and block_hash in self.host_tier:
                return "host"
            return None

    def stats(self) -> dict[str, dict]:
        """Per tier that is on: capacity_bytes, hits, misses, evictions, blocks and bytes held."""
        with self._lock:
            return {name: asdict(tier.stats()) for name, tier in
                    (("device", self.device_tier), ("host", self.host_tier)) if tier is not None}
