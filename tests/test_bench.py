"""The TTFT benchmark's pure parts: workload, link profiles, summary, report, CLI discovery (no nodes)."""

from __future__ import annotations

import argparse

import pytest

from skymemory.bench import report
from skymemory.bench.options import token_list
from skymemory.bench.profiles import PROFILES, parse_profiles, profile_of_manifest
from skymemory.bench.ttft import (DEVICE_RAM, Measurement, TTFTConfig, _expected_cached, satellite_budget,
                                  summarise)
from skymemory.bench.workload import build_workload
from skymemory.cli import build_parser
from skymemory.kv.model.tokenizer import build_byte_tokenizer


@pytest.mark.parametrize("prefix, suffix", [(128, 32), (1024, 32), (300, 7), (256, 1)])
def test_workload_prompts_share_exactly_the_prefix(prefix, suffix):
    tok = build_byte_tokenizer()
    w = build_workload(tok, prefix, suffix, 3)
    ids = [tok(p.text).input_ids for p in w.prompts]
    assert all(len(i) == prefix + suffix for i in ids)
    assert ids[0][:prefix] == ids[1][:prefix] == ids[2][:prefix]
    assert len({tuple(i[prefix:]) for i in ids}) == 3  # different suffixes
    assert len({i[prefix] for i in ids}) == 3  # from the very first suffix token


def test_workload_rejects_bad_sizes():
    tok = build_byte_tokenizer()
    with pytest.raises(ValueError):
        build_workload(tok, 0, 32, 1)
    with pytest.raises(ValueError):
        build_workload(tok, 128, 32, 9)


def test_profiles():
    assert [p.name for p in parse_profiles("rf,none")] == ["rf", "none"]
    assert PROFILES["laser"].launcher_args() == ["--ground-delay-ms", "3.0", "--delay-scale", "1.0"]
    for bad in ("", "laser,laser", "moon"):
        with pytest.raises(ValueError):
            parse_profiles(bad)
    assert profile_of_manifest({"ground_delay_ms": 35.0, "delay_scale": 1.0}).name == "rf"
    assert profile_of_manifest({"ground_delay_ms": 7.0, "delay_scale": 1.0}).name == "attached"


def test_expected_cached_tokens():
    assert _expected_cached(1056, 128, 1024) == 1024
    assert _expected_cached(1024, 128, 1024) == 896  # one token is always left to compute
    assert _expected_cached(300, 128, 250) == 128  # only full blocks inside the shared prefix


