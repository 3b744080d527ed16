"""Device rates: the fit of the forward over a cache, the calibration key, the checks before saving, re-checking
saved rates, and re-measuring them (never inside a timed round)."""

from __future__ import annotations

import dataclasses
import json
import logging
import types

import pytest
import torch

from skymemory.bench.ttft import RateWatch, describe_rates
from skymemory.kv.decide import calibration
from skymemory.kv.decide.costmodel import LinkModel, PrefillModel, RebuildModel
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.decide.policy import FetchPolicy, LinkEstimate

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


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch):
    """What load_or_calibrate keeps per process (rates loaded, warnings given) starts empty in each test."""
    monkeypatch.setattr(calibration, "_KNOWN", {})
    monkeypatch.setattr(calibration, "_WARNED", set())


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
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.decide.calibration"):
        rates = calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)
    checked = max((n for n, ms in CPU_PREFILL_MS.items() if ms * factor <= 300), default=16)  # largest <= 0.3 s
    assert timed[0] == (checked, 0)
    assert bool(calls) == measured_again
    if measured_again:
        assert rates is given
        ms = CPU_PREFILL_MS[checked]
        assert (f"cached prefill of {checked:,} tokens {ms * factor:,.0f} ms, measured now {ms:,.0f} ms: "
                "re-measuring") in caplog.text
    else:  # the suffix over it, the smallest and a middle prefill agreed too
        assert timed == [(checked, 0), (32, checked), (16, 0), (256, 0)] and not caplog.text
        assert rates.points[0][2] == pytest.approx(0.006 * factor)


def test_absurd_saved_figures_are_measured_again_for_real(tmp_path, monkeypatch, caplog):
    """Saved figures no forward can match (a microsecond for 64 tokens): timing the model now disagrees,
    however loaded the machine is."""
    model, _ = tiny("fp32")
    given = _saved_rates(tmp_path, monkeypatch, model, {16: 1.0, 32: 1.1, 64: 1.3}, {64: 1.2})
    _scale_saved_times(model, 1e-3)  # 1 us each
    calls = []
    monkeypatch.setattr(calibration, "calibrate", lambda *args, **kwargs: calls.append(1) or given)
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.decide.calibration"):
        calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)
    assert calls and "cached prefill of 64 tokens 0.0013 ms, measured now" in caplog.text


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

    monkeypatch.setattr("skymemory.kv.hf.manager.load_or_calibrate", measure)
    return manager, rates, measured, calls


def test_forwards_3x_off_the_rates_twice_in_a_row_measure_them_again(tmp_path, monkeypatch, caplog):
    manager, rates, measured, calls = _observing_manager(tmp_path, monkeypatch)
    predicted = rates.prefill.forward_s(1024)  # 112 ms
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.hf.manager"):
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


def test_a_failed_measurement_is_not_retried_inside_a_request(tmp_path, monkeypatch, caplog):
    """A re-measurement that fails keeps the rates and starts the count again: stale rates would make the next
    decision (inside a request's timed get_cache) measure again."""
    manager, rates, _, _ = _observing_manager(tmp_path, monkeypatch)
    calls = []

    def broken(model, **kwargs):
        calls.append(kwargs)
        raise RuntimeError("no device")

    monkeypatch.setattr("skymemory.kv.hf.manager.load_or_calibrate", broken)
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.hf.manager"):
        for _ in range(2):
            manager.observe_forward(512, 0, rates.prefill.forward_s(512) * 3)
    assert len(calls) == 1 and "keeping them" in caplog.text
    assert manager.device_rates() is rates and len(calls) == 1  # what plan() calls: nothing measured


# ---------------------------------------------------------------------------- checks before saving

# The demo's calibration (issue 39): 128 tokens 7.8 s after 64 tokens 0.9 s, and 256 tokens faster again.
NOT_INCREASING_MS = {16: 700.0, 32: 800.0, 64: 900.0, 128: 7800.0, 256: 2000.0}


def _rates(prefill_ms: dict, suffix_ms: dict, model=None, prefill: PrefillModel | None = None):
    points = _points(prefill_ms, suffix_ms)
    key = calibration.calibration_key(model, "fp16", 16) if model is not None else {}
    return calibration.DeviceRates(prefill or PrefillModel.fit(points), RebuildModel(0.0, 1e10),
                                   [list(p) for p in points], key, 1.0, [[1000, 0.001], [4000, 0.002]])


@pytest.mark.parametrize("prefill_ms, suffix_ms", [(H200_PREFILL_MS, H200_SUFFIX_MS), (CPU_PREFILL_MS, CPU_SUFFIX_MS),
                                                   ({16: 10.0, 32: 9.0, 64: 12.0, 128: 16.0}, {64: 11.0, 128: 10.0})],
                         ids=["launch-bound-gpu", "this-cpu", "10%-faster"])
