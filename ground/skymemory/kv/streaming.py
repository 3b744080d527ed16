"""Layerwise streaming of a cached prefix into the model (overlap transfer with compute).

Blocks are layer-major (codec.py): layer L of a block is the byte range
[64 + L * layer_bytes, 64 + (L + 1) * layer_bytes). `PrefixStream` fetches all
the prefix's blocks with one C fast-path call on a background thread, asking
the chunks in waves across blocks (the first layers of *every* block first);
the C code advances, per block, the count of chunks received contiguously
from chunk 0, so layer L is complete when every block's count covers it.
At most STREAM_WINDOW_BYTES are asked for and not yet received (about 8
layers of an 8-block TinyLlama prefix), so each layer's requests leave as
earlier layers arrive: with the window of a plain get (24 MiB, the whole
prefix) every satellite answers everything at once and layer 0 queues behind
the rest (laser: 68 % of the transfer hidden against 88-91 % with 8 MiB).
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

Integrity: every chunk's CRC32C is checked in C; each block's header is
checked before layer 0 is used, and each block's SHA-256 payload digest is
checked (on the transfer thread, as soon as its transfer ends) before the
*last* layer is released. Any failure raises `StreamFailed` from the
forward pass; `generate_streaming` then evicts and recomputes without the
cache, so the tokens are always the uncached ones.

Decoding follows codec.decode_block exactly (stored dtype -> float32 -> the
model's dtype), so a streamed prefix is bit-identical to a fetched one.

Hook for KVCManager (owned by the KV layer): `get_cache(prompt, streaming=True)`
can simply `return get_cache_streaming(self, prompt)`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from . import codec
from .store import BlockMiss

log = logging.getLogger(__name__)

POLL_S = 0.0002  # how often a waiting layer looks at the transfer's progress
STREAM_WINDOW_BYTES = 8 * 1024 * 1024  # bytes in flight while streaming: layers in order over raw throughput


class StreamFailed(RuntimeError):
    """The prefix could not be streamed (miss, timeout, corrupt block); recompute without it."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass
class StreamStats:
    started: float = 0.0  # perf_counter at start
    transfer_s: float | None = None  # start -> last chunk (and digests) in
    exposed_s: float = 0.0  # time the forward pass spent waiting for layers
    layer_ready_s: list[float] = field(default_factory=list)  # per layer: start -> usable
    layer_wait_s: list[float] = field(default_factory=list)  # per layer: time the forward waited for it
    bytes: int = 0
    pace_Bps: float = 0.0  # the pace the waves were asked at (0: unpaced)
    packets_rx: int = 0
    retransmits: int = 0

    @property
    def hidden_share(self) -> float | None:
        """Share of the transfer time the model did not wait for (hidden under compute)."""
        if not self.transfer_s:
            return None
        return max(0.0, 1.0 - self.exposed_s / self.transfer_s)


