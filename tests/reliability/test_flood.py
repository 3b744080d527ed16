"""Hostile load on a running satellite: a flood of SETs far beyond its memory
budget keeps bytes_used within the budget and RSS bounded; random and mutated
datagrams at full rate (tests/c/replay.c) leave it answering, also with
command authentication on."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import subprocess
from pathlib import Path

from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import auth, wire

REPO = Path(__file__).resolve().parents[2]
BUDGET = 1 << 20


def stats(cl: Cluster, sat=(0, 0), signer: auth.Signer | None = None) -> wire.Stats:
    async def go():
        async with SkyMemoryClient(cl.ground_addresses(), timeout=0.5, retries=6, signer=signer) as c:
            return await c.stats(sat)
    return asyncio.run(go())


def test_set_flood_stays_within_the_memory_budget(node_built):
    with Cluster(1, 1, ["--memory-budget", str(BUDGET), "--delay-scale", "0"]) as cl:
        rss_before = cl.rss_kib()[(0, 0)]
        addr = cl.ground_addresses()[(0, 0)]
        route = wire.RouteHeader(dst_plane=0, dst_sat=0, src_plane=wire.SKYMEM_GROUND_PLANE, src_sat=0,
                                 via_plane=wire.SKYMEM_NO_SAT, via_sat=wire.SKYMEM_NO_SAT, request_id=1)
        data = os.urandom(6144)
        sent = 0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))  # replies are never read: they pile up and drop in our buffer
            for b in range(1500):  # 1500 blocks x 4 chunks x 6 KiB = 35 MiB, 35x the budget
                h = hashlib.sha256(b"flood%d" % b).digest()
                for k in range(4):
                    desc = wire.make_desc(h, k, 4, 0, data, 1)
                    s.sendto(wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(desc, data)),
                             addr)
                    sent += 1
        st = stats(cl)
        rss_after = cl.rss_kib()[(0, 0)]
        assert cl.alive()[(0, 0)]
    assert st.bytes_budget == BUDGET
    assert 0 < st.bytes_used <= st.bytes_budget
    assert st.lru_evictions > 0  # the flood really overflowed the store
    # RSS may grow by the budget plus bounded queues/buffers, not by what was sent (35 MiB)
    assert (rss_after - rss_before) * 1024 <= BUDGET + 8 * (1 << 20), (rss_before, rss_after)


def test_random_datagrams_at_full_rate_keyed_node(node_built, tmp_path):
    replay = REPO / "build" / "skymem_replay"
    if not replay.exists():
        import pytest
        pytest.skip("build/skymem_replay is not built")
    auth.write_key_files(tmp_path, [(0, 0)])
    with Cluster(1, 1, ["--delay-scale", "0"], keys=tmp_path) as cl:
        port = cl.ground_addresses()[(0, 0)][1]
        # the replayer signs its STATS as the ground would for (0,0): with (0,0)'s UP key, from its file
        r = subprocess.run([str(replay), "--udp", f"127.0.0.1:{port}", "--count", "20000", "--seed", "5",
                            "--auth-keys", str(auth.satellite_key_file(tmp_path, 0, 0))],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        st = stats(cl, signer=auth.Signer.from_file(tmp_path / "constellation.keys"))
        assert cl.alive()[(0, 0)] and st.invalid > 0
