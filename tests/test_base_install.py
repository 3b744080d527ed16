"""The base install (no extras) runs a constellation, stores a file and listens to telemetry.

pyproject.toml's base dependencies carry the store, the launcher, the CLI and telemetry; torch and
transformers (extra `kv`), matplotlib (`plots`) and aiohttp (`dashboard`) are extras. Here every
command runs in a subprocess where importing any of those raises ModuleNotFoundError, as on a
base install (a `sitecustomize` on PYTHONPATH puts a finder that refuses them first on the
import path), against a live 2x2 constellation; a command that needs an extra must say which,
in one line.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from live import LAUNCHER, REPO, free_port_bases, free_tlm_addresses

EXTRAS = {"torch": "kv", "transformers": "kv", "optimum": "kv", "hqq": "kv", "matplotlib": "plots",
          "aiohttp": "dashboard"}

REFUSE = f'''
import sys

class RefuseExtras:
    """Import finder that refuses the modules of SkyMemory's extras, as a base install lacks them."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(EXTRAS)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, RefuseExtras())
'''


@pytest.fixture
def base_env(tmp_path) -> dict:
    site = tmp_path / "refuse_extras"
    site.mkdir()
    (site / "sitecustomize.py").write_text(REFUSE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    env.pop("SKYMEM_TRACEBACK", None)
    for module in EXTRAS:  # the refusal works, or this test would prove nothing
        r = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, (module, r.stderr)
    return env


def run(env: dict, cwd: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_base_commands_run_without_the_extras(node_path, base_env, tmp_path):
    isl, ground = free_port_bases(4)
    tlm_port = random.randrange(30000, 32000)
    manifest = tmp_path / "manifest.json"
    r = run(base_env, tmp_path, str(LAUNCHER), "--planes", "2", "--sats", "2", "--detach", "--quiet",
            "--manifest", str(manifest), "--isl-port-base", str(isl), "--ground-port-base", str(ground),
            "--tlm-address", free_tlm_addresses(4, tlm_port), "--tlm-port", str(tlm_port), "--health-timeout", "30")
    assert r.returncode == 0, r.stderr
    try:
        m = ["--manifest", str(manifest)]
        assert run(base_env, tmp_path, "-m", "skymemory", "--help").returncode == 0
        (tmp_path / "file.bin").write_bytes(random.randbytes(200_000))
        r = run(base_env, tmp_path, "-m", "skymemory", "put", "file.bin", *m)
        assert r.returncode == 0, r.stderr
        r = run(base_env, tmp_path, "-m", "skymemory", "get", "file.bin", "-o", "copy.bin", *m)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "copy.bin").read_bytes() == (tmp_path / "file.bin").read_bytes()
        r = run(base_env, tmp_path, "-m", "skymemory", "status", *m)
        assert r.returncode == 0 and "4/4 satellites answered" in r.stdout, r.stdout + r.stderr
        r = run(base_env, tmp_path, "-m", "skymemory", "telemetry", "listen", "--request-hk", "--until-complete",
                "--duration", "60", *m)
        assert r.returncode == 0 and "both apps' housekeeping from 4 of 4 satellites" in r.stdout, r.stdout + r.stderr
        r = run(base_env, tmp_path, str(LAUNCHER), "status", *m)
        assert r.returncode == 0, r.stderr
        r = run(base_env, tmp_path, "-m", "skymemory", "dashboard", "--port", "0", *m)  # a manifest it accepts
        assert r.returncode == 2 and r.stderr.splitlines() == [
            "skymemory dashboard needs the dashboard extra (aiohttp is not installed): "
            f"pip install -e '{REPO}[dashboard]'"], r.stderr  # from this checkout: its path (tmp_path is the cwd)
    finally:
        r = run(base_env, tmp_path, str(LAUNCHER), "stop", "--manifest", str(manifest))
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("argv, extra, module", [
    (["bench", "ttft", "--prefix-tokens", "128"], "kv", "torch"),
    (["model", "info", "--model", "embedded-tinyllama"], "kv", "torch"),
    (["layout", "--strategy", "rotation-hop", "--servers", "9", "-o", "layout.png"], "plots", "matplotlib"),
])
def test_a_command_that_needs_an_extra_names_it_in_one_line(base_env, tmp_path, argv, extra, module):
    r = run(base_env, tmp_path, "-m", "skymemory", *argv)
    name = "skymemory " + " ".join(argv[:2] if argv[0] in ("bench", "model") else argv[:1])
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        f"{name} needs the {extra} extra ({module} is not installed): pip install -e '{REPO}[{extra}]'"], r.stderr


def test_the_kv_api_without_torch_names_the_extra(base_env, tmp_path):
    """`from skymemory.kv.hf.manager import KVCManager` on a base install: a ModuleNotFoundError (existing except
    clauses still catch it) whose message names the extra and the pip command; radix needs no extra."""
    code = ("import skymemory.kv.index.radix\n"
            "try:\n"
            "    from skymemory.kv.hf.manager import KVCManager\n"
            "except ModuleNotFoundError as exc:\n"
            "    print(type(exc).__name__, exc.name, exc, sep='|')\n")
    for cwd, where in ((tmp_path, str(REPO)), (REPO, ".")):
        r = run(base_env, cwd, "-c", code)
        assert r.returncode == 0 and r.stdout.splitlines() == [
            "MissingExtra|torch|the KV layer (skymemory.kv) needs the kv extra (torch is not installed): "
            f"pip install -e '{where}[kv]'"], r.stdout + r.stderr
