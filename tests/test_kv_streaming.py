"""Layerwise streaming: the prefix arrives while the model runs; tokens equal the uncached run."""

from __future__ import annotations

import hashlib
import select
import socket
import threading

import pytest
import torch

from skymemory.kv.format import codec
from skymemory.kv.transfer.landing import LandingBuffers
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.decide.policy import LinkEstimate
from skymemory.kv.transfer.streaming import (STREAM_WINDOW_MIN, PrefixStream, StreamFailed, StreamingCache,
                                    generate_streaming, get_cache_streaming, stream_window)
from skymemory.link.fastpath import require_native
from skymemory.protocol import native, wire
from skymemory.store.constellation import ConstellationBlockStore

from fakesat import FakeSatellite
from kv_support import random_prompt, tiny

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")
BLOCK = 16


@pytest.fixture
def store():
    sats = [FakeSatellite(0, i) for i in range(3)]
    for s in sats:
        s.__enter__()
    st = ConstellationBlockStore({s.me: s.address for s in sats}, [s.me for s in sats], chunk_bytes=700,
                                 client_options={"timeout": 0.2}, fast_options={"rto_s": 0.05, "deadline_s": 10})
    st.sats = sats
    yield st
    st.close()
    for s in sats:
        s.__exit__()


def uncached(model, prompt, n):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("kv,n_blocks,suffix", [("fp32", 1, 1), ("fp32", 3, 9), ("fp32", 4, 33), ("fp16", 2, 5)])
def test_streamed_prefix_gives_the_uncached_tokens(tmp_path, store, kv, n_blocks, suffix):
    model, tokenizer = tiny(kv)
    manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype=kv, index_dir=tmp_path,
                         policy="fetch")
    prompt = random_prompt(n_blocks * BLOCK + suffix, seed=7 * n_blocks + suffix)
    assert manager.add_blocks(prompt[: n_blocks * BLOCK]).blocks_stored == n_blocks
    tokens, result, stats, failure = generate_streaming(manager, prompt, max_new_tokens=8, wave_layers=1)
    assert failure is None and result.prefix_tokens == n_blocks * BLOCK
    assert isinstance(result.cache, StreamingCache)
    assert tokens == uncached(model, prompt, 8)
    assert stats.transfer_s > 0 and 0.0 <= stats.hidden_share <= 1.0
    assert all(t > 0 for t in stats.layer_ready_s)  # every layer waited for, in order of need
    assert stats.layer_ready_s == sorted(stats.layer_ready_s)


def test_streamed_layers_equal_the_fetched_cache(tmp_path, store):
    model, tokenizer = tiny("fp32")
    manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp16", index_dir=tmp_path,
                         policy="fetch")
    prompt = random_prompt(3 * BLOCK + 4, seed=3)
    manager.add_blocks(prompt[: 3 * BLOCK])
    fetched = manager.get_cache(prompt).cache
    streamed = get_cache_streaming(manager, prompt).cache
    assert streamed.get_seq_length() == 3 * BLOCK  # known before any layer arrived
    for a, b in zip(fetched.layers, streamed.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_paced_stream_gives_the_uncached_tokens(tmp_path, store):
    model, tokenizer = tiny("fp32")
    manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp16", index_dir=tmp_path,
                         policy="fetch")
    prompt = random_prompt(3 * BLOCK + 4, seed=5)
    manager.add_blocks(prompt[: 3 * BLOCK])
    tokens, result, stats, failure = generate_streaming(manager, prompt, max_new_tokens=4, pace_Bps=2e6)
    assert failure is None and stats.pace_Bps == 2e6 and result.prefix_tokens == 3 * BLOCK
    assert tokens == uncached(model, prompt, 4)
    with pytest.raises(ValueError):
        get_cache_streaming(manager, prompt, pace_Bps=-1)


