"""Secure by default (issue 15): the launcher makes the constellation's key, every node takes it, the
ground finds it through the manifest; a datagram without a valid MAC changes nothing and is counted.
`--insecure` launches without it."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import stat
import time

from live import launched

from skymemory.link.client import SkyMemoryClient
from skymemory.orbit.manifest import Manifest
from skymemory.protocol import auth, wire

H = hashlib.sha256(b"secure-launch").digest()


def _send(address, *packets: bytes) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        for p in packets:
            s.sendto(p, address)


def test_default_launch_is_keyed_and_unsigned_datagrams_change_nothing(node_path, tmp_path):
    with launched(tmp_path, 2, 2) as path:
        m = Manifest.load(path)
        key_file = m.auth_key_file
        assert key_file and os.path.isfile(key_file)
        assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600  # readable by the operator only
        assert os.path.dirname(key_file) == m.run_dir
        signer = auth.signer_for_manifest(m)
        sat = (1, 1)

        async def go():
            async with SkyMemoryClient(m.ground_addresses(), signer=signer, timeout=0.5, retries=6) as c:
                await c.set_chunk(sat, H, 0, 1, b"kept" * 100)
                before = await c.stats(sat)
                route = wire.RouteHeader(sat[0], sat[1], request_id=4242)
                unsigned = [wire.encode_data_command(cc, route, body) for cc, body in (
                    (wire.SKYMEM_RESET_COUNTERS_CC, b""),
                    (wire.SKYMEM_EVICT_BLOCK_CC, wire.evict_body(H, 7, 0)),
                    (wire.SKYMEM_SET_PARAM_CC, wire.encode_set_param(wire.SKYMEM_PARAM_LOSS_PPM, 900000)),
                    (wire.SKYMEM_GET_CHUNK_CC, wire.chunk_ref(H, 0)))]
                forged = auth.Signer(1, bytes(32)).sign(unsigned[0])  # the right key id, a guessed key
                control = wire.encode_command(wire.SKYMEM_CMD_MID, wire.SKYMEM_RESET_COUNTERS_CC)
                _send(m.ground_addresses()[sat], *unsigned, forged, control)
                deadline = time.monotonic() + 30  # the datagrams are on their way: wait for them to be counted
                while (after := await c.stats(sat)).auth_failures < before.auth_failures + 6:
                    assert time.monotonic() < deadline, after
                    await asyncio.sleep(0.02)
                assert after.auth_failures == before.auth_failures + 6
                # nothing else changed: the counters were not reset, the chunk is there, no command was taken
                # (the one more command is our own STATS)
                assert after.cmd_count == before.cmd_count + 1 and after.rx_packets > before.rx_packets
                assert after.chunks == before.chunks
                assert await c.get_chunk(sat, H, 0) == b"kept" * 100

        asyncio.run(go())


def test_insecure_launch_has_no_key(node_path, tmp_path):
    with launched(tmp_path, 1, 2, "--insecure") as path:
        m = Manifest.load(path)
        assert m.auth_key_file == "" and auth.signer_for_manifest(m) is None
        assert not (tmp_path / "constellation.keys").exists()

        async def go():
            async with SkyMemoryClient(m.ground_addresses(), signer=None, timeout=0.5, retries=6) as c:
                await c.set_chunk((0, 1), H, 0, 1, b"open")
                return await c.get_chunk((0, 1), H, 0)

        assert asyncio.run(go()) == b"open"
