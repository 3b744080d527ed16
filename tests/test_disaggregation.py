"""Prefill as a Service: the planner of seed 003 §3.4 (kv.decide.disaggregation) and `skymemory model plan`.

The math runs on a synthetic profile (KV linear in l, prefill near-quadratic, as §3.4.2 assumes); the CLI on
embedded-tiny with given link rates. No timing thresholds.
"""

from __future__ import annotations

import json
import math
import statistics

import pytest

from skymemory.cli import main
from skymemory.kv.decide.disaggregation import (
    PAPER,
    Deployment,
    LengthDistribution,
    PrefillProfile,
    all_offloaded,
    plan,
    single_site,
    throughput_at,
)

# 100 KB of KV per token; 0.5 ms per token plus attention's l^2 share: Φkv falls as l grows
POINTS = tuple((n, n * 100_000, 0.05 + 5e-4 * n + 2e-8 * n * n) for n in (512, 1024, 2048, 4096, 8192))
PROFILE = PrefillProfile("synthetic", "cpu", "fp16", 128, POINTS)
LENGTHS = PAPER.scaled_to(16384)
# decode roomy enough that the producers and the consumer can balance (eqs. 7 and 8)
DEPLOY = Deployment(prefill_instances=4, pd_instances=16, decode_batch=8, decode_step_s=0.05, output_tokens=64)
FINE_T = [LENGTHS.low * (LENGTHS.high / LENGTHS.low) ** (i / 1500) for i in range(1501)]
FINE_NP = [DEPLOY.pd_instances * i / 2000 for i in range(1, 2000)]


# ------------------------------------------------------------------------------------------ the workload


def test_paper_distribution_moments_agree_with_a_large_sample():
    sample = PAPER.sample(100_000, seed=7)
    assert min(sample) >= PAPER.low and max(sample) <= PAPER.high
    assert PAPER.sample(50, seed=7) == sample[:50]  # deterministic for a seed
    assert statistics.mean(sample) == pytest.approx(PAPER.mean(), rel=0.02)
    assert 25_000 < PAPER.mean() < 29_000  # §4.1: "a mean of approximately 27K tokens"
    for t in (1000, 8000, 20000, 60000):
        above = [x for x in sample if x > t]
        below = [x for x in sample if x <= t]
        assert PAPER.share_above(t) == pytest.approx(len(above) / len(sample), abs=0.01)
        assert PAPER.mean_above(t) == pytest.approx(statistics.mean(above), rel=0.02)
        assert PAPER.mean_below(t) == pytest.approx(statistics.mean(below), rel=0.02)


def test_distribution_ends():
    assert PAPER.share_above(PAPER.high) == 0 and PAPER.mean_above(PAPER.high) == PAPER.high
    assert PAPER.share_above(PAPER.low - 1) == 1 and PAPER.mean_below(PAPER.low - 1) == PAPER.low
    assert PAPER.mean_above(PAPER.low - 1) == pytest.approx(PAPER.mean())
    scaled = PAPER.scaled_to(4096)
    assert (scaled.sigma, scaled.high, scaled.low) == (PAPER.sigma, 4096, 4)
    assert scaled.mean() == pytest.approx(PAPER.mean() * 4096 / PAPER.high, rel=1e-6)  # the same shape
    assert PAPER.scaled_to(4096, low=128).low == 128
    with pytest.raises(ValueError):
        LengthDistribution(9.9, 0.0, 128, 1024)
    with pytest.raises(ValueError):
        LengthDistribution(9.9, 1.0, 1024, 128)


# ------------------------------------------------------------------------------------------ the profile


def test_profile_interpolates_extrapolates_and_fits():
    p = PrefillProfile("m", "cpu", "fp16", 128, ((256, 1000, 1.0), (512, 3000, 2.0), (1024, 5000, 5.0)))
    assert p.kv_bytes(256) == 1000 and p.kv_bytes(384) == 2000 and p.kv_bytes(768) == 4000
    assert p.kv_bytes(2048) == 9000  # the last segment extended
    assert p.kv_bytes(128) == 0  # the first segment extended, never below 0
    assert p.kv_bytes(1) == 0
    a, b, c = p.fit
    assert min(a, b, c) >= 0
    assert all(p.prefill_s(n) > 0 for n in (0, 1, 100_000))
    exact = PROFILE  # a + b l + c l^2 exactly: recovered
    for n in (512, 3000, 8192, 100_000):
        assert exact.prefill_s(n) == pytest.approx(0.05 + 5e-4 * n + 2e-8 * n * n, rel=1e-6)
    assert exact.phi_Bps(1024) == pytest.approx(exact.kv_bytes(1024) / exact.prefill_s(1024))
    # a decreasing time: the non-negative fit does not go negative or decreasing
    odd = PrefillProfile("m", "cpu", "fp16", 128, ((100, 10, 2.0), (200, 20, 1.0)))
    assert odd.fit[1] >= 0 and odd.fit[2] >= 0 and odd.prefill_s(10_000) > 0