def test_token_list_validation():
    assert token_list("512,1024") == (512, 1024)
    for bad in ("0", "a", "5,5", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            token_list(bad)


def _m(mode, ttft, rnd=0, gen=None, equal=True):
    return Measurement(prefix_tokens=1024, mode=mode, round=rnd, suffix_index=0, prompt_tokens=1056, ttft_s=ttft,
                       first_token=5, cached_tokens=0 if mode == "nocache" else 1024, expected_cached_tokens=1024,
                       gen_total_s=gen, tokens=[5], first_token_equal=None if mode == "nocache" else equal,
                       tokens_equal=None if mode == "nocache" else equal)


def test_summary_medians_ratios_and_order():
    runs = [_m("nocache", 10.0, 0, 20.0), _m("local", 1.0, 0, 11.0), _m("sky-laser", 2.0, 0, 12.0),
            _m("nocache", 30.0, 1), _m("local", 3.0, 1), _m("sky-laser", 2.5, 1, equal=False),
            _m("nocache", 20.0, 2), _m("local", 2.0, 2), _m("sky-laser", 3.0, 2)]
    rows = summarise(runs)
    assert [r["mode"] for r in rows] == ["nocache", "local", "sky-laser"]
    nocache, local, sky = rows
    assert nocache["ttft_s"] == {"median": 20.0, "min": 10.0, "max": 30.0, "n": 3}
    assert sky["speedup_vs_nocache"] == pytest.approx(20.0 / 2.5)
    assert sky["ratio_vs_local"] == pytest.approx(2.5 / 2.0)
    assert sky["gen_speedup"] == pytest.approx(20.0 / 12.0)
    assert local["tokens_equal"] and not sky["tokens_equal"]
    result = {"summary": rows, "config": {"gen_tokens": 30}}
    table = report.ttft_table(result)
    assert "| 1024 | sky-laser | - | 2500 [2000-3000] |" in table and "| NO |" in table
    gen = report.generation_table(result)
    assert "| 1024 | sky-laser | 12.00 | 1.67x | 40% |" in gen and "6.2 / 4.9" in gen


def test_the_kv_in_the_models_memory_is_named_for_the_device_and_results_saved_as_gpu_ram_still_read():
    rows = summarise([_m("nocache", 10.0), _m(DEVICE_RAM, 1.0), _m("sky-laser", 2.0)])
    assert DEVICE_RAM == "device-ram"  # not "gpu-ram": on a CPU-only run there is no GPU
    assert rows[2]["ratio_vs_device_ram"] == pytest.approx(2.0)
    table = report.ttft_table({"summary": rows})
    assert "vs device-ram |" in table and "gpu" not in table
    assert "| 1024 | device-ram | - | 1000 [1000-1000] | 0.0 | - | - |" in table  # nothing fetched, nothing rebuilt
    # a result written before the rename: its mode and ratio keep their old names and read the same
    saved = [{**{k: v for k, v in r.items() if k != "ratio_vs_device_ram"},
              "mode": r["mode"].replace(DEVICE_RAM, "gpu-ram"), "ratio_vs_gpu_ram": r["ratio_vs_device_ram"]}
             for r in rows]
    old = report.ttft_table({"summary": saved})
    assert "| 1024 | gpu-ram | - | 1000 [1000-1000] | 0.0 | - | - |" in old
    assert old.splitlines()[4] == table.splitlines()[4]  # the sky row, its "vs" column included


def test_bench_subcommands_are_discovered():
    parser = build_parser()
    args = parser.parse_args(["bench", "ttft", "--prefix-tokens", "256", "--profiles", "laser"])
    assert args.prefix_tokens == (256,) and args.profiles == (PROFILES["laser"],) and callable(args.func)
    demo = parser.parse_args(["demo"])
    assert demo.prefix_tokens == (512, 1024) and demo.profiles == (PROFILES["laser"],)
    assert (demo.planes, demo.sats, demo.repeats, demo.gen_tokens, demo.model) == (19, 5, 3, 30, "embedded-tinyllama")


def test_compute_ceiling_measures_every_step():
    from skymemory.bench.ceiling import STEPS, measure
    from skymemory.kv.model.models import load_model

    model, _ = load_model("embedded-tiny", "cpu")
    times = measure(model, 256, 16, 2)
    assert set(times) == set(STEPS)
    assert all(len(v) == 2 and all(t > 0 for t in v) for v in times.values())


def test_satellites_hold_every_prefix_the_run_stores():
    assert satellite_budget(TTFTConfig(model="embedded-tinyllama")) == 64 * 1024 * 1024  # the floor
    big = TTFTConfig(model="embedded-llama3-8b", prefix_tokens=(4096, 16384), servers=10)
    kv = (1 + 32 + 128) * 16_777_280  # the warm-up block, then every 128-token fp16 block of both prefixes
    assert satellite_budget(big) * 10 >= 1.5 * kv


def _run(mode, tokens, rnd=0):
    """A run of mode that generated `tokens` (the first is its first token)."""
    return Measurement(prefix_tokens=1024, mode=mode, round=rnd, suffix_index=0, prompt_tokens=1056, ttft_s=1.0,
                       first_token=tokens[0], cached_tokens=0 if mode == "nocache" else 1024,
                       expected_cached_tokens=1024, gen_total_s=2.0, tokens=list(tokens))


def test_cached_tokens_are_compared_with_no_cache_and_with_device_ram_of_the_same_round():
    from skymemory.bench.ttft import _compare

    # device-ram computes the suffix over the no-cache run's own prefix KV, and here rounds its way to another
    # third token; sky-laser generates what device-ram does, local what neither does
    ref, in_memory = _run("nocache", [5, 6, 7]), _run(DEVICE_RAM, [5, 6, 8])
    same, wrong = _run("sky-laser", [5, 6, 8]), _run("local", [5, 9, 9])
    _compare(in_memory, ref, 3)
    _compare(same, ref, 3, in_memory)
    _compare(wrong, ref, 3, in_memory)
    assert (in_memory.tokens_equal, in_memory.tokens_equal_device_ram) == (False, None)
    assert (same.first_token_equal, same.tokens_equal, same.tokens_equal_device_ram) == (True, False, True)
    assert (wrong.tokens_equal, wrong.tokens_equal_device_ram) == (False, False)
    # without generation only the first token is compared, with either reference
    first_only = _run("sky-rf", [5])
    _compare(first_only, _run("nocache", [4]), None, _run(DEVICE_RAM, [5]))
    assert (first_only.tokens_equal, first_only.tokens_equal_device_ram) == (False, True)

    rows = {r["mode"]: r for r in summarise([ref, in_memory, same, wrong])}
    assert rows["sky-laser"]["tokens_equal_device_ram"] and rows["sky-laser"]["tokens_compared_device_ram"] == 1
    assert not rows["local"]["tokens_equal_device_ram"]
    table = report.ttft_table({"summary": list(rows.values()), "config": {"quantize": "hqq"}})
    cells = {line.split(" | ")[1]: line.rsplit(" | ", 1)[1] for line in table.splitlines()[2:6]}
    assert cells == {"nocache": "reference |", DEVICE_RAM: "NO (two forwards; see below) |",
                     "sky-laser": "no; = device-ram (1/1 runs) |", "local": "NO |"}
    assert "with hqq-quantised weights" in table and "numerical, not the cache" in table


def test_no_note_where_device_ram_generates_what_no_cache_does():
    from skymemory.bench.ttft import _compare

    ref, in_memory, sky = _run("nocache", [5, 6]), _run(DEVICE_RAM, [5, 6]), _run("sky-laser", [5, 7])
    _compare(in_memory, ref, 2)
    _compare(sky, ref, 2, in_memory)
    table = report.ttft_table({"summary": summarise([ref, in_memory, sky]), "config": {"quantize": None}})
    assert table.splitlines()[-1].endswith("| NO |") and "Tokens:" not in table  # the cache's own fault
    # a result saved before the device-ram comparison existed reads as it did
    saved = [{k: v for k, v in r.items() if "device_ram" not in k or k == "ratio_vs_device_ram"}
             for r in summarise([ref, in_memory, sky])]
    assert report.ttft_table({"summary": saved}).splitlines()[-1].endswith("| NO |")
