"""Coded stripes against dead satellites, on real nodes (issue 36): on a 4x4 constellation, named objects and KV
blocks are stored in stripes of 8 data + 2 parity chunks; the two satellites holding the most of their chunks are
then killed (SIGKILL: no goodbye). Every object still reads back byte for byte, and every KV prefix is still a
whole hit whose tokens equal those of no cache: nothing is recomputed. After `skymemory repair`, two more may die."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter

import pytest

from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.hf.report import compare_generation
from skymemory.kv.transfer.streaming import generate_streaming
from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.objects import ObjectStore, key_of

from kv_support import random_prompt, tiny
from live import REPO, launch, stop

BLOCK = 16
PARITY = 2


@pytest.fixture
def sky(node_built, tmp_path):
    path = launch(tmp_path, 4, 4)
    try:
        yield Manifest.load(path)
    finally:
        r = stop(path)
        assert r.returncode == 0, r.stderr


def holders(records_and_servers) -> Counter:
    """Chunks per satellite: chunk c of a block on its servers[c % n]."""
    count: Counter = Counter()
    for chunk_count, servers in records_and_servers:
        for c in range(chunk_count):
            count[tuple(servers[c % len(servers)])] += 1
    return count


def kill(m: Manifest, victims) -> None:
    pids = {(e.plane, e.sat): e.pid for e in m.satellites}
    for v in victims:
        os.kill(pids[v], signal.SIGKILL)


def test_objects_and_kv_prefixes_survive_the_two_busiest_satellites_killed(sky, tmp_path):
    objects = {"wide": os.urandom(3_000_000), "small": os.urandom(100_000), "one-byte": b"x"}
    store = ObjectStore(sky, 10)
    assert store.parity == PARITY  # the default: stripes of 8 + 2 over the 10 nearest
    metas = {name: store.put(name, data) for name, data in objects.items()}
    assert all(meta["parity"] == PARITY for meta in metas.values())

    model, tokenizer = tiny("fp32")
    with ConstellationBlockStore.nearest_from_manifest(sky, 10, parity=PARITY) as blocks:
        manager = KVCManager(model, tokenizer, blocks, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                             policy="fetch")
        prompts = [random_prompt(4 * BLOCK + 3, seed=36 + i) for i in range(3)]
        records = []
        for prompt in prompts:
            for h in manager.add_blocks(prompt).hashes:
                records.append(manager.index.get(h).record)
        assert all(r.parity == PARITY and r.stripe_data == 8 for r in records)
        # a process without the index finds a block by probing it, in whatever layout it was stored
        with ConstellationBlockStore.nearest_from_manifest(sky, 10, parity=0) as uncoded:
            probed = uncoded.probe_block(records[0].block_hash)
            assert (probed.parity, probed.n_bytes, probed.chunk_count) == (PARITY, records[0].n_bytes,
                                                                           records[0].chunk_count)
            plain = uncoded.put_block(os.urandom(32), os.urandom(50_000))
            assert blocks.probe_block(plain.block_hash).parity == 0
        now = sky.constellation().mission_ms()
        count = holders([(m["chunk_count"], m["servers"]) for m in metas.values()]
                        + [(r.chunk_count, blocks._servers(r, now)) for r in records])
        victims = [sat for sat, _ in count.most_common(PARITY)]
        kill(sky, victims)

        for name, data in objects.items():
            got, _ = ObjectStore(sky, 10).get(key_of(name))
            assert got == data, name
        for prompt in prompts:
            comparison = compare_generation(manager, prompt, new_tokens=6)
            assert comparison.prefix_tokens == 4 * BLOCK  # every block a hit: nothing recomputed
            assert comparison.cached == comparison.reference
        assert blocks.last_transfer.rebuilt > 0  # the dead satellites' chunks were rebuilt, not waited for
        # the layer-streamed path reads the same way: the whole prefix streamed in, the same tokens
        tokens, result, _stats, failure = generate_streaming(manager, prompts[0], max_new_tokens=6)
        assert failure is None and result.prefix_tokens == 4 * BLOCK
        assert tokens == compare_generation(manager, prompts[0], new_tokens=6).reference


def test_after_a_repair_m_more_satellites_may_die(sky, tmp_path):
    """Two busiest satellites killed, `skymemory repair` (the command), then the two busiest of what the objects
    use now killed too: four satellites of every object's stripes dead in all, and every object reads back."""
    objects = {"wide": os.urandom(1_500_000), "small": os.urandom(40_000), "one-byte": b"y"}
    store = ObjectStore(sky, 10)
    metas = {name: store.put(name, data) for name, data in objects.items()}
    first = [s for s, _ in holders([(m["chunk_count"], m["servers"]) for m in metas.values()]).most_common(PARITY)]
    kill(sky, first)

    manifest = tmp_path / "manifest.json"
    sky.save(manifest)
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    r = subprocess.run([sys.executable, "-m", "skymemory", "repair", *objects, "--manifest", str(manifest)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == len(objects) and all("chunks stored again" in line for line in lines), r.stderr
    assert all(sats_named(line) >= set(first) for line in lines), r.stderr  # each names where the dead ones' went

    now = {name: store.meta(key_of(name)) for name in objects}
    assert all(not set(first) & {tuple(s) for s in m["servers"]} for m in now.values())
    second = [s for s, _ in holders([(m["chunk_count"], m["servers"]) for m in now.values()]).most_common(PARITY)]
    kill(sky, second)
    for name, data in objects.items():
        got, meta = ObjectStore(sky, 10).get(key_of(name))
        assert got == data, name
        assert meta["rebuilt"] > 0 or set(second).isdisjoint(tuple(s) for s in meta["servers"]), name


def sats_named(line: str) -> set:
    return {(int(p), int(s)) for p, s in re.findall(r"\((\d+), (\d+)\)", line)}


def test_bench_faults_stripe_cells_are_never_wrong(node_built):
    """`skymemory bench faults --cells dead,slow10x` on a small constellation: coded blocks read whole with two
    satellites dead and with one slow, uncoded ones whole or cleanly missed; nothing wrong, nothing hung."""
    from skymemory.bench import stripe_faults

    dead = stripe_faults.run_cell("dead", 2, 3, blocks=2, block_bytes=150_000, parity=2, repeats=1)
    slow = stripe_faults.run_cell("slow10x", 2, 3, blocks=2, block_bytes=150_000, parity=2, repeats=2)
    rows = {(r.cell, r.parity): r for r in dead + slow}
    assert rows["dead", 2].exact == 2 and rows["dead", 2].rebuilt > 0
    assert rows["dead", 0].miss == 2  # every uncoded block had chunks on the dead
    assert rows["slow10x", 0].exact == rows["slow10x", 2].exact == 4
    assert all(r.wrong == r.hung == 0 for r in rows.values())
    assert "| dead | 2 | 2 | 2 | 0 | 0 | 0 |" in stripe_faults.table(dead + slow)
