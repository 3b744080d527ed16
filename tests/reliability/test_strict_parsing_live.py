"""Strict parsing against a running satellite: every out-of-range or reserved field docs/PROTOCOL.md
names is refused with the NAK it names, counted `invalid`, and changes nothing (issue 15).

The parsing is skymem_core's (`skymem_parse`, `skymem_nak_for_parse_error`), which the cFS app
calls too; tests/c/test_codec.c checks the same fields at the codec level.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import time

import pytest

from skymemory.launcher.cluster import Cluster
from skymemory.protocol import wire
from skymemory.protocol.native import xor_checksum

H = hashlib.sha256(b"strict-parsing").digest()  # the block the malformed commands name
KEPT = hashlib.sha256(b"strict-parsing-kept").digest()  # stored first: nothing may touch it
DATA = bytes(range(200))
SAT = (0, 1)
CMD, ROUTE = wire.SKYMEM_CMD_HDR_LEN, wire.SKYMEM_CMD_HDR_LEN + wire.SKYMEM_ROUTE_HDR_LEN


@pytest.fixture(scope="module")
def node(node_built):
    cl = Cluster(1, 2, ["--chunk-size", "1024"]).start_all()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield cl, sock
    finally:
        sock.close()
        assert all(code == 0 for code in cl.close().values())


def _finalize(pkt: bytearray) -> bytes:
    pkt[7] = 0
    pkt[7] = xor_checksum(pkt)
    return bytes(pkt)


_ids = iter(range(1000, 10**6))


def _packet(cc: int, body: bytes, patch: dict[int, bytes] | None = None) -> tuple[int, bytes]:
    """A data-plane command to SAT straight over its ground link, with bytes overwritten at `patch`
    (offsets from the start of the packet), the checksum kept right."""
    rid = next(_ids)
    route = wire.RouteHeader(SAT[0], SAT[1], wire.SKYMEM_GROUND_PLANE, 0, request_id=rid)
    pkt = bytearray(wire.encode_data_command(cc, route, body))
    for off, value in (patch or {}).items():
        pkt[off:off + len(value)] = value
    return rid, _finalize(pkt)


def _ask(node, pkt: bytes, rid: int, timeout: float = 5.0) -> wire.Reply:
    """Send until the reply with this request id comes back (the deadline adapts to a slow host)."""
    cl, sock = node
    addr = cl.ground_addresses()[SAT]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.sendto(pkt, addr)
        sock.settimeout(0.5)
        try:
            while True:
                reply = wire.decode_reply(sock.recv(65536))
                if reply.route.request_id == rid:
                    return reply
        except socket.timeout:
            continue
    raise AssertionError(f"no reply to request {rid} within {timeout} s")


def _stats(node) -> wire.Stats:
    rid, pkt = _packet(wire.SKYMEM_STATS_CC, b"")
    return _ask(node, pkt, rid).stats


def _holds(node, chunk_id: int, block_hash: bytes = H) -> bool:
    rid, pkt = _packet(wire.SKYMEM_PROBE_CC, wire.chunk_ref(block_hash, chunk_id))
    return _ask(node, pkt, rid).kind == wire.SKYMEM_REPLY_ACK


def _set_chunk_body(chunk_id: int = 1, count: int = 2, flags: int = 0, data: bytes = DATA, crc: int | None = None,
                    block_hash: bytes = H) -> bytes:
    """Descriptor + data packed by hand: ChunkDesc would not let these values through."""
    fields = (block_hash, chunk_id, count, 5, wire.crc32c(data) if crc is None else crc, len(data), 0, flags)
    return struct.pack(">32sIIQIHBB", *fields) + data


# (field, command, body, bytes patched at an offset, the NAK expected, chunk id that must not be stored)
CASES = [
    ("SET_CHUNK chunk_id >= chunk_count (5 of 2)", wire.SKYMEM_SET_CHUNK_CC, _set_chunk_body(5, 2), {},
     wire.SKYMEM_NAK_BAD_PARAM, 5),
    ("SET_CHUNK chunk_count 0", wire.SKYMEM_SET_CHUNK_CC, _set_chunk_body(0, 0), {}, wire.SKYMEM_NAK_BAD_PARAM, 0),
    ("SET_CHUNK chunk_id 0xFFFFFFFF", wire.SKYMEM_SET_CHUNK_CC, _set_chunk_body(0xFFFFFFFF, 2), {},
     wire.SKYMEM_NAK_BAD_PARAM, 0xFFFFFFFF),
    ("SET_CHUNK descriptor flags 0xFF", wire.SKYMEM_SET_CHUNK_CC, _set_chunk_body(flags=0xFF), {},
     wire.SKYMEM_NAK_BAD_PARAM, 1),
    ("route reserved byte", wire.SKYMEM_SET_CHUNK_CC, _set_chunk_body(),
     {CMD + wire.SKYMEM_ROUTE_RESERVED: b"\x01"}, wire.SKYMEM_NAK_BAD_PARAM, 1),
    ("route flags: a bit no version defines", wire.SKYMEM_SET_CHUNK_CC, _set_chunk_body(),
     {CMD + wire.SKYMEM_ROUTE_FLAGS: b"\x40"}, wire.SKYMEM_NAK_BAD_PARAM, 1),
    ("EVICT_BLOCK spare bytes", wire.SKYMEM_EVICT_BLOCK_CC, wire.evict_body(KEPT, 99, 0),
     {ROUTE + wire.SKYMEM_EV_SPARE + 1: b"\x07"}, wire.SKYMEM_NAK_BAD_PARAM, None),
    ("SET_PARAM spare", wire.SKYMEM_SET_PARAM_CC, wire.encode_set_param(wire.SKYMEM_PARAM_CHUNK_SIZE, 512),
     {ROUTE + 2: b"\x00\x01"}, wire.SKYMEM_NAK_BAD_PARAM, None),
    ("SET_PARAM unknown parameter", wire.SKYMEM_SET_PARAM_CC, wire.encode_set_param(77, 1), {},
     wire.SKYMEM_NAK_BAD_PARAM, None),
    ("SET_PARAM chunk size 0", wire.SKYMEM_SET_PARAM_CC, wire.encode_set_param(wire.SKYMEM_PARAM_CHUNK_SIZE, 0), {},
     wire.SKYMEM_NAK_BAD_PARAM, None),
    ("GET_CHUNKS count 0", wire.SKYMEM_GET_CHUNKS_CC, wire.chunk_range(H, 0, 1, 1),
     {ROUTE + wire.SKYMEM_CR_COUNT: bytes(4)}, wire.SKYMEM_NAK_BAD_PARAM, None),
    ("GET_CHUNKS count above 4096", wire.SKYMEM_GET_CHUNKS_CC, wire.chunk_range(H, 0, 1, 1),
     {ROUTE + wire.SKYMEM_CR_COUNT: (4097).to_bytes(4, "big")}, wire.SKYMEM_NAK_BAD_PARAM, None),
    ("GET_CHUNKS stride 0", wire.SKYMEM_GET_CHUNKS_CC, wire.chunk_range(H, 0, 2, 1),
     {ROUTE + wire.SKYMEM_CR_STRIDE: bytes(4)}, wire.SKYMEM_NAK_BAD_PARAM, None),
    ("MIGRATE stride 0", wire.SKYMEM_MIGRATE_CC, wire.migrate_body(H, 0, 2, 1, (0, 0)),
     {ROUTE + wire.SKYMEM_CR_STRIDE: bytes(4)}, wire.SKYMEM_NAK_BAD_PARAM, None),
    ("MIGRATE target outside the grid", wire.SKYMEM_MIGRATE_CC, wire.migrate_body(H, 0, 2, 1, (9, 9)), {},
     wire.SKYMEM_NAK_NO_ROUTE, None),
    ("function code no command has", wire.SKYMEM_NOOP_CC, b"", {6: b"\x3f"}, wire.SKYMEM_NAK_BAD_COMMAND, None),
    ("function code top bit", wire.SKYMEM_NOOP_CC, b"", {6: b"\x80"}, wire.SKYMEM_NAK_BAD_PARAM, None),
    ("body of the wrong length", wire.SKYMEM_PROBE_CC, wire.chunk_ref(H, 0) + b"\x00", {},
     wire.SKYMEM_NAK_BAD_LENGTH, None),
    ("SET_CHUNK data longer than the chunk size", wire.SKYMEM_SET_CHUNK_CC, _set_chunk_body(data=bytes(2000)), {},
     wire.SKYMEM_NAK_TOO_LARGE, 1),
    ("SET_CHUNK CRC32C wrong", wire.SKYMEM_SET_CHUNK_CC, _set_chunk_body(crc=1234), {}, wire.SKYMEM_NAK_BAD_CRC, 1),
]


@pytest.mark.parametrize("field,cc,body,patch,nak,chunk", CASES, ids=[c[0] for c in CASES])
def test_each_field_is_refused_with_its_nak_and_changes_nothing(node, field, cc, body, patch, nak, chunk):
    # a stored block the malformed command must not touch (the malformed EVICT names it)
    rid, pkt = _packet(wire.SKYMEM_SET_CHUNK_CC, _set_chunk_body(0, 2, block_hash=KEPT))
    assert _ask(node, pkt, rid).kind == wire.SKYMEM_REPLY_ACK
    before = _stats(node)
    rid, pkt = _packet(cc, body, patch)
    reply = _ask(node, pkt, rid)
    assert (reply.kind, wire.nak_name(reply.status)) == (wire.SKYMEM_REPLY_NAK, wire.nak_name(nak)), field
    after = _stats(node)
    assert after.chunks == before.chunks and after.bytes_used == before.bytes_used, field
    assert _holds(node, 0, KEPT), f"{field}: the stored chunk was touched"
    if chunk is not None:
        assert not _holds(node, chunk), f"{field}: the refused chunk was stored"
    parse_refused = nak in (wire.SKYMEM_NAK_BAD_LENGTH, wire.SKYMEM_NAK_BAD_COMMAND) or (
        nak == wire.SKYMEM_NAK_BAD_PARAM and "unknown parameter" not in field and "chunk size 0" not in field)
    if parse_refused:  # refused by the parser: counted as malformed
        assert after.invalid == before.invalid + 1, field
    assert after.err_count > before.err_count, f"{field}: the NAK is counted"
