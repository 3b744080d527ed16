"""The SkyMemory wire format in pure Python (mirror of skymem_wire.h).

Every packet is a CCSDS Space Packet with the cFS v7 default headers: commands
carry the 2-byte command secondary header (function code, XOR checksum),
telemetry the 10-byte time + spare header. The primary header is built and
parsed with the `spacepacket` library. Everything after the cFS headers is
big-endian SkyMemory payload. Every length is checked on decode; a bad packet
raises `WireError`, never returns partial data.

Constants below must equal the #defines of skymem_wire.h: building the extension
compiles each against its macro (`_cffi_build.header_checks`, so a header edit this
file does not follow stops the build), and tests/test_wire.py checks that every
#define of the header is here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from spacepacket import PacketType, SequenceFlags, SpacePacket

from skymemory.protocol.errors import WireError
from skymemory.protocol.native import crc32c, xor_checksum

# ---- CCSDS / cFS header sizes ------------------------------------------------
SKYMEM_PRI_HDR_LEN = 6
SKYMEM_CMD_HDR_LEN = 8
SKYMEM_TLM_HDR_LEN = 16

# ---- Message IDs --------------------------------------------------------------
SKYMEM_CMD_MID = 0x1890
SKYMEM_SEND_HK_MID = 0x1891
SKYMEM_DATA_CMD_MID = 0x1892
ISL_ROUTER_CMD_MID = 0x1893
ISL_ROUTER_SEND_HK_MID = 0x1894
SKYMEM_HK_TLM_MID = 0x0890
SKYMEM_REPLY_TLM_MID = 0x0892
ISL_ROUTER_HK_TLM_MID = 0x0893

# ---- Function codes -------------------------------------------------------------
SKYMEM_NOOP_CC = 0
SKYMEM_RESET_COUNTERS_CC = 1
SKYMEM_SET_PARAM_CC = 2
SKYMEM_SET_CHUNK_CC = 3
SKYMEM_GET_CHUNK_CC = 4
SKYMEM_GET_CHUNKS_CC = 5
SKYMEM_PROBE_CC = 6
SKYMEM_EVICT_BLOCK_CC = 7
SKYMEM_MIGRATE_CC = 8
SKYMEM_STATS_CC = 9
SKYMEM_NUM_CC = 10

ISL_ROUTER_NOOP_CC = 0
ISL_ROUTER_RESET_COUNTERS_CC = 1
ISL_ROUTER_SET_LINK_CC = 2

# ---- Control payloads -------------------------------------------------------------
SKYMEM_SET_PARAM_LEN = 8
SKYMEM_PARAM_MEMORY_BUDGET_KB = 1
SKYMEM_PARAM_CHUNK_SIZE = 2
SKYMEM_PARAM_DELAY_SCALE_PPM = 3
SKYMEM_PARAM_LOSS_PPM = 4

# ---- Route header -------------------------------------------------------------------
SKYMEM_ROUTE_HDR_LEN = 20
SKYMEM_ROUTE_DST_PLANE = 0
SKYMEM_ROUTE_DST_SAT = 2
SKYMEM_ROUTE_SRC_PLANE = 4
SKYMEM_ROUTE_SRC_SAT = 6
SKYMEM_ROUTE_VIA_PLANE = 8
SKYMEM_ROUTE_VIA_SAT = 10
SKYMEM_ROUTE_REQUEST_ID = 12
SKYMEM_ROUTE_TTL = 16
SKYMEM_ROUTE_HOPS = 17
SKYMEM_ROUTE_FLAGS = 18
SKYMEM_ROUTE_RESERVED = 19

SKYMEM_GROUND_PLANE = 0xFFFF
SKYMEM_NO_SAT = 0xFFFF
SKYMEM_DEFAULT_TTL = 255  # the one-byte maximum: a 128x128 torus is 128 hops across

SKYMEM_RF_AUTH = 0x01
SKYMEM_RF_GOSSIP = 0x02
SKYMEM_RF_MIGRATION = 0x04
SKYMEM_RF_KNOWN = 0x07  # every flag above; any other bit is refused

# ---- Block hash and chunk descriptor ---------------------------------------------------
SKYMEM_BLOCK_HASH_LEN = 32
SKYMEM_CHUNK_DESC_LEN = 56
SKYMEM_CD_BLOCK_HASH = 0
SKYMEM_CD_CHUNK_ID = 32
SKYMEM_CD_CHUNK_COUNT = 36
SKYMEM_CD_CREATED_MS = 40
SKYMEM_CD_CRC32C = 48
SKYMEM_CD_DATA_LEN = 52
SKYMEM_CD_GOSSIP_RADIUS = 54
SKYMEM_CD_FLAGS = 55
SKYMEM_CDF_ORIGIN = 0x01  # an origin record follows the descriptor (a migration's SET_CHUNK only)
SKYMEM_CDF_KNOWN = 0x01  # descriptor flags defined so far
SKYMEM_ORIGIN_LEN = 8  # origin record: u16 ground station, u16 via plane, u16 via sat, u16 zero
SKYMEM_OR_GROUND = 0
SKYMEM_OR_VIA_PLANE = 2
SKYMEM_OR_VIA_SAT = 4
SKYMEM_OR_RESERVED = 6

SKYMEM_DEFAULT_CHUNK_DATA = 6144
SKYMEM_MAX_CHUNK_DATA = 60000
SKYMEM_MAX_PACKET = 65507
SKYMEM_MAX_GET_CHUNKS = 4096

# ---- Data-plane bodies -----------------------------------------------------------------------
SKYMEM_CHUNK_REF_LEN = 36
SKYMEM_CHUNK_RANGE_LEN = 44
SKYMEM_CR_FIRST = 32
SKYMEM_CR_COUNT = 36
SKYMEM_CR_STRIDE = 40
SKYMEM_EVICT_LEN = 40
SKYMEM_EV_EVICT_ID = 32
SKYMEM_EV_RADIUS = 36
SKYMEM_EV_SPARE = 37
SKYMEM_MIGRATE_LEN = 48
SKYMEM_MG_TARGET_PLANE = 44
SKYMEM_MG_TARGET_SAT = 46

# ---- Replies ---------------------------------------------------------------------------------
SKYMEM_REPLY_HDR_LEN = 12
SKYMEM_RH_KIND = 0
SKYMEM_RH_CC = 1
SKYMEM_RH_STATUS = 2
SKYMEM_RH_RESERVED = 3
SKYMEM_RH_CHUNK_ID = 4
SKYMEM_RH_VALUE = 8

SKYMEM_REPLY_DATA = 1
SKYMEM_REPLY_ACK = 2
SKYMEM_REPLY_NAK = 3
SKYMEM_REPLY_EVICTED = 4
SKYMEM_REPLY_STATS = 5

SKYMEM_NAK_NOT_FOUND = 1
SKYMEM_NAK_BAD_LENGTH = 2
SKYMEM_NAK_BAD_CRC = 3
SKYMEM_NAK_NO_SPACE = 4
SKYMEM_NAK_TTL_EXPIRED = 5
SKYMEM_NAK_NO_ROUTE = 6
SKYMEM_NAK_BAD_COMMAND = 7
SKYMEM_NAK_AUTH_FAILED = 8
SKYMEM_NAK_TOO_LARGE = 9
SKYMEM_NAK_BUSY = 10
SKYMEM_NAK_MIGRATE_FAILED = 11
SKYMEM_NAK_BAD_PARAM = 12
SKYMEM_NAK_CONFLICT = 13

# ---- Stats body --------------------------------------------------------------------------------
SKYMEM_STATS_LEN = 88
SKYMEM_ST_PLANE = 0
SKYMEM_ST_SAT = 2
SKYMEM_ST_CMD_COUNT = 4
SKYMEM_ST_ERR_COUNT = 8
SKYMEM_ST_CHUNKS = 12
SKYMEM_ST_BYTES_USED = 16
SKYMEM_ST_BYTES_BUDGET = 24
SKYMEM_ST_LRU_EVICTIONS = 32
SKYMEM_ST_BLOCKS_PURGED = 36
SKYMEM_ST_RX_PACKETS = 40
SKYMEM_ST_TX_PACKETS = 44
SKYMEM_ST_FORWARDED = 48
SKYMEM_ST_DROPPED = 52
SKYMEM_ST_INVALID = 56
SKYMEM_ST_AUTH_FAILURES = 60
SKYMEM_ST_MIGRATED_OUT = 64
SKYMEM_ST_MIGRATED_IN = 68
SKYMEM_ST_MISSION_TIME_MS = 72
SKYMEM_ST_UPTIME_S = 80
SKYMEM_ST_SPARE = 84

# ---- ISL_ROUTER housekeeping body ---------------------------------------------------------------
ISL_ROUTER_HK_LEN = 48
ISL_ROUTER_HK_PLANE = 0
ISL_ROUTER_HK_SAT = 2
ISL_ROUTER_HK_CMD_COUNT = 4
ISL_ROUTER_HK_ERR_COUNT = 8
ISL_ROUTER_HK_RX_ISL = 12
ISL_ROUTER_HK_RX_GROUND = 16
ISL_ROUTER_HK_TX_ISL = 20
ISL_ROUTER_HK_TX_GROUND = 24
ISL_ROUTER_HK_FORWARDED = 28
ISL_ROUTER_HK_DELIVERED = 32
ISL_ROUTER_HK_DROPPED = 36
ISL_ROUTER_HK_INVALID = 40
ISL_ROUTER_HK_GROUND_KNOWN = 44

SKYMEM_AUTH_TRAILER_LEN = 44

NAK_NAMES = {
    value: name[len("SKYMEM_NAK_"):]
    for name, value in list(globals().items())
    if name.startswith("SKYMEM_NAK_")
}
CC_NAMES = {
    SKYMEM_NOOP_CC: "NOOP", SKYMEM_RESET_COUNTERS_CC: "RESET_COUNTERS", SKYMEM_SET_PARAM_CC: "SET_PARAM",
    SKYMEM_SET_CHUNK_CC: "SET_CHUNK", SKYMEM_GET_CHUNK_CC: "GET_CHUNK", SKYMEM_GET_CHUNKS_CC: "GET_CHUNKS",
    SKYMEM_PROBE_CC: "PROBE", SKYMEM_EVICT_BLOCK_CC: "EVICT_BLOCK", SKYMEM_MIGRATE_CC: "MIGRATE",
    SKYMEM_STATS_CC: "STATS",
}
REPLY_NAMES = {1: "DATA", 2: "ACK", 3: "NAK", 4: "EVICTED", 5: "STATS"}


def nak_name(code: int) -> str:
    return NAK_NAMES.get(code, f"UNKNOWN_{code}")


# ---- Structures ----------------------------------------------------------------------------------

_ROUTE = struct.Struct(">HHHHHHIBBBB")
_DESC = struct.Struct(">32sIIQIHBB")
_REPLY_HDR = struct.Struct(">BBBBII")
_CHUNK_REF = struct.Struct(">32sI")
_CHUNK_RANGE = struct.Struct(">32sIII")
_EVICT = struct.Struct(">32sIB3s")
_MIGRATE = struct.Struct(">32sIIIHH")
_SET_PARAM = struct.Struct(">HHI")
_ORIGIN = struct.Struct(">HHHH")
_TLM_TIME = struct.Struct(">IH4x")
_STATS = struct.Struct(">HHIIIQQIIIIIIIIIIQII")
assert _ROUTE.size == SKYMEM_ROUTE_HDR_LEN and _DESC.size == SKYMEM_CHUNK_DESC_LEN
assert _REPLY_HDR.size == SKYMEM_REPLY_HDR_LEN and _STATS.size == SKYMEM_STATS_LEN
assert _EVICT.size == SKYMEM_EVICT_LEN and _MIGRATE.size == SKYMEM_MIGRATE_LEN
assert _CHUNK_RANGE.size == SKYMEM_CHUNK_RANGE_LEN and _CHUNK_REF.size == SKYMEM_CHUNK_REF_LEN


def _u16(name: str, v: int) -> int:
    if not 0 <= v <= 0xFFFF:
        raise WireError(f"{name} must fit in 16 bits, got {v}")
    return v


@dataclass(frozen=True)
class RouteHeader:
    dst_plane: int
    dst_sat: int
    src_plane: int = SKYMEM_GROUND_PLANE
    src_sat: int = 0
    via_plane: int = SKYMEM_NO_SAT
    via_sat: int = SKYMEM_NO_SAT
    request_id: int = 0
    ttl: int = SKYMEM_DEFAULT_TTL
    hops: int = 0
    flags: int = 0

    def pack(self) -> bytes:
        try:
            return _ROUTE.pack(self.dst_plane, self.dst_sat, self.src_plane, self.src_sat, self.via_plane,
                               self.via_sat, self.request_id, self.ttl, self.hops, self.flags, 0)
        except struct.error as exc:
            raise WireError(f"route header field out of range: {exc}") from None

    @classmethod
    def unpack(cls, buf: bytes | memoryview) -> "RouteHeader":
        if len(buf) < SKYMEM_ROUTE_HDR_LEN:
            raise WireError(f"route header needs {SKYMEM_ROUTE_HDR_LEN} bytes, got {len(buf)}")
        f = _ROUTE.unpack_from(buf, 0)
        if f[10]:
            raise WireError(f"route header reserved byte is {f[10]}, not 0")
        if f[9] & ~SKYMEM_RF_KNOWN:
            raise WireError(f"route flags {f[9]:#04x} set a bit no version defines")
        return cls(*f[:10])


@dataclass(frozen=True)
class ChunkDesc:
    block_hash: bytes
    chunk_id: int
    chunk_count: int
    created_ms: int
    crc32c: int
    data_len: int
    gossip_radius: int = 0
    flags: int = 0

    def pack(self) -> bytes:
        if len(self.block_hash) != SKYMEM_BLOCK_HASH_LEN:
            raise WireError(f"block hash must be {SKYMEM_BLOCK_HASH_LEN} bytes, got {len(self.block_hash)}")
        try:
            return _DESC.pack(self.block_hash, self.chunk_id, self.chunk_count, self.created_ms, self.crc32c,
                              self.data_len, self.gossip_radius, self.flags)
        except struct.error as exc:
            raise WireError(f"chunk descriptor field out of range: {exc}") from None

    @classmethod
    def unpack(cls, buf: bytes | memoryview) -> "ChunkDesc":
        if len(buf) < SKYMEM_CHUNK_DESC_LEN:
            raise WireError(f"chunk descriptor needs {SKYMEM_CHUNK_DESC_LEN} bytes, got {len(buf)}")
        f = _DESC.unpack_from(buf, 0)
        return cls(bytes(f[0]), *f[1:])


Origin = tuple[int, int, int]  # (ground station, via plane, via sat) of a migrated chunk


def _chunk_body(body: bytes, what: str, origin_ok: bool) -> tuple[ChunkDesc, Origin | None, bytes]:
    """Descriptor [+ origin record] + data, refused as skymem_parse refuses it: a flag no version
    defines, a data_len that disagrees with the bytes, a chunk id not below chunk_count (>= 1), an
    origin record outside a migration's SET_CHUNK or with its reserved field set."""
    desc = ChunkDesc.unpack(body)
    if desc.flags & ~SKYMEM_CDF_KNOWN:
        raise WireError(f"chunk descriptor flags {desc.flags:#04x} set a bit no version defines")
    head = SKYMEM_CHUNK_DESC_LEN + (SKYMEM_ORIGIN_LEN if desc.flags & SKYMEM_CDF_ORIGIN else 0)
    if len(body) < head:
        raise WireError(f"{what} is shorter than its descriptor and origin record")
    data = body[head:]
    if len(data) != desc.data_len:
        raise WireError(f"{what} data_len {desc.data_len} but {len(data)} data bytes follow")
    if desc.data_len > SKYMEM_MAX_CHUNK_DATA:
        raise WireError(f"chunk data of {desc.data_len} bytes exceeds {SKYMEM_MAX_CHUNK_DATA}")
    if not 0 <= desc.chunk_id < desc.chunk_count:
        raise WireError(f"chunk id {desc.chunk_id} is not below the chunk count {desc.chunk_count}")
    origin = None
    if desc.flags & SKYMEM_CDF_ORIGIN:
        ground, via_plane, via_sat, reserved = _ORIGIN.unpack_from(body, SKYMEM_CHUNK_DESC_LEN)
        if not origin_ok:
            raise WireError(f"{what} carries an origin record, which only a migration's SET_CHUNK may")
        if reserved:
            raise WireError("origin record reserved field is not zero")
        origin = (ground, via_plane, via_sat)
    return desc, origin, data


