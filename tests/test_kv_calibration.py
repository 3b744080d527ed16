"""Device rates: the fit of the forward over a cache, the calibration key, and re-checking saved rates."""

from __future__ import annotations

import json
import logging
import types

import pytest
import torch

from skymemory.kv import calibration
from skymemory.kv.costmodel import LinkModel, PrefillModel, RebuildModel
from skymemory.kv.manager import KVCManager
from skymemory.kv.policy import FetchPolicy, LinkEstimate

from kv_support import MemoryBlockStore, tiny

TINYLLAMA = dict(block_tokens=128, block_bytes=2_883_648, layers=22)  # fp16 blocks

# TinyLlama fp16 on a big GPU (the shape measured on an H200): prefill launch-bound, 15 ms for 16 tokens
# and 27 ms for 2,048; a 32-token forward over a cache costs 24-25 ms whatever the context (the cache's
# kernels in every layer), about as much as the whole prefill.
H200_PREFILL_MS = {16: 15.0, 32: 15.2, 64: 15.3, 128: 15.5, 256: 16.0, 512: 17.0, 1024: 19.0, 2048: 27.0}
H200_SUFFIX_MS = {64: 24.0, 128: 24.0, 256: 24.2, 512: 24.4, 1024: 24.7, 2048: 25.0}

# embedded-tiny on this project's 2-core CPU (1 torch thread): `calibration.calibrate` as it measured it.
CPU_PREFILL_MS = {16: 6.0, 32: 5.5, 64: 7.1, 128: 9.7, 256: 15.2, 512: 36.5, 1024: 77.7, 2048: 175.3}
CPU_SUFFIX_MS = {64: 6.7, 128: 6.3, 256: 6.4, 512: 7.8, 1024: 8.8, 2048: 9.0}


def _points(prefill_ms: dict, suffix_ms: dict) -> list:
    return ([(n, 0, ms / 1e3) for n, ms in prefill_ms.items()]
            + [(calibration.SUFFIX_TOKENS, ctx, ms / 1e3) for ctx, ms in suffix_ms.items()])


@pytest.mark.parametrize("prefill_ms, suffix_ms, tolerance", [(H200_PREFILL_MS, H200_SUFFIX_MS, 0.10),
                                                             (CPU_PREFILL_MS, CPU_SUFFIX_MS, 0.25)],
                         ids=["launch-bound-gpu", "this-cpu"])
def test_a_suffix_over_a_cache_is_predicted_as_calibration_measured_it(prefill_ms, suffix_ms, tolerance):
    """The forward the fetch leaves to do (a short suffix over the cached prefix) is what a fetch saves
    against: the fit must reproduce the measured ones, not split their cost with the plain prefills."""
    fitted = PrefillModel.fit(_points(prefill_ms, suffix_ms))
    for ctx, ms in suffix_ms.items():
        assert fitted.forward_s(calibration.SUFFIX_TOKENS, ctx) * 1e3 == pytest.approx(ms, rel=tolerance), ctx
    for n, ms in prefill_ms.items():
        assert fitted.t(n) * 1e3 == pytest.approx(ms, rel=0.25), n


@pytest.mark.parametrize("prefix", [1024, 2048])
def test_a_launch_bound_gpu_recomputes_rather_than_fetch_from_host_memory(prefix):
    fitted = PrefillModel.fit(_points(H200_PREFILL_MS, H200_SUFFIX_MS), device="cuda")
    rates = calibration.DeviceRates(fitted, RebuildModel(0.0003, 30e9), [], {}, 0.0)
    link = LinkEstimate("host")
    host = LinkModel("host", 6e9, 0.0005)  # the host tier's measured rate
    link.observe(10_000_000, host.rtt_s + 10_000_000 / host.rate_Bps, host.rtt_s)
    decision = FetchPolicy().decide(rates, link, prompt_tokens=prefix + 32, cached_blocks=prefix // 128,
                                    streaming=False, **TINYLLAMA)
    assert decision.action == "recompute", decision


def _fake_cuda(monkeypatch, multiprocessors: int):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: types.SimpleNamespace(multi_processor_count=multiprocessors))


def test_the_key_names_the_multiprocessors_and_the_mps_share(monkeypatch):
    """Under CUDA MPS the device name is the same whatever the cap: a capped run must not reuse the
    whole GPU's rates."""
    model, _ = tiny("fp32")
    on_gpu = types.SimpleNamespace(config=model.config, device=torch.device("cuda", 0), dtype=torch.float16)
    monkeypatch.delenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", raising=False)
    _fake_cuda(monkeypatch, 132)
    whole = calibration.calibration_key(on_gpu, "fp16", 128)
    assert whole["multiprocessors"] == 132 and whole["mps_thread_percentage"] is None
    monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "25")
    capped = calibration.calibration_key(on_gpu, "fp16", 128)  # MPS that does not lower the count
    assert capped["mps_thread_percentage"] == "25" and capped["device"] == whole["device"]
    _fake_cuda(monkeypatch, 33)
    fewer = calibration.calibration_key(on_gpu, "fp16", 128)  # MPS that does
    assert len({calibration._path(k) for k in (whole, capped, fewer)}) == 3
    assert "multiprocessors" not in calibration.calibration_key(model, "fp16", 128)  # a CPU: its threads say it


