"""Real cFS instances seen from the ground: TO_LAB output on all of them, COSMOS decoding.

The second test spreads real instances over two "hosts" (loopback addresses of this machine,
reached through a stand-in `ssh`): a block striped across both must come back.

Opt-in: SKYMEM_CFS_EXE names a cFS mission's exe/cpu1 directory with the SkyMemory apps,
whose TO_LAB subscription table includes cfs_apps/mission_tables/to_lab_skymem_subs.inc
(docs/CFS.md). Five instances run with TO_LAB enabled on every one; each one's SKYMEM and
ISL_ROUTER housekeeping must arrive on its own telemetry address, no command counter may
move from telemetry, and a SKYMEM event and both housekeeping packets must decode with the
generated COSMOS definitions as ccsdspy decodes them.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skymemory.launcher import cfs_limits
from skymemory.launcher.keys import satellite_key_file
from skymemory.orbit.manifest import Manifest
from skymemory.protocol import telemetry, wire
from skymemory.protocol.housekeeping import HousekeepingListener

import cosmos_defs
from live import (LAUNCHER, fake_ssh_env, free_first_cpuid, free_port_bases, free_tlm_addresses, launched,
                  unsigned_commands_refused)

EXE = os.environ.get("SKYMEM_CFS_EXE")
pytestmark = pytest.mark.skipif(not EXE or not (Path(EXE) / "core-cpu1").is_file(),
                                reason="set SKYMEM_CFS_EXE to a cFS build's exe/cpu1 directory with the SkyMemory apps")


def test_five_instances_send_housekeeping_to_the_ground_and_cosmos_reads_it(tmp_path):
    problem = cfs_limits.problem(5, cfs_limits.HostLimits.local(), cfs_limits.InstanceCost())
    if problem:
        pytest.skip(problem)
    defs = cosmos_defs.packets()
    # --insecure: COSMOS's control commands carry no authentication trailer (docs/CFS.md)
    with launched(tmp_path, 1, 5, "--runtime", "cfs", "--cfs-exe", EXE, "--cfs-first-cpuid", free_first_cpuid(5),
                  "--tlm-address", free_tlm_addresses(5), "--insecure") as manifest:
        m = Manifest.load(manifest)
        assert len({e.command_port for e in m.satellites} | {1235}) == 6
        with HousekeepingListener(m) as listener:
            report = listener.run(60.0, enable_output=True, request_hk=True, until_complete=True)
            assert report.complete, {s: dict(t.count) for s, t in report.sats.items()}
            assert report.counters_moved == [] and report.misdelivered == []

            # a NOOP through CI_LAB, as COSMOS sends it by default: SKYMEM's event comes down through TO_LAB
            first = m.satellites[0]
            listener.cmd.sendto(cosmos_defs.encode_defaults(defs["SKYMEM_NOOP"]), (first.host, first.command_port))
            event = None
            deadline = time.monotonic() + 20
            while event is None and time.monotonic() < deadline:
                later = listener.run(1.0)
                for p in later.packets:
                    if p[:2] == b"\x08\x08" and len(p) == defs["SKYMEM_EVENT"].length:
                        fields = cosmos_defs.decode(defs["SKYMEM_EVENT"], p)
                        if fields["APP_NAME"] == "SKYMEM" and fields["EVENT_ID"] == 3:
                            event = fields
        assert event is not None, "no SKYMEM NOOP event came down"
        assert "NOOP" in event["MESSAGE"] and event["PROCESSOR_ID"] == first.cpuid
        assert defs["SKYMEM_EVENT"].field("EVENT_TYPE").states["INFO"] == event["EVENT_TYPE"]

        # real housekeeping of both apps: COSMOS and ccsdspy read the same values
        by_mid = {int.from_bytes(p[:2], "big"): p for p in report.packets}
        for name, mid, decode, prefix in (("SKYMEM_HK", wire.SKYMEM_HK_TLM_MID, telemetry.decode_hk_stream, "STATS_"),
                                          ("ISL_ROUTER_HK", wire.ISL_ROUTER_HK_TLM_MID,
                                           telemetry.decode_router_hk_stream, "ROUTER_")):
            raw = by_mid[mid]
            by_ccsdspy = {k: int(v[0]) for k, v in decode(raw).items() if v.dtype.kind in "iu"}
            by_cosmos = cosmos_defs.decode(defs[name], raw)
            for k, v in by_ccsdspy.items():
                if k.startswith(prefix):
                    assert by_cosmos[k[len(prefix):]] == v, (name, k)


def test_instances_spread_over_hosts_reach_each_other(tmp_path):
    problem = cfs_limits.problem(4, cfs_limits.HostLimits.local(), cfs_limits.InstanceCost())
    if problem:
        pytest.skip(problem)
    env = fake_ssh_env(tmp_path)
    isl, ground = free_port_bases(4, host="127.0.0.2")
    manifest = tmp_path / "m.json"
    r = subprocess.run([sys.executable, str(LAUNCHER), "--runtime", "cfs", "--cfs-exe", EXE, "--hosts",
                        "127.0.0.2,127.0.0.3", "--planes", "2", "--sats", "2", "--manifest", str(manifest),
                        "--remote-dir", str(tmp_path / "remote"), "--cfs-first-cpuid", free_first_cpuid(4),
                        "--isl-port-base", str(isl), "--ground-port-base", str(ground), "--detach", "--quiet",
                        "--health-timeout", "60"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    m = Manifest.load(manifest)
    try:
        assert [e.host for e in m.satellites] == ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"]
        cfg = (tmp_path / "remote" / "cfs" / "1-0" / "cf" / "skymemory.cfg").read_text()
        assert "hosts = 127.0.0.2, 127.0.0.3" in cfg and "bind = 127.0.0.3" in cfg
        # keyed: every instance holds a 0600 copy of its own satellite's key file (its links and its UP/DOWN
        # keys, never the ground's master) and refuses unsigned commands
        for name in ("0-0", "0-1", "1-0", "1-1"):
            copy = tmp_path / "remote" / "cfs" / name / "cf" / "skymem_auth.keys"
            assert stat.S_IMODE(copy.stat().st_mode) == 0o600
            plane, sat = map(int, name.split("-"))
            assert copy.read_bytes() == satellite_key_file(m.auth_key_file, plane, sat).read_bytes()
            assert copy.read_bytes() != Path(m.auth_key_file).read_bytes()
        unsigned_commands_refused(m, (1, 1))
        from skymemory.store.constellation import ConstellationBlockStore

        # up the overhead satellite's ground link: chunks for the other host's satellites cross over ISL
        with ConstellationBlockStore.from_manifest(m, [(0, 1), (1, 0), (1, 1)]) as store:
            payload = os.urandom(50_000)
            rec = store.put_block(b"s" * 32, payload)
            assert store.get_block(rec) == payload
    finally:
        r = subprocess.run([sys.executable, str(LAUNCHER), "stop", "--manifest", str(manifest)], capture_output=True,
                           text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert not list((tmp_path / "remote").rglob("skymem_auth.keys")), "stop leaves no copy of the key"


def test_keyed_cfs_constellation_takes_only_signed_commands(tmp_path):
    """The default launch on cFS: the key file in every instance's /cf, a named object round trip
    signed both ways, a migration whose ACK is signed with key 0, unsigned commands refused."""
    import asyncio
    import hashlib
    import socket

    from skymemory.link.client import SkyMemoryClient
    from skymemory.protocol.auth import signer_for_manifest
    from skymemory.store.objects import ObjectStore, key_of

    problem = cfs_limits.problem(4, cfs_limits.HostLimits.local(), cfs_limits.InstanceCost())
    if problem:
        pytest.skip(problem)
    with launched(tmp_path, 2, 2, "--runtime", "cfs", "--cfs-exe", EXE, "--cfs-first-cpuid",
                  free_first_cpuid(4)) as manifest:
        m = Manifest.load(manifest)
        assert m.auth_key_file and all((Path(m.run_dir) / "cfs" / f"{e.plane}-{e.sat}" / "cf" / "skymem_auth.keys")
                                       .stat().st_mode & 0o777 == 0o600 for e in m.satellites)
        data = os.urandom(50_000)
        kv = ObjectStore(m, 3, timeout_s=30)
        kv.put("cfs-object", data)
        assert kv.get(key_of("cfs-object"))[0] == data
        h = hashlib.sha256(b"cfs-keyed").digest()

        async def go():
            async with SkyMemoryClient(m.ground_addresses(), signer=signer_for_manifest(m), timeout=0.5,
                                       retries=8) as c:
                await c.set_chunk((0, 0), h, 0, 1, b"m" * 1000)
                assert await c.migrate((0, 0), h, 0, 1, (1, 1)) == 1  # the target's ACK verified by the holder
                before = (await c.stats((1, 0))).auth_failures
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    unsigned = wire.encode_data_command(wire.SKYMEM_RESET_COUNTERS_CC, wire.RouteHeader(1, 0))
                    s.sendto(unsigned, m.ground_addresses()[(1, 0)])
                deadline = time.monotonic() + 30
                while (after := await c.stats((1, 0))).auth_failures == before:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                return [(await c.stats(s)).auth_failures for s in [(0, 0), (1, 1)]], after.cmd_count

        failures, commands = asyncio.run(go())
        assert failures == [0, 0] and commands > 0  # nothing refused on the way; the counters were not reset
