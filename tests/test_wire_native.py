"""The Python codec and the flight C codec (through cffi) produce identical bytes and agree on parsing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skymemory.protocol import native, wire

pytestmark = pytest.mark.skipif(not native.AVAILABLE, reason="skymemory._native not built (pip install -e .)")

ffi, lib = native.ffi, native.lib
CAP = wire.SKYMEM_MAX_PACKET + 64

u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
hashes = st.binary(min_size=32, max_size=32)
routes = st.builds(wire.RouteHeader, u16, u16, u16, u16, u16, u16, u32, st.integers(0, 255), st.integers(0, 255),
                   st.sampled_from([0, wire.SKYMEM_RF_GOSSIP, wire.SKYMEM_RF_MIGRATION]))


def c_route(r: wire.RouteHeader):
    cr = ffi.new("skymem_route_t *")
    for name in ("dst_plane", "dst_sat", "src_plane", "src_sat", "via_plane", "via_sat", "request_id", "ttl",
                 "hops", "flags"):
        setattr(cr, name, getattr(r, name))
    return cr


def c_desc(d: wire.ChunkDesc):
    cd = ffi.new("skymem_chunk_desc_t *")
    cd.block_hash = list(d.block_hash)
    for name in ("chunk_id", "chunk_count", "created_ms", "crc32c", "data_len", "gossip_radius", "flags"):
        setattr(cd, name, getattr(d, name))
    return cd


def built(fn, *args) -> bytes:
    buf = ffi.new("uint8_t[]", CAP)
    n = fn(buf, CAP, *args)
    assert n > 0, ffi.string(lib.skymem_strerror(n)).decode()
    return bytes(ffi.buffer(buf, n))


def c_parse(pkt: bytes):
    msg = ffi.new("skymem_msg_t *")
    rc = lib.skymem_parse(pkt, len(pkt), msg)
    return rc, msg


@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=5000))
def test_crc32c_same(data):
    assert lib.skymem_crc32c(data, len(data)) == native.crc32c_py(data)


@settings(max_examples=60, deadline=None)
@given(route=routes, h=hashes, cid=u32, count=st.integers(1, 0xFFFFFFFF), created=st.integers(0, 2**64 - 1), data=st.binary(max_size=3000),
       radius=st.integers(0, 255), seq=st.integers(0, 0x3FFF))
def test_set_chunk_identical(route, h, cid, count, created, data, radius, seq):
    cid %= count  # a chunk of the block: the parsers refuse chunk_id >= chunk_count
    desc = wire.make_desc(h, cid, count, created, data, radius)
    py = wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(desc, data), seq=seq)
    c = built(lib.skymem_build_set_chunk, seq, c_route(route), c_desc(desc), data)
    assert py == c
    rc, msg = c_parse(py)
    assert rc == 0 and msg.desc.crc32c == desc.crc32c and bytes(ffi.buffer(msg.data, msg.desc.data_len)) == data


@settings(max_examples=60, deadline=None)
@given(route=routes, h=hashes, a=st.integers(0, 2**20), count=st.integers(1, wire.SKYMEM_MAX_GET_CHUNKS),
       stride=st.integers(1, 2**20),
       radius=st.integers(0, 255), tp=u16, ts=u16, seq=st.integers(0, 0x3FFF))
def test_fixed_commands_identical(route, h, a, count, stride, radius, tp, ts, seq):
    cr = c_route(route)
    pairs = [
        (wire.encode_data_command(wire.SKYMEM_GET_CHUNK_CC, route, wire.chunk_ref(h, a), seq=seq),
         built(lib.skymem_build_get_chunk, seq, cr, h, a)),
        (wire.encode_data_command(wire.SKYMEM_PROBE_CC, route, wire.chunk_ref(h, a), seq=seq),
         built(lib.skymem_build_probe, seq, cr, h, a)),
        (wire.encode_data_command(wire.SKYMEM_GET_CHUNKS_CC, route, wire.chunk_range(h, a, count, stride), seq=seq),
         built(lib.skymem_build_get_chunks, seq, cr, h, a, count, stride)),
        (wire.encode_data_command(wire.SKYMEM_EVICT_BLOCK_CC, route, wire.evict_body(h, a, radius), seq=seq),
         built(lib.skymem_build_evict, seq, cr, h, a, radius)),
        (wire.encode_data_command(wire.SKYMEM_MIGRATE_CC, route, wire.migrate_body(h, a, count, stride, (tp, ts)),
                                  seq=seq),
         built(lib.skymem_build_migrate, seq, cr, h, a, count, stride, tp, ts)),
        (wire.encode_data_command(wire.SKYMEM_STATS_CC, route, seq=seq),
         built(lib.skymem_build_data_cmd, wire.SKYMEM_STATS_CC, seq, cr, ffi.NULL, 0)),
        (wire.encode_data_command(wire.SKYMEM_SET_PARAM_CC, route, wire.encode_set_param(tp, a), seq=seq),
         built(lib.skymem_build_set_param, seq, cr, tp, a)),
        (wire.encode_command(wire.SKYMEM_CMD_MID, wire.SKYMEM_SET_PARAM_CC, wire.encode_set_param(tp, a), seq=seq),
         built(lib.skymem_build_set_param, seq, ffi.NULL, tp, a)),
    ]
    for py, c in pairs:
        assert py == c
        assert c_parse(py)[0] == 0
        assert wire.decode_command(c).route == (route if c[:2] == b"\x18\x92" else None)


@settings(max_examples=60, deadline=None)
@given(route=routes, h=hashes, data=st.binary(max_size=3000), cid=st.integers(0, 0xFFFFFFFE), secs=u32, subs=u16, seq=st.integers(0, 0x3FFF),
       kind=st.sampled_from([wire.SKYMEM_REPLY_ACK, wire.SKYMEM_REPLY_NAK, wire.SKYMEM_REPLY_EVICTED]),
       status=st.integers(0, 12), value=u32)
def test_replies_identical(route, h, data, cid, secs, subs, seq, kind, status, value):
    desc = wire.make_desc(h, cid, cid + 1 & 0xFFFFFFFF, 99, data)
    py = wire.encode_reply(route, wire.SKYMEM_REPLY_DATA, wire.SKYMEM_GET_CHUNK_CC, chunk_id=cid,
                           body=desc.pack() + data, seconds=secs, subseconds=subs, seq=seq)
    c = built(lib.skymem_build_reply_data, seq, secs, subs, c_route(route), wire.SKYMEM_GET_CHUNK_CC, c_desc(desc), data)
    assert py == c
    assert wire.decode_reply(c).data == data
    py = wire.encode_reply(route, kind, 6, status, cid, value, h, secs, subs, seq)
    c = built(lib.skymem_build_reply, seq, secs, subs, c_route(route), kind, 6, status, cid, value, h, 32)
    assert py == c
    rc, msg = c_parse(c)
    assert rc == 0 and msg.reply_value == value and wire.decode_reply(c).value == value


@settings(max_examples=40, deadline=None)
@given(route=routes, h=hashes, data=st.binary(max_size=2000), ground=u16, vp=u16, vs=u16)
def test_migration_set_chunk_with_origin_identical(route, h, data, ground, vp, vs):
    route = wire.RouteHeader(route.dst_plane, route.dst_sat, 1, 2, flags=wire.SKYMEM_RF_MIGRATION,
                             request_id=route.request_id)
    desc = wire.make_desc(h, 0, 1, 5, data)
    py = wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(desc, data, (ground, vp, vs)),
                                  seq=3)
    origin = ffi.new("skymem_origin_t *", {"ground": ground, "via_plane": vp, "via_sat": vs})
    c = built(lib.skymem_build_set_chunk_origin, 3, c_route(route), c_desc(desc), origin, data)
    assert py == c
    rc, msg = c_parse(c)
    assert rc == 0 and msg.has_origin and (msg.origin.ground, msg.origin.via_plane, msg.origin.via_sat) == (ground, vp, vs)
    cmd = wire.decode_command(py)
    assert cmd.origin == (ground, vp, vs) and cmd.data == data


def test_stats_and_hk_identical():
    stats = wire.Stats(*range(3, 22), spare=0)
    cs = ffi.new("skymem_stats_t *")
    for name in wire.STATS_FIELDS[:-1]:
        setattr(cs, name, getattr(stats, name))
    route = wire.RouteHeader(wire.SKYMEM_GROUND_PLANE, 1, 2, 3, 2, 3, 77)
    assert wire.encode_telemetry(wire.SKYMEM_HK_TLM_MID, stats.pack(), 5, 6, 7) == built(lib.skymem_build_hk, 7, 5, 6, cs)
    c = built(lib.skymem_build_reply_stats, 7, 5, 6, c_route(route), cs)
    assert wire.encode_reply(route, wire.SKYMEM_REPLY_STATS, wire.SKYMEM_STATS_CC, body=stats.pack(), seconds=5,
                             subseconds=6, seq=7) == c
    assert wire.decode_reply(c).stats == stats


@settings(max_examples=200, deadline=None)
@given(pkt=st.binary(min_size=0, max_size=200))
def test_python_never_accepts_what_c_rejects(pkt):
    """Random bytes: when C rejects a command packet Python must too (and vice versa)."""
    rc, _ = c_parse(pkt)
    try:
        if len(pkt) >= 1 and pkt[0] & 0x10:
            wire.decode_command(pkt)
        else:
            wire.decode_reply(pkt)
        py_ok = True
    except wire.WireError:
        py_ok = False
    if py_ok:
        assert rc == 0


@settings(max_examples=100, deadline=None)
@given(route=routes, h=hashes, first=u32, count=st.integers(1, wire.SKYMEM_MAX_GET_CHUNKS), stride=u32)
def test_range_rule_agrees(route, h, first, count, stride):
    buf = ffi.new("uint8_t[]", 256)
    n = lib.skymem_build_get_chunks(buf, 256, 0, c_route(route), h, first, count, stride)
    try:
        wire.chunk_range(h, first, count, stride)
        assert n > 0
    except wire.WireError:
        assert n < 0


def _valid_packets() -> list[bytes]:
    h = bytes(range(32))
    route = wire.RouteHeader(1, 2, wire.SKYMEM_GROUND_PLANE, 0, 1, 1, 0xABCDEF)
    desc = wire.make_desc(h, 3, 9, 1234, b"chunk-data")
    stats = wire.Stats(*range(1, 20))
    migration = wire.RouteHeader(1, 2, 3, 4, 5, 6, 0x1234, flags=wire.SKYMEM_RF_MIGRATION)
    return [
        wire.encode_command(wire.SKYMEM_CMD_MID, wire.SKYMEM_NOOP_CC),
        wire.encode_command(wire.SKYMEM_CMD_MID, wire.SKYMEM_SET_PARAM_CC, wire.encode_set_param(2, 4096)),
        wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(desc, b"chunk-data")),
        wire.encode_data_command(wire.SKYMEM_GET_CHUNKS_CC, route, wire.chunk_range(h, 0, 9, 3)),
        wire.encode_data_command(wire.SKYMEM_MIGRATE_CC, route, wire.migrate_body(h, 0, 9, 3, (4, 5))),
        wire.encode_data_command(wire.SKYMEM_EVICT_BLOCK_CC, route, wire.evict_body(h, 7, 2)),
        wire.encode_reply(route, wire.SKYMEM_REPLY_DATA, 4, chunk_id=3, body=desc.pack() + b"chunk-data"),
        wire.encode_reply(route, wire.SKYMEM_REPLY_NAK, 4, wire.SKYMEM_NAK_NOT_FOUND, 3, body=h),
        wire.encode_reply(route, wire.SKYMEM_REPLY_STATS, 9, body=stats.pack()),
        wire.encode_telemetry(wire.SKYMEM_HK_TLM_MID, stats.pack(), 5, 6),
        wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, migration, wire.set_chunk_body(desc, b"chunk-data", (7, 1, 2))),
    ]


DECODED_MIDS = {b"\x18\x90", b"\x18\x92", b"\x08\x90", b"\x08\x92"}


@settings(max_examples=600, deadline=None)
@given(which=st.integers(0, 10), cut=st.integers(0, 200), pos=st.integers(0, 200), value=st.integers(0, 255),
       mode=st.sampled_from(["byte", "truncate", "extend"]))
def test_mutated_packets_accepted_alike(which, cut, pos, value, mode):
    """Corrupt one byte, truncate or extend a valid packet: Python and C accept or reject it alike."""
    pkt = bytearray(_valid_packets()[which])
    if mode == "byte":
        pkt[pos % len(pkt)] = value
    elif mode == "truncate":
        pkt = pkt[:cut % len(pkt)]
    else:
        pkt += bytes([value]) * (1 + cut % 40)
    pkt = bytes(pkt)
    rc, _ = c_parse(pkt)
    if pkt[:2] not in DECODED_MIDS:
        return  # other message ids (SEND_HK, ISL_ROUTER...) are outside skymemory.protocol.wire
    try:
        wire.decode_any(pkt)
        py_ok = True
    except wire.WireError:
        py_ok = False
    assert py_ok == (rc == 0), (pkt.hex(), rc)
