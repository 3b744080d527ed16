"""--runtime swarm on a real Docker Swarm: 19x5 satellites as one stack over five swarm nodes.

The five nodes are network namespaces, each with its own dockerd, joined in one swarm with one
manager and labelled skymemory.host=0..4 (swarm_nodes.py); the image is built offline as `make
test-containers` builds it (docker_engine.py) and loaded into every node. The launcher deploys
the stack through the manager; the test then kills one satellite's container on its node and
watches Swarm bring it back. Opt-in: `make test-swarm`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from skymemory.bench.roundtrip import kv_block_round_trip, object_round_trip
from skymemory.launcher import keys, netns, swarm
from skymemory.launcher.sites import sites_of
from skymemory.orbit.manifest import Manifest

import engines
from commands import launcher, opt_in, show, skymemory
from docker_engine import IMAGE, DockerEngine
from live import in_site, unsigned_commands_refused
from swarm_nodes import SwarmNodes

pytestmark = opt_in("swarm", "make test-swarm")

PLANES, SATS, HOSTS = 19, 5, 5
RESTART_BOUND_S = 30  # the bound on a killed satellite answering again (restart delay: 1 s)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("dockerds in network namespaces need root")
    if shutil.which("dockerd") is None or shutil.which("nsenter") is None:
        pytest.skip("Docker is not installed (make test-swarm installs docker.io)")
    why = netns.probe()
    if why:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("swarm")
    archive = work / "image.tar"
    with DockerEngine(work / "engine"):  # builds the image (offline base image), then stops its dockerd if it started one
        subprocess.run(["docker", "save", "-o", str(archive), IMAGE], check=True, capture_output=True, timeout=600)
    pcs = SwarmNodes(HOSTS, work / "nodes", archive)
    with pcs:
        archive.unlink()
        yield pcs
        namespaces = list(pcs.record["namespaces"])
        problems = pcs.close()
    # nothing left: no process of the engines, none in the namespaces, no mount, no namespace
    left = pcs.leftovers()
    followed = sum(len(e.ours) for e in pcs.engines.values())
    print(f"after the test: {len(pcs.engines)} engines stopped ({followed} processes followed until gone), "
          f"{len(namespaces)} namespaces removed; problems {problems}; left {left}")
    assert not problems, problems
    assert not left, left


def as_manager(pcs: SwarmNodes, h: int = 0) -> dict:
    return {**os.environ, "DOCKER_HOST": pcs.socket(h)}


def test_a_worker_or_an_unlabelled_swarm_is_one_line(nodes, tmp_path):
    r = launcher("--runtime", "swarm", "--planes", "2", "--sats", "2", "--manifest", str(tmp_path / "m.json"),
                 "--quiet", env=as_manager(nodes, 1))
    print(show(r))
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"launch_constellation: the Docker engine at {nodes.socket(1)} is a swarm worker; run the launcher against "
        "a manager (DOCKER_HOST)"]
    assert not (tmp_path / "m.json").exists()


def test_19x5_as_a_swarm_stack(nodes, tmp_path):
    manifest = tmp_path / "m.json"
    env = as_manager(nodes)
    r = launcher("--runtime", "swarm", "--planes", str(PLANES), "--sats", str(SATS), "--manifest", str(manifest),
                 "--detach", "--health-timeout", "300", "--sites", "2", env=env)
    print(show(r))
    assert r.returncode == 0, show(r)
    print([line for line in r.stderr.splitlines() if "healthy;" in line][0])
    m = Manifest.load(manifest)
    stack = m.backend["stack"]
    stopped = False
    try:
        # placement: 19 satellites per node, where the manifest says, each its own service
        n = PLANES * SATS
        for h, address in enumerate(nodes.addresses):
            mine = {swarm.service_name(stack, e.plane, e.sat) for e in m.satellites if e.host == address}
            assert len(mine) == n // HOSTS
            running = {name.split(".")[0] for name in nodes.containers(h, stack)}
            assert running == mine, (h, sorted(running ^ mine)[:4])
        r = launcher("status", "--manifest", str(manifest), env=env)
        print(show(r))
        assert r.returncode == 0 and f"{n}/{n} running" in r.stdout

        # the keys: each satellite's own file is a Swarm secret of its own, mounted read-only, owned by the image's
        # user, mode 0400, and holding that satellite's keys only
        secrets = nodes.docker(0, "secret", "ls", "--format", "{{.Name}}").stdout.split()
        assert sorted(secrets) == sorted(f"{stack}_keys-{p}-{s}" for p in range(PLANES) for s in range(SATS))
        container = nodes.containers(2, stack)[0]
        plane, sat = container.split(".")[0].rsplit("sat-", 1)[1].split("-")
        seen = nodes.docker(2, "exec", container, "stat", "-c", "%u %a", keys.CONTAINER_KEY_FILE).stdout.strip()
        mount = [line for line in nodes.docker(2, "exec", container, "cat", "/proc/self/mounts").stdout.splitlines()
                 if f" {keys.CONTAINER_KEY_FILE} " in line]
        head = nodes.docker(2, "exec", container, "grep", "-m", "1", "^skymem-keys", keys.CONTAINER_KEY_FILE).stdout.strip()
        print(f"{container}: {keys.CONTAINER_KEY_FILE} uid/mode {seen}; {mount}; header {head!r}")
        assert seen == f"{swarm.IMAGE_USER} 400" and len(mount) == 1 and " ro," in mount[0]
        assert head == f"skymem-keys 4 satellite {plane} {sat}", head
        for sat in ((0, 0), (PLANES - 1, SATS - 1)):  # on the first node and on the last
            before, after = unsigned_commands_refused(m, sat)
            print(f"satellite {sat}: 2 unsigned commands refused, auth_failures {before} -> {after}")

        r = skymemory("status", "--route", "relay", "--manifest", str(manifest))
        print(show(r))
        assert r.returncode == 0 and f"{n}/{n} satellites answered" in r.stdout, show(r)
        for address in nodes.addresses:
            assert f"({address}): {n // HOSTS}/{n // HOSTS} answered" in r.stdout

        for trip in (object_round_trip(m, 10_000_000, servers=10),
                     kv_block_round_trip(m, servers=10, index_dir=tmp_path / "index")):
            print(trip.describe())
            assert trip.exact, trip.describe()

        between_sites(m, tmp_path)
        kill_one_satellite(nodes, m, manifest, tmp_path)

        r = launcher("stop", "--manifest", str(manifest), env=env)
        print(show(r))
        stopped = r.returncode == 0
        assert stopped and "none left running" in r.stderr, show(r)
    finally:
        if not stopped:
            launcher("stop", "--manifest", str(manifest), env=env)
    assert swarm.leftovers(nodes.manager_host, stack) == []
    # the nodes remove the containers of removed tasks on their own, then the containers' last processes (their
    # shims) exit: waited for while they keep going (engines.until_none), bounded
    containers = engines.until_none(lambda: [(h, c) for h in range(HOSTS) for c in nodes.containers(h, stack)],
                                    quiet_s=60, most_s=300, every_s=0.5)
    assert not containers, containers
    left = engines.until_none(lambda: [(nodes.addresses[h], pid, _cmdline(pid))
                                       for h in range(HOSTS) for pid in nodes.processes(h)],
                              quiet_s=60, most_s=300, every_s=0.5)
    print(f"after stop: no service, secret, config or container of {stack}; processes in the nodes' namespaces "
          f"besides dockerd and containerd: {left}")
    assert not left, left


def between_sites(m: Manifest, tmp_path: Path) -> None:
    """The stack's two ground sites (--sites 2: namespaces joined to the nodes' bridge, each with its own overhead
    satellite): what the first puts up through its overhead, the second gets down through its own."""
    first, second = sites_of(m)
    payload = os.urandom(300_000)
    (tmp_path / "site.kv").write_bytes(payload)
    put = in_site(first.namespace, "put", str(tmp_path / "site.kv"), "--name", "between-sites", "--route", "relay",
                  "--manifest", str(first.manifest))
    assert put.returncode == 0, put.stderr
    get = in_site(second.namespace, "get", "between-sites", "-o", str(tmp_path / "site.out"), "--route", "relay",
                  "--manifest", str(second.manifest))
    assert get.returncode == 0, get.stderr
    assert (tmp_path / "site.out").read_bytes() == payload
    overheads = [Manifest.load(site.manifest).constellation().overhead() for site in (first, second)]
    print(f"sites {first.namespace} and {second.namespace}: put up over {overheads[0]}, got back down over "
          f"{overheads[1]}, {m.constellation().hops(*overheads)} hops apart")
    assert overheads[0] != overheads[1]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "(gone)"


def kill_one_satellite(nodes: SwarmNodes, m: Manifest, manifest, tmp_path) -> None:
    """Kill one satellite's container on its node: Swarm starts it again and it answers within the bound.
    Data with no chunk on it stays byte-exact; data in coded stripes with chunks on it (the default for objects,
    parity=2 for KV blocks) is rebuilt byte-exact from the others; uncoded data (parity 0) with chunks on it is a
    clean miss naming them."""
    import torch

    from skymemory.kv.model.cache_arg import cache_arg
    from skymemory.kv.hf.manager import KVCManager
    from skymemory.kv.model.models import load_model
    from skymemory.store.constellation import ConstellationBlockStore
    from skymemory.store.objects import ObjectStore, key_of

    c = m.constellation()
    nearest = c.nearest(10)
    # a chunk server of the wide data only (stripes of 8 + 2, their parity rotated: each of the ten holds data)
    victim = next(s for s in reversed(nearest[4:8]) if s != c.overhead())
    clear, wide = nearest[:4], nearest
    assert victim not in clear
    e = m.entry(*victim)
    h = nodes.addresses.index(e.host)
    service = swarm.service_name(m.backend["stack"], *victim)
    print(f"victim: satellite {victim}, service {service} on node {h} ({e.host})")

    model, tokenizer = load_model("embedded-tiny", device="cpu", dtype="fp32")
    # not kv_block_round_trip's prompt: that block is cached already, and its record in orbit says so
    prompts = {"clear": [1] + [9 + (i * 7919) % 240 for i in range(128)],
               "wide": [1] + [5 + (i * 104729) % 250 for i in range(128)],
               "uncoded": [1] + [7 + (i * 1299709) % 240 for i in range(128)]}
    stores = {"clear": ConstellationBlockStore.from_manifest(m, clear),
              "wide": ConstellationBlockStore.from_manifest(m, wide, parity=2),
              "uncoded": ConstellationBlockStore.from_manifest(m, wide, parity=0)}
    managers = {k: KVCManager(model, tokenizer, stores[k], block_tokens=128, kv_dtype="fp32", policy="fetch",
                              index_dir=tmp_path / f"index-{k}") for k in stores}
    objects = {"clear": ObjectStore(m, len(clear)), "wide": ObjectStore(m, len(wide)),
               "uncoded": ObjectStore(m, len(wide), parity=0)}
    data = {k: os.urandom(1_000_000) for k in objects}

    def generate(result) -> list[int]:
        with torch.no_grad():
            out = model.generate(result.input_ids, attention_mask=result.attention_mask,
                                 **cache_arg(model, result.cache), max_new_tokens=6, do_sample=False)
        return out[0, result.input_ids.shape[1]:].tolist()

    def clear_data_exact() -> None:
        assert objects["clear"].get(key_of("clear"))[0] == data["clear"]
        hit = managers["clear"].get_cache(prompts["clear"])
        assert hit.prefix_tokens == 128 and hit.miss_reason is None

    try:
        for k in objects:
            objects[k].put(k, data[k])
            assert managers[k].add_blocks(prompts[k]).blocks_stored == 1
        reference = {k: generate(managers[k].get_cache(prompts[k], policy="recompute")) for k in prompts}
        clear_data_exact()
        # a command the ground signs now, sent only after the restart: the restarted node's replay floor
        # (its start time) must refuse it
        replayed = recorded_set_chunk(m, victim)
        before = stats(m, victim)

        killed = nodes.docker(h, "ps", "-q", "--filter", f"label=com.docker.swarm.service.name={service}",
                              check=True).stdout.split()
        assert len(killed) == 1
        nodes.docker(h, "kill", killed[0], check=True)
        t0 = time.monotonic()
        back_s, silent_seen, rounds = None, False, 0
        while back_s is None:
            assert time.monotonic() - t0 < RESTART_BOUND_S, f"{victim} not answering {RESTART_BOUND_S} s after the kill"
            clear_data_exact()  # throughout: the data with no chunk on the victim
            rounds += 1
            r = skymemory("status", "--manifest", str(manifest), "--timeout", "0.3")
            if r.returncode == 0 and f"{m.planes * m.sats}/{m.planes * m.sats} satellites answered" in r.stdout:
                back_s = time.monotonic() - t0
            else:
                silent_seen = silent_seen or f"UNHEALTHY, silent: {victim[0]}-{victim[1]}" in r.stdout
        after = stats(m, victim)
        restarted = nodes.docker(h, "ps", "-q", "--filter", f"label=com.docker.swarm.service.name={service}",
                                 check=True).stdout.split()
        print(f"killed container {killed[0]} of {service}; Swarm started {restarted}; skymemory status healthy "
              f"again {back_s:.1f} s after the kill (victim seen silent: {silent_seen}); clear data byte-exact "
              f"in {rounds} rounds meanwhile; victim uptime {before.uptime_s} s -> {after.uptime_s} s, chunks "
              f"{before.chunks} -> {after.chunks}")
        assert len(restarted) == 1 and restarted != killed
        assert before.chunks > 0 and after.chunks == 0 and after.uptime_s < before.uptime_s + back_s

        failures = send_raw(m, victim, replayed)
        print(f"a command signed before the restart, sent after it: auth_failures {after.auth_failures} -> "
              f"{failures}, chunks {stats(m, victim).chunks}")
        assert failures == after.auth_failures + 1 and stats(m, victim).chunks == 0

        clear_data_exact()
        # the coded object with chunks on the victim: rebuilt from the rest of each stripe, byte-exact, by the CLI
        out = tmp_path / "wide.bin"
        r = skymemory("get", "wide", "-o", str(out), "--manifest", str(manifest), "--timeout", "20")
        print(show(r))
        assert r.returncode == 0 and out.read_bytes() == data["wide"], r.stderr
        assert "chunks rebuilt from parity" in r.stderr, r.stderr  # the victim's data chunks, rebuilt
        # the uncoded object with chunks on the victim: exit 1, one line saying how many of its chunks are
        # missing: exactly the victim's (chunk i is on the (i mod 10)-th nearest satellite)
        out = tmp_path / "uncoded.bin"
        r = skymemory("get", "uncoded", "-o", str(out), "--manifest", str(manifest), "--timeout", "20")
        print(show(r))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr and not out.exists()
        missing = re.search(r"(\d+) of (\d+) chunks of block [0-9a-f]+ missing", lines[0])
        assert missing, lines[0]
        total = int(missing.group(2))
        assert int(missing.group(1)) == len(range(wide.index(victim), total, len(wide))), lines[0]
        # the coded KV block with chunks on the victim: a whole hit, nothing recomputed, the same tokens
        hit = managers["wide"].get_cache(prompts["wide"])
        print(f"coded KV block with chunks on the victim: prefix {hit.prefix_tokens} tokens, miss {hit.miss_reason}")
        assert hit.prefix_tokens == 128 and hit.miss_reason is None
        assert generate(hit) == reference["wide"]
        # the uncoded one: a miss, recomputed, the same tokens as before
        hit = managers["uncoded"].get_cache(prompts["uncoded"])
        print(f"uncoded KV block with chunks on the victim: prefix {hit.prefix_tokens} tokens, miss {hit.miss_reason}")
        assert hit.prefix_tokens == 0 and hit.miss_reason is not None
        assert generate(hit) == reference["uncoded"]
        assert generate(managers["clear"].get_cache(prompts["clear"])) == reference["clear"]
    finally:
        for store in stores.values():
            store.close()


def stats(m: Manifest, sat):
    from skymemory.link.client import SkyMemoryClient
    from skymemory.protocol.auth import signer_for_manifest

    async def go():
        async with SkyMemoryClient(m.ground_addresses(), signer=signer_for_manifest(m), bind=(m.ground_host, 0),
                                   timeout=0.5, retries=6) as client:
            return await client.stats(sat)

    return asyncio.run(go())


def recorded_set_chunk(m: Manifest, sat) -> bytes:
    """A SET_CHUNK to `sat`, signed with the ground key now (as an eavesdropper would record it)."""
    from skymemory.protocol import auth, wire

    block = hashlib.sha256(b"recorded-before-the-restart").digest()
    route = wire.RouteHeader(sat[0], sat[1], request_id=4343)
    packet = wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(
        wire.make_desc(block, 0, 1, int(time.time() * 1000), b"recorded"), b"recorded"))
    return auth.signer_for_manifest(m).sign(packet)


def send_raw(m: Manifest, sat, packet: bytes) -> int:
    """Send one datagram to the satellite's ground port; wait until its auth_failures moves (bounded); return it."""
    before = stats(m, sat).auth_failures
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(packet, m.ground_addresses()[sat])
    deadline = time.monotonic() + 10  # a bound on the datagram's arrival, not a measurement
    while (now := stats(m, sat).auth_failures) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    return now

