"""SkyMemory as a vLLM KV connector, end to end on this CPU: real vLLM engines, real satellites.

Every engine runs in a fresh process (serve_job.py): one that stores a prefix, then another that
must find it (num_cached_tokens) and generate what vLLM without the connector generates. The model
is embedded-small (random weights, built locally), served by vLLM from a folder and loaded by
KVCManager as "embedded-small": both name blocks alike, so a prefix stored by either is a hit in
the other.
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
import torch

from skymemory.kv.model.cache_arg import cache_arg
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.model.models import load_model
from skymemory.kv.index.radix import RadixIndex
from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore

from kv_support import random_prompt
from live import ground_host_elsewhere, launch, launch_netns, stop

SERVE_JOB = Path(__file__).with_name("serve_job.py")
BLOCK = 128
SERVERS = 5
JOB_TIMEOUT_S = 600  # engine starts take 5-40 s here; a hang is a failure, not a wait

P1 = random_prompt(300, seed=1)  # 2 usable blocks
P2 = P1[:2 * BLOCK] + random_prompt(65, seed=2)[1:]  # P1's two blocks, then its own tokens
P3 = random_prompt(400, seed=3)  # 3 blocks: stored by KVCManager
P4 = random_prompt(3 * BLOCK + 20, seed=4)  # 3 blocks: the failure test's
P5 = random_prompt(290, seed=5)  # 2 blocks: stored by vLLM, read by KVCManager
P6 = random_prompt(2 * BLOCK + 30, seed=6)  # 2 blocks and P7's 3: the partial failure test's (stored by no other)
P7 = random_prompt(3 * BLOCK + 40, seed=7)
P8 = random_prompt(2 * BLOCK + 50, seed=8)  # 2 blocks: the dead satellites test's
P9 = random_prompt(2 * BLOCK + 40, seed=9)  # 2 blocks each: the index in orbit's (servers with their own indexes)
P10 = random_prompt(2 * BLOCK + 41, seed=10)
P11 = random_prompt(2 * BLOCK + 42, seed=11)
P12 = random_prompt(2 * BLOCK + 43, seed=12)  # 2 blocks: stored on one ground host, found from another's namespace
NEW_TOKENS = 16


def run_job(tmp: Path, model: Path, engines: list[dict], name: str, wait: bool = True, netns: str | None = None):
    """Run engines in a fresh process (in network namespace `netns`, if given); returns their results (or the
    Popen, with wait=False)."""
    job = {"model": str(model), "out": str(tmp / f"{name}.out.json"), "engines": engines}
    (tmp / f"{name}.json").write_text(json.dumps(job))
    log = open(tmp / f"{name}.log", "w")
    where = ["ip", "netns", "exec", netns] if netns else []
    process = subprocess.Popen([*where, sys.executable, str(SERVE_JOB), str(tmp / f"{name}.json")], stdout=log,
                               stderr=subprocess.STDOUT)
    if not wait:
        return process
    return finish_job(process, tmp, name)


def finish_job(process, tmp: Path, name: str) -> dict:
    try:
        code = process.wait(JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"job {name} hung; its log: {tmp / f'{name}.log'}") from None
    assert code == 0, f"job {name} failed ({code}):\n" + (tmp / f"{name}.log").read_text()[-6000:]
    return json.loads((tmp / f"{name}.out.json").read_text())


def connector(manifest: Path, index: Path, servers: int | None = SERVERS, **extra) -> dict:
    """The connector's settings; servers=None leaves its default (10, more than the 3x3 has)."""
    given = {"servers": servers} if servers is not None else {}
    return {"manifest": str(manifest), "model": "embedded-small", "index_dir": str(index), **given, **extra}


def requests(**prompts) -> list[dict]:
    return [{"name": name, "ids": ids, "max_tokens": NEW_TOKENS} for name, ids in prompts.items()]