def _saved_rates(tmp_path, monkeypatch, model, prefill_ms, suffix_ms):
    """Save rates of the given points for `model` as load_or_calibrate does; return them."""
    monkeypatch.setenv("SKYMEMORY_CACHE", str(tmp_path))
    points = _points(prefill_ms, suffix_ms)
    given = calibration.DeviceRates(PrefillModel.fit(points), RebuildModel(0.0, 1e10), [list(p) for p in points],
                                    calibration.calibration_key(model, "fp16", 16), 1.0)
    monkeypatch.setattr(calibration, "calibrate", lambda *args, **kwargs: given)
    calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)
    return given


def _scale_saved_times(model, factor: float) -> None:
    path = calibration._path(calibration.calibration_key(model, "fp16", 16))
    data = json.loads(path.read_text())
    data["points"] = [[n, ctx, seconds * factor] for n, ctx, seconds in data["points"]]
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("factor, measured_again", [(7.0, True), (1 / 7, True), (1.5, False), (0.6, False),
                                                    (100.0, True)])  # none <= 0.3 s: the smallest is timed
def test_a_saved_calibration_is_timed_again_when_read(tmp_path, monkeypatch, caplog, factor, measured_again):
    model, _ = tiny("fp32")
    given = _saved_rates(tmp_path, monkeypatch, model, CPU_PREFILL_MS, CPU_SUFFIX_MS)
    _scale_saved_times(model, factor)  # as if it was measured on a machine `factor` times slower
    now = {(n, ctx): seconds for n, ctx, seconds in given.points}
    timed = []

    def time_now(model, ids, new, context, repeats):  # this host's times are the unscaled ones
        timed.append((new, context))
        return now[(new, context)]

    monkeypatch.setattr(calibration, "_time_forward", time_now)
    calls = []
    monkeypatch.setattr(calibration, "calibrate", lambda *args, **kwargs: calls.append(1) or given)
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.calibration"):
        rates = calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)
    checked = max((n for n, ms in CPU_PREFILL_MS.items() if ms * factor <= 300), default=16)  # largest <= 0.3 s
    assert timed[0] == (checked, 0)
    assert bool(calls) == measured_again
    if measured_again:
        assert rates is given
        ms = CPU_PREFILL_MS[checked]
        assert (f"cached prefill of {checked:,} tokens {ms * factor:,.0f} ms, measured now {ms:,.0f} ms: "
                "re-measuring") in caplog.text
    else:
        assert timed == [(checked, 0), (32, checked)] and not caplog.text  # the suffix point over it agreed too
        assert rates.points[0][2] == pytest.approx(0.006 * factor)


def test_absurd_saved_figures_are_measured_again_for_real(tmp_path, monkeypatch, caplog):
    """Saved figures no forward can match (a microsecond for 64 tokens): timing the model now disagrees,
    however loaded the machine is."""
    model, _ = tiny("fp32")
    given = _saved_rates(tmp_path, monkeypatch, model, {16: 1.0, 32: 1.0, 64: 1.0}, {64: 1.0})
    _scale_saved_times(model, 1e-3)  # 1 us each
    calls = []
    monkeypatch.setattr(calibration, "calibrate", lambda *args, **kwargs: calls.append(1) or given)
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.calibration"):
        calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)
    assert calls and "cached prefill of 64 tokens 0.001 ms, measured now" in caplog.text


def _observing_manager(tmp_path, monkeypatch):
    model, tokenizer = tiny("fp32")
    rates = calibration.DeviceRates(PrefillModel(0.01, 1e-4, 0.0, "given"), RebuildModel(0.0, 1e10), [], {}, 0.0)
    manager = KVCManager(model, tokenizer, MemoryBlockStore(), block_tokens=16, kv_dtype="fp32", index_dir=tmp_path,
                         device_rates=rates)
    measured = calibration.DeviceRates(PrefillModel(0.001, 1e-5, 0.0, "measured"), RebuildModel(0.0, 1e10), [], {},
                                       0.0)
    calls = []

    def measure(model, **kwargs):
        calls.append(kwargs)
        return measured

    monkeypatch.setattr("skymemory.kv.manager.load_or_calibrate", measure)
    return manager, rates, measured, calls


def test_forwards_3x_off_the_rates_twice_in_a_row_measure_them_again(tmp_path, monkeypatch, caplog):
    manager, rates, measured, calls = _observing_manager(tmp_path, monkeypatch)
    predicted = rates.prefill.forward_s(1024)  # 112 ms
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.manager"):
        manager.observe_forward(1024, 0, predicted / 3)
        assert manager.device_rates() is rates and not calls  # one forward off: could be a hiccup
        manager.observe_forward(32, 1024, rates.prefill.forward_s(32, 1024) * 3)
    assert "2 in a row more than 2x off" in caplog.text
    # measured again at once (by the caller that observed, outside any request) and saved
    assert calls == [dict(kv_format="fp32", block_tokens=16, refresh=True)]
    assert manager.device_rates() is measured and len(calls) == 1  # once


@pytest.mark.parametrize("factors", [(1.9, 0.55, 1.5, 1 / 1.9), (3.0, 1.0, 3.0, 1.0)])
def test_forwards_within_2x_or_not_in_a_row_keep_the_rates(tmp_path, monkeypatch, factors):
    manager, rates, _, calls = _observing_manager(tmp_path, monkeypatch)
    for factor in factors:
        manager.observe_forward(512, 0, rates.prefill.forward_s(512) * factor)
    assert manager.device_rates() is rates and not calls
