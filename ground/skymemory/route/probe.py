"""The link the KV crosses, measured: timed reads of one probe block through the constellation.

The rate the planner needs is the one the decode site's loads get (the paper's B_out, here the ground-to-orbit
link): measured, never configured. At start the probe stores one block of a KV block's size (random bytes,
under a name of its own, so it is never mistaken for a KV block) on the store the connector's settings make
(integrations.vllm.worker.open_store: the same servers, route, parity and sealing); each measure() reads it
back, timed, into the cost model's LinkEstimate (kv.decide.policy), which keeps the median of recent transfers.
A block evicted since (LRU) is stored again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time

from skymemory.integrations.vllm.config import ConnectorConfig
from skymemory.integrations.vllm.worker import open_store
from skymemory.kv.decide.policy import LinkEstimate
from skymemory.orbit.manifest import Manifest
from skymemory.store.contract import BlockMiss

log = logging.getLogger(__name__)

PROBE_PREFIX = b"skymemory/router-probe\0"
PROBE_WINDOW = 4


class LinkProbe:
    """measure() -> the link's rate in bytes/s (the estimate over recent reads), after one more timed read."""

    def __init__(self, config: ConnectorConfig, *, block_bytes: int, station_id: int,
                 manifest: Manifest | None = None) -> None:
        self.block_bytes = block_bytes
        self.store = open_store(config, manifest or Manifest.load(config.manifest), station_id)
        # the median of the last few reads: t follows a link that changes within a few probes, not sixteen
        self.link = LinkEstimate("router probe", window=PROBE_WINDOW)
        self._payload = os.urandom(block_bytes)
        # a name of this router's own: two routers never read each other's probe
        self._hash = hashlib.sha256(PROBE_PREFIX + os.urandom(16)).digest()
        self._record = None
        self._lock = threading.Lock()  # one read at a time on the store

    def _stored(self):
        if self._record is None:
            self._record = self.store.put_block(self._hash, self._payload)
        return self._record

    def measure(self) -> float | None:
        """Read the probe block once, timed, into the estimate; the estimated rate (None before any read).
        Raises what the store raises when the block cannot be stored or read (the caller logs it)."""
        with self._lock:
            record = self._stored()
            started = time.perf_counter()
            try:
                got = self.store.get_block(record)
            except BlockMiss:
                self._record = None  # evicted (LRU) or lost: stored again, read next time
                raise
            seconds = time.perf_counter() - started
            if bytes(got) != self._payload:
                raise BlockMiss("crc", "the probe block read back differs from what was stored")
            stats = getattr(self.store, "last_transfer", None)
            self.link.observe(len(self._payload), seconds, getattr(stats, "first_reply_s", None) or None)
        return self.rate_Bps()

    def rate_Bps(self) -> float | None:
        model = self.link.model()
        return model.rate_Bps if model is not None else None

    def close(self) -> None:
        with self._lock:
            if self._record is not None:
                try:
                    self.store.evict_block(self._record)
                except Exception as exc:  # noqa: BLE001 - best effort: an unevicted probe ages out by LRU
                    log.debug("router: probe block not evicted: %r", exc)
            self.store.close()