def test_a_lost_chunk_falls_back_to_recompute_and_evicts(tmp_path, store):
    model, tokenizer = tiny("fp32")
    manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                         policy="fetch")
    prompt = random_prompt(2 * BLOCK + 3, seed=11)
    hashes = manager.add_blocks(prompt[: 2 * BLOCK]).hashes
    gone = next(k for k in store.sats[1].store if k[0] == hashes[1])
    del store.sats[1].store[gone]  # one chunk of block 1 is gone
    tokens, result, _stats, failure = generate_streaming(manager, prompt, max_new_tokens=6)
    assert failure == "not-found"
    assert result.describe() == "fetch 2/2 (forced: policy fetch) planned, 0 loaded: stream failed: not-found, " \
                                "2 recomputed"
    assert tokens == uncached(model, prompt, 6)
    # the one rule (kv.index.lost), as KVCManager's: the block that failed left the index and the constellation; the
    # block before it arrived whole and stays (it was evicted too, before there was one rule)
    assert manager.index.get(hashes[1]) is None and manager.index.get(hashes[0]) is not None
    assert not any(k[0] == hashes[1] for s in store.sats for k in s.store)
    assert any(k[0] == hashes[0] for s in store.sats for k in s.store)


def test_a_failed_stream_still_delivers_the_blocks_that_arrived_whole(store):
    """What the vLLM worker loads when one request's block of a shared stream fails: every other block that
    arrived whole and checks (intact_blocks), layer by layer as a stream delivers it (layer_blocks_of)."""
    geometry = codec.BlockGeometry(layers=3, kv_heads=2, head_dim=8, tokens=BLOCK)
    gen = torch.Generator().manual_seed(5)
    layers = [[(torch.randn(2, BLOCK, 8, generator=gen), torch.randn(2, BLOCK, 8, generator=gen)) for _ in range(3)]
              for _ in range(3)]
    blocks = [(hashlib.sha256(b"whole-%d" % i).digest(), codec.encode_block(kv, "fp32")) for i, kv in enumerate(layers)]
    records = store.put_blocks(blocks)
    gone = next(k for k in store.sats[2].store if k[0] == blocks[1][0])
    del store.sats[2].store[gone]  # one chunk of block 1 is gone
    stream = PrefixStream(store, records, geometry, "fp32", dtype=torch.float32, device="cpu",
                          landing=LandingBuffers()).start()
    with pytest.raises(StreamFailed) as failed:
        stream.layer_blocks(0)
    assert failed.value.reason == "not-found" and failed.value.block == blocks[1][0]
    assert stream.intact_blocks(failed.value) == [True, False, True]
    for layer in range(3):
        kv = stream.layer_blocks_of(layer, [0, 2])
        for row, b in ((0, 0), (1, 2)):
            assert torch.equal(kv[row, 0], layers[b][layer][0]) and torch.equal(kv[row, 1], layers[b][layer][1])
    # a block that arrived whole but is not the block that was stored does not count as intact either
    other = StreamFailed("corrupt", "block 2 did not check", block=blocks[2][0])
    assert stream.intact_blocks(other) == [True, False, False]
    stream.close()


def test_page_loads_keep_what_they_fetched_near_and_load_it_from_there_next_time(store):
    """kv.paged.page_loads (the vLLM worker's loads) with a host tier: a stream's blocks enter it once they are in and
    checked, and the next load of them comes from it, the satellites not asked, the same KV in the pages."""
    from skymemory.kv.paged.page_loads import PageLoad, PageLoads
    from skymemory.kv.index.radix import RadixIndex
    from skymemory.kv.transfer.tiers import BlockTiers

    geometry = codec.BlockGeometry(layers=3, kv_heads=2, head_dim=8, tokens=BLOCK)
    gen = torch.Generator().manual_seed(7)
    blocks = [(hashlib.sha256(b"near-%d" % i).digest(),
               codec.encode_block([(torch.randn(2, BLOCK, 8, generator=gen), torch.randn(2, BLOCK, 8, generator=gen))
                                   for _ in range(3)], "fp32")) for i in range(2)]
    records = store.put_blocks(blocks)
    tiers = BlockTiers(codec.block_bytes(geometry, "fp32"), "cpu", host_bytes=4 * codec.block_bytes(geometry, "fp32"))
    loads = PageLoads(store, RadixIndex(), geometry, "fp32", dtype=torch.float32, landing=LandingBuffers(),
                      tiers=tiers)

    def load(pages: list[int]) -> tuple[dict, object]:
        written: dict = {}
        loads.start([PageLoad("r", records, pages)])
        for layer in range(3):
            loads.layer(layer, lambda layer, targets, kv: written.update(
                {(layer, page): kv[i] for i, page in enumerate(targets.tolist())}))
        return written, loads.finish()

    fetched, first = load([5, 6])
    assert len(first.transfers) == 1 and loads.take_failed() == []
    assert tiers.gather([h for h, _ in blocks])[1] == ["host", "host"]
    for s in store.sats:
        s.received.clear()
    near, second = load([7, 8])
    assert second.transfers == [] and len(second.page_writes) == 1 and not any(s.received for s in store.sats)
    assert all(torch.equal(near[(layer, new)], fetched[(layer, old)]) for layer in range(3)
               for new, old in ((7, 5), (8, 6)))


