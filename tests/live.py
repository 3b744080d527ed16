"""Helpers for tests against real launched constellations (imported by conftest and tests).

The node binary is found like the launcher finds it ($SKYMEM_NODE, else
build/skymem_node). Port bases are picked so every port is free right now, so
runs side by side do not collide.
"""

from __future__ import annotations

import contextlib
import os
import ipaddress
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO / "ground", Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from skymemory.launcher.nodes import find_node  # noqa: E402
from skymemory.launcher.processes import free_port_bases  # noqa: E402,F401

LAUNCHER = REPO / "tools" / "launch_constellation.py"


def node_binary() -> Path | None:
    try:
        return find_node()
    except FileNotFoundError:
        return None


def launch(tmp: Path, planes: int, sats: int, *extra: str) -> Path:
    """Start a detached constellation; returns its manifest path."""
    isl, ground = free_port_bases(planes * sats)
    manifest = tmp / "manifest.json"
    cmd = [sys.executable, str(LAUNCHER), "--planes", str(planes), "--sats", str(sats), "--detach", "--quiet",
           "--manifest", str(manifest), "--isl-port-base", str(isl), "--ground-port-base", str(ground),
           "--health-timeout", "30", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"launcher failed ({r.returncode}):\n{r.stderr}")
    return manifest


def launch_netns(tmp: Path, planes: int, sats: int, hosts: int) -> Path:
    """`launch(... --netns hosts)`, or skip the test where network namespaces cannot be made or the
    launcher's subnet is taken by another run right now."""
    import pytest

    from skymemory.launcher import netns

    why = netns.probe()
    if why:
        pytest.skip(why)
    try:
        return launch(tmp, planes, sats, "--netns", str(hosts))
    except RuntimeError as exc:
        if "already in use on this host" in str(exc):
            pytest.skip("the --netns subnet is taken by another run right now")
        raise


@contextlib.contextmanager
def launched_sites(tmp: Path, planes: int, sats: int, hosts: int, sites: int, *extra: str):
    """A detached --netns `hosts` --sites `sites` constellation for the with-block: yields (main manifest path,
    [Site, ...] in site order); skips like launch_netns where namespaces cannot be made; stopped after, and the
    stop must succeed (which also removes the site namespaces and manifests)."""
    import pytest

    from skymemory.launcher import netns
    from skymemory.launcher.sites import sites_of
    from skymemory.orbit.manifest import Manifest

    why = netns.probe()
    if why:
        pytest.skip(why)
    try:
        manifest = launch(tmp, planes, sats, "--netns", str(hosts), "--sites", str(sites), *extra)
    except RuntimeError as exc:
        if "already in use on this host" in str(exc):
            pytest.skip("the --netns subnet is taken by another run right now")
        raise
    try:
        m = Manifest.load(manifest)
        yield manifest, sites_of(m)
    finally:
        r = stop(manifest)
        assert r.returncode == 0, r.stderr


