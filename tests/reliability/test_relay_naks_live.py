"""A relay answers no command it cannot verify (issue 25; docs/PROTOCOL.md §5).

A satellite relaying a command for another satellite cannot check its tag (that is the
destination's job), so on a keyed constellation a command it cannot deliver -- a destination
outside the grid, or a spent TTL -- is dropped and counted, never NAKed: a NAK would be an answer,
echoing the request id toward whatever source the packet claims, to a packet nobody verified.
Unkeyed, the relay still answers NAK NO_ROUTE, as it always has (shown here too, so the check can
fail). The order is deterministic: the relayed command and then a STATS go to the same ground
port, and the node handles them in turn, so any NAK is sent before the STATS answer arrives.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import auth, wire

ENTRY = (0, 0)


def _command_outside_the_grid(request_id: int) -> bytes:
    """A NOOP for (5,0) of a 1x2 grid, from ground station 1: the entry satellite can only relay it."""
    return wire.encode_data_command(wire.SKYMEM_NOOP_CC, wire.RouteHeader(5, 0, src_sat=1, request_id=request_id))


def _relay_once(cl: Cluster, packet: bytes, client_kwargs: dict) -> tuple[list[bytes], int]:
    """Sends packet into the entry satellite's ground port; returns what came back to its sender by the
    time a STATS sent after it is answered, and the entry satellite's dropped count."""

    async def go():
        async with SkyMemoryClient(cl.ground_addresses(), timeout=0.5, retries=8, **client_kwargs) as c:
            before = (await c.stats(ENTRY)).dropped
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", 0))
                s.setblocking(False)
                s.sendto(packet, cl.ground_addresses()[ENTRY])
                after = (await c.stats(ENTRY)).dropped
                heard = []
                while True:
                    try:
                        heard.append(s.recv(65536))
                    except BlockingIOError:
                        return heard, after - before

    return asyncio.run(go())


@pytest.fixture
def keyed(node_built, tmp_path):
    keys = auth.write_key_files(tmp_path, [(0, 0), (0, 1)])
    cl = Cluster(1, 2, keys=tmp_path)
    cl.start_all()
    try:
        yield cl, auth.Signer(1, keys.masters[1])
    finally:
        cl.close()


@pytest.fixture
def unkeyed(node_built):
    cl = Cluster(1, 2)
    cl.start_all()
    try:
        yield cl
    finally:
        cl.close()


def test_a_keyed_relay_drops_what_it_cannot_deliver_unanswered(keyed):
    cl, ground = keyed
    heard, dropped = _relay_once(cl, ground.sign(_command_outside_the_grid(0x51)), {"signer": ground, "station_id": 1})
    assert dropped == 1
    assert heard == []


def test_an_unkeyed_relay_still_naks_no_route(unkeyed):
    heard, dropped = _relay_once(unkeyed, _command_outside_the_grid(0x52), {})
    assert dropped == 1
    replies = [wire.decode_reply(p) for p in heard]
    assert [(r.route.request_id, r.status) for r in replies] == [(0x52, wire.SKYMEM_NAK_NO_ROUTE)]