def test_strict_mode_raises_the_stream_failure(tmp_path, store):
    model, tokenizer = tiny("fp32")
    manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                         strict=True, policy="fetch")
    prompt = random_prompt(BLOCK + 2, seed=5)
    hashes = manager.add_blocks(prompt[:BLOCK]).hashes
    store.sats[0].corrupt_replies = 10_000  # every chunk from satellite 0 fails CRC32C until the retries end
    store.fast.retries = 1
    with pytest.raises(StreamFailed):
        generate_streaming(manager, prompt, max_new_tokens=2)
    assert hashes


def test_no_cached_prefix_streams_nothing(tmp_path, store):
    model, tokenizer = tiny("fp32")
    manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                         policy="fetch")
    prompt = random_prompt(BLOCK + 5, seed=9)
    tokens, result, stats, failure = generate_streaming(manager, prompt, max_new_tokens=4)
    assert result.prefix_tokens == 0 and stats is None and failure is None
    assert tokens == uncached(model, prompt, 4)


def test_ttft_benchmark_records_a_failed_stream_and_recomputes(tmp_path, store):
    """bench ttft's streamed mode: a lost chunk is a recorded miss, the tokens still the uncached ones."""
    from types import SimpleNamespace

    from skymemory.bench.ttft import run_cached

    model, tokenizer = tiny("fp32")
    manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                         policy="fetch")
    prompt = random_prompt(2 * BLOCK + 3, seed=13)
    hashes = manager.add_blocks(prompt[: 2 * BLOCK]).hashes
    streamed = run_cached(manager, SimpleNamespace(text=prompt), 5, streaming=True)
    assert streamed["cached_tokens"] == 2 * BLOCK and streamed["stream_waited_s"] is not None
    assert streamed["tokens"] == uncached(model, prompt, 5)
    gone = next(k for k in store.sats[0].store if k[0] == hashes[0])
    del store.sats[0].store[gone]
    failed = run_cached(manager, SimpleNamespace(text=prompt), 5, streaming=True)
    assert failed["cached_tokens"] == 0 and failed["miss_reason"] == "stream failed: not-found"
    assert "stream_waited_s" not in failed
    assert failed["tokens"] == uncached(model, prompt, 5)


class GatedSatellite(FakeSatellite):
    """A FakeSatellite that holds every reply until the group has received `gate.need` distinct requests."""

    def __init__(self, sat: int, gate: dict) -> None:
        super().__init__(0, sat)
        self.gate = gate  # need, seen (request ids), open (threading.Event), lock
        self.held: list[tuple[bytes, tuple]] = []
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.gate["open"].is_set() and self.held:
                for reply, addr in self.held:
                    self.sock.sendto(reply, addr)
                self.held.clear()
            ready, _, _ = select.select([self.sock], [], [], 0.01)
            if not ready:
                continue
            data, addr = self.sock.recvfrom(65535)
            cmd = wire.decode_command(data)
            if cmd.cc == wire.SKYMEM_GET_CHUNKS_CC and not self.gate["open"].is_set():
                with self.gate["lock"]:
                    self.gate["seen"].add(cmd.route.request_id)  # a re-request keeps its id: counted once
                    if len(self.gate["seen"]) >= self.gate["need"]:
                        self.gate["open"].set()
                self.held += [(reply, addr) for reply in self._answer(cmd)]
                continue
            for reply in self._answer(cmd):
                self.sock.sendto(reply, addr)


