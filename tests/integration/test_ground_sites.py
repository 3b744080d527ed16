"""Two ground sites far apart (launcher --sites, issue 54): a prefill site puts an object up over its own
overhead satellite, a decode site gets it back down over its own, through the ISLs between them.

Each site is a network namespace of its own on the emulated hosts' bridge, with its own address, overhead
satellite, station id and manifest; its commands run there (`ip netns exec NS python -m skymemory ...`). Which
satellites' ground links carried the traffic is read from their ISL_ROUTER housekeeping (rx_ground, tx_ground:
packets in and out of their ground port), asked for from the main ground in the root namespace."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from skymemory.launcher import netns, sites
from skymemory.orbit.manifest import Manifest, ManifestError
from skymemory.protocol import wire

from live import LAUNCHER, REPO, in_site, launched_sites

Sat = tuple[int, int]


def ground_link_counters(m: Manifest) -> dict[Sat, tuple[int, int]]:
    """(rx_ground, tx_ground) of every satellite, from its ISL_ROUTER housekeeping (an HK request padded to the
    answer's length, which a native node answers to its sender; each request counts once in rx_ground and its
    answer once in tx_ground). Bounded: a few rounds of 1 s for the satellites that have not answered."""
    request = wire.encode_hk_request(wire.ISL_ROUTER_SEND_HK_MID)
    out: dict[Sat, tuple[int, int]] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((m.ground_host, 0))
        for _ in range(5):
            for sat, address in m.ground_addresses().items():
                if sat not in out:
                    s.sendto(request, address)
            deadline = time.monotonic() + 1.0
            while len(out) < len(m.satellites) and time.monotonic() < deadline:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    packet = s.recv(65535)
                except TimeoutError:
                    break
                if int.from_bytes(packet[:2], "big") & 0x1FFF != wire.ISL_ROUTER_HK_TLM_MID & 0x1FFF:
                    continue
                hk = wire.decode_router_hk(packet)[2]
                out[(hk.plane, hk.sat)] = (hk.rx_ground, hk.tx_ground)
            if len(out) == len(m.satellites):
                return out
    raise AssertionError(f"no ISL_ROUTER housekeeping from {sorted(set(m.ground_addresses()) - set(out))}")


def moved(before: dict, after: dict) -> dict[Sat, tuple[int, int]]:
    return {s: (after[s][0] - before[s][0], after[s][1] - before[s][1]) for s in before}


def carried_by(delta: dict[Sat, tuple[int, int]], packets: int) -> Sat:
    """The one satellite whose ground link carried the transfer (at least `packets` in and out); every other's
    carried at most our housekeeping requests (one each, a few with a resend)."""
    busy = [s for s, (rx, tx) in delta.items() if rx >= packets and tx >= packets]
    assert len(busy) == 1, f"ground links that carried the transfer: {busy}; per satellite (rx, tx): {delta}"
    quiet = {s: d for s, d in delta.items() if s != busy[0] and max(d) > 5}
    assert not quiet, f"other ground links carried traffic too: {quiet}"
    return busy[0]


def test_prefill_site_puts_up_its_overhead_and_decode_site_gets_down_its_own(node_path, tmp_path):
    payload = os.urandom(200_000)  # 33+ chunks of 6 KiB: far more than the housekeeping requests
    (tmp_path / "prompt.kv").write_bytes(payload)
    # a rotation step of ~16 days (time scale 1e-3): the overhead satellites stay where they are during the test
    with launched_sites(tmp_path, 3, 4, 3, 2, "--time-scale", "0.001") as (manifest, pair):
        m = Manifest.load(manifest)
        assert [s.address for s in pair] == ["10.77.0.253", "10.77.0.252"]
        prefill, decode = (Manifest.load(s.manifest) for s in pair)
        assert [site.ground_netns for site in (prefill, decode)] == [s.namespace for s in pair]
        assert [site.ground_host for site in (prefill, decode)] == [s.address for s in pair]
        assert len({m.ground_station, prefill.ground_station, decode.ground_station}) == 3
        up, down = prefill.constellation().overhead(), decode.constellation().overhead()
        assert tuple(prefill.ground_overhead) == tuple(m.ground_overhead) == (1, 2)  # site 0: the main overhead
        assert up != down and m.constellation().hops(up, down) == 3  # (1, 2) and (2, 0): as far apart as 3x4 has
        status = subprocess.run([sys.executable, str(LAUNCHER), "status", "--manifest", str(manifest)],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and all(s.namespace in status.stdout for s in pair), status.stdout

        before = ground_link_counters(m)
        put = in_site(pair[0].namespace, "put", str(tmp_path / "prompt.kv"), "--name", "prompt", "--route", "relay",
                      "--manifest", str(pair[0].manifest))
        assert put.returncode == 0, put.stderr
        after_put = ground_link_counters(m)
        got = tmp_path / "loaded.kv"
        get = in_site(pair[1].namespace, "get", "prompt", "-o", str(got), "--route", "relay",
                      "--manifest", str(pair[1].manifest))
        assert get.returncode == 0, get.stderr
        after_get = ground_link_counters(m)
        assert got.read_bytes() == payload
        assert (prefill.constellation().overhead(), decode.constellation().overhead()) == (up, down)

        chunks = len(payload) // m.chunk_size
        assert carried_by(moved(before, after_put), chunks) == up  # up over the prefill site's overhead
        assert carried_by(moved(after_put, after_get), chunks // 2) == down  # down over the decode site's
        print(f"put up over {up}: ground link (rx, tx) {moved(before, after_put)[up]}; get down over {down}: "
              f"{moved(after_put, after_get)[down]}; {m.constellation().hops(up, down)} hops apart")
    # stopped: the site namespaces and their manifests are gone with the constellation
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(s.namespace in listed for s in pair)
    assert not any(s.manifest.exists() for s in pair) and not manifest.exists()


def test_a_site_manifest_is_not_the_one_stop_takes(node_path, tmp_path):
    """`stop` / `status` with a site's manifest say which manifest to use and stop nothing; a process still in a
    site namespace makes `stop` fail naming it (its user ends it), the next stop then succeeds."""
    with launched_sites(tmp_path, 2, 2, 2, 1) as (manifest, [site]):
        for action in ("stop", "status"):
            r = subprocess.run([sys.executable, str(LAUNCHER), action, "--manifest", str(site.manifest)],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 1 and f"--manifest {manifest.resolve()}" in r.stderr, r.stderr
        assert manifest.exists() and site.manifest.exists()
        sleeper = subprocess.Popen([*netns.exec_prefix(site.namespace), "sleep", "60"])
        try:
            deadline = time.monotonic() + 10
            while not netns.namespace_pids(site.namespace) and time.monotonic() < deadline:
                time.sleep(0.05)
            r = subprocess.run([sys.executable, str(LAUNCHER), "stop", "--manifest", str(manifest)],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 1 and f"in ground site namespace {site.namespace}" in r.stderr, r.stderr
        finally:
            sleeper.kill()
            sleeper.wait()


def test_bad_sites_are_rejected(tmp_path, capsys):
    from skymemory.launcher.options import parse_args

    for args, said in ((["--sites", "2"], "needs --netns"),
                       (["--sites", "0", "--netns", "3"], "--sites: must be in 1..8, got 0"),
                       (["--sites", "9", "--netns", "3"], "--sites: must be in 1..8, got 9"),
                       (["--sites", "x", "--netns", "3"], "--sites: not an integer"),
                       (["--netns", "250", "--sites", "8", "--planes", "16", "--sats", "16"], "at most 245 hosts"),
                       (["--netns", "1", "--sites", "2", "--planes", "1", "--sats", "1"], "share an overhead"),
                       (["--runtime", "docker", "--sites", "2"], "needs --netns H (or --runtime swarm")):
        with pytest.raises(SystemExit) as e:
            parse_args([*args, "--manifest", str(tmp_path / "m.json")])
        err = capsys.readouterr().err
        assert e.value.code == 2 and said in err, (args, err)
    r = subprocess.run([sys.executable, str(LAUNCHER), "--sites", "2", "--manifest", str(tmp_path / "m.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--sites 2 needs --netns H" in r.stderr and not (tmp_path / "m.json").exists()
    ok = parse_args(["--netns", "3", "--sites", "2", "--planes", "3", "--sats", "4"])
    assert sites.overheads(ok.planes, ok.sats, ok.overhead, ok.sites) == [(1, 2), (2, 0)]
    assert sites.overheads(8, 8, (4, 4), 4) == [(4, 4), (6, 6), (0, 0), (2, 2)]  # spread evenly


def test_the_manifest_schema_checks_the_sites():
    m = Manifest(planes=3, sats=3, ground_station=5)
    m.sites = [{"site": 0, "namespace": "skmab-s0", "address": "10.77.0.253", "ground_station": 6,
                "ground_overhead": [1, 1], "manifest": "/run/m.site-0.json"}]
    good = json.loads(m.to_json())
    good["satellites"] = [{"plane": p, "sat": s, "host": "10.77.0.1", "isl_port": 20000 + 3 * p + s,
                           "ground_port": 30000 + 3 * p + s} for p in range(3) for s in range(3)]
    assert Manifest.from_dict(good).sites == m.sites
    for change, said in (({"ground_station": 5}, "ground_station 5 is also the main ground's"),
                         ({"address": "10.77.0.999"}, "must be an IPv4 address"),
                         ({"ground_overhead": [3, 0]}, "outside the 3x3 grid"),
                         ({"site": 1}, "entry 0 must be site 0"),
                         ({"color": "red"}, "color is not a site field"),
                         ({"namespace": ""}, "must not be empty")):
        bad = json.loads(json.dumps(good))
        bad["sites"][0].update(change)
        with pytest.raises(ManifestError, match=said):
            Manifest.from_dict(bad)
    missing = json.loads(json.dumps(good))
    del missing["sites"][0]["manifest"]
    with pytest.raises(ManifestError, match="manifest is missing"):
        Manifest.from_dict(missing)


ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 40000))
print("ready", flush=True)
s.settimeout(30)
data, peer = s.recvfrom(100)
s.sendto(data, peer)
"""
ASK = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
s.sendto(b"hello", (sys.argv[1], 40000))
print(s.recvfrom(100)[0].decode())
"""


def test_sites_join_a_bridge_other_machines_are_on(tmp_path):
    """--runtime swarm's way (netns.bridge_for, netns.join_sites): ground sites joined to the bridge an emulated
    machine is on, with the free addresses from the top of its subnet; they reach it; teardown leaves the bridge."""
    why = netns.probe()
    if why:
        pytest.skip(why)
    try:
        machines = netns.build(2, subnet="10.76.0.")  # two emulated machines on a bridge, as the swarm nodes are
    except netns.NetnsUnavailable as exc:
        if "already in use" in str(exc):
            pytest.skip("10.76.0.0/24 is taken by another run right now")
        raise
    record = {}
    try:
        found = netns.bridge_for(["10.76.0.1", "10.76.0.2"])
        assert found is not None and found[0] == machines["bridge"] and str(found[1]) == "10.76.0.254/24"
        assert netns.bridge_for(["10.76.0.1", "192.0.2.7"]) is None
        record = netns.join_sites(*found, ["10.76.0.1", "10.76.0.2", "10.76.0.253"], 2)
        assert record["site_addresses"] == ["10.76.0.252", "10.76.0.251"]  # below the bridge's, past a used one
        echo = subprocess.Popen([*netns.exec_prefix(machines["namespaces"][0]), sys.executable, "-c", ECHO,
                                 "10.76.0.1"], stdout=subprocess.PIPE, text=True)
        try:
            assert echo.stdout.readline().strip() == "ready"
            r = subprocess.run([*netns.exec_prefix(record["site_namespaces"][1]), sys.executable, "-c", ASK,
                                "10.76.0.1"], capture_output=True, text=True, timeout=30)
            assert r.returncode == 0 and r.stdout.strip() == "hello", r.stderr
        finally:
            echo.kill()
            echo.wait()
        assert netns.teardown(record) == []
        assert not any(netns.namespace_exists(ns) for ns in record["site_namespaces"])
        assert subprocess.run(["ip", "link", "show", machines["bridge"]], capture_output=True).returncode == 0
    finally:
        netns.teardown(record)
        netns.teardown(machines)
