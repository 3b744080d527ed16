"""The KV index in orbit, on real nodes (issue 37): a ground host with its own index finds the blocks another host
stored, through their records on their home satellites; a record is found while one of its homes lives and is a
clean miss when none does; a record a satellite planted or swapped is no record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.index.orbit_records import OrbitRecords, record_key
from skymemory.link.client import SkyMemoryClient
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest
from skymemory.store.constellation import ConstellationBlockStore

from kv_support import random_prompt, tiny
from live import REPO, ground_host_elsewhere, launch, launch_netns, stop

BLOCK = 16


@pytest.fixture
def sky(node_built, tmp_path):
    path = launch(tmp_path, 4, 4)
    try:
        yield path, Manifest.load(path)
    finally:
        r = stop(path)
        assert r.returncode == 0, r.stderr


def manager(sky_manifest, index_dir, **kw) -> tuple[KVCManager, ConstellationBlockStore]:
    model, tokenizer = tiny("fp32")
    store = ConstellationBlockStore.nearest_from_manifest(sky_manifest, 10)
    return KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=index_dir,
                      policy="fetch", **kw), store


SECOND_HOST = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[3])
    from kv_support import tiny
    from skymemory.kv.hf.manager import KVCManager
    from skymemory.kv.hf.report import compare_generation
    from skymemory.orbit.manifest import Manifest
    from skymemory.store.constellation import ConstellationBlockStore
    model, tokenizer = tiny("fp32")
    with ConstellationBlockStore.nearest_from_manifest(Manifest.load(sys.argv[1]), 10) as store:
        manager = KVCManager(model, tokenizer, store, block_tokens=16, kv_dtype="fp32", index_dir=sys.argv[2],
                             policy="fetch")
        out = []
        for prompt in json.loads(sys.stdin.read()):
            source = manager.find_prefix(prompt).source
            c = compare_generation(manager, prompt, new_tokens=6)
            out.append({"source": source, "prefix_tokens": c.prefix_tokens, "cached": c.cached,
                        "reference": c.reference, "then": manager.find_prefix(prompt).source})
    print(json.dumps(out))
""")


def test_a_second_ground_host_finds_the_blocks_the_first_stored(sky, tmp_path):
    path, m = sky
    first, store = manager(m, tmp_path / "host-a")
    prompts = [random_prompt(4 * BLOCK + 3, seed=37 + i) for i in range(2)]
    with store:
        for prompt in prompts:
            assert first.add_blocks(prompt).blocks_stored == 4
        assert first.orbit.counters["published"] == 8
    # another process, another index (empty): the records in orbit lead it to every block
    r = subprocess.run([sys.executable, "-c", SECOND_HOST, str(path), str(tmp_path / "host-b"),
                        str(REPO / "tests")], input=json.dumps(prompts), capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(REPO / "ground")}, timeout=300)
    assert r.returncode == 0, r.stderr
    for seen in json.loads(r.stdout):
        assert seen["source"] == "orbit" and seen["then"] == "index"  # learnt into its own index
        assert seen["prefix_tokens"] == 4 * BLOCK  # every block a hit
        assert seen["cached"] == seen["reference"]  # the tokens of no cache


def test_a_ground_host_in_another_network_namespace_finds_what_this_one_stored(node_built, tmp_path):
    """The satellites on three emulated hosts (--netns 3); this process stores from the ground address, and a
    second ground host, a process in another network namespace at another address with an index of its own,
    finds every block through the records in orbit."""
    path = launch_netns(tmp_path, 3, 3, 3)
    try:
        m = Manifest.load(path)
        first, store = manager(m, tmp_path / "host-a")
        prompts = [random_prompt(3 * BLOCK + 5, seed=137)]
        with store:
            assert first.add_blocks(prompts[0]).blocks_stored == 3
        namespace, other = ground_host_elsewhere(path, tmp_path / "manifest-elsewhere.json")
        r = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", SECOND_HOST, str(other),
                            str(tmp_path / "host-b"), str(REPO / "tests")], input=json.dumps(prompts),
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "ground")},
                           timeout=300)
        assert r.returncode == 0, r.stderr
        (seen,) = json.loads(r.stdout)
        assert seen["source"] == "orbit" and seen["prefix_tokens"] == 3 * BLOCK
        assert seen["cached"] == seen["reference"]
    finally:
        r = stop(path)
        assert r.returncode == 0, r.stderr


def test_a_record_is_found_while_one_home_lives(sky, tmp_path):
    _, m = sky
    first, store = manager(m, tmp_path / "host-a")
    prompt = random_prompt(2 * BLOCK + 3, seed=7)
    with store:
        hashes = first.add_blocks(prompt).hashes
        homes = store.record_homes(record_key(hashes[0]))
        assert len(homes) == 3
        pids = {(e.plane, e.sat): e.pid for e in m.satellites}
        for dead in range(len(homes) + 1):
            if dead:
                os.kill(pids[homes[dead - 1]], signal.SIGKILL)
            # a fresh host each time: nothing in its index, nothing remembered absent
            orbit = OrbitRecords(store, timeout_s=1.0)
            found = orbit.find(first.root, hashes[:1])
            if dead < len(homes):
                assert [e.block_hash for e in found] == hashes[:1], f"{dead} homes dead"
            else:
                assert found == [] and orbit.counters["timeouts"] == 1  # a clean miss, ended by the timeout


def test_a_planted_or_swapped_record_is_no_record(sky, tmp_path):
    _, m = sky
    first, store = manager(m, tmp_path / "host-a")
    prompts = [random_prompt(BLOCK + 3, seed=70), random_prompt(BLOCK + 3, seed=71)]
    with store:
        mine, other = (first.add_blocks(p).hashes[0] for p in prompts)
        key = record_key(mine)
        homes = store.record_homes(key)
        # what a captured satellite could do with what it holds: keep another block's sealed record under this
        # block's key (it does not open: the key is in its associated data), or a record in the clear
        swapped = store.first_copies([record_key(other)], lambda _k, _h, blob: bytes(blob), 1.0)[0]
        forged = json.dumps({"v": 1, "hash": mine.hex(), "parent": first.root.hex()}).encode()
        client_options = {"signer": signer_for_manifest(m)}

        async def plant(copies):
            async with SkyMemoryClient(m.ground_addresses(), mission_ms=m.constellation().mission_ms,
                                       bind=(m.ground_host, 0), **client_options) as client:
                for home, blob in zip(homes, copies):
                    await client.evict_block(home, key)
                    if blob is not None:
                        await client.set_chunk(home, key, 0, 1, blob)

        import asyncio

        asyncio.run(plant([swapped, forged, None]))  # two homes lie, the third lost its copy
        orbit = OrbitRecords(store, timeout_s=1.0)
        assert orbit.find(first.root, [mine]) == []
        assert orbit.counters["bad_copies"] == 2
        second, _ = manager(m, tmp_path / "host-b", orbit=orbit, probe=False)  # the orbit alone (a probe of the
        assert second.find_prefix(prompts[0]).source == "none"  # data would find it): a miss, not other bytes

        first.orbit.publish([first.index.get(mine)])  # its host publishes it again: every copy genuine
        assert [e.block_hash for e in OrbitRecords(store).find(first.root, [mine])] == [mine]
