"""Replies are authenticated too, and replay protection survives a restart (issue 15).

A migration's holder deletes its copy of a chunk on the target's ACK; an attacker who could forge
or replay that ACK could make chunks vanish. Here the test plays the target satellite itself:
it binds (0,1)'s ISL port, receives the holder's migration SET_CHUNK and answers it, holding the
constellation key like a real satellite. A forged ACK (unsigned, or signed with a wrong key)
deletes nothing; a genuine ACK recorded before the holder restarted, replayed after the restart to
the same request id, deletes nothing either; both are counted. Likewise a ground command
recorded before a restart is refused after it.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time

import pytest

from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import auth, wire
from skymemory.protocol.errors import ChunkNotFound

H = hashlib.sha256(b"auth-replies").digest()
DATA = bytes(range(256)) * 4
HOLDER, TARGET = (0, 0), (0, 1)


@pytest.fixture
def setup(node_built, tmp_path):
    keys = auth.write_key_files(tmp_path, [(0, 0), (0, 1)])
    cl = Cluster(1, 2, keys=tmp_path)
    cl.start(HOLDER)
    cl.wait_healthy([HOLDER], 30)
    target = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the test is satellite (0,1)
    target.bind(("127.0.0.1", cl.isl_base + 1))
    try:
        # the test signs as the target does over its link to the holder
        link = auth.derive_link(keys.link_master, TARGET, HOLDER)
        yield cl, target, auth.Signer(1, keys.masters[1]), auth.Signer(auth.link_id(*TARGET), link, satellite=True)
    finally:
        target.close()
        cl.close()


def _next_set_chunk(target: socket.socket, timeout: float = 30.0) -> wire.Command:
    """The holder's next migration SET_CHUNK arriving at the fake target (its resends included)."""
    target.settimeout(timeout)
    while True:
        cmd = wire.decode_command(target.recv(65536))
        if cmd.cc == wire.SKYMEM_SET_CHUNK_CC and cmd.route.flags & wire.SKYMEM_RF_MIGRATION:
            return cmd


def _ack(cmd: wire.Command) -> bytes:
    """The target's ACK of a migration SET_CHUNK, unsigned: routed back to the holder."""
    route = wire.RouteHeader(cmd.route.src_plane, cmd.route.src_sat, TARGET[0], TARGET[1],
                             request_id=cmd.route.request_id)
    return wire.encode_reply(route, wire.SKYMEM_REPLY_ACK, wire.SKYMEM_SET_CHUNK_CC, chunk_id=cmd.chunk_id, value=1,
                             body=cmd.block_hash)


async def _wait_failures(c: SkyMemoryClient, at_least: int) -> int:
    """auth_failures of the holder once it reached `at_least` (bounded: the datagrams are on their way)."""
    deadline = time.monotonic() + 30
    while True:
        n = (await c.stats(HOLDER)).auth_failures
        if n >= at_least or time.monotonic() > deadline:
            return n
        await asyncio.sleep(0.02)


async def _holds(c: SkyMemoryClient, chunk: int) -> bool:
    try:
        await c.get_chunk(HOLDER, H, chunk)
        return True
    except ChunkNotFound:
        return False


def test_forged_and_replayed_migration_acks_delete_nothing(setup):
    cl, target, ground, satellite = setup
    holder_isl = ("127.0.0.1", cl.isl_base)

    async def go():
        async with SkyMemoryClient(cl.ground_addresses(), signer=ground, station_id=1, timeout=0.5,
                                   retries=8) as c:
            await c.set_chunk(HOLDER, H, 0, 1, DATA)
            migrating = asyncio.ensure_future(c.migrate(HOLDER, H, 0, 1, TARGET, timeout=20))
            cmd = await asyncio.to_thread(_next_set_chunk, target)
            assert cmd.origin == (1, HOLDER[0], HOLDER[1])  # its ground station travels with it
            before = (await c.stats(HOLDER)).auth_failures
            target.sendto(_ack(cmd), holder_isl)  # unsigned
            wrong = auth.Signer(auth.link_id(*TARGET), bytes(32), satellite=True)
            target.sendto(wrong.sign(_ack(cmd)), holder_isl)  # wrong key
            assert await _wait_failures(c, before + 2) == before + 2
            assert await _holds(c, 0), "a forged ACK deleted the chunk"
            genuine = satellite.sign(_ack(cmd))
            target.sendto(genuine, holder_isl)
            assert await migrating == 1 and not await _holds(c, 0)  # the genuine one moves it

            cl.restart(HOLDER)  # empty, with a fresh replay state: the floor is its start time
            await c.set_chunk(HOLDER, H, 0, 1, DATA)
            migrating = asyncio.ensure_future(c.migrate(HOLDER, H, 0, 1, TARGET, timeout=20))
            cmd = await asyncio.to_thread(_next_set_chunk, target)
            before = (await c.stats(HOLDER)).auth_failures
            target.sendto(genuine, holder_isl)  # the ACK recorded before the restart, same request id
            assert await _wait_failures(c, before + 1) == before + 1
            assert await _holds(c, 0), "a replayed ACK deleted the chunk after the restart"
            target.sendto(satellite.sign(_ack(cmd)), holder_isl)
            assert await migrating == 1

    asyncio.run(go())


def test_a_command_recorded_before_a_restart_is_refused_after_it(setup):
    cl, _target, ground, _satellite = setup

    async def go():
        async with SkyMemoryClient(cl.ground_addresses(), signer=ground, station_id=1, timeout=0.5,
                                   retries=8) as c:
            c.capture = []
            await c.set_chunk(HOLDER, H, 1, 2, DATA)
            recorded = next(p for p in c.capture if p[:2] == b"\x18\x92" and p[6] & 0x7F == wire.SKYMEM_SET_CHUNK_CC)
            cl.restart(HOLDER)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", 0))
                s.sendto(recorded, cl.ground_addresses()[HOLDER])
            assert await _wait_failures(c, 1) == 1
            st = await c.stats(HOLDER)
            assert st.chunks == 0 and not await _holds(c, 1)

    asyncio.run(go())
