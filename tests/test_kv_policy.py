"""Fetch or recompute by default: decisions from given rates, the link estimate, calibration, and the manager."""

from __future__ import annotations

import math

import pytest
import torch

from skymemory.kv.decide import calibration
from skymemory.kv.transfer import landing
from skymemory.kv.decide.costmodel import LinkModel, PrefillModel, RebuildModel
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.decide.policy import FetchPolicy, LinkEstimate
from skymemory.kv.hf.report import compare_generation
from skymemory.store.contract import BlockMiss
from skymemory.store.local import LocalBlockStore

from kv_support import MemoryBlockStore, random_prompt, tiny

BLOCK = 16
TINYLLAMA = dict(block_tokens=128, block_bytes=2_883_648, layers=22)  # fp16 blocks
# A GPU running a small model: launch-bound prefill, about 16 ms whatever the length (issue 12's H100 figures).
H100_TINYLLAMA = PrefillModel(0.0155, 0.3e-6, 0.0, "cuda", d=0.5e-6)
# Eight small SMs (the MPS-capped H100 of GPU_NOTES, an Orin-class budget): 135 ms for 2,048 tokens.
ORIN_TINYLLAMA = PrefillModel(0.004, 62e-6, 1e-9, "cuda")
FAST_REBUILD = RebuildModel(0.0003, 30e9)  # pinned copy + relayout on a GPU
LASER = LinkModel("laser", 0.9e9, 0.0065)


def _decide(prefill, link, prompt_tokens, cached_blocks, rebuild=FAST_REBUILD, streaming=False, split=False):
    rates = calibration.DeviceRates(prefill, rebuild, [], {}, 0.0)
    estimate = LinkEstimate(link.name)
    estimate.observe(10_000_000, link.rtt_s + 10_000_000 / link.rate_Bps, link.rtt_s)
    return FetchPolicy().decide(rates, estimate, prompt_tokens=prompt_tokens, cached_blocks=cached_blocks,
                                streaming=streaming, split=split, **TINYLLAMA)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("prefix", [512, 1024, 2048])
