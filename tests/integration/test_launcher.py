"""Launcher lifecycle with real nodes: detach, refuse a second start, stop leaves nothing."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from skymemory.launcher import keys, processes
from skymemory.orbit.manifest import Manifest

from live import LAUNCHER, launch, launch_netns, stop


def run_launcher(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAUNCHER), *args], capture_output=True, text=True, timeout=120)


def test_detach_refuse_and_stop(node_path, tmp_path):
    manifest = launch(tmp_path, 2, 3)
    m = Manifest.load(manifest)
    pids = [e.pid for e in m.satellites]
    assert len(pids) == 6 and all(processes.alive(p, "skymem_node") for p in pids)
    again = run_launcher("--planes", "2", "--sats", "3", "--manifest", str(manifest), "--detach")
    assert again.returncode == 1 and "still running" in again.stderr
    assert run_launcher("status", "--manifest", str(manifest)).returncode == 0
    r = stop(manifest)
    assert r.returncode == 0, r.stderr
    assert not any(processes.alive(p) for p in pids)
    assert not manifest.exists()
    assert not list((tmp_path / "pids").glob("*.pid"))


def test_bad_arguments_are_rejected(tmp_path, capsys):
    from skymemory.launcher.options import parse_args

    for args in (["--planes", "0"], ["--sats", "x"], ["--loss", "1.5"], ["--netns", "3", "--hosts", "10.0.0.1"],
                 ["--chunk-size", "70000"], ["--overhead", "9,9", "--planes", "3", "--sats", "3"],
                 ["--addresses", "shared", "--isl-port-base", "40000", "--ground-port-base", "40010"],
                 ["--runtime", "cfs"], ["--hosts", "pc1,pc2"], ["--hosts", "10.0.0.1,10.0.0.1"], ["--bind", "localhost"],
                 ["--time-scale", "0"], ["--memory-budget", "-5"], ["--netns", "0"], ["--planes", "200", "--sats", "200"],
                 ["--planes", "2", "--sats", "8000"],  # 4,001 hops across: more than a ttl allows
                 ["--hosts", "10.0.0.1", "--remote-dir", "skymemory"],  # relative: the start script cds into it
                 ["--addresses", "per-satellite", "--bind", "10.0.0.1"], ["--addresses", "per-satellite", "--netns", "2"],
                 ["--addresses", "per-satellite", "--bind", "127.255.255.200", "--planes", "10", "--sats", "10"]):
        with pytest.raises(SystemExit) as e:
            parse_args([*args, "--manifest", str(tmp_path / "m.json")])
        assert e.value.code == 2, args
        assert "error" in capsys.readouterr().err, args
    assert parse_args(["--planes", "3", "--sats", "3"]).overhead == (1, 1)


def test_port_layout_stays_out_of_the_ephemeral_range():
    """Shared ports while they fit below the ephemeral range, an address per satellite beyond."""
    from skymemory.launcher.ports import choose

    linux = (32768, 60999)
    small, warning = choose(95, "127.0.0.1", 20000, 30000, ephemeral=linux)
    assert not small.per_satellite and warning is None
    assert (small.address(94), small.isl_port(94), small.ground_port(94)) == ("127.0.0.1", 20094, 30094)
    big, warning = choose(128 * 128, "127.0.0.1", 20000, 30000, ephemeral=linux)
    assert big.per_satellite and warning is None
    assert (big.address(16383), big.isl_port(16383), big.ground_port(16383)) == ("127.0.64.0", 20000, 30000)
    chosen, warning = choose(95, "127.0.0.1", 20000, 40000, ephemeral=linux)  # bases the user gave
    assert not chosen.per_satellite and "ground ports 40000..40094 lie in the kernel's ephemeral" in warning
    netns, _ = choose(4096, "127.0.0.1", 20000, 40000, one_machine=False, ephemeral=linux)
    assert not netns.per_satellite


def test_an_address_per_satellite_round_trip(node_path, tmp_path):
    """--addresses per-satellite: every node on its own loopback address, the same two ports; ISL works."""
    manifest = launch(tmp_path, 3, 3, "--addresses", "per-satellite", "--bind", "127.0.3.1")
    try:
        m = Manifest.load(manifest)
        assert [e.host for e in m.satellites] == [f"127.0.3.{i + 1}" for i in range(9)]
        assert len({(e.isl_port, e.ground_port) for e in m.satellites}) == 1
        from skymemory.store.constellation import ConstellationBlockStore

        with ConstellationBlockStore.from_manifest(m, m.constellation().nearest(4), route="relay") as store:  # over ISL
            payload = bytes(range(256)) * 300
            rec = store.put_block(b"a" * 32, payload)
            assert store.get_block(rec) == payload
    finally:
        r = stop(manifest)
    assert r.returncode == 0, r.stderr


def test_a_request_crosses_more_than_64_hops(node_path, tmp_path):
    """A 1x140 ring is 70 hops across: a block relayed to the far side and back arrives (ttl was once 64)."""
    manifest = launch(tmp_path, 1, 140, "--memory-budget", str(1 << 20), "--overhead", "0,0")
    try:
        from skymemory.store.constellation import ConstellationBlockStore

        m = Manifest.load(manifest)
        with ConstellationBlockStore.from_manifest(m, [(0, 70)], via=(0, 0)) as store:
            payload = bytes(range(256)) * 40
            rec = store.put_block(b"f" * 32, payload)
            assert store.get_block(rec) == payload
    finally:
        r = stop(manifest)
    assert r.returncode == 0, r.stderr


def test_failed_boot_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYMEM_NODE", "/bin/false")  # exits at once: the health check must give up and clean up
    r = run_launcher("--planes", "1", "--sats", "2", "--manifest", str(tmp_path / "m.json"), "--detach",
                     "--health-timeout", "5", "--isl-port-base", "29990", "--ground-port-base", "49990")
    assert r.returncode == 1 and "exited during boot" in r.stderr
    assert not (tmp_path / "m.json").exists()
    assert not list(tmp_path.rglob("*.keys"))  # the keys it wrote went too


def test_netns_round_trip(node_path, tmp_path):
    manifest = launch_netns(tmp_path, 3, 3, 3)
    try:
        m = Manifest.load(manifest)
        assert {e.host for e in m.satellites} == {"10.77.0.1", "10.77.0.2", "10.77.0.3"}
        assert len(m.backend["namespaces"]) == 3
        from skymemory.store.constellation import ConstellationBlockStore

        with ConstellationBlockStore.from_manifest(m, m.constellation().nearest(4), route="relay") as store:
            payload = bytes(range(256)) * 300
            rec = store.put_block(b"n" * 32, payload)
            assert store.get_block(rec) == payload
    finally:
        r = stop(manifest)
    assert r.returncode == 0, r.stderr
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in m.backend["namespaces"])


def test_docker_without_engine_writes_compose_and_fails(tmp_path):
    from skymemory.launcher import docker

    if docker.engine_problem() is None:
        pytest.skip("a Docker engine answers here; this test covers the no-engine path")
    r = run_launcher("--runtime", "docker", "--planes", "2", "--sats", "2", "--manifest", str(tmp_path / "m.json"))
    assert r.returncode == 1 and "compose file written" in r.stderr
    compose = (tmp_path / "docker-compose.yml").read_text()
    assert compose.count("image: ${SKYMEM_IMAGE:-skymemory-node:latest}") == 4
    assert '"--plane", "1", "--sat", "1"' in compose
    assert compose.count(f'"--auth-keys", "{keys.CONTAINER_KEY_FILE}"') == 4  # keyed by default, as everywhere


def test_compose_hands_every_container_the_key_read_only(tmp_path):
    """Each service mounts its own satellite's key file, and no other, read-only where --auth-keys points, and
    runs as the file's owner (the file stays 0600; the image's user, nobody, could not read it) with no
    capabilities; the ground's file (the masters) is mounted nowhere; --insecure: none of it."""
    from skymemory.launcher import docker

    ground = keys.make_key_file(tmp_path, [(0, s) for s in range(3)])
    own = {(0, s): keys.satellite_key_file(ground, 0, s) for s in range(3)}
    jobs = [((0, s), ["--plane", "0", "--sat", str(s), "--auth-keys", keys.CONTAINER_KEY_FILE]) for s in range(3)]
    compose = docker.write_compose(tmp_path / "keyed.yml", "skymemtest", jobs, key_files=own).read_text()
    for s in range(3):
        assert compose.count(f'      - "{own[(0, s)]}:{keys.CONTAINER_KEY_FILE}:ro"\n') == 1
    assert str(ground) not in compose
    assert compose.count(f'    user: "{os.getuid()}:{os.getgid()}"\n') == 3
    assert compose.count("    cap_drop: [ALL]\n") == 3
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in [ground, *own.values()])
    insecure = docker.write_compose(tmp_path / "open.yml", "skymemtest", jobs).read_text()
    assert "volumes:" not in insecure and "user:" not in insecure
    with pytest.raises(ValueError, match="choose another --run-dir"):
        odd = tmp_path / "a:b"
        odd_ground = keys.make_key_file(odd, [(0, s) for s in range(3)])
        docker.write_compose(tmp_path / "odd.yml", "skymemtest", jobs,
                             key_files={(0, s): keys.satellite_key_file(odd_ground, 0, s) for s in range(3)})


