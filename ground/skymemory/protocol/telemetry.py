"""Telemetry decoding with ccsdspy: HK packets of both apps, STATS replies, any reply, data-plane commands.

The packet definitions mirror skymem_wire.h (big-endian payload after the cFS
headers). `split_by_mid` cuts a recorded stream (concatenated packets, e.g. a
capture file) into one stream per message id — commands and telemetry of the
same APID differ only in the type bit — checking every packet length; then
each stream is decoded by its ccsdspy definition into numpy arrays.
"""

from __future__ import annotations

import io
import logging
from collections import OrderedDict
from pathlib import Path

import numpy as np

# ccsdspy logs an INFO banner on import, to stderr; keep only its warnings and errors.
logging.getLogger("ccsdspy").addFilter(lambda record: record.levelno >= logging.WARNING)

from ccsdspy import FixedLength, PacketArray, PacketField, VariableLength  # noqa: E402

from skymemory.protocol import wire
from skymemory.protocol.errors import WireError

_TLM_TIME = [
    PacketField(name="TLM_SECONDS", data_type="uint", bit_length=32),
    PacketField(name="TLM_SUBSECONDS", data_type="uint", bit_length=16),
    PacketField(name="TLM_SPARE", data_type="fill", bit_length=32),
]
_CMD_SEC = [
    PacketField(name="CC_RESERVED", data_type="uint", bit_length=1),
    PacketField(name="FUNCTION_CODE", data_type="uint", bit_length=7),
    PacketField(name="CHECKSUM", data_type="uint", bit_length=8),
]
_ROUTE = [PacketField(name=f"ROUTE_{n.upper()}", data_type="uint", bit_length=b) for n, b in (
    ("dst_plane", 16), ("dst_sat", 16), ("src_plane", 16), ("src_sat", 16), ("via_plane", 16), ("via_sat", 16),
    ("request_id", 32), ("ttl", 8), ("hops", 8), ("flags", 8), ("reserved", 8))]
_REPLY_HDR = [PacketField(name=f"REPLY_{n.upper()}", data_type="uint", bit_length=b) for n, b in (
    ("kind", 8), ("cc", 8), ("status", 8), ("reserved", 8), ("chunk_id", 32), ("value", 32))]
_STATS_BITS = {"bytes_used": 64, "bytes_budget": 64, "mission_time_ms": 64, "plane": 16, "sat": 16}
_STATS = [PacketField(name=f"STATS_{n.upper()}", data_type="uint", bit_length=_STATS_BITS.get(n, 32))
          for n in wire.STATS_FIELDS]

HK_PACKET = FixedLength(_TLM_TIME + _STATS, apid=wire.SKYMEM_HK_TLM_MID & 0x7FF, name="SKYMEM_HK_TLM",
                        description="SKYMEM housekeeping: cFS telemetry header + stats body")
_ROUTER_BITS = {"plane": 16, "sat": 16}
ROUTER_HK_PACKET = FixedLength(
    _TLM_TIME + [PacketField(name=f"ROUTER_{n.upper()}", data_type="uint", bit_length=_ROUTER_BITS.get(n, 32))
                 for n in wire.ISL_ROUTER_HK_FIELDS],
    apid=wire.ISL_ROUTER_HK_TLM_MID & 0x7FF, name="ISL_ROUTER_HK_TLM",
    description="ISL_ROUTER housekeeping: cFS telemetry header + router counters")
STATS_REPLY_PACKET = FixedLength(_TLM_TIME + _ROUTE + _REPLY_HDR + _STATS, name="SKYMEM_STATS_REPLY",
                                 apid=wire.SKYMEM_REPLY_TLM_MID & 0x7FF)
REPLY_PACKET = VariableLength(_TLM_TIME + _ROUTE + _REPLY_HDR + [
    PacketArray(name="BODY", data_type="uint", bit_length=8, array_shape="expand")],
    apid=wire.SKYMEM_REPLY_TLM_MID & 0x7FF, name="SKYMEM_REPLY_TLM")
DATA_COMMAND_PACKET = VariableLength(_CMD_SEC + _ROUTE + [
    PacketArray(name="BODY", data_type="uint", bit_length=8, array_shape="expand")],
    apid=wire.SKYMEM_DATA_CMD_MID & 0x7FF, name="SKYMEM_DATA_CMD")