def test_measured_calibrations_pass_the_checks(prefill_ms, suffix_ms):
    assert calibration.problems(_rates(prefill_ms, suffix_ms)) is None


@pytest.mark.parametrize("prefill_ms, suffix_ms, problem", [
    (NOT_INCREASING_MS, {}, "prefill of 128 tokens 7,800 ms is 8.7x the prefill of 64 tokens 900 ms (at most 4x)"),
    ({16: 10.0, 32: 20.0, 64: 40.0, 128: 30.0}, {}, "prefill of 128 tokens 30 ms is faster than the prefill of 64"),
    (CPU_PREFILL_MS, {64: 9.0, 128: 5.0}, "32-token forward over 128 tokens 5 ms is faster than the 32-token "
                                          "forward over 64 tokens 9 ms"),
    (CPU_PREFILL_MS, {64: 6.0, 256: 60.0}, "32-token forward over 256 tokens 60 ms is 10.0x the 32-token forward "
                                           "over 64 tokens 6 ms (at most 4x)"),
    ({16: 10.0, 32: 0.0, 64: 40.0}, {}, "a prefill of 32 tokens timed 0.0 s"),
    ({16: 10.0, 32: float("nan"), 64: 40.0}, {}, "a prefill of 32 tokens timed nan s"),
    ({16: 10.0, 32: 20.0}, {64: 5.0}, "2 prefill lengths timed, the fit needs 3"),
], ids=["growing-faster-than-quadratic", "decreasing", "suffix-decreasing", "suffix-faster-than-linear", "zero",
        "nan", "two-lengths"])
def test_calibrations_that_no_model_explains_are_refused(prefill_ms, suffix_ms, problem):
    points = _points(prefill_ms, suffix_ms)
    rates = calibration.DeviceRates(PrefillModel(0.01, 1e-5, 0.0), RebuildModel(0.0, 1e10), points, {}, 1.0)
    assert problem in calibration.problems(rates)


def test_a_fit_more_than_half_off_a_point_is_refused():
    good = _rates(CPU_PREFILL_MS, CPU_SUFFIX_MS)
    assert calibration.fit_error(good.prefill, good.points) < 0.25
    flat = dataclasses.replace(good, prefill=PrefillModel(0.052, 0.0, 0.0))  # 52 ms whatever the length
    assert calibration.problems(flat) == ("the fit is 845% off the prefill of 32 tokens (5.5 ms measured, 52 ms "
                                          "fitted; at most 50%)")


def test_a_non_increasing_calibration_is_refused_not_saved(tmp_path, monkeypatch, caplog):
    """Issue 39: the demo saved 128 tokens 7.8 s after 64 tokens 0.9 s. Saving it is refused; measured, it is
    measured again (ATTEMPTS in all), then used by this process only, with one warning, and never written."""
    monkeypatch.setenv("SKYMEMORY_CACHE", str(tmp_path))
    model, _ = tiny("fp32")
    bad = _rates(NOT_INCREASING_MS, {}, model)
    with pytest.raises(calibration.CalibrationRefused, match="128 tokens 7,800 ms is 8.7x"):
        calibration.save(bad)
    assert not list(tmp_path.rglob("*.json"))

    calls = []
    monkeypatch.setattr(calibration, "calibrate", lambda *args, **kwargs: calls.append(1) or bad)
    with caplog.at_level(logging.INFO, logger="skymemory.kv.decide.calibration"):
        rates = calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)
        again = calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)  # another manager
    assert len(calls) == calibration.ATTEMPTS and not list(tmp_path.rglob("*.json"))
    assert "128 tokens 7,800 ms" in rates.problem and again is rates
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "for this process only, unsaved" in warnings[0].getMessage()
    assert "calibrated in" not in caplog.text  # no figures from the refused fit
    assert "prefill of 1,024" not in describe_rates(rates) and "failed their checks" in describe_rates(rates)


def test_a_refused_measurement_is_measured_again(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SKYMEMORY_CACHE", str(tmp_path))
    model, _ = tiny("fp32")
    results = [_rates(NOT_INCREASING_MS, {}, model), _rates(CPU_PREFILL_MS, CPU_SUFFIX_MS, model)]
    monkeypatch.setattr(calibration, "calibrate", lambda *args, **kwargs: results.pop(0))
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.decide.calibration"):
        rates = calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)
    assert not results and rates.problem is None and not caplog.text
    saved = json.loads(calibration._path(rates.key).read_text())
    assert saved["points"] == rates.points and saved["rebuild_points"] == rates.rebuild_points


