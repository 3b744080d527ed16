"""`skymemory bench vllm`: argument validation and the prompts it builds (no engine, no vLLM needed)."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from skymemory.bench import vllm as bench_vllm


def parser():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    bench_vllm.register(sub)
    return p


@pytest.mark.parametrize("argv", [
    ["vllm", "--prefix-tokens", "100"],  # not whole blocks
    ["vllm", "--prefix-tokens", "512,512"],
    ["vllm", "--prefix-tokens", "x"],
    ["vllm", "--suffix-tokens", "0"],
    ["vllm", "--suffix-tokens", "128"],  # a suffix past one block would be cached too
    ["vllm", "--new-tokens", "0"],
    ["vllm", "--repeats", "0"],
    ["vllm", "--profiles", "moon"],
    ["vllm", "--profiles", "none,none"],
    ["vllm", "--kv", "int4"],
    ["vllm", "--kvcache-gib", "0"],
    ["vllm", "--servers", "0"],
    ["vllm", "--planes", "0"],
])
def test_bad_arguments_are_rejected(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parser().parse_args(argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err


def test_defaults():
    a = parser().parse_args(["vllm"])
    assert a.model == "embedded-tinyllama" and a.prefix_tokens == (512, 1024, 2048) and a.suffix_tokens == 32
    assert a.new_tokens == 16 and a.repeats == 3 and a.servers == 10 and a.kv == "fp16"
    assert [p.name for p in a.profiles] == ["none", "laser", "rf"] and (a.planes, a.sats) == (19, 5)
    assert a.kvcache_gib is None and a.work_dir is None and str(a.out) == "out/bench-vllm"


def test_more_servers_than_satellites_is_refused_before_any_work(tmp_path, capsys):
    a = parser().parse_args(["vllm", "--planes", "3", "--sats", "3", "--servers", "10", "--out", str(tmp_path)])
    assert a.func(a) == 2
    assert capsys.readouterr().err.strip() == "skymemory bench vllm: --servers 10 is more than the 3x3 satellites"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_one_line_says_where_it_is(tmp_path, capsys):
    a = parser().parse_args(["vllm", "--out", str(tmp_path)])
    assert a.func(a) == 1
    assert capsys.readouterr().err.splitlines() == [bench_vllm.NEEDS_VLLM]


def test_prompts_share_the_prefix_and_differ_after_it():
    one, two = (bench_vllm.prompt_ids(256, k, 32, 259) for k in (3, 4))
    assert len(one) == len(two) == 288 and one[:256] == two[:256] and one[256:] != two[256:]
    assert one == bench_vllm.prompt_ids(256, 3, 32, 259)  # the same in every mode and run
    assert min(one + two) >= bench_vllm.FIRST_ID and max(one + two) < 259
    assert bench_vllm.prompt_ids(512, 3, 32, 259)[:256] != one[:256]  # each length its own prefix


def test_max_model_len_is_whole_blocks_and_at_least_4096():
    assert bench_vllm.max_model_len((512, 1024), 32, 16) == 4096
    assert bench_vllm.max_model_len((4096,), 32, 16) == 4096 + 128
