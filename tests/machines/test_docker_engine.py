"""--runtime docker on a real Docker engine: 19x5 satellites in 95 containers of the project's image.

The engine is the one already running, or a dockerd started here without a bridge (host
networking only); the base image is made offline from Debian's packages when missing
(docker_engine.py). Opt-in: `make test-containers`.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from skymemory.bench.roundtrip import kv_block_round_trip, object_round_trip
from skymemory.launcher import docker, keys
from skymemory.launcher.machines import container_name
from skymemory.orbit.manifest import Manifest

from commands import firewall_state, launcher, opt_in, show, skymemory
from docker_engine import DockerEngine
from live import free_port_bases, unsigned_commands_refused

pytestmark = opt_in("containers", "make test-containers")

PLANES, SATS = 19, 5
CPUS, MEMORY_MIB = 0.25, 96  # per satellite: a quarter of a core, 96 MiB (its 64 MiB chunk store and the node)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("starting dockerd and building images needs root")
    if shutil.which("docker") is None or (shutil.which("dockerd") is None and docker.engine_problem()):
        pytest.skip("Docker is not installed (make test-containers installs docker.io)")
    before = firewall_state()
    with DockerEngine(tmp_path_factory.mktemp("docker")) as e:
        yield e
    assert firewall_state() == before, "the firewall is not as it was before the container tests"


def test_without_compose_the_launcher_says_so(engine, tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with the docker CLI and nothing else
    bin_dir.mkdir()
    (bin_dir / "docker").symlink_to(shutil.which("docker"))
    env = {**os.environ, "PATH": str(bin_dir)}
    if subprocess.run(["docker", "compose", "version"], capture_output=True, env=env).returncode == 0:
        pytest.skip("this docker CLI has the compose v2 plugin")
    r = launcher("--runtime", "docker", "--planes", "2", "--sats", "2", "--manifest", str(tmp_path / "m.json"),
                 env=env)
    print(show(r))
    assert r.returncode == 1 and docker.NO_COMPOSE in r.stderr and "compose file written" in r.stderr
    assert not (tmp_path / "m.json").exists()


def test_19x5_in_containers(engine, tmp_path):
    manifest = tmp_path / "m.json"
    isl, ground = free_port_bases(PLANES * SATS)
    r = launcher("--runtime", "docker", "--planes", str(PLANES), "--sats", str(SATS), "--manifest", str(manifest),
                 "--container-cpus", str(CPUS), "--container-memory-mib", str(MEMORY_MIB), "--detach",
                 "--isl-port-base", str(isl), "--ground-port-base", str(ground), "--health-timeout", "300")
    print(show(r))
    assert r.returncode == 0, show(r)
    m = Manifest.load(manifest)
    project = m.backend["project"]
    stopped = False
    try:
        print(f"compose: {' '.join(m.backend['compose_command'])}")
        names = [container_name(project, e.plane, e.sat) for e in m.satellites]
        assert docker.containers(project) == {n: "running" for n in names}
        limits = subprocess.run(["docker", "inspect", "-f", "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}", *names],
                                capture_output=True, text=True, check=True).stdout.split("\n")
        assert set(filter(None, limits)) == {f"{int(CPUS * 1e9)} {MEMORY_MIB * 2**20}"}

        # keyed: the key file mounted read-only where each node's --auth-keys points, the node run as the
        # file's owner without capabilities; a satellite refuses unsigned commands (counted as auth failures)
        assert m.auth_key_file and os.path.dirname(m.auth_key_file) == m.run_dir
        seen = subprocess.run(["docker", "inspect", "-f", '{{.Config.User}} {{json .HostConfig.CapDrop}} '
                               '{{range .Mounts}}{{.Source}}:{{.Destination}}:{{.RW}}{{end}}', *names],
                              capture_output=True, text=True, check=True).stdout.split("\n")
        owner = os.stat(m.auth_key_file)  # each container mounts its own satellite's file, not the ground's
        assert set(filter(None, seen)) <= {f'{owner.st_uid}:{owner.st_gid} ["ALL"] '
                                           f"{keys.satellite_key_file(m.auth_key_file, e.plane, e.sat)}:"
                                           f"{keys.CONTAINER_KEY_FILE}:false" for e in m.satellites}, seen[:2]
        for sat in ((0, 0), (PLANES - 1, SATS - 1)):
            before, after = unsigned_commands_refused(m, sat)
            print(f"container {container_name(project, *sat)}: 2 unsigned commands refused, "
                  f"auth_failures {before} -> {after}")

        r = skymemory("status", "--route", "relay", "--manifest", str(manifest))
        print(show(r))
        assert r.returncode == 0 and "95/95 satellites answered" in r.stdout, show(r)

        for trip in (object_round_trip(m, 10_000_000, servers=10),
                     kv_block_round_trip(m, servers=10, index_dir=tmp_path / "index")):
            print(trip.describe())
            assert trip.exact, trip.describe()

        r = skymemory("bench", "ttft", "--manifest", str(manifest), "--model", "embedded-tiny", "--prefix-tokens",
                      "256", "--suffix-tokens", "16", "--repeats", "1", "--gen-tokens", "4", "--out",
                      str(tmp_path / "ttft"))
        print(show(r))
        assert r.returncode == 0 and "| 256 | sky-attached |" in r.stdout and "yes (1/1 runs)" in r.stdout, show(r)

        # one container dies: both status commands name it
        victim = container_name(project, 7, 3)
        subprocess.run(["docker", "kill", victim], capture_output=True, check=True)
        r = launcher("status", "--manifest", str(manifest))
        print(show(r))
        assert r.returncode == 1 and f"container {victim} (exited)" in r.stdout and "94/95 running" in r.stdout
        r = skymemory("status", "--manifest", str(manifest), "--timeout", "0.3")
        print(show(r))
        assert r.returncode == 1 and f"container {victim}: 0/1 answered; UNHEALTHY" in r.stdout

        r = launcher("stop", "--manifest", str(manifest))
        print(show(r))
        stopped = r.returncode == 0
        assert stopped, show(r)
    finally:
        if not stopped:
            launcher("stop", "--manifest", str(manifest))
    assert docker.containers(project) == {}
