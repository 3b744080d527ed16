"""--runtime docker: a compose file from docker/compose.template.yml, one service per satellite.

`docker compose up -d` runs only when a Docker engine answers (`docker info`);
otherwise the launcher says so and exits non-zero, leaving the compose file.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from skymemory.launcher.nodes import REPO

TEMPLATE = REPO / "docker" / "compose.template.yml"
SERVICE = """  sat-{name}:
    image: ${{SKYMEM_IMAGE:-skymemory-node:latest}}
    network_mode: host
    restart: "no"
    command: {command}
"""


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


def write_compose(path: Path, nodes: list[tuple[str, list[str]]]) -> Path:
    """nodes: (name, argv without the binary). The image's entrypoint is skymem_node."""
    head = TEMPLATE.read_text()
    services = "".join(SERVICE.format(name=n, command=_yaml_list(argv)) for n, argv in nodes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head.rstrip("\n") + "\n" + services)
    return path


def _yaml_list(argv: list[str]) -> str:
    return "[" + ", ".join('"' + a.replace('"', '\\"') + '"' for a in argv) + "]"


def compose(path: Path, *verb: str, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = ["docker", "compose", "-f", str(path), "-p", path.parent.name or "skymemory", *verb]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def describe(cmd: list[str]) -> str:
    return shlex.join(cmd)
