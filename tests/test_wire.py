"""The pure-Python wire codec: constants equal the C header, packets round-trip, lengths are checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skymemory.protocol import wire
from skymemory.protocol.errors import WireError
from skymemory.protocol.native import crc32c_py

HEADER = Path(__file__).resolve().parents[1] / "cfs_apps/skymem_core/fsw/inc/skymem_wire.h"


def header_defines() -> dict[str, int]:
    defines = {}
    for m in re.finditer(r"^#define\s+(\w+)\s+(0x[0-9A-Fa-f]+|\d+)u?\b", HEADER.read_text(), re.M):
        defines[m.group(1)] = int(m.group(2), 0)
    return defines


def test_every_header_define_is_mirrored():
    defines = header_defines()
    assert len(defines) > 100  # the parser found the header's constants
    missing = [n for n in defines if not hasattr(wire, n)]
    wrong = {n: (v, getattr(wire, n)) for n, v in defines.items() if hasattr(wire, n) and getattr(wire, n) != v}
    assert not missing, f"not mirrored in skymemory.protocol.wire: {missing}"
    assert not wrong, f"differ (header, python): {wrong}"


def test_cfs_sample_app_noop_checksum():
    # SAMPLE_APP NOOP from the cFS facts sheet: MID 0x1882, cc 0 -> 18 82 C0 00 00 01 00 A4
    assert wire.encode_command(0x1882, 0) == bytes.fromhex("1882C0000001 00A4".replace(" ", ""))


def test_control_noop_layout():
    pkt = wire.encode_command(wire.SKYMEM_CMD_MID, wire.SKYMEM_NOOP_CC)
    assert len(pkt) == 8 and pkt[:2] == b"\x18\x90" and pkt[4:6] == b"\x00\x01"
    cmd = wire.decode_command(pkt)
    assert cmd.cc == 0 and cmd.route is None


def test_crc32c_known_vector():
    assert crc32c_py(b"123456789") == 0xE3069283
    assert crc32c_py(b"") == 0


hashes = st.binary(min_size=32, max_size=32)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
routes = st.builds(wire.RouteHeader, u16, u16, u16, u16, u16, u16, u32, st.integers(0, 255), st.integers(0, 255),
                   st.sampled_from([0, wire.SKYMEM_RF_GOSSIP, wire.SKYMEM_RF_MIGRATION]))


@settings(max_examples=60, deadline=None)
@given(route=routes, h=hashes, cid=u32, count=st.integers(1, 0xFFFFFFFF), created=st.integers(0, 2**64 - 1),
       data=st.binary(max_size=2000), radius=st.integers(0, 255))
def test_set_chunk_roundtrip(route, h, cid, count, created, data, radius):
    cid %= count  # a chunk of the block: the parsers refuse chunk_id >= chunk_count
    desc = wire.make_desc(h, cid, count, created, data, radius)
    pkt = wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(desc, data))
    assert len(pkt) == 8 + 20 + 56 + len(data)
    cmd = wire.decode_command(pkt)
    assert cmd.route == route and cmd.desc == desc and cmd.data == data


@settings(max_examples=40, deadline=None)
@given(route=routes, h=hashes, first=st.integers(0, 2**20), count=st.integers(1, wire.SKYMEM_MAX_GET_CHUNKS),
       stride=st.integers(1, 2**20),
       eid=u32, radius=st.integers(0, 255), tp=u16, ts=u16)
def test_fixed_commands_roundtrip(route, h, first, count, stride, eid, radius, tp, ts):
    c = wire.decode_command(wire.encode_data_command(wire.SKYMEM_GET_CHUNKS_CC, route,
                                                     wire.chunk_range(h, first, count, stride)))
    assert (c.block_hash, c.first, c.count, c.stride) == (h, first, count, stride)
    c = wire.decode_command(wire.encode_data_command(wire.SKYMEM_EVICT_BLOCK_CC, route, wire.evict_body(h, eid, radius)))
    assert (c.block_hash, c.evict_id, c.radius) == (h, eid, radius)
    c = wire.decode_command(wire.encode_data_command(wire.SKYMEM_MIGRATE_CC, route,
                                                     wire.migrate_body(h, first, count, stride, (tp, ts))))
    assert c.target == (tp, ts) and c.count == count
    c = wire.decode_command(wire.encode_data_command(wire.SKYMEM_PROBE_CC, route, wire.chunk_ref(h, first)))
    assert (c.cc, c.block_hash, c.chunk_id) == (wire.SKYMEM_PROBE_CC, h, first)


@settings(max_examples=40, deadline=None)
@given(route=routes, h=hashes, data=st.binary(max_size=3000), cid=st.integers(0, 0xFFFFFFFE), secs=u32, subs=u16)
def test_data_reply_roundtrip(route, h, data, cid, secs, subs):
    desc = wire.make_desc(h, cid, (cid + 1) & 0xFFFFFFFF, 5, data)
    pkt = wire.encode_reply(route, wire.SKYMEM_REPLY_DATA, wire.SKYMEM_GET_CHUNK_CC, chunk_id=cid,
                            body=desc.pack() + data, seconds=secs, subseconds=subs)
    r = wire.decode_reply(pkt)
    assert r.desc == desc and r.data == data and r.route == route and (r.seconds, r.subseconds) == (secs, subs)
    assert wire.chunk_crc_ok(r)


def test_stats_reply_and_hk():
    stats = wire.Stats(*range(1, 20))
    route = wire.RouteHeader(wire.SKYMEM_GROUND_PLANE, 0, 3, 4, 3, 4, 99)
    r = wire.decode_reply(wire.encode_reply(route, wire.SKYMEM_REPLY_STATS, wire.SKYMEM_STATS_CC, body=stats.pack()))
    assert r.stats == stats
    secs, subs, hk = wire.decode_hk(wire.encode_telemetry(wire.SKYMEM_HK_TLM_MID, stats.pack(), 7, 8))
    assert (secs, subs, hk) == (7, 8, stats)


def test_length_errors_are_detected():
    route = wire.RouteHeader(1, 2, request_id=5)
    h = bytes(32)
    good = wire.encode_data_command(wire.SKYMEM_GET_CHUNK_CC, route, wire.chunk_ref(h, 1))
    with pytest.raises(WireError):  # truncated datagram: primary length disagrees
        wire.decode_command(good[:-1])
    with pytest.raises(WireError):  # body one byte short, headers consistent
        wire.decode_command(wire.encode_data_command(wire.SKYMEM_GET_CHUNK_CC, route, wire.chunk_ref(h, 1)[:-1]))
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(WireError, match="checksum"):
        wire.decode_command(bytes(bad))
    desc = wire.make_desc(h, 0, 1, 0, b"abc")
    with pytest.raises(WireError):  # data_len says 3, 2 follow
        wire.decode_reply(wire.encode_reply(route, wire.SKYMEM_REPLY_DATA, 4, body=desc.pack() + b"ab"))
    with pytest.raises(WireError):
        wire.decode_reply(wire.encode_reply(route, wire.SKYMEM_REPLY_ACK, 3, body=b"x" * 5))
    with pytest.raises(WireError):
        wire.decode_reply(b"\x08\x92\xc0")
    with pytest.raises(WireError):
        wire.chunk_range(h, 0, 0)
    with pytest.raises(WireError):
        wire.set_chunk_body(wire.make_desc(h, 0, 1, 0, b"x" * 60001), b"x" * 60001)