STATS_FIELDS = (
    "plane", "sat", "cmd_count", "err_count", "chunks", "bytes_used", "bytes_budget", "lru_evictions",
    "blocks_purged", "rx_packets", "tx_packets", "forwarded", "dropped", "invalid", "auth_failures",
    "migrated_out", "migrated_in", "mission_time_ms", "uptime_s", "spare",
)


@dataclass(frozen=True)
class Stats:
    plane: int
    sat: int
    cmd_count: int
    err_count: int
    chunks: int
    bytes_used: int
    bytes_budget: int
    lru_evictions: int
    blocks_purged: int
    rx_packets: int
    tx_packets: int
    forwarded: int
    dropped: int
    invalid: int
    auth_failures: int
    migrated_out: int
    migrated_in: int
    mission_time_ms: int
    uptime_s: int
    spare: int = 0

    def pack(self) -> bytes:
        return _STATS.pack(*(getattr(self, n) for n in STATS_FIELDS))

    @classmethod
    def unpack(cls, buf: bytes | memoryview) -> "Stats":
        if len(buf) != SKYMEM_STATS_LEN:
            raise WireError(f"stats body must be {SKYMEM_STATS_LEN} bytes, got {len(buf)}")
        return cls(*_STATS.unpack(buf))


ISL_ROUTER_HK_FIELDS = (
    "plane", "sat", "cmd_count", "err_count", "rx_isl", "rx_ground", "tx_isl", "tx_ground", "forwarded",
    "delivered", "dropped", "invalid", "ground_known",
)
_ISL_ROUTER_HK = struct.Struct(">HH11I")
assert _ISL_ROUTER_HK.size == ISL_ROUTER_HK_LEN


