"""The dashboard's telemetry on other launcher backends: network namespaces and ssh hosts (a stand-in ssh).

Its poller asks each satellite at the address the manifest gives, from the
manifest's ground address; every satellite must show up. (cFS instances
answer the same STATS request: tests/integration/test_cfs_ground.py needs a
cFS build; a Docker engine is not available here.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from skymemory.dashboard import Dashboard

from live import LAUNCHER, fake_ssh_env, free_port_bases, launch_netns, stop


def every_satellite_up(manifest, timeout_s: float = 60.0) -> dict:
    async def main():
        d = Dashboard(manifest=manifest)
        await d.start(0)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                snap = d.snapshot()
                if snap["fleet"] and all(c["state"] == "up" for c in snap["fleet"]["cells"]):
                    return snap
                assert time.monotonic() < deadline, snap["problem"] or [c["state"] for c in snap["fleet"]["cells"]]
                await asyncio.sleep(0.1)
        finally:
            await d.stop()

    return asyncio.run(main())


def test_dashboard_sees_satellites_in_network_namespaces(node_path, tmp_path):
    manifest = launch_netns(tmp_path, 3, 3, 3)
    try:
        snap = every_satellite_up(manifest)
        assert len(snap["fleet"]["cells"]) == 9
    finally:
        r = stop(manifest)
    assert r.returncode == 0, r.stderr


def test_dashboard_sees_satellites_on_ssh_hosts(node_path, tmp_path):
    env = fake_ssh_env(tmp_path)
    isl, ground = free_port_bases(4, host="127.0.0.2")
    manifest = tmp_path / "m.json"
    launcher = [sys.executable, str(LAUNCHER)]
    r = subprocess.run([*launcher, "--hosts", "127.0.0.2,127.0.0.3", "--planes", "2", "--sats", "2", "--manifest",
                        str(manifest), "--remote-dir", str(tmp_path / "remote"), "--remote-node", str(node_path),
                        "--isl-port-base", str(isl), "--ground-port-base", str(ground), "--detach", "--quiet",
                        "--health-timeout", "30"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    try:
        snap = every_satellite_up(manifest)
        assert len(snap["fleet"]["cells"]) == 4
    finally:
        r = subprocess.run([*launcher, "stop", "--manifest", str(manifest)], env=env, capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 0, r.stderr
