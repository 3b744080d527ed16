"""--hosts against real OpenSSH servers: the paper's split, 19 satellites on each of 5 mini PCs.

The mini PCs are network namespaces, each running its own sshd on its own address with a key
made here (minipcs.py). The launcher copies the node binary and the constellation's key file
to every host over ssh, starts each host's nodes there (keyed: unsigned commands are refused),
and they talk to each other over the hosts' addresses (ISLs between hosts). Opt-in:
`make test-hosts`.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from skymemory.bench.roundtrip import kv_block_round_trip, object_round_trip
from skymemory.launcher import keys, netns
from skymemory.orbit.manifest import Manifest

from commands import launcher, opt_in, show, skymemory
from live import unsigned_commands_refused
from minipcs import SSHD, MiniPCs

pytestmark = opt_in("hosts", "make test-hosts")

PLANES, SATS, HOSTS = 19, 5, 5


@pytest.fixture(scope="module")
def pcs(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("emulated mini PCs need root (network namespaces, sshd)")
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server is not installed (make test-hosts installs it)")
    why = netns.probe()
    if why:
        pytest.skip(why)
    pcs = MiniPCs(HOSTS, tmp_path_factory.mktemp("minipcs"))
    with pcs:
        yield pcs
        problems = pcs.close()
    assert not problems, problems


def hosts_args(pcs: MiniPCs, manifest) -> list[str]:
    return ["--manifest", str(manifest), "--hosts", ",".join(pcs.destinations), "--ssh-config", pcs.ssh_config,
            "--remote-dir", pcs.remote_dir, "--planes", str(PLANES), "--sats", str(SATS), "--detach",
            "--health-timeout", "120"]


def test_a_host_without_the_node_binary_is_named(pcs, node_path, tmp_path):
    r = launcher(*hosts_args(pcs, tmp_path / "m.json"))  # no --copy-node, and no skymem_node on their PATH
    print(show(r))
    assert r.returncode == 1
    assert f"ssh {pcs.destinations[0]} failed" in r.stderr and "no node binary" in r.stderr
    assert not (tmp_path / "m.json").exists()
    assert all(pcs.processes(h) == [] for h in range(HOSTS))
    assert not any((pcs.dir / f"pc{h}" / keys.REMOTE_KEY_DIR).exists() for h in range(HOSTS))  # removed again


def test_a_host_the_key_cannot_reach_stops_the_launch(pcs, node_path, tmp_path):
    """The third host's sshd is down: its key cannot be copied, so the launch stops, with one line naming
    it, rather than start that host's nodes unauthenticated; the hosts already started are torn down."""
    down = 2
    pcs.stop_sshd(down)
    try:
        r = launcher(*hosts_args(pcs, tmp_path / "m.json"), "--copy-node")
    finally:
        pcs.start_sshd(down)
    print(show(r))
    assert r.returncode == 1
    assert f"cannot be copied to {pcs.destinations[down]}:{keys.remote_key_dir(pcs.remote_dir)}" in r.stderr
    assert "the launch stops rather than run unauthenticated" in r.stderr
    assert not (tmp_path / "m.json").exists()
    assert all(pcs.processes(h) == [] for h in range(HOSTS))
    assert not any((pcs.dir / f"pc{h}" / keys.REMOTE_KEY_DIR).exists() for h in range(HOSTS))