@pytest.fixture(scope="module")
def baseline(model_dir, tmp_path_factory) -> dict:
    """vLLM without the connector: the tokens every cached run must give."""
    tmp = tmp_path_factory.mktemp("baseline")
    out = run_job(tmp, model_dir, [{"name": "plain", "connector": None, "requests": requests(
        P1=P1, P2=P2, P3=P3, P4=P4, P5=P5, P6=P6, P7=P7, P8=P8, P9=P9, P10=P10, P11=P11, P12=P12)}], "baseline")
    return {name: r["tokens"] for name, r in out["plain"].items()}


def kvc_manager(manifest: Path, index: Path, store: ConstellationBlockStore) -> KVCManager:
    model, tokenizer = load_model("embedded-small", "cpu", "fp32")
    return KVCManager(model, tokenizer, store, kv_dtype="fp16", index=RadixIndex(index), policy="fetch")


def generated(manager: KVCManager, hit) -> list[int]:
    """The tokens Hugging Face generates from a cache hit (greedy, NEW_TOKENS of them)."""
    model = manager.model
    with torch.no_grad():
        out = model.generate(hit.input_ids, attention_mask=hit.attention_mask, **cache_arg(model, hit.cache),
                             max_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, hit.input_ids.shape[1]:].tolist()


def test_a_fresh_process_finds_the_prefix_another_served_and_generates_the_same_tokens(
        model_dir, sky, baseline, tmp_path):
    index = tmp_path / "index"
    # process A: the deployment's shape (scheduler and worker in processes of their own), with the connector's
    # default servers (10) on this 3x3: the store stripes over the 9 there are (it stored nothing before)
    stored = run_job(tmp_path, model_dir, [{"name": "A", "multiprocess": True,
                                            "connector": connector(sky, index, servers=None),
                                            "requests": requests(P1=P1)}], "A")["A"]
    assert stored["P1"]["num_cached_tokens"] == 0 and stored["P1"]["tokens"] == baseline["P1"]
    assert len(RadixIndex(index)) == 2  # its two full blocks
    assert {e.record.n_servers for e in RadixIndex(index).newest(2)} == {9}
    # process B: a new engine, nothing in its own memory
    found = run_job(tmp_path, model_dir, [{"name": "B", "connector": connector(sky, index, servers=None),
                                           "requests": requests(P1=P1, P2=P2)}], "B")["B"]
    for name in ("P1", "P2"):
        assert found[name]["num_cached_tokens"] == 2 * BLOCK, found[name]
        assert found[name]["tokens"] == baseline[name]
        assert found[name]["kv_transfer_params"]["skymemory"]["fetched_blocks"] == 2


def test_one_cache_for_both_engines(model_dir, sky, baseline, tmp_path):
    index = tmp_path / "index"
    m = Manifest.load(sky)
    with ConstellationBlockStore.nearest_from_manifest(m, SERVERS, client_options={"station_id": 61}) as store:
        manager = kvc_manager(sky, index, store)
        assert manager.add_blocks(P3).blocks_stored == 3  # stored through Hugging Face ...
        out = run_job(tmp_path, model_dir, [{"name": "C", "connector": connector(sky, index),
                                             "requests": requests(P3=P3, P5=P5)}], "C")["C"]
        assert out["P3"]["num_cached_tokens"] == 3 * BLOCK and out["P3"]["tokens"] == baseline["P3"]  # ... hit in vLLM
        assert out["P5"]["num_cached_tokens"] == 0  # stored by vLLM ...
        hit = manager.get_cache(P5)  # ... hit through Hugging Face
        assert hit.source == "index" and hit.prefix_tokens == 2 * BLOCK
        assert generated(manager, hit) == baseline["P5"]


