"""A Docker engine and the project's image for the container tests, made without a registry.

    with DockerEngine(workdir) as engine:
        engine.started_here     # True when this testbed started dockerd (and will stop it)

On entry:
- an engine that already answers `docker info` is used as it is (and left running); otherwise
  `dockerd --bridge=none --iptables=false --ip-masq=false --ip-forward=false` is started: host
  networking only, so no bridge network is created and neither the firewall nor the forwarding
  sysctl is touched;
- the base image debian:bookworm-slim, when the engine lacks it, is made offline from Debian's
  packages: `debootstrap --variant=minbase bookworm ROOTFS`, then `tar -C ROOTFS -c . | docker
  import - debian:bookworm-slim` (a machine with Docker Hub would simply pull it);
- the project's image is built: `docker build --network host -f docker/Dockerfile -t
  skymemory-node:latest .` (the build stage installs its compilers from Debian's packages).
On exit, a dockerd started here is stopped with every process of its engine (engines.stop_engine:
its containerd and the containers' shims, waited for until gone), after removing any container of
a SkyMemory Compose project still there; what had to be killed, or survived, is an error. Images
stay (the next run reuses them); remove them with `docker image rm skymemory-node:latest
debian:bookworm-slim`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from skymemory.launcher import docker

import engines

REPO = Path(__file__).resolve().parents[2]
IMAGE = "skymemory-node:latest"
BASE_IMAGE = "debian:bookworm-slim"
DEBIAN_MIRROR = os.environ.get("SKYMEM_DEBIAN_MIRROR", "http://deb.debian.org/debian")
DOCKERD_FLAGS = ["--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false"]
EXEC_ROOT = "/var/run/docker"  # dockerd's default: its containerd's config and socket, named by every shim


def say(message: str) -> None:
    print(f"[docker testbed] {message}", file=sys.stderr, flush=True)


class DockerEngine:
    def __init__(self, workdir: Path) -> None:
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dockerd: subprocess.Popen | None = None

    @property
    def started_here(self) -> bool:
        return self.dockerd is not None

    def __enter__(self) -> "DockerEngine":
        try:
            if docker.engine_problem() is not None:
                self._start_dockerd()
            else:
                say("using the Docker engine that already runs")
            if not _has_image(BASE_IMAGE):
                self._make_base_image()
            self._build_image()
        except BaseException:
            for problem in self.close():
                say(problem)
            raise
        return self

    def _start_dockerd(self, timeout_s: float = 120.0) -> None:
        say(f"starting dockerd {' '.join(DOCKERD_FLAGS)}")
        log = open(self.dir / "dockerd.log", "ab")
        try:
            self.dockerd = subprocess.Popen(["dockerd", *DOCKERD_FLAGS, "--pidfile", str(self.dir / "dockerd.pid")],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while docker.engine_problem() is not None:
            if self.dockerd.poll() is not None:
                tail = (self.dir / "dockerd.log").read_text(errors="replace")[-1500:]
                self.dockerd = None
                raise RuntimeError(f"dockerd exited during start-up:\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"dockerd does not answer after {timeout_s:g} s (log: {self.dir / 'dockerd.log'})")
            time.sleep(0.2)

    def _make_base_image(self) -> None:
        rootfs = self.dir / "rootfs"
        say(f"{BASE_IMAGE} is not there: debootstrap --variant=minbase bookworm from {DEBIAN_MIRROR}")
        t = time.monotonic()
        _run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs), DEBIAN_MIRROR], self.dir / "debootstrap.log")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(["docker", "import", "-", BASE_IMAGE], stdin=tar.stdout, capture_output=True,
                                  text=True)
        tar.stdout.close()
        tar.wait()
        shutil.rmtree(rootfs, ignore_errors=True)
        if imported.returncode != 0 or tar.returncode != 0:
            raise RuntimeError(f"docker import failed: {imported.stderr.strip()}")
        say(f"{BASE_IMAGE} made in {time.monotonic() - t:.0f} s")

    def _build_image(self) -> None:
        say(f"docker build --network host -f docker/Dockerfile -t {IMAGE} .")
        t = time.monotonic()
        _run(["docker", "build", "--network", "host", "-f", "docker/Dockerfile", "-t", IMAGE, "."],
             self.dir / "build.log", cwd=REPO)
        say(f"{IMAGE} built in {time.monotonic() - t:.0f} s")

    def close(self) -> list[str]:
        """Stop a dockerd started here and all of its engine; returns what had to be killed or survived."""
        if self.dockerd is None:
            return []
        try:
            for name, _ in _skymemory_containers():
                subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
        finally:
            say("stopping the dockerd started here")
            t = time.monotonic()
            problems = engines.stop_engine(self.dockerd, "the dockerd started here",
                                           engines.Engine(self.dockerd.pid, EXEC_ROOT + "/containerd"))
            self.dockerd = None
            say(f"dockerd and every process of its engine gone in {time.monotonic() - t:.1f} s")
        return problems

    def __exit__(self, kind, *exc) -> None:
        engines.report_at_exit(self.close(), kind is not None, say)


def _has_image(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


def _skymemory_containers() -> list[tuple[str, str]]:
    """(name, project) of every container a SkyMemory launch made (projects named skymem...)."""
    r = subprocess.run(["docker", "ps", "-a", "--format", '{{.Names}}\t{{.Label "' + docker.PROJECT_LABEL + '"}}'],
                       capture_output=True, text=True, timeout=60)
    rows = [line.split("\t") for line in r.stdout.splitlines() if "\t" in line]
    return [(name, project) for name, project in rows if project.startswith("skymem")]


def _run(argv: list[str], log: Path, cwd: Path | None = None) -> None:
    with open(log, "wb") as f:
        r = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}); end of {log}:\n"
                           + log.read_text(errors="replace")[-1500:])