@dataclass(frozen=True)
class RouterHk:
    """ISL_ROUTER housekeeping (ISL_ROUTER_HK_TLM_MID): the router's own counters."""
    plane: int
    sat: int
    cmd_count: int
    err_count: int
    rx_isl: int
    rx_ground: int
    tx_isl: int
    tx_ground: int
    forwarded: int
    delivered: int
    dropped: int
    invalid: int
    ground_known: int

    def pack(self) -> bytes:
        return _ISL_ROUTER_HK.pack(*(getattr(self, n) for n in ISL_ROUTER_HK_FIELDS))

    @classmethod
    def unpack(cls, buf: bytes | memoryview) -> "RouterHk":
        if len(buf) != ISL_ROUTER_HK_LEN:
            raise WireError(f"ISL_ROUTER housekeeping must be {ISL_ROUTER_HK_LEN} bytes, got {len(buf)}")
        return cls(*_ISL_ROUTER_HK.unpack(buf))


# ---- Primary header (spacepacket) --------------------------------------------------------------


def _with_primary(mid: int, seq: int, data_field: bytes) -> bytearray:
    """Prefix the data field with the CCSDS primary header for MsgId V1 `mid`."""
    if not 1 <= mid <= 0x1FFF:
        raise WireError(f"message id out of range: {mid:#x}")
    if len(data_field) + SKYMEM_PRI_HDR_LEN > SKYMEM_MAX_PACKET:
        raise WireError(f"packet of {len(data_field) + SKYMEM_PRI_HDR_LEN} bytes exceeds {SKYMEM_MAX_PACKET}")
    packet = SpacePacket(
        packet_type=PacketType((mid >> 12) & 1),
        apid=mid & 0x7FF,
        packet_sequence_count=seq & 0x3FFF,
        packet_data_field=data_field,
        packet_sec_hdr_flag=bool((mid >> 11) & 1),
        sequence_flags=SequenceFlags.UNSEGMENTED,
    )
    return bytearray(packet.encode())