def test_profile_round_trip_and_errors(tmp_path):
    path = tmp_path / "p.json"
    PROFILE.save(path)
    again = PrefillProfile.load(path)
    assert again == PROFILE and again.prefill_s(3000) == PROFILE.prefill_s(3000)
    good = PROFILE.as_dict()
    bad = [
        [],
        {k: v for k, v in good.items() if k != "points"},
        {**good, "points": [[512, 1, 0.1]]},  # one point
        {**good, "points": [[1024, 1, 0.1], [512, 1, 0.2]]},  # not increasing
        {**good, "points": [[512, 1, 0.1], [1024, 1, -1]]},  # a negative time
        {**good, "points": [[512, 1, 0.1], [1024, 1, "x"]]},
        {**good, "points": "many"},
        {**good, "block_tokens": 0},
        {**good, "colour": "red"},
        {**good, "model": 3},
    ]
    for d in bad:
        with pytest.raises(ValueError) as info:
            PrefillProfile.from_dict(d)
        assert "\n" not in str(info.value)
    path.write_text("{not json")
    with pytest.raises(ValueError):
        PrefillProfile.load(path)


# ------------------------------------------------------------------------------------------ the plan


def test_eqs_3_to_6_at_one_point():
    r = throughput_at(PROFILE, LENGTHS, 1e9, DEPLOY, 2000, 6)
    p = LENGTHS.share_above(2000)
    l_long, l_short = LENGTHS.mean_above(2000), LENGTHS.mean_below(2000)
    theta_prfaas = min(4 / PROFILE.prefill_s(l_long), 1e9 / PROFILE.kv_bytes(l_long))
    assert r.share_offloaded == pytest.approx(p)
    assert r.theta_prfaas == pytest.approx(theta_prfaas)
    assert r.theta_pd_p == pytest.approx(6 / PROFILE.prefill_s(l_short))
    assert r.theta_pd_d == pytest.approx(10 * 8 / (0.05 * 64))
    assert r.throughput == pytest.approx(min(theta_prfaas / p, r.theta_pd_p / (1 - p), r.theta_pd_d))
    assert r.egress_Bps == pytest.approx(p * r.throughput * PROFILE.kv_bytes(l_long))
    assert r.np + r.nd == pytest.approx(DEPLOY.pd_instances)


def test_a_fast_link_balances_eqs_7_and_8():
    best = plan(PROFILE, LENGTHS, 1e15, DEPLOY, thresholds=FINE_T, splits=FINE_NP)
    assert best.bound != "prefill site link"
    producers = (best.theta_prfaas / best.share_offloaded, best.theta_pd_p / (1 - best.share_offloaded))
    assert producers[0] == pytest.approx(producers[1], rel=0.05)  # eq. 7
    assert best.theta_prfaas + best.theta_pd_p == pytest.approx(best.theta_pd_d, rel=0.05)  # eq. 8


def test_a_slower_link_raises_t_and_lowers_egress():
    plans = [plan(PROFILE, LENGTHS, rate, DEPLOY) for rate in (1e12, 3e9, 1e9, 3e8, 1e8, 3e7, 1e7, 1e6)]
    thresholds = [p.threshold for p in plans]
    assert thresholds == sorted(thresholds)
    assert thresholds[-1] > thresholds[0]
    egress = [p.egress_Bps for p in plans]
    assert all(later <= earlier * (1 + 1e-9) for earlier, later in zip(egress, egress[1:]))
    assert all(p.egress_Bps <= p.link_Bps * (1 + 1e-9) for p in plans)  # never more than the link carries


