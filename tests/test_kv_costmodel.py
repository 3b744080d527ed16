"""Fetch-or-recompute cost model: fit, predictions and decisions on fixed inputs."""

from __future__ import annotations

import pytest

from skymemory.kv.costmodel import LinkModel, PrefillModel, decide, format_table, measure_prefill, predict

from kv_support import tiny

KV = dict(block_tokens=128, block_bytes=2_883_648, layers=22)  # TinyLlama fp16 blocks
GPU = PrefillModel(0.005, 20e-6, 2e-9, "fast accelerator")  # ~25 ms for 1k tokens
CPU = PrefillModel(0.02, 400e-6, 200e-9, "slow cpu")


def test_fit_recovers_a_quadratic():
    truth = PrefillModel(0.01, 1e-4, 3e-8)
    fitted = PrefillModel.fit([(n, truth.t(n)) for n in (16, 128, 512, 1024, 2048)])
    for n in (64, 700, 1500):
        assert fitted.t(n) == pytest.approx(truth.t(n), rel=1e-6)


def test_rf_link_and_short_prefix_recomputes():
    rf = LinkModel("rf", 100e6, 0.075)
    d = decide(rf, GPU, prompt_tokens=160, cached_blocks=1, **KV)
    assert d.action == "recompute" and d.fetch_blocks == 0 and d.predicted_s == d.recompute_s < d.fetch_all_s


def test_fast_link_and_long_prefix_fetches():
    laser = LinkModel("laser", 1.2e9, 0.008)
    d = decide(laser, CPU, prompt_tokens=2048 + 32, cached_blocks=16, **KV)
    assert d.action == "fetch" and d.fetch_blocks == 16 and d.predicted_s < d.recompute_s


def test_streaming_never_predicts_slower_than_fetch_then_compute():
    link = LinkModel("laser", 5e8, 0.01)
    for m in range(0, 9):
        args = dict(prompt_tokens=1056, fetch_blocks=m, **KV)
        assert predict(link, CPU, streaming=True, **args) <= predict(link, CPU, streaming=False, **args)


def test_slow_link_can_make_a_partial_fetch_best():
    # the link moves about as fast as the device recomputes: the first blocks (cheap to compute without
    # context) are recomputed by nobody -- check the decision is one of the three and consistent
    link = LinkModel("slow", 30e6, 0.05)
    d = decide(link, CPU, prompt_tokens=1056, cached_blocks=8, **KV)
    assert d.action in {"fetch", "partial", "recompute"}
    assert d.predicted_s == min(predict(link, CPU, prompt_tokens=1056, fetch_blocks=m, **KV) for m in range(9))
    assert "| decision |" in format_table([("x", 1024, 32, d)])


def test_bad_inputs():
    with pytest.raises(ValueError):
        LinkModel("x", 0, 0.1)
    with pytest.raises(ValueError):
        decide(LinkModel("x", 1e6, 0.1), CPU, prompt_tokens=100, cached_blocks=1, **KV)  # 128 > 100
    with pytest.raises(ValueError):
        PrefillModel.fit([(1, 1.0), (2, 2.0)])


def test_measure_prefill_on_a_model():
    model, _ = tiny("fp32")
    m = measure_prefill(model, lengths=(8, 16, 32), repeats=1)
    assert m.t(32) >= m.t(8) >= 0 and m.device == "cpu"