class PrefixStream:
    """The prefix blocks arriving in the background; `layer(i)` blocks until layer i is usable."""

    def __init__(self, store, records, geometry: codec.BlockGeometry, kv_format: str, *, dtype: torch.dtype,
                 device, wave_layers: int = 1, deadline_s: float | None = None, pace_Bps: float = 0.0,
                 window_bytes: int = STREAM_WINDOW_BYTES) -> None:
        if not records:
            raise ValueError("nothing to stream")
        if not hasattr(store, "block_jobs") or getattr(store, "fast", None) is None:
            raise ValueError("streaming needs a ConstellationBlockStore with the fast path")
        self.store = store
        self.geometry = geometry
        self.kv_format = kv_format
        self.dtype, self.device = dtype, device
        self.n_bytes = codec.block_bytes(geometry, kv_format)
        for r in records:
            if r.n_bytes >= 0 and r.n_bytes != self.n_bytes:
                raise StreamFailed("incomplete", f"record says {r.n_bytes} bytes, the model's block is {self.n_bytes}")
        self.records = [dataclasses.replace(r, n_bytes=self.n_bytes) for r in records]
        self.chunk_bytes = self.records[0].chunk_bytes
        if any(r.chunk_bytes != self.chunk_bytes for r in self.records):
            raise ValueError("all blocks of a prefix must use one chunk size")
        self.layer_bytes = codec.layer_bytes(geometry, kv_format)
        self.wave_chunks = max(1, -(-wave_layers * self.layer_bytes // self.chunk_bytes))
        if pace_Bps < 0:
            raise ValueError("pace_Bps must be >= 0")
        self.pace_Bps = pace_Bps
        self.window_bytes = window_bytes
        self.deadline_s = deadline_s or store.fast.deadline_s + 5.0
        self.prefix = np.zeros(len(records), dtype=np.uint32)
        self.jobs = store.block_jobs(self.records)
        self.chunk_count = self.jobs[0].chunk_count
        self.error: StreamFailed | None = None
        self.done = threading.Event()  # transfer over (success or error), digests checked
        self._transfer_over = threading.Event()
        self._digests = [hashlib.sha256() for _ in records]
        self.stats = StreamStats(layer_ready_s=[0.0] * geometry.layers, layer_wait_s=[0.0] * geometry.layers,
                                 pace_Bps=pace_Bps)
        self._header_checked = False
        self._thread: threading.Thread | None = None

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
        hasher = threading.Thread(target=self._hash_as_it_arrives, name="kv-stream-digest", daemon=True)
        hasher.start()
        try:
            t = self.store.fetch_jobs(self.jobs, prefix=self.prefix, wave_chunks=self.wave_chunks,
                                      pace_Bps=self.pace_Bps, window_bytes=self.window_bytes)
            self.stats.packets_rx, self.stats.retransmits = t.packets_rx, t.retransmits
            self._transfer_over.set()
            hasher.join()
            for job, digest in zip(self.jobs, self._digests):  # the last layer waits for these
                if digest.digest() != codec.read_header(job.buf).digest:
                    raise StreamFailed("corrupt", f"block {job.block_hash.hex()[:16]}: payload digest mismatch")
            self.stats.bytes = self.n_bytes * len(self.jobs)
        except StreamFailed as exc:
            self.error = exc
        except BlockMiss as exc:
            self.error = StreamFailed(exc.reason, str(exc))
        except Exception as exc:  # noqa: BLE001 - socket errors, codec errors: all failures of the stream
            self.error = StreamFailed(type(exc).__name__, str(exc))
        finally:
            self._transfer_over.set()
            self.stats.transfer_s = time.perf_counter() - self.stats.started
            self.done.set()

    def _hash_as_it_arrives(self) -> None:
        """SHA-256 of each block's payload, fed with the bytes as they become contiguous.

        hashlib releases the GIL on large updates, so this runs beside the model; when the
        transfer ends only the last bytes are left to hash.
        """
        hashed = [codec.HEADER_BYTES] * len(self.jobs)
        while True:
            over = self._transfer_over.is_set()  # read before the progress: no bytes are missed
            progressed = False
            for b, job in enumerate(self.jobs):
                upto = min(self.n_bytes, int(self.prefix[b]) * self.chunk_bytes)
                if upto > hashed[b]:
                    self._digests[b].update(memoryview(job.buf)[hashed[b]:upto])
                    hashed[b] = upto
                    progressed = True
            if over and not progressed:
                return
            if not progressed:
                time.sleep(0.001)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- consumer side ----------------------------------------------------------------
    def _chunks_for(self, layer: int) -> int:
        end = codec.layer_offset(self.geometry, self.kv_format, layer) + self.layer_bytes
        return min(self.chunk_count, -(-end // self.chunk_bytes))

    def _check_headers(self) -> None:
        for job in self.jobs:
            try:
                header = codec.read_header(job.buf)
            except codec.CodecError as exc:
                raise StreamFailed("corrupt", str(exc)) from None
            if header.geometry != self.geometry or header.kv_format != self.kv_format:
                raise StreamFailed("corrupt", f"block {job.block_hash.hex()[:16]} is {header.kv_format} "
                                   f"{header.geometry}, expected {self.kv_format} {self.geometry}")
        self._header_checked = True

    def wait_layer(self, layer: int) -> None:
        """Until layer `layer` of every block is in (the last layer: and every digest checked)."""
        last = layer == self.geometry.layers - 1
        need = self._chunks_for(layer)
        started = time.perf_counter()
        while True:
            if self.error is not None:
                raise self.error
            if last:
                if self.done.is_set():
                    break
            elif int(self.prefix.min()) >= need:
                break
            if time.perf_counter() - self.stats.started > self.deadline_s:
                raise StreamFailed("timeout", f"layer {layer} not in after {self.deadline_s:.0f} s")
            time.sleep(POLL_S)
        if self.error is not None:
            raise self.error
        now = time.perf_counter()
        self.stats.exposed_s += now - started
        self.stats.layer_wait_s[layer] = now - started
        self.stats.layer_ready_s[layer] = now - self.stats.started
        if not self._header_checked:
            self._check_headers()

    def layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `layer`'s prefix K, V as [1, kv_heads, prefix_tokens, head_dim] in the model's dtype."""
        self.wait_layer(layer)
        keys, values = zip(*(self._decode(job.buf, layer) for job in self.jobs))
        k = torch.cat(keys, dim=1).unsqueeze(0).to(device=self.device, dtype=self.dtype)
        v = torch.cat(values, dim=1).unsqueeze(0).to(device=self.device, dtype=self.dtype)
        return k, v

    def _decode(self, buffer: bytearray, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One block's layer, exactly as codec.decode_block computes it (float32 result)."""
        g = self.geometry
        shape = (g.kv_heads, g.tokens, g.head_dim)
        count = g.kv_heads * g.tokens * g.head_dim
        offset = codec.layer_offset(g, self.kv_format, layer)

        def tensor(at: int, dtype: torch.dtype, shape_: tuple[int, ...]) -> torch.Tensor:
            n = int(np.prod(shape_))
            return torch.frombuffer(buffer, dtype=dtype, count=n, offset=at).reshape(shape_)

        if self.kv_format == "int8":
            k = tensor(offset, torch.int8, shape)
            offset += count
            k_scale = tensor(offset, codec.SCALE_DTYPE, (g.kv_heads, 1, g.head_dim))
            offset += 2 * g.kv_heads * g.head_dim
            v = tensor(offset, torch.int8, shape)
            offset += count
            v_scale = tensor(offset, codec.SCALE_DTYPE, (g.kv_heads, g.tokens, 1))
            return (k.float() * k_scale.float()).to(torch.float32), (v.float() * v_scale.float()).to(torch.float32)
        stored = codec._TORCH[self.kv_format]
        size = count * stored.itemsize
        return (tensor(offset, stored, shape).to(torch.float32), tensor(offset + size, stored, shape).to(torch.float32))


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


def get_cache_streaming(manager, prompt, *, wave_layers: int = 1, pace_Bps: float = 0.0):
    """Like KVCManager.get_cache, but the prefix streams in while the model runs.

    Returns the manager's CacheResult; `.cache` is a StreamingCache (or an empty
    DynamicCache when nothing is cached) and `.cache.stream.stats` tells how
    long the transfer took and how much of it the model waited for.
    `pace_Bps` > 0 asks the layers after the first no faster than that (0: unpaced).
    """
    from .manager import CacheResult

    found = manager.find_prefix(prompt)
    records, n_usable, input_ids = found.records, found.usable_blocks, found.input_ids
    source, lookup_s = found.source, found.lookup_s
    if not records:
        return CacheResult(DynamicCache(config=manager.model.config), input_ids, 0, [], n_usable,
                           "not-cached" if n_usable else None, source, lookup_s=lookup_s)
    stream = PrefixStream(manager.store, records, manager.geometry, manager.kv_format, dtype=manager.model.dtype,
                          device=manager.model.device, wave_layers=wave_layers, pace_Bps=pace_Bps).start()
    return CacheResult(StreamingCache(stream), input_ids, stream.prefix_tokens, [r.block_hash for r in records],
                       n_usable, None if len(records) == n_usable else "not-cached", source, lookup_s=lookup_s,
                       bytes_retrieved=stream.n_bytes * len(records))


def evict_after_failure(manager, result, failure: StreamFailed) -> None:
    """A stream failed: let its transfer end, evict its blocks (lazy eviction, §3.9), drop them from the index."""
    stream = getattr(result.cache, "stream", None)
    if stream is not None:
        stream.join(10)
    log.warning("streamed KV prefix failed (%s): %s", failure.reason, failure)
    for h in result.blocks:
        entry = manager.index.get(h)
        if entry is not None:
            try:
                manager.store.evict_block(entry.record)
            except Exception as exc:  # noqa: BLE001 - best effort
                log.info("evicting %s failed: %r", h.hex()[:16], exc)
    if result.blocks:
        manager.index.remove(result.blocks[0])


def generate_streaming(manager, prompt, *, max_new_tokens: int = 30, wave_layers: int = 1,
                       pace_Bps: float = 0.0, **generate_kwargs):
    """Greedy generation with a streamed prefix; on a failed stream, evict and recompute without it.

    Returns (new token ids, CacheResult, StreamStats or None, failure reason or None).
    """
    result = get_cache_streaming(manager, prompt, wave_layers=wave_layers, pace_Bps=pace_Bps)
    generate_kwargs.setdefault("do_sample", False)
    stream = getattr(result.cache, "stream", None)

    def run(cache):
        with torch.no_grad():
            out = manager.model.generate(result.input_ids, attention_mask=result.attention_mask, past_key_values=cache,
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