def test_a_saved_non_increasing_calibration_is_measured_again(tmp_path, monkeypatch, caplog):
    """A file that fails the checks (written before them, or by hand) is stale: measured again, not re-timed."""
    monkeypatch.setenv("SKYMEMORY_CACHE", str(tmp_path))
    model, _ = tiny("fp32")
    path = calibration._path(calibration.calibration_key(model, "fp16", 16))
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_rates(NOT_INCREASING_MS, {}, model).as_dict()))
    good = _rates(CPU_PREFILL_MS, CPU_SUFFIX_MS, model)
    calls = []
    monkeypatch.setattr(calibration, "calibrate", lambda *args, **kwargs: calls.append(1) or good)
    monkeypatch.setattr(calibration, "_time_forward", lambda *args: pytest.fail("a stale file is not re-timed"))
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.decide.calibration"):
        rates = calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)
    assert rates is good and calls == [1]
    assert "the saved points fail the checks: prefill of 128 tokens 7,800 ms is 8.7x" in caplog.text
    assert json.loads(path.read_text())["points"] == good.points


def test_a_stale_file_warns_once_per_process(tmp_path, monkeypatch, caplog):
    """Several managers (or calls) of one model: the file is re-timed and the warning given once."""
    model, _ = tiny("fp32")
    given = _saved_rates(tmp_path, monkeypatch, model, CPU_PREFILL_MS, CPU_SUFFIX_MS)
    now = {(n, ctx): seconds for n, ctx, seconds in given.points}
    timed = []
    monkeypatch.setattr(calibration, "_time_forward",
                        lambda model, ids, new, context, repeats: timed.append(1) or now[(new, context)])
    monkeypatch.setattr(calibration, "calibrate", lambda *args, **kwargs: given)
    with caplog.at_level(logging.WARNING, logger="skymemory.kv.decide.calibration"):
        for _ in range(3):
            _scale_saved_times(model, 7.0)  # another process saved rates of a loaded machine
            assert calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16) is given
            calibration.load_or_calibrate(model, kv_format="fp16", block_tokens=16)  # unchanged file: as loaded
    assert len(timed) == 3  # one point each time: the first disagreed
    assert len([r for r in caplog.records if "re-measuring" in r.getMessage()]) == 1


@pytest.mark.parametrize("factor, chosen", [(1.0, [(2048, 0), (32, 2048), (16, 0), (256, 0)]),
                                            (10.0, [(256, 0), (32, 256), (16, 0), (64, 0)]),
                                            (40.0, [(64, 0), (32, 64), (16, 0), (32, 0)]),
                                            (45.0, [(32, 0), (32, 256), (16, 0)]),  # none over 32: the cheap one
                                            (100.0, [(16, 0)])])
def test_a_recheck_times_a_small_a_middle_and_the_largest_cheap_prefill_and_a_suffix(factor, chosen):
    points = [[n, ctx, s * factor] for n, ctx, s in _points(CPU_PREFILL_MS, CPU_SUFFIX_MS)]
    assert [tuple(p[:2]) for p in calibration.recheck_points(points)] == chosen


def test_a_rebuild_no_slower_for_4_blocks_than_for_1_gets_a_bounded_rate():
    """The demo printed "rebuild 8650944 GB/s": 4 blocks timed no slower than 1 divided by a nanosecond."""
    block = 2_883_648
    model = calibration.fit_rebuild([[block, 3.0e-4], [4 * block, 2.9e-4]])
    assert model.rate_Bps == pytest.approx(3 * block / (calibration.NOISE * 2.9e-4))  # 149 GB/s
    assert model.seconds(block) == pytest.approx(3.0e-4)
    exact = calibration.fit_rebuild([[block, 1e-3], [4 * block, 2.5e-3]])
    assert exact.seconds(block) == pytest.approx(1e-3) and exact.seconds(4 * block) == pytest.approx(2.5e-3)


# ---------------------------------------------------------------------------- bench ttft: between rounds only


def test_the_benchmark_measures_rates_again_between_rounds_only_and_once(tmp_path, monkeypatch, caplog):
    other, _, _, _ = _observing_manager(tmp_path / "other", monkeypatch)
    manager, rates, measured, calls = _observing_manager(tmp_path, monkeypatch)  # what both measure with
    other._device_rates = rates
    fetching = types.SimpleNamespace(policy=types.SimpleNamespace(mode="fetch"))
    lines = []
    watch = RateWatch([manager, fetching, manager, other], lines.append)
    assert watch.managers == [manager, other]
    off = rates.prefill.forward_s(1024) * 3
    for rnd in range(4):
        for _ in range(3):  # no-cache and cached runs of one round, every one 3x off the rates
            watch.observe(1024, 0, off)
        assert len(calls) == (rnd >= 2)  # nothing measured inside a round
        watch.between_rounds(1024, rnd)
        # round 0 runs its shapes for the first time: not shown; round 1: measured again; then no more
        assert len(calls) == (rnd >= 1)
    assert manager.device_rates() is measured and other.device_rates() is measured
    assert [(a["prefix_tokens"], a["after_round"]) for a in watch.measured_again] == [(1024, 1)]
    assert len(lines) == 1 and "rates measured again after round 1 of prefix 1024" in lines[0]
