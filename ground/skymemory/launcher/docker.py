"""--runtime docker: one container per satellite, from a compose file the launcher writes.

The compose file is docker/compose.template.yml's head and one service per satellite, each
with host networking: the nodes bind the same loopback addresses and ports as native ones (the
manifest's port rule holds) and no Docker network is created. --container-cpus and
--container-memory-mib cap every satellite (a flight computer is small). Either Compose runs it:
the `docker compose` plugin (v2) or the standalone `docker-compose` (v1), whichever is installed;
when neither is, or no engine answers (`docker info`), the launcher says so and leaves the
compose file in the run directory.

Unless --insecure, each container gets the constellation's key file bind-mounted read-only at
keys.CONTAINER_KEY_FILE (the node's --auth-keys). The file stays mode 0600, so the node runs as
the file's owner (the user who launched; the image's default user, nobody, could not read it),
with every capability dropped, so that running as root in there grants nothing beyond the uid.

Every container is named <project>-sat-<plane>-<sat> (machines.container_name; the project is
"skymem" and a random tag, kept in the manifest), so `status` names an unhealthy container and
`stop` checks that none of the project's containers is left.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from skymemory.launcher.keys import CONTAINER_KEY_FILE
from skymemory.launcher.machines import container_name
from skymemory.launcher.nodes import REPO

TEMPLATE = REPO / "docker" / "compose.template.yml"
SERVICE = """  sat-{name}:
    image: ${{SKYMEM_IMAGE:-skymemory-node:latest}}
    container_name: {container}
    network_mode: host
    restart: "no"
    command: {command}
"""
PROJECT_LABEL = "com.docker.compose.project"  # both Compose versions label their containers with it


def engine_problem() -> str | None:
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    try:
        r = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 15 s"
    if r.returncode != 0:
        return "no Docker engine answers (`docker info`: " + (r.stderr.strip().splitlines() or ["?"])[-1] + ")"
    return None


def compose_command() -> list[str] | None:
    """`docker compose` (v2 plugin) where the CLI has it, else `docker-compose` (v1), else None."""
    if shutil.which("docker"):
        try:
            if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=15).returncode == 0:
                return ["docker", "compose"]
        except subprocess.TimeoutExpired:
            pass
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


NO_COMPOSE = "neither `docker compose` (the v2 plugin) nor `docker-compose` (v1) is installed"


def write_compose(path: Path, project: str, nodes: list[tuple[tuple[int, int], list[str]]],
                  cpus: float | None = None, memory_mib: int | None = None,
                  key_files: dict[tuple[int, int], Path] | None = None) -> Path:
    """nodes: ((plane, sat), argv without the binary); the image's entrypoint is skymem_node.
    key_files: each satellite's own key file, mounted read-only in its container only (None: --insecure)."""
    limits = (f"    cpus: {cpus:g}\n" if cpus else "") + (f"    mem_limit: {memory_mib}m\n" if memory_mib else "")
    services = "".join(SERVICE.format(name=f"{p}-{s}", container=container_name(project, p, s),
                                      command=_yaml_list(argv)) + limits
                       + _key_mount(key_files[(p, s)] if key_files is not None else None) for (p, s), argv in nodes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TEMPLATE.read_text().rstrip("\n") + "\n" + services)
    return path


def _key_mount(key_file: Path | None) -> str:
    """The service lines that hand a container its key file: read-only, read as its owner, no capabilities."""
    if key_file is None:
        return ""
    source = str(Path(key_file).resolve())
    if ":" in source or '"' in source:  # the short volume syntax splits on ':'
        raise ValueError(f"the key file's path {source} has a ':' or '\"', which a compose volume cannot name; "
                         "choose another --run-dir")
    owner = os.stat(source)
    return (f'    user: "{owner.st_uid}:{owner.st_gid}"\n'
            "    cap_drop: [ALL]\n"
            f'    volumes:\n      - "{source}:{CONTAINER_KEY_FILE}:ro"\n')


def _yaml_list(argv: list[str]) -> str:
    return "[" + ", ".join('"' + a.replace('"', '\\"') + '"' for a in argv) + "]"


def compose(command: list[str], path: Path, project: str, *verb: str, services: int = 0,
            timeout: float = 900) -> subprocess.CompletedProcess:
    """Run Compose on the project. services: how many the file has, for COMPOSE_PARALLEL_LIMIT (below)."""
    env = None
    if services:
        # Compose v1 creates each service's container in a task nested in that service's own task, and
        # both take a slot of one pool (64 by default): with more services than slots, every slot can be
        # held by a service task waiting for a slot for its create, and `up` hangs for good
        # (docker/compose#7486, #5864; seen here with 95 services). Two slots per service rule that out.
        env = {**os.environ, "COMPOSE_PARALLEL_LIMIT": str(max(64, 2 * services))}
    return subprocess.run([*command, "-f", str(path), "-p", project, *verb], capture_output=True, text=True,
                          timeout=timeout, env=env)


def containers(project: str) -> dict[str, str]:
    """Every container of the project, running or not: name -> state (running, exited, ...)."""
    r = subprocess.run(["docker", "ps", "-a", "--filter", f"label={PROJECT_LABEL}={project}",
                        "--format", "{{.Names}}\t{{.State}}"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"docker ps failed: {r.stderr.strip()}")
    return dict(line.split("\t", 1) for line in r.stdout.splitlines() if "\t" in line)


def node_pids(names: list[str]) -> dict[str, int]:
    """Host pid of each running container's node (its entrypoint: pid 1 inside the container)."""
    if not names:
        return {}
    r = subprocess.run(["docker", "inspect", "-f", "{{.Name}} {{.State.Pid}}", *names], capture_output=True,
                       text=True, timeout=120)
    pids = {}
    for line in r.stdout.splitlines():
        name, _, pid = line.strip().lstrip("/").partition(" ")
        if pid.isdigit() and int(pid) > 0:
            pids[name] = int(pid)
    return pids


def logs_tail(name: str, lines: int = 5) -> str:
    r = subprocess.run(["docker", "logs", "--tail", str(lines), name], capture_output=True, text=True, timeout=30)
    return (r.stdout + r.stderr).strip() or "(no log)"
