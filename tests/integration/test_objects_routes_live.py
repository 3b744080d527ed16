"""Named objects over each route, and a failed put leaving nothing behind (issue 14), on real nodes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest
from skymemory.protocol.errors import SkyMemoryError
from skymemory.protocol.seal import ContentKeys
from skymemory.store.objects import ObjectStore, PutFailed, key_of
from skymemory.store.routes import ROUTES

from live import REPO, launched

SERVERS = 5


def stats_of(m) -> dict:
    """STATS of every satellite that answers (straight to its own ground port), within a few seconds."""
    async def collect():
        async with SkyMemoryClient(m.ground_addresses(), timeout=0.3, retries=3, bind=(m.ground_host, 0),
                                   signer=signer_for_manifest(m)) as client:
            async def one(sat):
                try:
                    return sat, await client.stats(sat)
                except SkyMemoryError:
                    return sat, None

            return dict(await asyncio.gather(*(one((e.plane, e.sat)) for e in m.satellites)))

    return {s: st for s, st in asyncio.run(collect()).items() if st is not None}


@pytest.mark.parametrize("route", ROUTES)
def test_put_get_round_trip_over_each_route(constellation, route):
    m = constellation
    data = os.urandom(250_000)
    before = sum(st.forwarded for st in stats_of(m).values())
    meta = ObjectStore(m, SERVERS, route=route, timeout_s=20).put(f"object-over-{route}", data)
    got, _ = ObjectStore(m, SERVERS, route=route, timeout_s=20).get(key_of(f"object-over-{route}"))
    assert got == data
    forwarded = sum(st.forwarded for st in stats_of(m).values()) - before
    # relay goes up through the overhead satellite and over ISL to the others; direct and auto (every
    # satellite of a launched constellation has a ground link) go up each satellite's own
    if route == "relay":
        assert forwarded >= meta["chunk_count"] // 2, forwarded
    else:
        assert forwarded == 0, forwarded


def test_status_over_each_route(constellation, tmp_path):
    manifest = constellation.save(tmp_path / "manifest.json")
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    for args in (["--route", "direct"], ["--route", "relay"], ["--route", "auto"], ["--via-overhead"]):
        r = subprocess.run([sys.executable, "-m", "skymemory", "status", *args, "--manifest", str(manifest)],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0 and "16/16 satellites answered" in r.stdout, (args, r.stderr)
        deprecated = "--via-overhead is deprecated; use --route relay" in r.stderr
        assert deprecated == (args == ["--via-overhead"]), (args, r.stderr)


def test_put_get_paced_to_an_emulated_link(node_path, tmp_path):
    """--bandwidth-mbps 8: the manifest records it, put and get pace to it (relay: one ground link)."""
    with launched(tmp_path, 3, 3, "--bandwidth-mbps", "8") as manifest:
        m = Manifest.load(manifest)
        told = []
        kv = ObjectStore(m, SERVERS, route="relay", timeout_s=30, say=told.append)
        data = os.urandom(300_000)
        kv.put("paced", data)
        got, _ = kv.get(key_of("paced"))
        assert got == data
        assert sum("paced to 0.90 MB/s" in t for t in told) == 2, told  # the put and the get


@pytest.fixture()
def cluster(node_path):
    cl = Cluster(3, 3).start_all()
    try:
        yield cl
    finally:
        cl.close()


def test_a_failed_put_evicts_what_it_stored(cluster, tmp_path):
    m = cluster.manifest()  # a Cluster writes no content keys (the launcher does): the ground's own, here
    m.content_key_file = str(ContentKeys.new().save(tmp_path / "content.keys"))
    fresh = stats_of(m)  # a node's own bookkeeping is in bytes_used from the start
    kv = ObjectStore(m, SERVERS, timeout_s=3)
    servers = kv.c.nearest(SERVERS)
    cluster.kill(servers[-1])  # its chunks are never acknowledged: the put must fail by its deadline
    told = []
    kv.say = told.append
    with pytest.raises(PutFailed) as failed:
        kv.put("doomed", os.urandom(400_000))
    assert "not acknowledged by the deadline" in str(failed.value)
    assert failed.value.evicted > 0 and failed.value.satellites == SERVERS - 1, str(failed.value)
    assert str(servers[-1]) in str(failed.value)  # the dead one is named: nothing could be evicted there
    assert any("failed after" in t for t in told) and any("cleanup" in t for t in told), told
    left = stats_of(m)
    assert len(left) == 8 and all(st.chunks == 0 and st.bytes_used == fresh[s].bytes_used
                                  for s, st in left.items()), left

    # the same through the command line: exit 1, one line that says what was evicted
    manifest = m.save(tmp_path / "manifest.json")
    src = tmp_path / "object.bin"
    src.write_bytes(os.urandom(400_000))
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    r = subprocess.run([sys.executable, "-m", "skymemory", "put", str(src), "--servers", str(SERVERS),
                        "--timeout", "3", "--manifest", str(manifest)], capture_output=True, text=True, env=env,
                       timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith("skymemory put: put failed: ") and "evicted" in lines[0], lines
    assert all(st.chunks == 0 and st.bytes_used == fresh[s].bytes_used for s, st in stats_of(m).items())