@dataclass(frozen=True)
class Primary:
    mid: int
    seq: int
    is_command: bool


def parse_primary(packet: bytes | bytearray | memoryview) -> Primary:
    """Check the primary header against the datagram and return MsgId and sequence count."""
    if len(packet) < SKYMEM_PRI_HDR_LEN + 1:
        raise WireError(f"packet of {len(packet)} bytes is shorter than a primary header plus one byte")
    try:
        sp = SpacePacket.decode(bytes(packet))
    except ValueError as exc:
        raise WireError(f"bad CCSDS primary header: {exc}") from None
    if sp.packet_version != 0:
        raise WireError(f"CCSDS version {sp.packet_version} is not 0")
    if not sp.packet_sec_hdr_flag:
        raise WireError("secondary header flag clear (every cFS packet has one)")
    if sp.sequence_flags != SequenceFlags.UNSEGMENTED:
        raise WireError("segmented packets are not used by SkyMemory")
    mid = (packet[0] << 8 | packet[1]) & 0xFFFF
    return Primary(mid=mid & 0x1FFF, seq=sp.packet_sequence_count, is_command=bool(sp.packet_type))


# ---- Commands --------------------------------------------------------------------------------------


def encode_command(mid: int, cc: int, payload: bytes = b"", seq: int = 0) -> bytes:
    """A cFS command: primary header + function code + XOR checksum + payload."""
    if not 0 <= cc <= 0x7F:
        raise WireError(f"function code must be 0..127, got {cc}")
    if not (mid >> 12) & 1:
        raise WireError(f"{mid:#x} is not a command message id")
    pkt = _with_primary(mid, seq, bytes([cc, 0]) + payload)
    pkt[7] = xor_checksum(pkt)
    return bytes(pkt)