def test_satellites_killed_during_a_load_give_a_recompute_not_wrong_tokens(model_dir, node_path, baseline,
                                                                          tmp_path):
    index = tmp_path / "index"
    # a slow link (0.05 Mbit/s per satellite): the load of P4's three blocks would take seconds
    (tmp_path / "slow").mkdir()
    slow = launch(tmp_path / "slow", 3, 3, "--bandwidth-mbps", "0.05")
    try:
        m = Manifest.load(slow)
        with ConstellationBlockStore.nearest_from_manifest(m, SERVERS, client_options={"station_id": 63}) as store:
            assert kvc_manager(slow, index, store).add_blocks(P4).blocks_stored == 3
        marker = tmp_path / "generating"
        process = run_job(tmp_path, model_dir, [{"name": "F", "marker": str(marker), "requests": requests(P4=P4),
                                                 "connector": connector(slow, index, load_timeout_s=2.0)}], "F",
                          wait=False)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the request is scheduled and its blocks are on their way
        assert stop(slow).returncode == 0  # every satellite killed
        out = finish_job(process, tmp_path, "F")["F"]["P4"]
    finally:
        stop(slow)  # (again: in case the test failed before it)
    assert out["tokens"] == baseline["P4"]
    said = out["kv_transfer_params"]["skymemory"]
    assert said["fetched_blocks"] == 3 and "the load failed" in said["decision"], said
    assert "Recovered from KV load failure" in (tmp_path / "F.log").read_text()  # vLLM recomputed the blocks
    # the first block that did not arrive and the blocks after it are not claimed again (as KVCManager does)
    assert len(RadixIndex(index)) < 3


def test_a_failed_block_costs_only_its_own_request(model_dir, sky, baseline, tmp_path):
    """Two requests load in the same step (one stream): one of P7's blocks is gone from the satellites. P7 recomputes
    from that block on; P6's blocks, which arrived whole, are loaded all the same."""
    index = tmp_path / "index"
    m = Manifest.load(sky)
    with ConstellationBlockStore.nearest_from_manifest(m, SERVERS, client_options={"station_id": 59}) as store:
        manager = kvc_manager(sky, index, store)
        added = manager.add_blocks(P7)
        assert manager.add_blocks(P6).blocks_stored == 2 and added.blocks_stored == 3
        store.evict_block(manager.index.get(added.hashes[1]).record)  # the index still has it: the load finds out
    out = run_job(tmp_path, model_dir, [{"name": "T", "together": True, "connector": connector(sky, index),
                                         "requests": requests(P6=P6, P7=P7)}], "T")["T"]
    assert out["P6"]["tokens"] == baseline["P6"] and out["P7"]["tokens"] == baseline["P7"]
    p6, p7 = (out[name]["kv_transfer_params"]["skymemory"] for name in ("P6", "P7"))
    assert "the load failed" in p7["decision"], p7
    assert "the load failed" not in p6["decision"] and p6["fetched_blocks"] == 2, p6
    log = (tmp_path / "T.log").read_text()
    assert "loading 2 blocks failed" in log and "loading 5 blocks failed" not in log  # P7's second and third only
    assert "Recovered from KV load failure" in log


def test_blocks_in_coded_stripes_load_whole_with_two_satellites_dead(model_dir, node_path, baseline, tmp_path):
    """The connector's default stripes (8 + 2 over the 10 nearest of a 4x4): engine A stores P8's blocks, the two
    satellites holding most of their chunks are killed, and engine B, a fresh process, still loads both blocks
    (nothing recomputed) and gives plain vLLM's tokens."""
    index = tmp_path / "index"
    (tmp_path / "sky").mkdir()
    path = launch(tmp_path / "sky", 4, 4)
    try:
        stored = run_job(tmp_path, model_dir, [{"name": "A", "connector": connector(path, index, servers=None),
                                                "requests": requests(P8=P8)}], "A")["A"]
        assert stored["P8"]["tokens"] == baseline["P8"]
        records = [e.record for e in RadixIndex(index).newest(2)]
        assert [(r.parity, r.stripe_data) for r in records] == [(2, 8)] * 2
        m = Manifest.load(path)
        held: dict = {}
        for r in records:  # chunk c on the c mod n-th nearest satellite when the block was set
            servers = m.constellation().nearest(r.n_servers, r.created_ms)
            for c in range(r.chunk_count):
                held[servers[c % r.n_servers]] = held.get(servers[c % r.n_servers], 0) + 1
        pids = {(e.plane, e.sat): e.pid for e in m.satellites}
        for sat in sorted(held, key=held.get, reverse=True)[:2]:
            os.kill(pids[sat], signal.SIGKILL)
        found = run_job(tmp_path, model_dir, [{"name": "B", "connector": connector(path, index, servers=None),
                                               "requests": requests(P8=P8)}], "B")["B"]["P8"]
    finally:
        stop(path)
    assert found["num_cached_tokens"] == 2 * BLOCK and found["tokens"] == baseline["P8"], found
    said = found["kv_transfer_params"]["skymemory"]
    assert said["fetched_blocks"] == 2 and "the load failed" not in said["decision"], said  # uncoded, it fails