def in_site(namespace: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m skymemory ARGS` run in a ground site's namespace, as a user would run it."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    from skymemory.launcher.netns import exec_prefix

    return subprocess.run([*exec_prefix(namespace), sys.executable, "-m", "skymemory", *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=REPO)


def ground_host_elsewhere(manifest: Path, out: Path) -> tuple[str, Path]:
    """A --netns constellation's manifest for a second ground host: the last emulated host's namespace, and a
    copy of the manifest (written to `out`) whose ground address is that host's own."""
    import json

    from skymemory.orbit.manifest import Manifest

    m = Manifest.load(manifest)
    namespace = m.backend["namespaces"][-1]
    elsewhere = json.loads(manifest.read_text())
    elsewhere["ground_host"] = next(e.host for e in m.satellites if e.netns == namespace)
    out.write_text(json.dumps(elsewhere))
    return namespace, out


def free_first_cpuid(n: int) -> str:
    """A --cfs-first-cpuid whose n CI_LAB ports (1234 + cpuid - 1) are free on every address right now."""
    from skymemory.launcher.processes import busy_udp_port

    for first in range(3, 60000, 97):
        if busy_udp_port("0.0.0.0", list(range(1233 + first, 1233 + first + n))) is None:
            return str(first)
    raise RuntimeError(f"no free range of {n} CI_LAB ports")


def free_tlm_addresses(n: int, port: int = 1235) -> str:
    """A first loopback address (for --tlm-address) whose n successors can all take `port` right now."""
    for third in range(20, 250):
        base = ipaddress.IPv4Address(f"127.{third}.0.1")
        socks = []
        try:
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((str(base + i), port))
            return str(base)
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free loopback telemetry addresses")


FAKE_SSH = """#!/bin/sh
# stand-in for ssh: the "hosts" of the tests are loopback addresses of this machine. Like ssh, it joins
# the remote command's words with spaces and hands the line to a shell.
while [ "$1" = "-o" ] || [ "$1" = "-F" ]; do shift 2; done
shift
exec sh -c "$*"
"""


def fake_ssh_env(tmp: Path) -> dict:
    """An environment whose `ssh` runs the launcher's remote scripts here (for --hosts 127.0.0.x,...)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def stop(manifest: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAUNCHER), "stop", "--manifest", str(manifest)],
                          capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def launched(tmp: Path, planes: int, sats: int, *extra: str):
    """A detached constellation for the with-block (its manifest path); stopped after, the stop must succeed."""
    manifest = launch(tmp, planes, sats, *extra)
    try:
        yield manifest
    finally:
        r = stop(manifest)
        assert r.returncode == 0, r.stderr


def time_scale_for(step_wall_s: float, sats: int, altitude_km: float = 550.0) -> float:
    """--time-scale that makes one rotation step (1/sats of an orbit) last step_wall_s of wall time."""
    from skymemory.orbit import geometry

    return geometry.orbital_period_s(altitude_km * 1000.0) / sats / step_wall_s


def unsigned_commands_refused(m, sat: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """Send one satellite of a keyed constellation two unsigned commands (RESET_COUNTERS, SET_CHUNK) straight
    to its ground port, as anyone on the link could, and wait until both are counted as auth failures.
    Asserts neither was taken; returns its auth_failures before and after (for the test's log)."""
    import asyncio
    import hashlib
    import time

    from skymemory.link.client import SkyMemoryClient
    from skymemory.protocol import auth, wire

    signer = auth.signer_for_manifest(m)
    assert signer is not None, "the manifest names no key file: this constellation runs without authentication"
    block = hashlib.sha256(b"unsigned-probe").digest()

    async def go() -> tuple[int, int]:
        async with SkyMemoryClient(m.ground_addresses(), signer=signer, bind=(m.ground_host, 0), timeout=0.5,
                                   retries=6) as c:
            before = await c.stats(sat)
            route = wire.RouteHeader(sat[0], sat[1], request_id=4242)
            unsigned = [wire.encode_data_command(wire.SKYMEM_RESET_COUNTERS_CC, route, b""),
                        wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(
                            wire.make_desc(block, 0, 1, int(time.time() * 1000), b"unsigned"), b"unsigned"))]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind((m.ground_host, 0))
                for packet in unsigned:
                    s.sendto(packet, m.ground_addresses()[sat])
            deadline = time.monotonic() + 30  # a bound on waiting for the datagrams to arrive, not a measurement
            while (after := await c.stats(sat)).auth_failures < before.auth_failures + len(unsigned):
                assert time.monotonic() < deadline, f"unsigned commands not counted as auth failures: {after}"
                await asyncio.sleep(0.05)
            # neither was taken: the counters were not reset (only our STATS requests count), no chunk was stored
            assert after.auth_failures == before.auth_failures + len(unsigned), after
            assert after.cmd_count > before.cmd_count and after.chunks == before.chunks, (before, after)
            return before.auth_failures, after.auth_failures

    return asyncio.run(go())