# An HK request (SKYMEM_SEND_HK_MID, ISL_ROUTER_SEND_HK_MID) padded to the longest answer: the native node
# answers an HK request to its sender only when it is at least as long as the answer, so that no forged
# sender can use it as an amplifier (docs/PROTOCOL.md §7; with --tlm-dest, as on cFS, HK goes there instead).
HK_REQUEST_LEN = SKYMEM_TLM_HDR_LEN + max(SKYMEM_STATS_LEN, ISL_ROUTER_HK_LEN)


def encode_hk_request(mid: int) -> bytes:
    """An HK request for the native node's ground port, zero-padded to HK_REQUEST_LEN (cFS takes 8 bytes)."""
    return encode_command(mid, 0, bytes(HK_REQUEST_LEN - SKYMEM_CMD_HDR_LEN))


def encode_data_command(cc: int, route: RouteHeader, body: bytes = b"", seq: int | None = None) -> bytes:
    """A data-plane command (SKYMEM_DATA_CMD_MID): route header + body."""
    return encode_command(SKYMEM_DATA_CMD_MID, cc, route.pack() + body,
                          route.request_id if seq is None else seq)


def encode_set_param(param_id: int, value: int) -> bytes:
    return _SET_PARAM.pack(_u16("param_id", param_id), 0, value)


