"""Launcher lifecycle with real nodes: detach, refuse a second start, stop leaves nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from skymemory.launcher import netns, processes
from skymemory.manifest import Manifest

from conftest import LAUNCHER, launch, stop


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


def test_bad_arguments_are_rejected(tmp_path):
    for args in (["--planes", "0"], ["--sats", "x"], ["--loss", "1.5"], ["--netns", "3", "--hosts", "10.0.0.1"],
                 ["--chunk-size", "70000"], ["--overhead", "9,9", "--planes", "3", "--sats", "3"],
                 ["--isl-port-base", "40000", "--ground-port-base", "40010"], ["--runtime", "cfs"]):
        r = run_launcher(*args, "--manifest", str(tmp_path / "m.json"))
        assert r.returncode == 2, (args, r.stderr)
        assert "error" in r.stderr


def test_failed_boot_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYMEM_NODE", "/bin/false")  # exits at once: the health check must give up and clean up
    r = run_launcher("--planes", "1", "--sats", "2", "--manifest", str(tmp_path / "m.json"), "--detach",
                     "--health-timeout", "5", "--isl-port-base", "29990", "--ground-port-base", "49990")
    assert r.returncode == 1 and "exited during boot" in r.stderr
    assert not (tmp_path / "m.json").exists()


def test_netns_round_trip(node_path, tmp_path):
    why = netns.probe()
    if why:
        pytest.skip(why)
    manifest = launch(tmp_path, 3, 3, "--netns", "3")
    try:
        m = Manifest.load(manifest)
        assert {e.host for e in m.satellites} == {"10.77.0.1", "10.77.0.2", "10.77.0.3"}
        assert len(m.backend["namespaces"]) == 3
        from skymemory.blockstore import ConstellationBlockStore

        with ConstellationBlockStore.from_manifest(m, m.constellation().nearest(4)) as store:
            payload = bytes(range(256)) * 300
            rec = store.put_block(b"n" * 32, payload)
            assert store.get_block(rec) == payload
    finally:
        r = stop(manifest)
    assert r.returncode == 0, r.stderr
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in m.backend["namespaces"])
