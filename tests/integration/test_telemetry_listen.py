"""Housekeeping of every satellite reaches the ground where it is sent (native nodes, --tlm-dest:
the counterpart of a cFS mission's TO_LAB), `skymemory telemetry listen` receives it, and the
capture it writes decodes with ccsdspy, ISL_ROUTER housekeeping included."""

from __future__ import annotations

import random
import subprocess
import sys

from skymemory.orbit.manifest import Manifest

from live import free_tlm_addresses, launched


def skymemory(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skymemory", *args], capture_output=True, text=True, timeout=120)


def test_listen_gets_both_apps_housekeeping_from_every_satellite(node_path, tmp_path):
    port = random.randrange(30000, 32000)
    with launched(tmp_path, 2, 3, "--tlm-address", free_tlm_addresses(6, port), "--tlm-port", str(port)) as manifest:
        m = Manifest.load(manifest)
        assert len({(e.tlm_host, e.tlm_port) for e in m.satellites}) == 6  # one address per satellite
        capture = tmp_path / "tlm.bin"
        r = skymemory("telemetry", "listen", "--manifest", str(manifest), "--request-hk", "--until-complete",
                      "--duration", "60", "-o", str(capture))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "both apps' housekeeping from 6 of 6 satellites; command counters moved on none; " \
               "housekeeping on another satellite's address: none" in r.stdout
        d = skymemory("telemetry", "decode", str(capture), "--limit", "0")
        assert d.returncode == 0, d.stderr
        assert "0x0893 ISL_ROUTER_HK_TLM" in d.stdout and "0x0890 SKYMEM_HK_TLM" in d.stdout
    r = skymemory("telemetry", "listen", "--manifest", str(manifest))
    assert r.returncode == 1 and "no manifest" in r.stderr


def test_listen_refuses_a_constellation_without_telemetry(node_path, tmp_path):
    with launched(tmp_path, 1, 2) as manifest:
        r = skymemory("telemetry", "listen", "--manifest", str(manifest), "--duration", "1")
    assert r.returncode == 1 and "sends no telemetry" in r.stderr