def chunk_ref(block_hash: bytes, chunk_id: int) -> bytes:
    _check_hash(block_hash)
    return _CHUNK_REF.pack(block_hash, chunk_id)


def chunk_range(block_hash: bytes, first: int, count: int, stride: int = 1) -> bytes:
    _check_hash(block_hash)
    _check_range(first, count, stride)
    return _CHUNK_RANGE.pack(block_hash, first, count, stride)


def _check_range(first: int, count: int, stride: int) -> None:
    if not 1 <= count <= SKYMEM_MAX_GET_CHUNKS:
        raise WireError(f"chunk count must be 1..{SKYMEM_MAX_GET_CHUNKS}, got {count}")
    if stride < 1:
        raise WireError(f"stride must be >= 1, got {stride}")
    if first + (count - 1) * stride > 0xFFFFFFFF:
        raise WireError("chunk id range overflows 32 bits")


def evict_body(block_hash: bytes, evict_id: int, radius: int) -> bytes:
    _check_hash(block_hash)
    return _EVICT.pack(block_hash, evict_id, radius, bytes(3))


def migrate_body(block_hash: bytes, first: int, count: int, stride: int, target: tuple[int, int]) -> bytes:
    return chunk_range(block_hash, first, count, stride) + struct.pack(">HH", *target)


def set_chunk_body(desc: ChunkDesc, data: bytes, origin: Origin | None = None) -> bytes:
    """Descriptor + data; with `origin` (a migration's SET_CHUNK) the descriptor gets flag ORIGIN and
    the origin record goes between them."""
    if desc.data_len != len(data):
        raise WireError(f"descriptor says {desc.data_len} data bytes, got {len(data)}")
    if len(data) > SKYMEM_MAX_CHUNK_DATA:
        raise WireError(f"chunk data of {len(data)} bytes exceeds {SKYMEM_MAX_CHUNK_DATA}")
    if origin is None:
        return replace(desc, flags=desc.flags & ~SKYMEM_CDF_ORIGIN).pack() + data
    return replace(desc, flags=desc.flags | SKYMEM_CDF_ORIGIN).pack() + _ORIGIN.pack(*origin, 0) + data


def make_desc(block_hash: bytes, chunk_id: int, chunk_count: int, created_ms: int, data: bytes,
              gossip_radius: int = 0) -> ChunkDesc:
    return ChunkDesc(block_hash, chunk_id, chunk_count, created_ms, crc32c(data), len(data), gossip_radius)


def _check_hash(block_hash: bytes) -> None:
    if len(block_hash) != SKYMEM_BLOCK_HASH_LEN:
        raise WireError(f"block hash must be {SKYMEM_BLOCK_HASH_LEN} bytes, got {len(block_hash)}")


@dataclass(frozen=True)
class Command:
    """A decoded command (control or data plane)."""

    mid: int
    cc: int
    seq: int
    route: RouteHeader | None  # None for control commands
    body: bytes  # bytes after the route header (control: after the command header)
    # parsed body, depending on cc
    desc: ChunkDesc | None = None
    data: bytes = b""
    block_hash: bytes = b""
    chunk_id: int = 0
    first: int = 0
    count: int = 0
    stride: int = 0
    evict_id: int = 0
    radius: int = 0
    target: tuple[int, int] | None = None
    param_id: int = 0
    param_value: int = 0
    origin: Origin | None = None  # a migration's SET_CHUNK: (ground station, via plane, via sat)


_FIXED_BODY = {
    SKYMEM_NOOP_CC: 0, SKYMEM_RESET_COUNTERS_CC: 0, SKYMEM_STATS_CC: 0, SKYMEM_SET_PARAM_CC: SKYMEM_SET_PARAM_LEN,
    SKYMEM_GET_CHUNK_CC: SKYMEM_CHUNK_REF_LEN, SKYMEM_PROBE_CC: SKYMEM_CHUNK_REF_LEN,
    SKYMEM_GET_CHUNKS_CC: SKYMEM_CHUNK_RANGE_LEN, SKYMEM_EVICT_BLOCK_CC: SKYMEM_EVICT_LEN,
    SKYMEM_MIGRATE_CC: SKYMEM_MIGRATE_LEN,
}


