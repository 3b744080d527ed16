"""`skymemory bench sites` without vLLM: its workload, its bad input, the throughput model's rows and the report.
The run itself (two sites, the router, vLLM) is measured in BENCHMARKS.md; the same path is tested live in
tests/vllm_engine/test_vllm_sites.py."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from skymemory.bench import sites as bench_sites
from skymemory.kv.decide.disaggregation import PrefillProfile


def parser():
    p = argparse.ArgumentParser()
    bench_sites.register(p.add_subparsers(dest="cmd"))
    return p


@pytest.mark.parametrize("argv", [
    ["sites", "--requests", "1"], ["sites", "--concurrency", "0"], ["sites", "--max-tokens", "100"],
    ["sites", "--output-tokens", "0"], ["sites", "--slow-isl", "0.5"], ["sites", "--probe-s", "0"],
    ["sites", "--planes", "1"], ["sites", "--seed", "-1"],
])
def test_bad_arguments_are_rejected(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parser().parse_args(argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err


@pytest.mark.parametrize("argv, why", [
    (["sites", "--profile", "moon"], "unknown link profile"),
    (["sites", "--lengths", "x"], "token counts"),
    (["sites", "--max-tokens", "4096", "--output-tokens", "16"], "must fit"),
])
def test_bad_values_are_one_line_before_any_work(argv, why):
    a = parser().parse_args(argv)
    with pytest.raises(SystemExit, match=why):
        a.func(a)


def test_the_workload_is_the_papers_lengths_scaled_and_seeded():
    a = parser().parse_args(["sites", "--requests", "200", "--max-tokens", "2048"])
    prompts = bench_sites.workload(a)
    lengths = [len(p) for p in prompts]
    assert len(prompts) == 200 and min(lengths) >= 1 and max(lengths) <= 2048
    assert sorted(lengths)[100] < 2048 // 4  # log-normal: most prompts are short, a few long
    assert bench_sites.workload(a) == prompts


PROFILE = PrefillProfile("m", "cpu", "fp16", 128, ((256, 4_000_000, 0.5), (1024, 16_000_000, 2.5),
                                                     (2048, 32_000_000, 6.0)))


def test_the_model_predicts_for_each_measured_link():
    a = SimpleNamespace(max_tokens=2048, concurrency=4, output_tokens=16)
    fast, slow = bench_sites.predictions(PROFILE, a, [("fast", 1e9), ("slow", 1e5)], decode_step_s=0.01)
    assert fast["routed"] >= fast["one_site"] and fast["routed"] >= fast["all_offloaded"]
    assert slow["threshold"] >= fast["threshold"]  # a slower link offloads only longer prompts
    assert slow["egress_Bps"] <= fast["egress_Bps"]


def test_the_report_has_the_three_ways_the_thresholds_and_the_prediction():
    row = {"requests": 4, "requests_per_s": 0.5, "output_tokens_per_s": 8.0, "ttft_p50_s": 1.0, "ttft_p99_s": 2.0,
           "offloaded": 2, "blocks_loaded": 6, "bytes_crossed": 17_400_000}
    a = SimpleNamespace(max_tokens=2048, concurrency=4, output_tokens=16)
    result = {"command": "skymemory bench sites", "model": "m", "link_profile": "laser", "planes": 3, "sats": 4,
              "concurrency": 4, "output_tokens": 16, "max_tokens": 2048, "decode_step_s": 0.05,
              "rows": [{**row, "mode": mode} for mode in bench_sites.MODES],
              "router_history": [{"time": 100.0, "link_Bps": 2e6, "threshold": 700},
                                 {"time": 130.0, "link_Bps": 5e5, "threshold": 1400}],
              "link_changed_at": 120.0,
              "predictions": bench_sites.predictions(PROFILE, a, [("at start", 2e6), ("after", 5e5)], 0.05)}
    text = bench_sites.markdown(result)
    assert text.startswith("`skymemory bench sites`")
    for mode in bench_sites.MODES:
        assert f"| {mode} | 4 | 0.500 |" in text
    assert "| 30.0 | 0.50 | 1400 |" in text and "at +20.0 s" in text and "17.40 |" in text