def test_every_layer_is_asked_before_the_first_reply(tmp_path):
    """A prefix larger than the old fixed 8 MiB stream window: every layer's requests leave at once (the
    plain get's window), so satellites that answer nothing until they have all of them still deliver it."""
    geometry = codec.BlockGeometry(layers=8, kv_heads=8, head_dim=128, tokens=128)  # 4 MiB a block (fp16)
    gen = torch.Generator().manual_seed(3)
    blocks = []
    for b in range(3):  # 12 MiB in all: over 8 MiB
        layers = [(torch.randn(8, 128, 128, generator=gen).half(), torch.randn(8, 128, 128, generator=gen).half())
                  for _ in range(geometry.layers)]
        blocks.append((hashlib.sha256(b"gated-%d" % b).digest(), codec.encode_block(layers, "fp16")))
    prefix_bytes = sum(len(p) for _, p in blocks)
    gate = {"need": 0, "seen": set(), "open": threading.Event(), "lock": threading.Lock()}
    gate["open"].set()  # storing is not gated
    sats = [GatedSatellite(i, gate) for i in range(3)]
    for s in sats:
        s.__enter__()
    st = ConstellationBlockStore({s.me: s.address for s in sats}, [s.me for s in sats], chunk_bytes=60000,
                                 client_options={"timeout": 0.5},
                                 fast_options={"rto_s": 0.5, "deadline_s": 10, "window_bytes": 2 * prefix_bytes,
                                               "retries": 100})  # never given up on (that would free the window)
    try:
        records = st.put_blocks(blocks)
        stream = PrefixStream(st, records, geometry, "fp16", dtype=torch.float16, device="cpu",
                              landing=LandingBuffers())
        ffi, lib = require_native()
        n_blocks = ffi.new("skymem_bulk_block_t[]", len(stream.jobs))
        for b, job in zip(n_blocks, stream.jobs):
            b.chunk_count, b.n_servers = job.chunk_count, len(job.servers)
        gate["need"] = lib.skymem_bulk_get_requests(n_blocks, len(stream.jobs), stream.wave_chunks,
                                                    int(stream.wave_doubling))
        gate["open"].clear()  # from now on no satellite answers before it has every request of the stream
        stream.start()
        for layer in range(geometry.layers):
            keys, _ = stream.layer(layer)  # a timeout here: some layer was never asked
            assert keys.shape == (1, 8, 3 * 128, 128)
        assert len(gate["seen"]) == gate["need"] > geometry.layers * len(blocks)
        assert stream.error is None and stream.stats.bytes == prefix_bytes
    finally:
        st.close()
        for s in sats:
            s.__exit__()


def test_stream_window_never_costs_a_round_trip():
    """Twice rate x round trip, at least 8 MiB, a plain get's window (None) unmeasured or beyond it."""
    link = LinkEstimate("sky", clock=lambda: 0.0)
    assert stream_window(None) is None and stream_window(link) is None  # nothing measured: a get's window
    link.observe(46_000_000, 0.193 + 0.007, 0.007)  # laser: 238 MB/s x 7 ms = 1.7 MB
    assert stream_window(link) == STREAM_WINDOW_MIN
    rf = LinkEstimate("sky", clock=lambda: 0.0)
    rf.observe(46_000_000, 0.45 + 0.071, 0.071)  # rf held to a small window: 102 MB/s x 71 ms
    assert stream_window(rf) == int(2 * 46_000_000 / 0.45 * 0.071) > STREAM_WINDOW_MIN
    fast = LinkEstimate("sky", clock=lambda: 0.0)
    fast.observe(46_000_000, 0.2 + 0.071, 0.071)  # 230 MB/s x 71 ms x 2 = 33 MB: over a get's 24 MiB
    assert stream_window(fast) is None