def decode_command(packet: bytes, verify_checksum: bool = True) -> Command:
    """Decode a SkyMemory command; raises WireError on any inconsistency."""
    prim = parse_primary(packet)
    if not prim.is_command:
        raise WireError("not a command packet")
    if len(packet) < SKYMEM_CMD_HDR_LEN:
        raise WireError(f"command of {len(packet)} bytes is shorter than the command header")
    if verify_checksum and xor_checksum(packet) != 0:
        raise WireError("command checksum mismatch")
    if packet[6] & 0x80:
        raise WireError("reserved bit of the function-code byte is set")
    cc = packet[6] & 0x7F
    if prim.mid == SKYMEM_CMD_MID:
        route, body = None, bytes(packet[SKYMEM_CMD_HDR_LEN:])
        allowed = (SKYMEM_NOOP_CC, SKYMEM_RESET_COUNTERS_CC, SKYMEM_SET_PARAM_CC)
        if cc not in allowed:
            raise WireError(f"function code {cc} is not a control command")
    elif prim.mid == SKYMEM_DATA_CMD_MID:
        route = RouteHeader.unpack(memoryview(packet)[SKYMEM_CMD_HDR_LEN:])
        body = bytes(packet[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN:])
        if route.flags & SKYMEM_RF_AUTH:
            if len(body) < SKYMEM_AUTH_TRAILER_LEN:
                raise WireError("AUTH flag set but the packet has no room for the trailer")
            body = body[:-SKYMEM_AUTH_TRAILER_LEN]
        if cc >= SKYMEM_NUM_CC:
            raise WireError(f"unknown function code {cc}")
    else:
        raise WireError(f"message id {prim.mid:#x} is not a SkyMemory command")
    kw: dict = {}
    if cc == SKYMEM_SET_CHUNK_CC:
        desc, origin, data = _chunk_body(body, "SET_CHUNK", bool(route.flags & SKYMEM_RF_MIGRATION))
        kw = {"desc": desc, "data": data, "block_hash": desc.block_hash, "chunk_id": desc.chunk_id, "origin": origin}
    else:
        want = _FIXED_BODY[cc]
        if len(body) != want:
            raise WireError(f"{CC_NAMES[cc]} body must be {want} bytes, got {len(body)}")
        if cc in (SKYMEM_GET_CHUNK_CC, SKYMEM_PROBE_CC):
            h, cid = _CHUNK_REF.unpack(body)
            kw = {"block_hash": h, "chunk_id": cid}
        elif cc == SKYMEM_GET_CHUNKS_CC:
            h, first, count, stride = _CHUNK_RANGE.unpack(body)
            _check_range(first, count, stride)
            kw = {"block_hash": h, "first": first, "count": count, "stride": stride}
        elif cc == SKYMEM_EVICT_BLOCK_CC:
            h, eid, radius, spare = _EVICT.unpack(body)
            if any(spare):
                raise WireError("EVICT_BLOCK spare bytes are not zero")
            kw = {"block_hash": h, "evict_id": eid, "radius": radius}
        elif cc == SKYMEM_MIGRATE_CC:
            h, first, count, stride, tp, ts = _MIGRATE.unpack(body)
            _check_range(first, count, stride)
            kw = {"block_hash": h, "first": first, "count": count, "stride": stride, "target": (tp, ts)}
        elif cc == SKYMEM_SET_PARAM_CC:
            pid, spare, value = _SET_PARAM.unpack(body)
            if spare:
                raise WireError("SET_PARAM spare field is not zero")
            kw = {"param_id": pid, "param_value": value}
    return Command(mid=prim.mid, cc=cc, seq=prim.seq, route=route, body=body, **kw)


# ---- Telemetry and replies -----------------------------------------------------------------------


def encode_telemetry(mid: int, payload: bytes, seconds: int = 0, subseconds: int = 0, seq: int = 0) -> bytes:
    """A cFS telemetry packet: primary header + time (u32 s, u16 subs) + 4 spare + payload."""
    if (mid >> 12) & 1:
        raise WireError(f"{mid:#x} is a command message id, not telemetry")
    return bytes(_with_primary(mid, seq, _TLM_TIME.pack(seconds, subseconds) + payload))


@dataclass(frozen=True)
class Reply:
    route: RouteHeader
    kind: int
    cc: int
    status: int
    chunk_id: int
    value: int
    seconds: int = 0
    subseconds: int = 0
    seq: int = 0
    block_hash: bytes = b""
    desc: ChunkDesc | None = None
    data: bytes = b""
    stats: Stats | None = None

    @property
    def kind_name(self) -> str:
        return REPLY_NAMES.get(self.kind, f"UNKNOWN_{self.kind}")


def encode_reply(route: RouteHeader, kind: int, cc: int, status: int = 0, chunk_id: int = 0, value: int = 0,
                 body: bytes = b"", seconds: int = 0, subseconds: int = 0, seq: int = 0) -> bytes:
    payload = route.pack() + _REPLY_HDR.pack(kind, cc, status, 0, chunk_id, value) + body
    return encode_telemetry(SKYMEM_REPLY_TLM_MID, payload, seconds, subseconds, seq)


