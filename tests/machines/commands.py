"""Helpers of the tests on real machines (tests/machines): opting in, running the launcher and the CLI.

The tests here run the launcher against a Docker engine (test_docker_engine.py) and OpenSSH
servers (test_ssh_hosts.py). They are opt-in, because they need root, packages and minutes:
`make test-containers` and `make test-hosts` install what is missing, set SKYMEM_LIVE to
`containers` / `hosts` and run them; without it every test here is skipped, so `make test`
needs neither Docker nor sshd."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from live import LAUNCHER


def live_selected(kind: str) -> bool:
    return kind in os.environ.get("SKYMEM_LIVE", "").split(",")


def opt_in(kind: str, target: str):
    return pytest.mark.skipif(not live_selected(kind), reason=f"opt-in: `{target}` (sets SKYMEM_LIVE={kind})")


def launcher(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAUNCHER), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def skymemory(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skymemory", *args], capture_output=True, text=True, timeout=timeout)


def show(r: subprocess.CompletedProcess) -> str:
    """A finished command's output, for an assertion message and for the log of the make target."""
    return f"exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


def firewall_state() -> str:
    """The host's packet-filter setup, to check a test leaves it as it found it: the iptables
    rules and policies (without counters) and the two sysctls Docker's defaults change."""
    import re
    import shutil
    from pathlib import Path

    lines = []
    if shutil.which("iptables-save"):
        saved = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
        lines += [re.sub(r"\[\d+:\d+\]", "", line) for line in saved.splitlines() if not line.startswith("#")]
    for sysctl in ("net/bridge/bridge-nf-call-iptables", "net/ipv4/ip_forward"):
        path = Path("/proc/sys") / sysctl
        lines.append(f"{sysctl} = {path.read_text().strip() if path.exists() else 'absent'}")
    return "\n".join(lines)