def test_servers_with_their_own_indexes_share_one_cache_through_records_in_orbit(model_dir, sky, baseline, tmp_path):
    """Server A stores P9's prefix; server B, a fresh process with its own ground index (as on another host), loads
    it through the blocks' records in orbit. The same between Hugging Face and vLLM, both ways: each with an index
    of its own, each hits what the other stored, with plain vLLM's tokens."""
    a = run_job(tmp_path, model_dir, [{"name": "A", "connector": connector(sky, tmp_path / "index-a"),
                                       "requests": requests(P9=P9)}], "A")["A"]
    assert a["P9"]["num_cached_tokens"] == 0 and a["P9"]["tokens"] == baseline["P9"]
    m = Manifest.load(sky)
    with ConstellationBlockStore.nearest_from_manifest(m, SERVERS, client_options={"station_id": 57}) as store:
        hf = kvc_manager(sky, tmp_path / "index-hf", store)
        assert hf.add_blocks(P10).blocks_stored == 2
        b = run_job(tmp_path, model_dir, [{"name": "B", "connector": connector(sky, tmp_path / "index-b"),
                                           "requests": requests(P9=P9, P10=P10, P11=P11)}], "B")["B"]
        assert len(RadixIndex(tmp_path / "index-b")) == 6  # P9's and P10's learnt from orbit, P11's its own
        for name in ("P9", "P10"):
            assert b[name]["num_cached_tokens"] == 2 * BLOCK, (name, b[name])
            assert b[name]["tokens"] == baseline[name]
        assert b["P11"]["num_cached_tokens"] == 0  # stored by B ...
        hit = hf.get_cache(P11)  # ... found by Hugging Face, whose index never saw it
        assert hit.source == "orbit" and hit.prefix_tokens == 2 * BLOCK
        assert generated(hf, hit) == baseline["P11"]
    off = run_job(tmp_path, model_dir, [{"name": "C", "connector": connector(sky, tmp_path / "index-c",
                                                                           orbit_index=False),
                                         "requests": requests(P9=P9)}], "C")["C"]
    assert off["P9"]["num_cached_tokens"] == 0  # without records in orbit: its own index only


def test_a_server_on_another_host_finds_through_records_in_orbit_what_this_one_stored(model_dir, node_path, baseline,
                                                                                       tmp_path):
    """The satellites on three emulated hosts (--netns 3). Server A, at the ground address, stores P12; server B
    runs in another network namespace, at that host's own address, with its own ground index, and loads P12's
    blocks through their records in orbit, with plain vLLM's tokens."""
    (tmp_path / "sky").mkdir()
    path = launch_netns(tmp_path / "sky", 3, 3, 3)
    try:
        a = run_job(tmp_path, model_dir, [{"name": "A", "connector": connector(path, tmp_path / "index-a"),
                                           "requests": requests(P12=P12)}], "A")["A"]
        assert a["P12"]["num_cached_tokens"] == 0 and a["P12"]["tokens"] == baseline["P12"]
        namespace, other = ground_host_elsewhere(path, tmp_path / "manifest-elsewhere.json")
        b = run_job(tmp_path, model_dir, [{"name": "B", "connector": connector(other, tmp_path / "index-b"),
                                           "requests": requests(P12=P12)}], "B", netns=namespace)["B"]["P12"]
    finally:
        stop(path)
    assert b["num_cached_tokens"] == 2 * BLOCK and b["tokens"] == baseline["P12"], b
    assert b["kv_transfer_params"]["skymemory"]["fetched_blocks"] == 2