def test_a_small_model_on_a_big_gpu_recomputes(prefix, split):
    # a split would pay the launch-bound forward twice (the first blocks, then the suffix): recompute all at once
    d = _decide(H100_TINYLLAMA, LASER, prefix + 32, prefix // 128, split=split)
    assert d.action == "recompute" and d.fetch_blocks == 0 and d.predicted_s == d.recompute_s < d.fetch_all_s


def test_a_link_as_fast_as_the_device_splits_unless_the_caller_cannot():
    # Orin-class compute (8 ms a block) against a link that moves a TinyLlama block in as long
    link = LinkModel("balanced", TINYLLAMA["block_bytes"] / ORIN_TINYLLAMA.forward_s(128), 0.0)
    d = _decide(ORIN_TINYLLAMA, link, 2048 + 32, 16, split=True)
    assert d.action == "split" and 6 <= d.split_at <= 10 and d.split_at + d.fetch_blocks == 16
    assert d.predicted_s < min(d.recompute_s, d.fetch_all_s)
    assert d.describe() == f"split {d.split_at}+{16 - d.split_at}/16"
    engine = _decide(ORIN_TINYLLAMA, link, 2048 + 32, 16)  # vLLM's connector loads a prefix, computes the rest
    assert engine.action != "split" and engine.split_at == 0 and engine.predicted_s > d.predicted_s
    for mode, loaded in (("fetch", 16), ("recompute", 0)):  # forced modes are what they were
        forced = FetchPolicy(mode).decide(None, LinkEstimate("x"), prompt_tokens=2048 + 32, cached_blocks=16,
                                          streaming=False, split=True, **TINYLLAMA)
        assert (forced.action, forced.fetch_blocks, forced.split_at) == (mode, loaded, 0)


def test_a_small_gpu_fetches_a_long_prefix_over_laser():
    d = _decide(ORIN_TINYLLAMA, LASER, 2048 + 32, 16)
    assert d.action == "fetch" and d.fetch_blocks == 16 and d.predicted_s < d.recompute_s


def test_a_big_model_fetches_from_ram_but_not_over_a_slow_link():
    llama3 = dict(block_tokens=128, block_bytes=16_777_280, layers=32)  # Llama-3-8B fp16 blocks
    prefill = PrefillModel(0.02, 20e-6, 1e-9, "cuda")  # ~0.6 s for 16K tokens
    rates = calibration.DeviceRates(prefill, FAST_REBUILD, [], {}, 0.0)
    for rate, action in ((20e9, "fetch"), (0.1e9, "recompute")):
        link = LinkEstimate("x")
        link.observe(100_000_000, 100_000_000 / rate, 0.0)
        d = FetchPolicy().decide(rates, link, prompt_tokens=16384 + 32, cached_blocks=128, streaming=False, **llama3)
        assert d.action == action, (rate, d)


def test_forced_and_cold_start_decisions_say_why():
    link = LinkEstimate("sky")
    args = dict(prompt_tokens=1056, cached_blocks=8, streaming=False, **TINYLLAMA)
    forced = FetchPolicy("recompute").decide(None, link, **args)
    assert (forced.action, forced.fetch_blocks, forced.reason) == ("recompute", 0, "forced: policy recompute")
    assert FetchPolicy("auto").decide(None, link, mode="fetch", **args).fetch_blocks == 8
    cold = FetchPolicy("auto").decide(None, link, **args)  # nothing measured: the fetch is the measurement
    assert cold.action == "fetch" and "no transfer measured" in cold.reason and math.isnan(cold.predicted_s)
    assert cold.describe() == f"fetch 8/8 ({cold.reason})"
    with pytest.raises(ValueError, match="fetch policy"):
        FetchPolicy("sometimes")


def test_the_link_estimate_separates_round_trip_and_goodput():
    link = LinkEstimate("sky", window=3)
    assert link.model() is None
    link.observe(0, 1.0)  # nothing moved: ignored
    for _ in range(5):
        link.observe(100_000_000, 0.01 + 0.1, 0.01)  # 100 MB in 100 ms after a 10 ms round trip
    model = link.model()
    assert link.samples == 3 and model.rtt_s == pytest.approx(0.01) and model.rate_Bps == pytest.approx(1e9)


def test_an_old_link_estimate_is_measured_again():
    """A store judged too slow is not judged so for ever: once its transfers age out, auto fetches again."""
    now = [0.0]
    link = LinkEstimate("sky", max_age_s=60.0, clock=lambda: now[0])
    link.observe(1_000_000, 10.0, 0.5)  # a very slow transfer: auto would recompute
    rates = calibration.DeviceRates(H100_TINYLLAMA, FAST_REBUILD, [], {}, 0.0)  # a GPU: recompute is cheap
    args = dict(prompt_tokens=1056, cached_blocks=8, streaming=False, **TINYLLAMA)
    assert FetchPolicy().decide(rates, link, **args).action == "recompute"
    now[0] = 59.0
    assert link.samples == 1
    now[0] = 61.0
    assert link.samples == 0 and link.model() is None
    d = FetchPolicy().decide(rates, link, **args)
    assert (d.action, d.fetch_blocks) == ("fetch", 8) and "measures the link" in d.reason
    with pytest.raises(ValueError, match="max_age_s"):
        LinkEstimate("sky", max_age_s=0)


def test_the_compute_fit_learns_the_cost_of_a_context():
    truth = PrefillModel(0.01, 1e-4, 3e-8, d=2e-6)
    points = [(n, 0, truth.forward_s(n)) for n in (16, 128, 512, 1024)]
    points += [(32, ctx, truth.forward_s(32, ctx)) for ctx in (256, 1024, 2048)]
    fitted = PrefillModel.fit(points)
    for new, ctx in ((64, 0), (32, 4096), (700, 300)):
        assert fitted.forward_s(new, ctx) == pytest.approx(truth.forward_s(new, ctx), rel=1e-6)
    assert fitted.compute_s(1056, 1024) == pytest.approx(truth.forward_s(32, 1024))


def test_calibration_measures_once_and_is_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYMEMORY_CACHE", str(tmp_path))
    model, _ = tiny("fp32")
    rates = calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=BLOCK, budget_s=0.005, repeats=1)
    assert rates.prefill.t(512) > 0 and rates.rebuild.rate_Bps > 0 and rates.points
    assert any(ctx > 0 for _, ctx, _ in rates.points)  # forwards over a context were timed too

    def must_not_run(*args, **kwargs):
        raise AssertionError("the saved calibration should have been used")

    monkeypatch.setattr(calibration, "calibrate", must_not_run)
    monkeypatch.setattr(calibration, "recheck", lambda *args, **kwargs: None)  # timing-free: test_kv_calibration
    again = calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=BLOCK)
    assert again.prefill == rates.prefill and again.rebuild == rates.rebuild
    with pytest.raises(AssertionError, match="saved calibration"):
        calibration.load_or_calibrate(model, kv_format="int8", block_tokens=BLOCK)  # another key: measured


