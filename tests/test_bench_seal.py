"""Sealed against unsealed, side by side: `bench ttft --seal` and `bench vllm --seal` (options, order, tables)."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from skymemory.bench import ttft_command
from skymemory.bench import vllm as bench_vllm
from skymemory.bench.options import seal_list
from skymemory.bench.profiles import PROFILES
from skymemory.bench.ttft import (CachedMode, Measurement, TTFTConfig, round_order, satellite_budget, seal_comparison,
                                  seal_table, sealed_twin, sky_mode_name, summarise)
from skymemory.cli import build_parser


# ---- options ---------------------------------------------------------------------------------------------

def test_seal_values():
    assert seal_list("on") == ("on",) and seal_list("off") == ("off",)
    assert seal_list("on,off") == ("on", "off") and seal_list("off, on") == ("off", "on")
    for bad in ("", "yes", "on,on", "on,off,on", "true", "on,", "ON"):
        with pytest.raises(argparse.ArgumentTypeError, match="want on, off or on,off"):
            seal_list(bad)


def test_bench_ttft_takes_seal_and_defaults_to_sealed_only():
    parser = build_parser()
    args = parser.parse_args(["bench", "ttft", "--prefix-tokens", "1024", "--profiles", "laser", "--seal", "on,off"])
    cfg = ttft_command.config_from_args(args)
    assert cfg.seal == ("on", "off") and [p.name for p in cfg.profiles] == ["laser"]
    assert ttft_command.config_from_args(parser.parse_args(["bench", "ttft"])).seal == ("on",)
    demo = parser.parse_args(["demo"])  # the demo runs bench ttft's code: sealed only, no option for it
    assert not hasattr(demo, "seal") and ttft_command.config_from_args(demo).seal == ("on",)


@pytest.mark.parametrize("value", ["maybe", "on,on", ""])
def test_bench_ttft_refuses_bad_seal_values(value, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["bench", "ttft", "--seal", value])
    assert exc.value.code == 2 and "want on, off or on,off" in capsys.readouterr().err


def test_ttft_config_checks_seal():
    TTFTConfig(seal=("off", "on")).check()
    for bad in ((), ("on", "on"), ("sealed",)):
        with pytest.raises(ValueError, match="seal must be on, off or both"):
            TTFTConfig(seal=bad).check()


def test_bench_vllm_takes_seal(capsys):
    p = argparse.ArgumentParser()
    bench_vllm.register(p.add_subparsers(dest="cmd"))
    assert p.parse_args(["vllm"]).seal == ("on",)
    assert p.parse_args(["vllm", "--prefix-tokens", "1024", "--profiles", "laser", "--seal", "on,off"]).seal == (
        "on", "off")
    with pytest.raises(SystemExit) as exc:
        p.parse_args(["vllm", "--seal", "of"])
    assert exc.value.code == 2 and "want on, off or on,off" in capsys.readouterr().err


def test_the_satellites_hold_both_copies_of_every_prefix():
    cfg = dict(model="embedded-llama3-8b", prefix_tokens=(4096, 16384), servers=10)
    one, both = satellite_budget(TTFTConfig(**cfg)), satellite_budget(TTFTConfig(**cfg, seal=("on", "off")))
    assert (both - 16 * 1024 * 1024) >= 2 * (one - 16 * 1024 * 1024) - 2


# ---- bench ttft: names, order, the comparison ------------------------------------------------------------------

def test_mode_names():
    assert sky_mode_name("laser") == "sky-laser"  # sealed keeps the names it always had
    assert sky_mode_name("laser", "off") == "sky-laser-unsealed"
    assert sky_mode_name("laser", "off", 1, "relay", "stream") == "sky-laser-unsealed@relay-stream"
    assert sky_mode_name("rf", "on", kind="auto") == "sky-rf-auto"
    for name in ("sky-laser-unsealed", "sky-laser-unsealed@relay-stream", "sky-rf-unsealed-auto"):
        assert sealed_twin(name) == name.replace("-unsealed", "")


def _mode(name, profile=None, seal=None):
    return CachedMode(name, None, PROFILES[profile] if profile else None, None, seal=seal)


def test_sealed_and_unsealed_take_turns_going_first():
    modes = [_mode("local"), _mode("sky-laser", "laser", "on"), _mode("sky-laser-auto", "laser", "on"),
             _mode("sky-laser-unsealed", "laser", "off"), _mode("sky-laser-unsealed-auto", "laser", "off"),
             _mode("sky-rf", "rf", "on"), _mode("sky-rf-unsealed", "rf", "off")]
    names = lambda rnd: [m.name for m in round_order(modes, rnd)]  # noqa: E731
    assert names(0) == names(2) == [m.name for m in modes]
    assert names(1) == names(3) == ["local", "sky-laser-unsealed", "sky-laser-unsealed-auto", "sky-laser",
                                    "sky-laser-auto", "sky-rf-unsealed", "sky-rf"]
    sealed_only = [m for m in modes if m.seal != "off"]
    assert round_order(sealed_only, 1) == sealed_only  # one setting: nothing to alternate


def _m(mode, ttft, retrieval, rnd, seal):
    return Measurement(prefix_tokens=1024, mode=mode, round=rnd, suffix_index=rnd % 2, prompt_tokens=1056,
                       ttft_s=ttft, first_token=5, cached_tokens=1024, expected_cached_tokens=1024,
                       retrieval_s=retrieval, tokens=[5], route="auto", seal=seal)


def test_the_closing_table_gives_sealed_over_unsealed_per_mode_and_prefix():
    runs = []
    for rnd, (sealed, unsealed) in enumerate([(0.104, 0.100), (0.210, 0.200), (0.106, 0.100)]):
        runs += [_m("nocache", 1.0, 0.0, rnd, None), _m("sky-laser", sealed, sealed / 2, rnd, "on"),
                 _m("sky-laser-unsealed", unsealed, unsealed / 2, rnd, "off"),
                 _m("sky-laser-auto", 0.3, 0.1, rnd, "on")]  # its unsealed twin was not measured
    rows = summarise(runs)
    assert [r["seal"] for r in rows] == [None, "on", "off", "on"]
    (c,) = seal_comparison(rows)
    assert (c["prefix_tokens"], c["mode"], c["unsealed_mode"], c["route"], c["runs"]) == (
        1024, "sky-laser", "sky-laser-unsealed", "auto", 3)
    assert c["sealed_ttft_s"] == pytest.approx(0.106) and c["unsealed_ttft_s"] == pytest.approx(0.100)
    assert c["sealed_vs_unsealed"] == pytest.approx(1.06)
    assert c["sealed_retrieval_s"] == pytest.approx(0.053)
    table = seal_table([c])
    assert table.splitlines()[0].startswith("Sealed / unsealed TTFT per profile and prefix length")
    assert "| 1024 | sky-laser | auto | 100.0 | 106.0 | 1.060x | 50.0 | 53.0 | 3 |" in table
    assert seal_comparison(summarise([r for r in runs if r.seal != "off"])) == [] and seal_table([]) == ""


# ---- bench vllm ------------------------------------------------------------------------------------------------

def _q(mode, seconds, kind="ttft", request=3):
    return bench_vllm.Request(1024, mode, kind, request, 1056, seconds, [7, 8], 1024 if mode.startswith("sky") else 0,
                              1024 if mode.startswith("sky") else 0)


def test_vllm_comparison_per_prefix_length():
    requests = []
    for mode, seconds in (("vllm", 0.5), ("sky-laser", 0.102), ("sky-laser-auto", 0.11), ("sky-laser-unsealed", 0.1),
                          ("sky-laser-unsealed-auto", 0.1)):
        requests += [_q(mode, seconds, request=3), _q(mode, seconds, request=4), _q(mode, 1.0, "tokens", 1)]
    rows = bench_vllm.summarise(requests)
    assert {r["mode"]: r["seal"] for r in rows} == {"vllm": None, "sky-laser": "on", "sky-laser-auto": "on",
                                                    "sky-laser-unsealed": "off", "sky-laser-unsealed-auto": "off"}
    pairs = bench_vllm.seal_comparison(rows)
    assert [(c["mode"], c["unsealed_mode"]) for c in pairs] == [("sky-laser", "sky-laser-unsealed"),
                                                               ("sky-laser-auto", "sky-laser-unsealed-auto")]
    assert pairs[0]["sealed_vs_unsealed"] == pytest.approx(1.02) and pairs[0]["runs"] == 2
    compared = bench_vllm.comparisons(rows, ["laser"], ("on", "off"))
    assert [(c["mode"], c["seal"]) for c in compared] == [("sky-laser", "on"), ("sky-laser-unsealed", "off")]
    assert compared[1]["sky_speedup_vs_vllm"] == pytest.approx(5.0)
    result = {"config": {"model": "m", "engine_dtype": "float32", "block_tokens": 128, "max_model_len": 4096,
                         "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1", "kv": "fp16",
                         "servers": 10, "planes": 19, "sats": 5, "suffix_tokens": 32, "repeats": 2, "new_tokens": 2},
              "environment": {"vllm": "0", "torch": "0", "transformers": "0", "cpu": "cpu", "cpu_count": 2},
              "wall_s": 1.0, "summary": rows, "comparisons": compared, "seal_comparison": pairs}
    text = bench_vllm.markdown(result)
    assert "| 1024 | sky-laser-unsealed | 100 [100-100] | 5.00x |" in text
    assert "- prefix 1024, laser: sky-laser-unsealed is 5.00x as fast as vllm" in text
    assert "| 1024 | sky-laser | 100.0 | 102.0 | 1.020x | 2 |" in text
    # a sealed-only run, and a result saved before the option: no comparison, the lines as they were
    old = {**result, "comparisons": [{k: v for k, v in compared[0].items() if k not in ("mode", "seal")}]}
    del old["seal_comparison"]
    assert "Sealed / unsealed" not in bench_vllm.markdown(old)
    assert "- prefix 1024, laser: sky-laser is 4.90x as fast as vllm" in bench_vllm.markdown(old)


def test_vllm_engines_alternate_by_profile_and_tell_the_connector():
    assert bench_vllm.seal_order(("on", "off"), 0) == ("on", "off")
    assert bench_vllm.seal_order(("on", "off"), 1) == ("off", "on")
    assert bench_vllm.seal_order(("on",), 1) == ("on",)
    args = SimpleNamespace(kv="fp16", servers=10)
    assert bench_vllm.connector_extra(args, "m", "/r/manifest.json", "/r/index")["seal"] is True
    assert bench_vllm.connector_extra(args, "m", "/r/manifest.json", "/r/index", "off")["seal"] is False


def test_vllm_chain_root_follows_the_runs_seal_setting(tmp_path, monkeypatch):
    from skymemory.kv.hf.manager import KVCManager
    from skymemory.kv.model.models import load_model
    from skymemory.kv.index.radix import RadixIndex
    from skymemory.kv.store import MemoryBlockStore

    monkeypatch.setenv("SKYMEMORY_CACHE", str(tmp_path))
    model, tokenizer = load_model("embedded-tiny", "cpu", "fp32")
    plain = KVCManager(model, tokenizer, MemoryBlockStore(), block_tokens=bench_vllm.BLOCK_TOKENS, kv_dtype="fp16",
                       index=RadixIndex())  # a store that does not seal: the unsealed layout
    unsealed = bench_vllm.chain_root("embedded-tiny", "fp16", lambda s: None, sealed=False)
    assert unsealed == plain.root
    assert bench_vllm.chain_root("embedded-tiny", "fp16", lambda s: None) not in (unsealed, None)  # sealed: apart