DEFINITIONS = {
    wire.SKYMEM_HK_TLM_MID: HK_PACKET,
    wire.ISL_ROUTER_HK_TLM_MID: ROUTER_HK_PACKET,
    wire.SKYMEM_REPLY_TLM_MID: REPLY_PACKET,
    wire.SKYMEM_DATA_CMD_MID: DATA_COMMAND_PACKET,
}
MID_NAMES = {wire.SKYMEM_HK_TLM_MID: "SKYMEM_HK_TLM", wire.SKYMEM_REPLY_TLM_MID: "SKYMEM_REPLY_TLM",
             wire.SKYMEM_DATA_CMD_MID: "SKYMEM_DATA_CMD", wire.SKYMEM_CMD_MID: "SKYMEM_CMD",
             wire.SKYMEM_SEND_HK_MID: "SKYMEM_SEND_HK", wire.ISL_ROUTER_HK_TLM_MID: "ISL_ROUTER_HK_TLM",
             wire.ISL_ROUTER_CMD_MID: "ISL_ROUTER_CMD", wire.ISL_ROUTER_SEND_HK_MID: "ISL_ROUTER_SEND_HK"}


def iter_packets(stream: bytes):
    """Yield each packet of concatenated CCSDS packets; WireError on a truncated tail."""
    off = 0
    while off < len(stream):
        if len(stream) - off < wire.SKYMEM_PRI_HDR_LEN:
            raise WireError(f"{len(stream) - off} trailing bytes at offset {off} are not a whole primary header")
        total = int.from_bytes(stream[off + 4:off + 6], "big") + 7
        if off + total > len(stream):
            raise WireError(f"packet at offset {off} says {total} bytes, only {len(stream) - off} remain")
        yield stream[off:off + total]
        off += total


def split_by_mid(stream: bytes) -> "OrderedDict[int, bytes]":
    out: OrderedDict[int, bytearray] = OrderedDict()
    for pkt in iter_packets(stream):
        mid = int.from_bytes(pkt[:2], "big")
        out.setdefault(mid, bytearray()).extend(pkt)
    return OrderedDict((k, bytes(v)) for k, v in out.items())


def decode_stream(stream: bytes) -> dict[int, dict[str, np.ndarray]]:
    """{mid: {field: array}} for every message id with a definition (others: packet count only)."""
    result: dict[int, dict[str, np.ndarray]] = {}
    for mid, data in split_by_mid(stream).items():
        definition = DEFINITIONS.get(mid)
        if definition is None:
            result[mid] = {"PACKETS": np.array([sum(1 for _ in iter_packets(data))])}
            continue
        result[mid] = definition.load(io.BytesIO(data), include_primary_header=True)
    return result


def decode_file(path: str | Path) -> dict[int, dict[str, np.ndarray]]:
    return decode_stream(Path(path).read_bytes())


def _decode_fixed(stream: bytes, mid: int, body_len: int, what: str, packet) -> dict[str, np.ndarray]:
    """Every packet of `stream` must be `what` (message id `mid`, `body_len` bytes after the header)."""
    for pkt in iter_packets(stream):
        if int.from_bytes(pkt[:2], "big") != mid:
            raise WireError(f"not an {what} packet: message id {pkt[:2].hex()}")
        if len(pkt) != wire.SKYMEM_TLM_HDR_LEN + body_len:
            raise WireError(f"{what} packet of {len(pkt)} bytes")
    return packet.load(io.BytesIO(stream), include_primary_header=True)


def decode_hk_stream(stream: bytes) -> dict[str, np.ndarray]:
    """Only HK packets (every packet must be SKYMEM HK telemetry of the right length)."""
    return _decode_fixed(stream, wire.SKYMEM_HK_TLM_MID, wire.SKYMEM_STATS_LEN, "HK", HK_PACKET)


def decode_router_hk_stream(stream: bytes) -> dict[str, np.ndarray]:
    """Only ISL_ROUTER HK packets (each of the right length)."""
    return _decode_fixed(stream, wire.ISL_ROUTER_HK_TLM_MID, wire.ISL_ROUTER_HK_LEN, "ISL_ROUTER HK",
                         ROUTER_HK_PACKET)


def decode_stats_replies(stream: bytes) -> dict[str, np.ndarray]:
    """Only STATS replies (fixed length), e.g. the answers `skymemory status` collects."""
    want = wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_HDR_LEN + wire.SKYMEM_REPLY_HDR_LEN + wire.SKYMEM_STATS_LEN
    for pkt in iter_packets(stream):
        if int.from_bytes(pkt[:2], "big") != wire.SKYMEM_REPLY_TLM_MID or len(pkt) != want:
            raise WireError(f"not a STATS reply: message id {pkt[:2].hex()}, {len(pkt)} bytes")
        if pkt[wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_HDR_LEN] != wire.SKYMEM_REPLY_STATS:
            raise WireError("a reply of another kind has the STATS length")
    return STATS_REPLY_PACKET.load(io.BytesIO(stream), include_primary_header=True)
