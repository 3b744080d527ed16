"""Layerwise streaming of a cached prefix into the model (overlap transfer with compute).

Blocks are layer-major (codec.py): layer L of a block is the byte range
[64 + L * layer_bytes, 64 + (L + 1) * layer_bytes). `PrefixStream` fetches all
the prefix's blocks with one C fast-path call on a background thread, asking
the chunks in waves across blocks (the first layers of *every* block first;
`wave_layers` layers in the first wave, each wave after it twice as wide, so
a 22-layer prefix takes 5 waves of requests rather than 22: a stream's
transfer then takes 1.03-1.19x a fetch's, against 1.16-1.44x with a wave per
layer, BENCHMARKS.md "Streaming at fetch speed");
the C code advances, per block, the count of chunks received contiguously
from chunk 0, so layer L is complete when every block's count covers it.

Bytes in flight (`stream_window`): twice the link's measured rate times its
round trip, at least STREAM_WINDOW_MIN (8 MiB), and a plain get's window
(fastpath.BulkTransfer: the socket's receive buffer, at most 24 MiB) before
the link is measured or when that is larger. So a window never costs a
round trip, and on a short one the requests still leave as earlier layers
arrive. A fixed 8 MiB window capped a stream at window / RTT: on the rf
profile (71 ms round trip) a 46 MB prefix took 1.9-2.3x a plain fetch's
time (BENCHMARKS.md, issue 24). On none and laser, at this CPU's
0.2-0.3 GB/s, 8 MiB is more than the product, and there it gave layer 0
sooner and a transfer no slower than a plain get's 24 MiB, so it stays the
floor. Twice the product because the rate measured through a window is at
most window / RTT: a stream held to 8 MiB measures just that, and doubling
lets the next one out of it (8 -> 16 -> 24 MiB on rf). Requests leave in
layer-major order and each satellite answers in that order, so with any
window layer 0 is asked and answered first.

A layer waits only for its own bytes (`_layer_in`: every block's received
prefix covers it), asleep: the C transfer rings an eventfd once every prefix
reaches the chunks the waiting layer needs (link/bell.py), so a forward that
is ahead of the bytes sleeps 5-6 times per 22-layer prefix (layers come in
bursts), where polling every 0.2 ms woke it some 200 times and took CPU from
the transfer on a host of two cores (BENCHMARKS.md, "A stream's reader
asleep on a bell"). The last layer also waits for the transfer's end and the
blocks' checks: its chunks are the last asked, so that end is when its own
bytes are in, plus a fold of the chunk CRCs (the last layer is released
within a millisecond of the last byte, same table). The check stays: it is
the end-to-end proof that the chunks make the block that was stored.

With `pace_Bps` the waves after the first are asked no faster than that:
asked all at once, every satellite answers every wave at the same moment and
layer 0's chunks can queue behind later layers' at the shared receiver.
Off by default: on the laser profile it trims the slowest runs' wait for
layer 0 but lengthens the transfer (BENCHMARKS.md, issue 7).

`StreamingCache` is a transformers DynamicCache whose layers are
`StreamingLayer`s: a layer reports the prefix length at once (so masks and
positions are built without waiting), and only its `update()` — called by
the attention of that layer during the forward pass — waits until the
layer's prefix KV has arrived, decodes it and prepends it. The forward pass
over the suffix thus waits per layer, not for the whole prefix.

The bytes land in one reusable host buffer (kv.transfer.landing; pinned when the model
is on CUDA). A layer is rebuilt exactly as a fetched prefix is (kv.format.rebuild), so
a streamed prefix is bit-identical to a fetched one. On CUDA each layer's bytes
go to the device on a side stream as soon as they are in, with one event per
layer: the forward's layer l waits (on the device) for its own copy only, and
the host thread never waits for a copy.

Integrity: every chunk's CRC32C is checked in C; each block's header is
checked before layer 0 is used, and each block's CRC32C (folded from its
chunks' CRCs when the transfer ends: no pass over the bytes) is checked
before the *last* layer is released. Any failure raises `StreamFailed` from
the forward pass; `generate_streaming` then evicts and recomputes without the
cache, so the tokens are always the uncached ones.

Hook for KVCManager (owned by the KV layer): `get_cache(prompt, streaming=True)`
simply returns `get_cache_streaming(self, prompt)`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from ...link import fastpath
from ...link.bell import ProgressBell
from ..format import codec, rebuild
from ..index.lost import forget_from
from ..index.result import CacheResult
from ..model.cache_arg import cache_arg
from ..store import BlockMiss, StreamedBlockReads, streams
from .affinity import unpin_current_thread

log = logging.getLogger(__name__)

STREAM_WINDOW_MIN = 8 * 1024 * 1024  # the least bytes in flight while streaming (see stream_window)


def stream_window(link) -> int | None:
    """Bytes in flight for a stream over `link` (a kv.decide.policy.LinkEstimate): max(8 MiB, 2 x rate x RTT);
    None (a plain get's window) before any transfer was measured, or when that is no more than this."""
    model = link.model() if link is not None else None
    if model is None:
        return None
    window = max(STREAM_WINDOW_MIN, int(2 * model.rate_Bps * model.rtt_s))
    return None if window >= fastpath.GET_WINDOW_MAX else window


class StreamFailed(RuntimeError):
    """The prefix could not be streamed (miss, timeout, corrupt block); recompute without it. `satellites`: those
    to blame, as the store's BlockMiss named them (for a "seal" failure, whose chunks did not open). `block`: the
    hash of the block that failed, when one did (PrefixStream.intact_blocks finds the others that cannot be used)."""

    def __init__(self, reason: str, message: str, *, satellites: tuple[tuple[int, int], ...] = (),
                 block: bytes | None = None) -> None:
        self.reason = reason
        self.satellites = tuple(satellites)
        self.block = block
        super().__init__(message)


@dataclass
class StreamStats:
    started: float = 0.0  # perf_counter at start
    transfer_s: float | None = None  # start -> last chunk in and every block checked
    exposed_s: float = 0.0  # time the forward pass spent waiting for layers
    layer_ready_s: list[float] = field(default_factory=list)  # per layer: start -> usable
    layer_wait_s: list[float] = field(default_factory=list)  # per layer: time the forward waited for it
    bytes: int = 0
    pace_Bps: float = 0.0  # the pace the waves were asked at (0: unpaced)
    packets_rx: int = 0
    retransmits: int = 0
    first_reply_s: float = 0.0  # start -> the first chunk (a round trip)
    sleeps: int = 0  # times a waiting layer slept on the bell (each ended by a ring or the deadline)

    @property
    def hidden_share(self) -> float | None:
        """Share of the transfer time the model did not wait for (hidden under compute)."""
        if not self.transfer_s:
            return None
        return max(0.0, 1.0 - self.exposed_s / self.transfer_s)


class PrefixStream:
    """The prefix blocks arriving in the background; `layer(i)` blocks until layer i is usable."""

    def __init__(self, store: StreamedBlockReads, records, geometry: codec.BlockGeometry, kv_format: str, *,
                 dtype: torch.dtype, device, landing, wave_layers: int = 1, wave_doubling: bool = True,
                 deadline_s: float | None = None, pace_Bps: float = 0.0, window_bytes: int | None = None,
                 verify_sha256: bool = False, link=None, on_landed=None) -> None:
        if not records:
            raise ValueError("nothing to stream")
        if not streams(store):
            raise ValueError(f"streaming needs a store with StreamedBlockReads (a ConstellationBlockStore with "
                             f"the fast path), not a {type(store).__name__}")
        if pace_Bps < 0:
            raise ValueError("pace_Bps must be >= 0")
        self.store = store
        self.geometry = geometry
        self.kv_format = kv_format
        self.dtype, self.device = dtype, torch.device(device)
        self.verify_sha256 = verify_sha256
        self.link = link  # a kv.decide.policy.LinkEstimate that learns from a successful transfer
        # on_landed(hashes, raw): every block in and checked, before the buffer goes back (a tier's write-through)
        self.on_landed = on_landed
        self.n_bytes = codec.block_bytes(geometry, kv_format)
        for r in records:
            if r.n_bytes >= 0 and r.n_bytes != self.n_bytes:
                raise StreamFailed("incomplete", f"record says {r.n_bytes} bytes, the model's block is {self.n_bytes}")
        self.records = [dataclasses.replace(r, n_bytes=self.n_bytes) for r in records]
        if any(r.chunk_bytes != self.records[0].chunk_bytes for r in self.records):
            raise ValueError("all blocks of a prefix must use one chunk size")
        self.layer_bytes = codec.layer_bytes(geometry, kv_format)
        self.pace_Bps = pace_Bps
        self.window_bytes = window_bytes if window_bytes is not None else stream_window(link)  # None: a get's
        self.deadline_s = deadline_s or store.stream_deadline_s + 5.0  # the transfer gives up first
        self.prefix = np.zeros(len(records), dtype=np.uint32)
        self._landing = landing
        self._lease = landing.lease(len(records), self.n_bytes)
        host = self._lease.raw.numpy()
        try:
            self.jobs = store.block_jobs(self.records, [host[i] for i in range(len(records))])
        except BlockMiss as exc:  # a record this store cannot read (sealed or not)
            landing.give_back(self._lease)
            raise StreamFailed(exc.reason, str(exc), block=exc.block) from None
        for job in self.jobs:
            job.chunk_crcs = np.zeros(job.chunk_count, dtype=np.uint32)
        self.chunk_count = self.jobs[0].data_chunk_count  # what `prefix` counts (coded: data chunks only)
        # content bytes per chunk: a layer's bytes are in once the chunks up to its end are (a sealed chunk
        # carries 32 bytes fewer of them, and is opened, so authenticated, as it lands)
        self.chunk_bytes = self.jobs[0].plain_chunk_bytes
        self.wave_chunks = max(1, -(-wave_layers * self.layer_bytes // self.chunk_bytes))
        layout = self.jobs[0].stripes
        if layout is not None:  # waves count chunk ids on the wire, where each stripe's parity follows its data
            self.wave_chunks = -(-self.wave_chunks * layout.n // layout.k)
        self.wave_doubling = wave_doubling
        self.error: StreamFailed | None = None
        self.done = threading.Event()  # transfer over (success or error), blocks checked
        self.bell = ProgressBell()  # wakes a waiting layer: rung by the transfer (link/bell.py)
        self.stats = StreamStats(layer_ready_s=[0.0] * geometry.layers, layer_wait_s=[0.0] * geometry.layers,
                                 pace_Bps=pace_Bps)
        self._header_checked = False
        self._thread: threading.Thread | None = None
        self._closed = False
        # where layers are rebuilt from: the host buffer itself, or its copy on the device
        self._on_device = self.device.type == "cuda"
        if self._on_device:
            self._device_raw = torch.empty(self._lease.raw.shape, dtype=torch.uint8, device=self.device)
            self._copy_stream = torch.cuda.Stream(device=self.device)
            # written on the side stream: the allocator must not reuse it before that stream is done with it
            self._device_raw.record_stream(self._copy_stream)
            self._copied: list = []  # one event per layer copied so far, in layer order
        self._views = rebuild.payload_views(self._device_raw if self._on_device else self._lease.raw, geometry,
                                            kv_format)

    @property
    def prefix_tokens(self) -> int:
        return len(self.records) * self.geometry.tokens

    # ---- transfer thread --------------------------------------------------------------
    def start(self) -> "PrefixStream":
        self.stats.started = time.perf_counter()
        self._thread = threading.Thread(target=self._fetch, name="kv-stream", daemon=True)
        self._thread.start()
        return self

    def _fetch(self) -> None:
        unpin_current_thread()  # not the CPU an engine pinned its compute to (kv/transfer/affinity.py)
        try:
            t = self.store.fetch_jobs(self.jobs, prefix=self.prefix, wave_chunks=self.wave_chunks,
                                      wave_doubling=self.wave_doubling, pace_Bps=self.pace_Bps,
                                      window_bytes=self.window_bytes, bell=self.bell)
            self.stats.packets_rx, self.stats.retransmits = t.packets_rx, t.retransmits
            self.stats.first_reply_s = t.first_reply_s
            for job in self.jobs:  # the last layer waits for these
                self._check(job)
            self.stats.bytes = self.n_bytes * len(self.jobs)
            if self.link is not None:
                self.link.observe(self.stats.bytes, time.perf_counter() - self.stats.started, t.first_reply_s or None)
        except StreamFailed as exc:
            self.error = exc
        except BlockMiss as exc:
            self.error = StreamFailed(exc.reason, str(exc), satellites=exc.satellites, block=exc.block)
        except Exception as exc:  # noqa: BLE001 - socket errors, codec errors: all failures of the stream
            self.error = StreamFailed(type(exc).__name__, str(exc))
        finally:
            self.stats.transfer_s = time.perf_counter() - self.stats.started
            self.done.set()
            self.bell.ring()  # a reader waiting for the last layer, or for chunks that will not come

    def _check(self, job) -> None:
        """Block `job`, arrived whole, is the block that was stored (its header, and its payload's CRC: folded
        from its chunks', or, sealed, taken over the bytes opened under the ground's key); StreamFailed("corrupt")
        if not."""
        try:
            codec.check_block(job.buf, block_crc32c=job.block_crc32c(), expect=self.geometry,
                              kv_format=self.kv_format, verify_sha256=self.verify_sha256 and not job.sealed,
                              authenticated=job.sealed)
        except codec.CodecError as exc:
            raise StreamFailed("corrupt", f"block {job.block_hash.hex()[:16]}: {exc}", block=job.block_hash) from None

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        """Wait for the transfer to end and give the host buffer back (after the last device copy)."""
        if self._closed:
            return
        self.join(self.deadline_s)
        if self._thread is not None and self._thread.is_alive():
            return  # still writing into the buffer: let it be collected with this stream instead
        self._closed = True
        self.bell.close()
        event = None
        if self._on_device and self._copied:
            event = self._copied[-1]
        self._landing.give_back(self._lease, event)

    def intact_blocks(self, failure: StreamFailed) -> list[bool]:
        """After `failure`, which blocks can still be used: each arrived whole, checks, and is not the one the
        failure names. Waits for the transfer to end (a header that does not check fails the stream while the
        rest is still arriving); none can be used if it runs on past the deadline."""
        self.join(self.deadline_s)
        if self._thread is not None and self._thread.is_alive():
            return [False] * len(self.jobs)
        return [job.block_hash != failure.block and job.complete() and self._checks(job)
                for job in self.jobs]

    def _checks(self, job) -> bool:
        try:
            self._check(job)
        except StreamFailed:
            return False
        return True

    def layer_blocks_of(self, layer: int, rows: list[int]) -> torch.Tensor:
        """Layer `layer` of blocks `rows` (of intact_blocks), as layer_blocks gives it, without waiting: what a
        failed stream still delivers."""
        views = rebuild.payload_views(self._lease.raw, self.geometry, self.kv_format)
        return rebuild.block_layer(views, layer, self.dtype)[torch.tensor(rows, dtype=torch.int64)]

    # ---- consumer side ----------------------------------------------------------------
    def _chunks_for(self, layer: int) -> int:
        end = codec.layer_offset(self.geometry, self.kv_format, layer) + self.layer_bytes
        return min(self.chunk_count, -(-end // self.chunk_bytes))

    def _layer_in(self, layer: int) -> bool:
        """Are layer `layer`'s bytes of every block in host memory (the last layer: and every block checked)?"""
        if layer == self.geometry.layers - 1:
            return self.done.is_set() and self.error is None
        return int(self.prefix.min()) >= self._chunks_for(layer)

    def _check_headers(self) -> None:
        for job in self.jobs:
            try:
                header = codec.read_header(job.buf)
            except codec.CodecError as exc:
                raise StreamFailed("corrupt", str(exc), block=job.block_hash) from None
            if header.geometry != self.geometry or header.kv_format != self.kv_format:
                raise StreamFailed("corrupt", f"block {job.block_hash.hex()[:16]} is {header.kv_format} "
                                   f"{header.geometry}, expected {self.kv_format} {self.geometry}",
                                   block=job.block_hash)
        self._header_checked = True

    def _wait(self, ready, chunks: int, what: str) -> None:
        """Until ready() (which the transfer's first `chunks` chunks of every block, or its end, make true),
        asleep on the bell: woken once, when they are in or the transfer ends."""
        while not ready():
            if self.error is not None:
                raise self.error
            if self.done.is_set():  # a whole transfer has every chunk: only a fault of this code gets here
                raise StreamFailed("incomplete", f"the transfer ended without {what}")
            left = self.deadline_s - (time.perf_counter() - self.stats.started)
            if left <= 0:
                raise StreamFailed("timeout", f"{what} not in after {self.deadline_s:.0f} s")
            self.bell.arm(chunks)
            if not ready() and not self.done.is_set():  # looked at after arming: a ring is not missed
                self.stats.sleeps += 1
                self.bell.wait(left)

    def wait_chunks(self, chunks: int) -> None:
        """Until the first `chunks` chunks of every block are in (the transfer's end: at most all of them)."""
        self._wait(lambda: int(self.prefix.min()) >= chunks or self.done.is_set(), chunks, f"{chunks} chunks")

    def wait_layer(self, layer: int) -> None:
        """Until layer `layer` of every block is in (the last layer: and every block checked)."""
        started = time.perf_counter()
        last = layer == self.geometry.layers - 1
        self._wait(lambda: self._layer_in(layer), 0 if last else self._chunks_for(layer), f"layer {layer}")
        now = time.perf_counter()
        self.stats.exposed_s += now - started
        self.stats.layer_wait_s[layer] = now - started
        self.stats.layer_ready_s[layer] = now - self.stats.started
        if not self._header_checked:
            self._check_headers()

    def _copy_layers_in(self, upto: int) -> None:
        """Issue the device copies of every layer whose bytes are in, up to `upto` at least (side stream)."""
        layer = len(self._copied)
        while layer < self.geometry.layers and (layer <= upto or self._layer_in(layer)):
            start = codec.layer_offset(self.geometry, self.kv_format, layer)
            end = start + self.layer_bytes
            if layer == 0:
                start = 0  # the headers too: the device copy is then the whole block
            with torch.cuda.stream(self._copy_stream):
                for block in range(len(self.jobs)):
                    self._device_raw[block, start:end].copy_(self._lease.raw[block, start:end], non_blocking=True)
                event = torch.cuda.Event()
                event.record(self._copy_stream)
            self._copied.append(event)
            layer += 1

    def layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `layer`'s prefix K, V as [1, kv_heads, prefix_tokens, head_dim] in the model's dtype."""
        self.wait_layer(layer)
        if self._on_device:
            self._copy_layers_in(layer)
            torch.cuda.current_stream(self.device).wait_event(self._copied[layer])  # this layer's copy only
        keys, values = rebuild.rebuild_layer(self._views, layer, self.dtype)
        if layer == self.geometry.layers - 1:
            self._landed()
            self.close()
        return keys, values


    def layer_blocks(self, layer: int) -> torch.Tensor:
        """Layer `layer` block by block, [m, 2, kv_heads, tokens, head_dim] in the stream's dtype, on the host
        (for a paged cache: kv.paged.paged); waits like layer()."""
        self.wait_layer(layer)
        views = self._views if not self._on_device else rebuild.payload_views(self._lease.raw, self.geometry,
                                                                               self.kv_format)
        kv = rebuild.block_layer(views, layer, self.dtype)
        if layer == self.geometry.layers - 1:
            self._landed()
            self.close()
        return kv

    def _landed(self) -> None:
        """Hand the landed blocks to on_landed (the last layer is in: every block arrived whole and checks)."""
        if self.on_landed is None:
            return
        try:
            self.on_landed([r.block_hash for r in self.records], self._lease.raw)
        except Exception as exc:  # noqa: BLE001 - the load succeeded; only a copy near the model is missing
            log.warning("keeping %d streamed blocks near the model failed: %r", len(self.records), exc)


class StreamingLayer(DynamicLayer):
    """A DynamicLayer whose prefix arrives while the model runs: update() waits for it."""

    def __init__(self, stream: PrefixStream, index: int) -> None:
        self._stream = stream
        self._index = index
        self._loaded = False
        self._keys = self._values = None
        super().__init__()  # sets keys/values to None through the properties below

    def _load(self) -> None:
        if not self._loaded:
            self._keys, self._values = self._stream.layer(self._index)
            self.dtype, self.device = self._keys.dtype, self._keys.device
            self._loaded = True

    # keys/values read by anyone (not only update) wait for the prefix too
    @property
    def keys(self):
        if not self._loaded and self._stream is not None:
            self._load()
        return self._keys

    @keys.setter
    def keys(self, value) -> None:
        self._keys = value

    @property
    def values(self):
        if not self._loaded and self._stream is not None:
            self._load()
        return self._values

    @values.setter
    def values(self, value) -> None:
        self._values = value

    @property
    def is_initialized(self) -> bool:
        return True  # the prefix length is known from the start

    @is_initialized.setter
    def is_initialized(self, value) -> None:
        pass

    def lazy_initialization(self, key_states, value_states) -> None:
        self._load()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self._load()
        self._keys = torch.cat([self._keys, key_states], dim=-2)
        self._values = torch.cat([self._values, value_states], dim=-2)
        return self._keys, self._values

    def get_seq_length(self) -> int:
        if not self._loaded:
            return self._stream.prefix_tokens
        return self._keys.shape[-2]


class StreamingCache(DynamicCache):
    """A DynamicCache over a PrefixStream: one StreamingLayer per model layer."""

    def __init__(self, stream: PrefixStream) -> None:
        Cache.__init__(self, layers=[StreamingLayer(stream, i) for i in range(stream.geometry.layers)])
        self.stream = stream


def get_cache_streaming(manager, prompt, *, wave_layers: int = 1, pace_Bps: float = 0.0, policy: str | None = None,
                        cache_salt: str | None = None):
    """Like KVCManager.get_cache, but the prefix streams in while the model runs.

    Returns the manager's CacheResult; `.cache` is a StreamingCache (or an empty
    DynamicCache when nothing is cached or the policy recomputes) and
    `.cache.stream.stats` tells how long the transfer took and how much of it the
    model waited for. `pace_Bps` > 0 asks the layers after the first no faster than
    that (0: unpaced). The fetch-or-recompute decision assumes the overlap. `cache_salt`
    names the tenant, as in KVCManager.get_cache.
    """
    if pace_Bps < 0:
        raise ValueError("pace_Bps must be >= 0")
    if getattr(manager, "grouped", None) is not None:  # kv.hf.grouped: fetched whole, the manager says so once
        return manager.get_cache(prompt, streaming=True, policy=policy, cache_salt=cache_salt)
    found = manager.find_prefix(prompt, cache_salt=cache_salt)
    decision = manager.plan(found, streaming=True, policy=policy)
    records = found.records[: decision.fetch_blocks] if decision else []
    not_cached = "not-cached" if len(found.records) < found.usable_blocks else None
    if not records:
        return CacheResult(DynamicCache(config=manager.model.config), found.input_ids, 0, [], found.usable_blocks,
                           not_cached, found.source, lookup_s=found.lookup_s, decision=decision)
    manager.note_use(records)
    stream = PrefixStream(manager.store_for(found.tenant), records, manager.geometry, manager.kv_format,
                          dtype=manager.model.dtype,
                          device=manager.model.device, landing=manager.landing, wave_layers=wave_layers,
                          pace_Bps=pace_Bps, verify_sha256=manager.verify_sha256, link=manager.link).start()
    return CacheResult(StreamingCache(stream), found.input_ids, stream.prefix_tokens, [r.block_hash for r in records],
                       found.usable_blocks, not_cached, found.source, lookup_s=found.lookup_s,
                       bytes_retrieved=stream.n_bytes * len(records), decision=decision)


def evict_after_failure(manager, result, failure: StreamFailed) -> None:
    """A stream failed: let its transfer end, then the one rule for what failed (kv.index.lost: the first block that
    failed and those after it leave store and index); `result` then says that nothing was loaded and why (the
    whole prompt is computed)."""
    stream = getattr(result.cache, "stream", None)
    log.warning("streamed KV prefix failed (%s): %s", failure.reason, failure)
    if stream is not None:
        intact = stream.intact_blocks(failure)  # (before close: it reads the landed blocks)
        stream.close()
        records, position = stream.records, next((i for i, ok in enumerate(intact) if not ok), None)
    else:  # no stream to ask which block failed: the whole prefix
        records = [e.record for e in map(manager.index.get, result.blocks) if e is not None]
        position = 0 if records else None
    if position is not None:
        forget_from(manager.store, manager.index, records, position, failure.reason, failure.satellites,
                    manager.orbit)
    result.prefix_tokens, result.blocks, result.miss_reason = 0, [], f"stream failed: {failure.reason}"


def generate_streaming(manager, prompt, *, max_new_tokens: int = 30, wave_layers: int = 1,
                       pace_Bps: float = 0.0, policy: str | None = None, **generate_kwargs):
    """Greedy generation with a streamed prefix; on a failed stream, evict and recompute without it.

    Returns (new token ids, CacheResult, StreamStats or None, failure reason or None).
    """
    result = get_cache_streaming(manager, prompt, wave_layers=wave_layers, pace_Bps=pace_Bps, policy=policy)
    generate_kwargs.setdefault("do_sample", False)
    stream = getattr(result.cache, "stream", None)

    def run(cache):
        with torch.no_grad():
            out = manager.model.generate(result.input_ids, attention_mask=result.attention_mask, **cache_arg(manager.model, cache),
                                         max_new_tokens=max_new_tokens, **generate_kwargs)
        return out[0, result.input_ids.shape[1]:].tolist()

    try:
        tokens = run(result.cache)
        failure = None
    except StreamFailed as exc:
        evict_after_failure(manager, result, exc)
        if manager.strict:
            raise
        tokens = run(DynamicCache(config=manager.model.config))
        failure = exc.reason
    return tokens, result, stream.stats if stream is not None else None, failure