def test_19x5_over_five_ssh_hosts(pcs, node_path, tmp_path):
    manifest = tmp_path / "m.json"
    r = launcher(*hosts_args(pcs, manifest), "--copy-node")
    print(show(r))
    assert r.returncode == 0, show(r)
    m = Manifest.load(manifest)
    stopped = False
    try:
        # 19 satellites per host, each a process in that host's namespace, started from the copied binary
        for h, dest in enumerate(pcs.destinations):
            mine = [e for e in m.satellites if e.remote == dest]
            assert len(mine) == PLANES * SATS // HOSTS and {e.host for e in mine} == {dest}
            assert {e.pid for e in mine} <= set(pcs.processes(h))
            assert (pcs.dir / f"pc{h}" / "skymem_node").is_file()  # on that host's own disk
        r = launcher("status", "--manifest", str(manifest))
        print(show(r))
        assert r.returncode == 0 and "95/95 satellites running" in r.stdout

        # keyed: every host holds a 0600 copy of the key files of its own satellites (not the ground's), each
        # node started with its own, and a satellite refuses unsigned commands (counted as auth failures)
        assert m.auth_key_file and os.path.dirname(m.auth_key_file) == m.run_dir
        for h, dest in enumerate(pcs.destinations):
            e = next(e for e in m.satellites if e.remote == dest)
            copy = pcs.dir / f"pc{h}" / keys.REMOTE_KEY_DIR / f"{e.plane}-{e.sat}.keys"  # that host's disk
            assert stat.S_IMODE(copy.stat().st_mode) == 0o600, copy
            assert copy.read_bytes() == keys.satellite_key_file(m.auth_key_file, e.plane, e.sat).read_bytes()
            argv = Path(f"/proc/{e.pid}/cmdline").read_bytes().split(b"\0")
            assert argv[argv.index(b"--auth-keys") + 1].decode() == keys.remote_key_file(pcs.remote_dir, e.plane, e.sat)
        for sat in ((0, 0), (PLANES - 1, SATS - 1)):  # on the first host and on the last
            before, after = unsigned_commands_refused(m, sat)
            print(f"satellite {sat} on {next(e.remote for e in m.satellites if (e.plane, e.sat) == sat)}: "
                  f"2 unsigned commands refused, auth_failures {before} -> {after}")

        # every satellite answers through the overhead satellite: requests cross the hosts over ISL
        r = skymemory("status", "--route", "relay", "--manifest", str(manifest))
        print(show(r))
        assert r.returncode == 0 and "95/95 satellites answered" in r.stdout, show(r)

        for trip in (object_round_trip(m, 10_000_000, servers=10),
                     kv_block_round_trip(m, servers=10, index_dir=tmp_path / "index")):
            print(trip.describe())
            assert trip.exact, trip.describe()

        # one host's nodes die: both status commands name that host
        dead = 3
        pids = " ".join(str(e.pid) for e in m.satellites if e.remote == pcs.destinations[dead])
        assert pcs.ssh(dead, f"kill -9 {pids}").returncode == 0
        r = launcher("status", "--manifest", str(manifest))
        print(show(r))
        assert r.returncode == 1 and f"{pcs.destinations[dead]}: 0/19 satellites running" in r.stdout
        assert f"unhealthy: {pcs.destinations[dead]} (0/19 running)" in r.stdout
        r = skymemory("status", "--manifest", str(manifest), "--timeout", "0.3")
        print(show(r))
        assert r.returncode == 1 and f"ssh host {pcs.destinations[dead]}: 0/19 answered; UNHEALTHY" in r.stdout
        assert f"ssh host {pcs.destinations[0]}: 19/19 answered" in r.stdout

        # a host drops off the network (its sshd stops): named as unreachable, and back
        gone = 4
        pcs.stop_sshd(gone)
        r = launcher("status", "--manifest", str(manifest))
        print(show(r))
        assert r.returncode == 1 and f"{pcs.destinations[gone]}: unreachable over ssh" in r.stdout
        pcs.start_sshd(gone)

        r = launcher("stop", "--manifest", str(manifest))
        print(show(r))
        stopped = r.returncode == 0
        assert stopped, show(r)
        assert "none left running" in r.stderr
    finally:
        if not stopped:
            launcher("stop", "--manifest", str(manifest))
    left = {pcs.destinations[h]: pcs.processes(h) for h in range(HOSTS)}
    print(f"processes left in the mini PCs' namespaces (their sshd aside): {left}")
    assert not any(left.values()), left
    keys_left = [str(p) for h in range(HOSTS) if (p := pcs.dir / f"pc{h}" / keys.REMOTE_KEY_DIR).exists()]
    assert not keys_left, f"stop left key files on the hosts: {keys_left}"