def test_cfs_runtime_round_trip(tmp_path):
    """Real cFS instances (a mission's exe/cpu1 with the SKYMEM + ISL_ROUTER apps), opt-in via SKYMEM_CFS_EXE."""
    import os
    from pathlib import Path

    exe = os.environ.get("SKYMEM_CFS_EXE")
    if not exe or not (Path(exe) / "core-cpu1").is_file():
        pytest.skip("set SKYMEM_CFS_EXE to a cFS build's exe/cpu1 directory with the SkyMemory apps")
    from skymemory.launcher import cfs_limits

    problem = cfs_limits.problem(4, cfs_limits.HostLimits.local(), cfs_limits.InstanceCost())
    if problem:
        pytest.skip(problem)
    from live import free_first_cpuid

    first = int(free_first_cpuid(4))
    manifest = launch(tmp_path, 2, 2, "--runtime", "cfs", "--cfs-exe", exe, "--cfs-first-cpuid", str(first))
    m = Manifest.load(manifest)
    try:
        assert (tmp_path / "cfs" / "1-1" / "cf" / "skymemory.cfg").read_text().count("plane = 1") == 1
        assert [e.cpuid for e in m.satellites] == [first + i for i in range(4)]
        assert [e.command_port for e in m.satellites] == [1233 + first + i for i in range(4)]  # CI_LAB's rule
        from skymemory.store.constellation import ConstellationBlockStore

        with ConstellationBlockStore.from_manifest(m, [(0, 0), (0, 1), (1, 0), (1, 1)]) as store:
            payload = os.urandom(100_000)
            rec = store.put_block(b"c" * 32, payload)
            assert store.get_block(rec) == payload
    finally:
        r = stop(manifest)
    assert r.returncode == 0, r.stderr
    assert not any(processes.alive(e.pid) for e in m.satellites)