def decode_telemetry_header(packet: bytes) -> tuple[Primary, int, int]:
    prim = parse_primary(packet)
    if prim.is_command:
        raise WireError("not a telemetry packet")
    if len(packet) < SKYMEM_TLM_HDR_LEN:
        raise WireError(f"telemetry of {len(packet)} bytes is shorter than the telemetry header")
    seconds, subseconds = _TLM_TIME.unpack_from(packet, SKYMEM_PRI_HDR_LEN)
    return prim, seconds, subseconds


def decode_reply(packet: bytes) -> Reply:
    """Decode a routed reply; every body length is checked against its kind."""
    prim, seconds, subseconds = decode_telemetry_header(packet)
    if prim.mid != SKYMEM_REPLY_TLM_MID:
        raise WireError(f"message id {prim.mid:#x} is not a SkyMemory reply")
    off = SKYMEM_TLM_HDR_LEN
    if len(packet) < off + SKYMEM_ROUTE_HDR_LEN + SKYMEM_REPLY_HDR_LEN:
        raise WireError(f"reply of {len(packet)} bytes is shorter than its headers")
    route = RouteHeader.unpack(memoryview(packet)[off:])
    off += SKYMEM_ROUTE_HDR_LEN
    kind, cc, status, reserved, chunk_id, value = _REPLY_HDR.unpack_from(packet, off)
    if reserved:
        raise WireError(f"reply header reserved byte is {reserved}, not 0")
    body = bytes(packet[off + SKYMEM_REPLY_HDR_LEN:])
    if route.flags & SKYMEM_RF_AUTH:
        if len(body) < SKYMEM_AUTH_TRAILER_LEN:
            raise WireError("AUTH flag set but the reply has no room for the trailer")
        body = body[:-SKYMEM_AUTH_TRAILER_LEN]
    common = dict(route=route, kind=kind, cc=cc, status=status, chunk_id=chunk_id, value=value,
                  seconds=seconds, subseconds=subseconds, seq=prim.seq)
    if kind == SKYMEM_REPLY_DATA:
        desc, _, data = _chunk_body(body, "DATA reply", origin_ok=False)
        return Reply(**common, block_hash=desc.block_hash, desc=desc, data=data)
    if kind in (SKYMEM_REPLY_ACK, SKYMEM_REPLY_NAK):
        if len(body) not in (0, SKYMEM_BLOCK_HASH_LEN):
            raise WireError(f"{REPLY_NAMES[kind]} body must be empty or a block hash, got {len(body)} bytes")
        return Reply(**common, block_hash=body)
    if kind == SKYMEM_REPLY_EVICTED:
        if len(body) != SKYMEM_BLOCK_HASH_LEN:
            raise WireError(f"EVICTED body must be a block hash, got {len(body)} bytes")
        return Reply(**common, block_hash=body)
    if kind == SKYMEM_REPLY_STATS:
        return Reply(**common, stats=Stats.unpack(body))
    raise WireError(f"unknown reply kind {kind}")


def decode_hk(packet: bytes) -> tuple[int, int, Stats]:
    """Decode SKYMEM HK telemetry: (seconds, subseconds, stats)."""
    prim, seconds, subseconds = decode_telemetry_header(packet)
    if prim.mid != SKYMEM_HK_TLM_MID:
        raise WireError(f"message id {prim.mid:#x} is not SKYMEM HK telemetry")
    return seconds, subseconds, Stats.unpack(packet[SKYMEM_TLM_HDR_LEN:])


def decode_router_hk(packet: bytes) -> tuple[int, int, RouterHk]:
    """Decode ISL_ROUTER HK telemetry: (seconds, subseconds, counters)."""
    prim, seconds, subseconds = decode_telemetry_header(packet)
    if prim.mid != ISL_ROUTER_HK_TLM_MID:
        raise WireError(f"message id {prim.mid:#x} is not ISL_ROUTER HK telemetry")
    return seconds, subseconds, RouterHk.unpack(packet[SKYMEM_TLM_HDR_LEN:])


def decode_any(packet: bytes) -> Command | Reply | tuple[int, int, Stats]:
    """Decode by message id: SkyMemory commands, replies and HK telemetry."""
    if len(packet) < 2:
        raise WireError("packet shorter than a message id")
    word = packet[0] << 8 | packet[1]
    if word in (SKYMEM_CMD_MID, SKYMEM_DATA_CMD_MID):
        return decode_command(packet)
    if word == SKYMEM_REPLY_TLM_MID:
        return decode_reply(packet)
    if word == SKYMEM_HK_TLM_MID:
        return decode_hk(packet)
    raise WireError(f"message id {word:#06x} is not decoded by skymemory.protocol.wire")


def chunk_crc_ok(reply: Reply) -> bool:
    """True when a DATA reply's data matches its descriptor's CRC32C."""
    return reply.desc is not None and crc32c(reply.data) == reply.desc.crc32c

