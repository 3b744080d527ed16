"""Hardware in the loop: the TTFT benchmark against real satellite processes.

A 5x5 constellation of skymem_node processes on loopback and the small
embedded model (`embedded-tiny`). What is checked: the cache hits, it covers
the expected prefix (every full block of the shared prefix), and the tokens
generated with the cache equal those of the uncached run, for the KV from the
constellation and from local RAM. No timing is asserted (the machine is
shared); the benchmark's own output is checked for shape, not speed.
Also: the benchmark's constellation is torn down on errors and when the
benchmark process is killed outright.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skymemory.bench import report
from skymemory.bench.launch import LocalConstellation, boot, free_port_offset
from skymemory.bench.profiles import PROFILES
from skymemory.bench.ttft import TTFTConfig, run
from skymemory.launcher.processes import alive

REPO = Path(__file__).resolve().parents[2]
BLOCK = 128


def _small_config(**kw) -> TTFTConfig:
    base = dict(model="embedded-tiny", prefix_tokens=(2 * BLOCK, 3 * BLOCK), suffix_tokens=24, suffixes=2,
                repeats=2, gen_tokens=8, gen_repeats=2, planes=5, sats=5, servers=6,
                profiles=(PROFILES["none"],))
    base.update(kw)
    return TTFTConfig(**base)


def _check_cached_runs(result: dict, modes: set[str]) -> None:
    runs = result["measurements"]
    assert {m["mode"] for m in runs} == {"nocache", "device-ram"} | modes
    for m in runs:
        if m["mode"] == "nocache":
            assert m["cached_tokens"] == 0
            continue
        if m["mode"].endswith("-auto"):  # fetched what it decided to: whole blocks of the prefix, maybe none
            action, counts = m["decision"].split()[:2]
            used, cached = counts.split("/")
            assert cached.isdigit() and int(cached) * BLOCK == m["expected_cached_tokens"], m
            if action == "split":  # "split 1+1/2": the first blocks recomputed in get_cache, the rest loaded
                recomputed, loaded = (int(x) for x in used.split("+"))
                assert recomputed + loaded == int(cached) and m["recomputed_tokens"] == recomputed * BLOCK, m
                assert m["cached_tokens"] == int(cached) * BLOCK, m
            else:
                assert action in ("fetch", "partial", "recompute") and m["recomputed_tokens"] == 0, m
                assert m["cached_tokens"] == int(used) * BLOCK and m["bytes_retrieved"] >= 0, m
        else:  # the hit covers every full block of the shared prefix, and nothing of the suffix
            assert m["cached_tokens"] == m["expected_cached_tokens"] == m["prefix_tokens"], m
            assert m["mode"] == "device-ram" or m["bytes_retrieved"] > 0
        assert m["first_token_equal"] is True, m
        assert m["tokens_equal"] is True, m
        assert len(m["tokens"]) == 8
    # the reference the cached runs were compared with is the real thing: the tokens differ between suffixes
    refs = {(m["prefix_tokens"], m["suffix_index"]): tuple(m["tokens"]) for m in runs if m["mode"] == "nocache"}
    if len(refs) > 1:
        assert len(set(refs.values())) > 1


@pytest.fixture(scope="module")
def booted_result(node_path, tmp_path_factory):
    """One benchmark run that boots its own 5x5 constellation (link profile: none), fetched and streamed."""
    work = tmp_path_factory.mktemp("ttft")
    result = run(_small_config(node=node_path, work_dir=work, streaming="both"))
    return result, work


def test_cache_hits_cover_the_prefix_and_tokens_equal(booted_result):
    result, _ = booted_result
    _check_cached_runs(result, {"local", "sky-none", "sky-none-stream", "sky-none-auto"})
    assert len(result["servers"]["none"]) == 6
    for m in result["measurements"]:  # only the streamed runs waited for layers, and their transfer is recorded
        assert (m["stream_waited_s"] is not None) == (m["mode"] == "sky-none-stream"), m
        if m["mode"] == "sky-none-stream":
            assert 0 <= m["stream_waited_s"] <= m["retrieval_s"] and m["rebuild_s"] == 0


def test_the_benchmark_tears_its_constellation_down(booted_result):
    _, work = booted_result
    manifest = work / "sky-none" / "manifest.json"
    assert not manifest.exists()  # the launcher removes it after stopping every node
    assert "stopping" in (work / "sky-none" / "launcher.log").read_text()


def test_report_outputs(booted_result, tmp_path):
    result, _ = booted_result
    paths = report.write_all(result, tmp_path)
    for path in paths.values():
        assert path.stat().st_size > 0
    assert json.loads(paths["json"].read_text())["summary"] == result["summary"]
    table = report.markdown(result)
    for prefix in (256, 384):
        for mode in ("nocache", "device-ram", "local", "sky-none", "sky-none-stream", "sky-none-auto"):
            assert f"| {prefix} | {mode} |" in table
    assert "(overlapped; waited" in table
    assert "NO" not in table.split("| tokens equal |")[1]  # every cached cell says yes
    assert "paper Table 3" in table


def test_attach_to_a_running_constellation_with_laser_delays(node_path, tmp_path):
    """--manifest: the benchmark uses a constellation someone else launched (here: laser profile)."""
    sky = boot(planes=5, sats=5, profile=PROFILES["laser"], run_dir=tmp_path / "sky", node=node_path)
    with sky:
        result = run(_small_config(prefix_tokens=(2 * BLOCK,), repeats=1, gen_repeats=1,
                                   manifest=sky.manifest_path))
        pids = [e.pid for e in sky.manifest.satellites]
        assert all(alive(p) for p in pids)  # attaching never stops what it did not start
    _check_cached_runs(result, {"local", "sky-laser", "sky-laser-auto"})
    assert result["profiles"]["laser"]["ground_delay_ms"] == 3.0
    assert not any(alive(p) for p in pids)


def test_an_error_after_boot_stops_every_node(node_path, tmp_path):
    sky = LocalConstellation(planes=2, sats=2, profile=PROFILES["none"], run_dir=tmp_path,
                             port_offset=free_port_offset(4), node=node_path)
    pids = []
    with pytest.raises(RuntimeError, match="boom"):
        with sky:
            pids = [e.pid for e in sky.manifest.satellites]
            assert all(alive(p) for p in pids)
            raise RuntimeError("boom")
    assert len(pids) == 4 and not any(alive(p) for p in pids)


def test_killing_the_benchmark_process_leaves_no_node(node_path, tmp_path):
    """SIGKILL (no cleanup code runs): the nodes still go, through the parent-death signal chain."""
    script = (
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from skymemory.bench.launch import LocalConstellation, boot, free_port_offset\n"
        "from skymemory.bench.profiles import PROFILES\n"
        f"sky = LocalConstellation(planes=2, sats=2, profile=PROFILES['none'], run_dir=Path({str(tmp_path)!r}),\n"
        f"                         port_offset=free_port_offset(4), node=Path({str(node_path)!r}))\n"
        "sky.start()\n"
        "print(json.dumps([sky.proc.pid] + [e.pid for e in sky.manifest.satellites]), flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        pids = json.loads(line)
        assert len(pids) == 5 and all(alive(p) for p in pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)


def test_cli_bench_ttft_writes_its_outputs(node_path, tmp_path):
    out, events = tmp_path / "out", tmp_path / "events.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground"), "SKYMEM_NODE": str(node_path)}
    r = subprocess.run(
        [sys.executable, "-m", "skymemory", "bench", "ttft", "--model", "embedded-tiny", "--planes", "4",
         "--sats", "4", "--prefix-tokens", "256", "--suffix-tokens", "16", "--repeats", "1", "--gen-tokens", "4",
         "--profiles", "none", "--out", str(out), "--events", str(events)],
        capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert "| 256 | sky-none |" in r.stdout and "yes (1/1 runs)" in r.stdout
    assert "booting a 4x4 constellation" in r.stderr
    for name in ("ttft.json", "ttft.md", "ttft_by_prefix.png", "ttft_breakdown.png"):
        assert (out / name).stat().st_size > 0
    # the live view's feed: every measurement as it happened, between a start and a done
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    kinds = [e["event"] for e in lines]
    assert kinds[0] == "start" and kinds[-1] == "done" and "constellation" in kinds and "log" in kinds
    measured = [e for e in lines if e["event"] == "measurement"]
    assert {e["mode"] for e in measured} == {"nocache", "device-ram", "local", "sky-none", "sky-none-auto"}
    assert all(e["ttft_s"] > 0 and e["time"] > 0 for e in measured)


@pytest.mark.parametrize("argv, message", [
    (["--prefix-tokens", "0"], "token counts must be"),
    (["--profiles", "laser,moon"], "unknown link profile"),
    (["--suffixes", "9"], "invalid choice"),
    (["--chunk-size", "60001"], "at most 60000"),
    (["--manifest", "/nonexistent/manifest.json"], "no such file"),
])
def test_cli_rejects_bad_arguments(argv, message, capsys):
    from skymemory.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "ttft", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_rejects_more_servers_than_satellites(capsys):
    from skymemory.cli import main

    assert main(["bench", "ttft", "--servers", "30", "--planes", "5", "--sats", "5"]) == 2
    assert "more than the 5x5" in capsys.readouterr().err