def _auto_manager(tmp_path, prefill):
    model, tokenizer = tiny("fp32")
    rates = calibration.DeviceRates(prefill, RebuildModel(0.0, 10e9), [], {}, 0.0)
    return KVCManager(model, tokenizer, MemoryBlockStore(), block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                      device_rates=rates)


def test_the_manager_recomputes_when_recomputing_is_faster(tmp_path):
    manager = _auto_manager(tmp_path, PrefillModel(1e-6, 0.0, 0.0, "free compute"))
    prompt = random_prompt(4 * BLOCK + 3, seed=31)
    manager.add_blocks(prompt)
    first = manager.get_cache(prompt)  # nothing measured yet: fetches, and measures the store
    assert first.prefix_tokens == 4 * BLOCK and first.decision.action == "fetch" and manager.link.samples == 1
    second = manager.get_cache(prompt)
    assert second.decision.action == "recompute" and second.prefix_tokens == 0
    assert second.cache.get_seq_length() == 0 and second.miss_reason is None and second.bytes_retrieved == 0
    assert second.decision.inputs["link"] == "MemoryBlockStore"
    comparison = compare_generation(manager, prompt, new_tokens=6)  # still the uncached tokens
    assert comparison.cached == comparison.reference


def test_the_manager_fetches_when_computing_is_slow(tmp_path):
    manager = _auto_manager(tmp_path, PrefillModel(0.01, 0.01, 0.0, "slow compute"))  # 10 ms a token
    prompt = random_prompt(4 * BLOCK + 3, seed=32)
    manager.add_blocks(prompt)
    for _ in range(3):
        result = manager.get_cache(prompt)
        assert result.decision.action == "fetch" and result.prefix_tokens == 4 * BLOCK
    assert result.decision.reason == "predicted" and result.decision.predicted_s < result.decision.recompute_s
    assert manager.get_cache(prompt, policy="recompute").prefix_tokens == 0  # a caller can force it
    assert manager.get_cache(random_prompt(BLOCK + 3, seed=33)).decision is None  # nothing cached: nothing decided


def test_landing_buffers_are_reused_and_wait_for_their_last_copy():
    buffers = landing.LandingBuffers()
    first = buffers.lease(2, 1000)
    assert first.raw.shape == (2, 1000)

    class Copy:  # a stand-in for the CUDA event of the device copy that reads the buffer
        waited = False

        def synchronize(self):
            Copy.waited = True

    buffers.give_back(first, Copy())
    again = buffers.lease(1, 1500)  # fits in the returned buffer: the same memory, once its copy is done
    assert again.buffer.data_ptr() == first.buffer.data_ptr() and Copy.waited
    bigger = buffers.lease(3, 1000)  # does not fit what is free: new memory
    assert bigger.buffer.data_ptr() != first.buffer.data_ptr()


def test_landing_stops_at_the_first_missing_block():
    store = LocalBlockStore(chunk_bytes=100)
    records = [store.put_block(bytes([i]) * 32, bytes([i + 1]) * 300) for i in range(3)]
    store.evict_block(records[1])
    raw = torch.zeros((3, 300), dtype=torch.uint8)
    arrival = landing.land(store, records, raw)
    assert arrival.landed.complete == 1 and isinstance(arrival.landed.miss, BlockMiss)
    assert arrival.landed.miss.reason == "not-found"
    assert bytes(raw[0].numpy()) == b"\1" * 300 and bytes(raw[1].numpy()) == b"\0" * 300
    assert arrival.bytes == 300 and arrival.seconds >= 0


def test_a_failed_calibration_fetches_and_says_why(tmp_path, monkeypatch):
    model, tokenizer = tiny("fp32")
    manager = KVCManager(model, tokenizer, MemoryBlockStore(), block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path)

    def broken(*args, **kwargs):
        raise ValueError("need forward timings at three lengths or more")

    monkeypatch.setattr("skymemory.kv.hf.manager.load_or_calibrate", broken)
    prompt = random_prompt(3 * BLOCK + 3, seed=34)
    manager.add_blocks(prompt)
    manager.get_cache(prompt)  # the first fetch measures the link; the next request needs the device's rates
    result = manager.get_cache(prompt)
    assert result.prefix_tokens == 3 * BLOCK and result.decision.action == "fetch"
    assert result.decision.reason.startswith("calibration failed (ValueError: need forward timings")