def _foreground(tmp_path):
    """Start a 2x2 launcher in the foreground; return (process, manifest) once it reports running."""
    import time

    from live import free_port_bases

    isl, ground = free_port_bases(4)
    manifest = tmp_path / "fg.json"
    proc = subprocess.Popen([sys.executable, str(LAUNCHER), "--planes", "2", "--sats", "2", "--manifest", str(manifest),
                             "--isl-port-base", str(isl), "--ground-port-base", str(ground)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    for line in proc.stdout:  # bounded: the launcher exits (closing stdout) on any failure
        if "running; Ctrl-C" in line or time.monotonic() > deadline:
            break
    assert proc.poll() is None, "launcher exited before reporting running"
    return proc, manifest


def test_foreground_ctrl_c_tears_down(node_path, tmp_path):
    import signal

    proc, manifest = _foreground(tmp_path)
    pids = [e.pid for e in Manifest.load(manifest).satellites]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0
    assert not any(processes.alive(p) for p in pids)
    assert not manifest.exists()


def test_killed_launcher_leaves_no_orphans(node_path, tmp_path):
    import time

    proc, manifest = _foreground(tmp_path)
    pids = [e.pid for e in Manifest.load(manifest).satellites]
    proc.kill()  # SIGKILL: no teardown code runs; the nodes' parent-death signal must end them
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(processes.alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(processes.alive(p) for p in pids)
    r = stop(manifest)  # the stale manifest is cleaned up without error
    assert r.returncode == 0, r.stderr


def test_a_cluster_started_twice_runs_each_node_once(node_path, monkeypatch):
    """`with Cluster(...).start_all() as cl` starts the nodes once: a second start leaves a running node alone."""
    from skymemory.launcher.cluster import Cluster

    monkeypatch.setenv("SKYMEM_NODE", str(node_path))
    with Cluster(1, 2, ["--delay-scale", "0"]).start_all() as cl:
        pids = {sat: p.pid for sat, p in cl.procs.items()}
        cl.start_all()
        assert {sat: p.pid for sat, p in cl.procs.items()} == pids and all(cl.alive().values())
