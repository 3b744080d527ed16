"""ccsdspy definitions decode what the codec encodes, field by field, and agree with spacepacket."""

from __future__ import annotations

import hashlib

import pytest
from spacepacket import SpacePacket

from skymemory.protocol import telemetry, wire
from skymemory.protocol.errors import WireError


def stats(i: int) -> wire.Stats:
    return wire.Stats(i, i + 1, 10 * i, 2, 300 + i, 2**40 + i, 2**41, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                      2**50 + i, 99)


def test_hk_stream_decodes_with_ccsdspy():
    stream = b"".join(wire.encode_telemetry(wire.SKYMEM_HK_TLM_MID, stats(i).pack(), 1000 + i, 5, seq=i)
                      for i in range(4))
    d = telemetry.decode_hk_stream(stream)
    assert list(d["CCSDS_APID"]) == [0x090] * 4
    assert list(d["CCSDS_SEQUENCE_COUNT"]) == [0, 1, 2, 3]
    assert list(d["TLM_SECONDS"]) == [1000, 1001, 1002, 1003]
    assert list(d["STATS_PLANE"]) == [0, 1, 2, 3]
    assert list(d["STATS_BYTES_USED"]) == [2**40 + i for i in range(4)]
    assert list(d["STATS_MISSION_TIME_MS"]) == [2**50 + i for i in range(4)]
    with pytest.raises(WireError):
        telemetry.decode_hk_stream(stream[:-3])


def test_router_hk_decodes_with_ccsdspy_and_wire_alike():
    hks = [wire.RouterHk(i, i + 1, *range(10 * i, 10 * i + 11)) for i in range(3)]
    pkts = [wire.encode_telemetry(wire.ISL_ROUTER_HK_TLM_MID, hk.pack(), 70 + i, seq=i) for i, hk in enumerate(hks)]
    d = telemetry.decode_router_hk_stream(b"".join(pkts))
    assert list(d["CCSDS_APID"]) == [0x093] * 3 and list(d["TLM_SECONDS"]) == [70, 71, 72]
    for n in wire.ISL_ROUTER_HK_FIELDS:
        assert list(d[f"ROUTER_{n.upper()}"]) == [getattr(hk, n) for hk in hks], n
    assert [wire.decode_router_hk(p)[2] for p in pkts] == hks
    assert telemetry.decode_stream(b"".join(pkts))[wire.ISL_ROUTER_HK_TLM_MID]["ROUTER_GROUND_KNOWN"][2] == 30
    with pytest.raises(WireError):
        telemetry.decode_router_hk_stream(pkts[0] + wire.encode_telemetry(wire.SKYMEM_HK_TLM_MID, stats(0).pack()))


def test_stats_replies_decode_with_fixed_length_definition():
    route = wire.RouteHeader(wire.SKYMEM_GROUND_PLANE, 0, 5, 6, 5, 6, 1234, hops=3)
    stream = b"".join(wire.encode_reply(route, wire.SKYMEM_REPLY_STATS, wire.SKYMEM_STATS_CC, body=stats(i).pack(),
                                        seconds=50 + i) for i in range(3))
    d = telemetry.decode_stats_replies(stream)
    assert list(d["ROUTE_HOPS"]) == [3, 3, 3] and list(d["ROUTE_REQUEST_ID"]) == [1234] * 3
    assert list(d["REPLY_KIND"]) == [wire.SKYMEM_REPLY_STATS] * 3
    assert list(d["STATS_CHUNKS"]) == [300, 301, 302] and list(d["TLM_SECONDS"]) == [50, 51, 52]
    with pytest.raises(WireError):
        telemetry.decode_stats_replies(wire.encode_reply(route, wire.SKYMEM_REPLY_ACK, 0))


def test_mixed_capture_decodes_with_ccsdspy_and_spacepacket_alike():
    h = hashlib.sha256(b"x").digest()
    route = wire.RouteHeader(3, 4, wire.SKYMEM_GROUND_PLANE, 0, 1, 1, 77)
    desc = wire.make_desc(h, 2, 5, 123, b"abcdef")
    pkts = [
        wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(desc, b"abcdef")),
        wire.encode_data_command(wire.SKYMEM_GET_CHUNK_CC, route, wire.chunk_ref(h, 2)),
        wire.encode_reply(route, wire.SKYMEM_REPLY_DATA, 4, chunk_id=2, body=desc.pack() + b"abcdef", seconds=9),
        wire.encode_reply(route, wire.SKYMEM_REPLY_ACK, 3, chunk_id=2, body=h),
    ]
    decoded = telemetry.decode_stream(b"".join(pkts))
    cmds, replies = decoded[wire.SKYMEM_DATA_CMD_MID], decoded[wire.SKYMEM_REPLY_TLM_MID]
    for i, raw in enumerate(pkts[:2]):
        sp = SpacePacket.decode(raw)
        assert cmds["CCSDS_APID"][i] == sp.apid and cmds["CCSDS_SEQUENCE_COUNT"][i] == sp.packet_sequence_count
        assert cmds["CCSDS_PACKET_LENGTH"][i] == len(sp.packet_data_field) - 1
        assert cmds["FUNCTION_CODE"][i] == sp.packet_data_field[0]
        assert bytes(cmds["BODY"][i].astype("uint8")) == bytes(sp.packet_data_field[22:])
        assert cmds["ROUTE_REQUEST_ID"][i] == 77
    assert list(replies["REPLY_KIND"]) == [wire.SKYMEM_REPLY_DATA, wire.SKYMEM_REPLY_ACK]
    assert bytes(replies["BODY"][1].astype("uint8")) == h
    assert bytes(replies["BODY"][0].astype("uint8"))[56:] == b"abcdef"


def test_truncated_stream_is_rejected():
    with pytest.raises(WireError):
        list(telemetry.iter_packets(wire.encode_command(wire.SKYMEM_CMD_MID, 0) + b"\x18\x90"))


def test_cli_decode(tmp_path, capsys):
    from skymemory.cli import main

    f = tmp_path / "hk.bin"
    f.write_bytes(b"".join(wire.encode_telemetry(wire.SKYMEM_HK_TLM_MID, stats(i).pack(), 77) for i in range(3)))
    assert main(["telemetry", "decode", str(f)]) == 0
    out = capsys.readouterr().out
    assert "SKYMEM_HK_TLM: 3 packets" in out and out.count("\n") == 5
    f.write_bytes(f.read_bytes()[:-1])
    assert main(["telemetry", "decode", str(f)]) == 1
    with pytest.raises(SystemExit) as missing:  # refused when the command line is read
        main(["telemetry", "decode", str(tmp_path / "missing")])
    assert missing.value.code == 2