@pytest.mark.parametrize("rate", [1e12, 1e9, 1e8, 1e6])
def test_plan_beats_both_baselines(rate):
    best = plan(PROFILE, LENGTHS, rate, DEPLOY)
    base = single_site(PROFILE, LENGTHS, DEPLOY)
    naive = all_offloaded(PROFILE, LENGTHS, rate, DEPLOY)
    assert base.share_offloaded == 0 and base.egress_Bps == 0
    assert naive.share_offloaded == 1
    assert best.throughput >= base.throughput * (1 - 1e-12)
    assert best.throughput >= naive.throughput * (1 - 1e-12)
    assert best.bound in ("prefill site compute", "prefill site link", "decode site prefill", "decode")


def test_ties_prefer_the_larger_threshold():
    # everything is decode-bound: every t gives the same Λ, so the plan keeps traffic off the link
    slow_decode = Deployment(prefill_instances=100, pd_instances=2, decode_batch=1, decode_step_s=10,
                             output_tokens=1000)
    best = plan(PROFILE, LENGTHS, 1e12, slow_decode, splits=[1.0])
    assert best.bound == "decode" and best.threshold == LENGTHS.high


@pytest.mark.parametrize("rate", [0, -1, math.inf, math.nan, "fast", None])
def test_bad_link_rates(rate):
    with pytest.raises(ValueError):
        plan(PROFILE, LENGTHS, rate, DEPLOY)


def test_bad_inputs():
    with pytest.raises(ValueError):
        plan(PROFILE, LENGTHS, 1e9, DEPLOY, thresholds=[])
    with pytest.raises(ValueError):
        plan(PROFILE, LENGTHS, 1e9, DEPLOY, splits=[0.0])
    with pytest.raises(ValueError):
        plan(PROFILE, LENGTHS, 1e9, DEPLOY, splits=[DEPLOY.pd_instances])
    with pytest.raises(ValueError):
        plan(PROFILE.as_dict(), LENGTHS, 1e9, DEPLOY)
    with pytest.raises(ValueError):
        throughput_at(PROFILE, LENGTHS, 1e9, DEPLOY, 1000, 0)
    with pytest.raises(ValueError):
        Deployment(pd_instances=0)
    with pytest.raises(ValueError):
        Deployment(decode_step_s=math.nan)


# ------------------------------------------------------------------------------------------ the CLI


def test_cli_plans_embedded_tiny(tmp_path, capsys):
    saved = tmp_path / "tiny.json"
    code = main(["model", "plan", "--model", "embedded-tiny", "--link-mbps", "100,1", "--lengths", "128,256",
                 "--repeats", "1", "--max-tokens", "2048", "--save-profile", str(saved)])
    out = capsys.readouterr().out
    assert code == 0
    assert "Φkv Gbit/s" in out and "link 100 Mbit/s" in out and "link 1 Mbit/s" in out
    for label in ("optimal", "single site", "all offloaded", "vs single site"):
        assert label in out
    profile = PrefillProfile.load(saved)
    assert profile.model == "embedded-tiny" and [p[0] for p in profile.points] == [128, 256]
    # the saved profile is reused, nothing measured again
    code = main(["model", "plan", "--profile", str(saved), "--link-mbps", "10"])
    assert code == 0 and "link 10 Mbit/s" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["model", "plan", "--model", "embedded-tiny"],  # no link at all
    ["model", "plan", "--model", "embedded-tiny", "--link-mbps", "10", "--lengths", "256"],  # one length
    ["model", "plan", "--model", "embedded-tiny,embedded-small", "--link-mbps", "10", "--save-profile", "x.json"],
    ["model", "plan", "--profile", "/nonexistent/p.json", "--link-mbps", "10"],
    ["model", "plan", "--model", "embedded-tiny", "--link-mbps", "10", "--manifest", "/nonexistent/m.json"],
])
def test_cli_bad_input_is_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "error" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["model", "plan", "--link-mbps", "0"],
    ["model", "plan", "--link-mbps", "nan"],
    ["model", "plan", "--link", "microwave"],
    ["model", "plan", "--pd-instances", "-1"],
])
def test_cli_bad_numbers_are_refused_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_profile_json_is_plain(tmp_path):
    PROFILE.save(tmp_path / "p.json")
    d = json.loads((tmp_path / "p.json").read_text())
    assert d["points"][0] == [512, 51_200_000, POINTS[0][2]]
