"""Hostile input on the ground side, property-tested: the Python decoder and the
client's receive path take any bytes without crashing or returning garbage, and
the auth trailer signs exactly what skymem_auth.h says it does."""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import auth, wire
from skymemory.protocol.errors import WireError
from skymemory.protocol.native import xor_checksum

H = hashlib.sha256(b"prop").digest()
ROUTE = wire.RouteHeader(dst_plane=1, dst_sat=2, src_plane=wire.SKYMEM_GROUND_PLANE, src_sat=3,
                         via_plane=wire.SKYMEM_NO_SAT, via_sat=wire.SKYMEM_NO_SAT, request_id=99)


def valid_packets() -> list[bytes]:
    desc = wire.make_desc(H, 1, 4, 123, b"x" * 100, 1)
    return [
        wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, ROUTE, wire.set_chunk_body(desc, b"x" * 100)),
        wire.encode_data_command(wire.SKYMEM_GET_CHUNK_CC, ROUTE, wire.chunk_ref(H, 3)),
        wire.encode_data_command(wire.SKYMEM_MIGRATE_CC, ROUTE, wire.migrate_body(H, 0, 4, 1, (2, 2))),
        wire.encode_data_command(wire.SKYMEM_EVICT_BLOCK_CC, ROUTE, wire.evict_body(H, 7, 2)),
        wire.encode_reply(ROUTE, wire.SKYMEM_REPLY_DATA, wire.SKYMEM_GET_CHUNK_CC, chunk_id=1,
                          body=desc.pack() + b"x" * 100),
        wire.encode_reply(ROUTE, wire.SKYMEM_REPLY_NAK, wire.SKYMEM_GET_CHUNK_CC, wire.SKYMEM_NAK_NOT_FOUND,
                          body=H),
        wire.encode_command(wire.SKYMEM_CMD_MID, wire.SKYMEM_NOOP_CC),
    ]


VALID = valid_packets()


def decode_or_wire_error(packet: bytes):
    try:
        return wire.decode_any(packet)
    except WireError:
        return None


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=9000))
def test_random_bytes_only_raise_wire_error(data):
    decode_or_wire_error(data)


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from(VALID), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=1, max_size=4),
       st.integers(-20, 20))
def test_mutated_packets_only_raise_wire_error(packet, flips, resize):
    b = bytearray(packet)
    for pos, bit in flips:
        b[pos % len(b)] ^= 1 << bit
    if resize < 0:
        b = b[:max(0, len(b) + resize)]
    else:
        b += bytes(resize)
    decoded = decode_or_wire_error(bytes(b))
    if isinstance(decoded, wire.Reply) and decoded.kind == wire.SKYMEM_REPLY_DATA:
        # a DATA reply that decodes carries exactly data_len bytes of data
        assert decoded.desc is not None and len(decoded.data) == decoded.desc.data_len


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.binary(max_size=2000), st.sampled_from(VALID)), max_size=20))
def test_client_receive_path_survives_any_datagram(datagrams):
    c = SkyMemoryClient({(0, 0): ("127.0.0.1", 9)})
    for d in datagrams:
        c._on_datagram(d)  # must not raise; junk is counted, not acted on
    assert c.counters["received"] == len(datagrams)


# ---- auth trailer -----------------------------------------------------------------
KEY = bytes(range(32))
SIGNER = auth.Signer(5, KEY)
MUTABLE = {7, 16, 17, 18, 19, 24, 25}  # checksum, via (4), ttl, hops


def sign(packet: bytes, seq: int = 1000) -> bytes:
    return SIGNER.sign(packet, seq=seq)


def up_key(packet: bytes) -> bytes:
    """The key a ground command is signed with: the UP key of its destination, derived from the master."""
    plane, sat = struct.unpack_from(">HH", packet, wire.SKYMEM_CMD_HDR_LEN + wire.SKYMEM_ROUTE_DST_PLANE)
    return auth.derive(KEY, auth.UP, plane, sat)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID[:4]), st.integers(0, 2**64 - 1))
def test_signed_packet_layout(packet, seq):
    s = sign(packet, seq)
    assert len(s) == len(packet) + auth.TRAILER_LEN
    assert struct.unpack(">H", s[4:6])[0] + 7 == len(s)
    assert xor_checksum(s) == 0  # cFS checksum holds over the whole signed packet
    assert s[26] & wire.SKYMEM_RF_AUTH
    assert struct.unpack(">IQ", s[-44:-32]) == (5, seq)
    assert s[-32:] == auth.mac(up_key(packet), s[:-32])
    cmd = wire.decode_command(s)  # the Python decoder splits the trailer off too
    assert cmd.cc == packet[6] & 0x7F


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(VALID[:4]), st.integers(0, 10**6), st.integers(0, 7))
def test_mac_covers_every_byte_but_the_mutable_ones(packet, pos, bit):
    s = bytearray(sign(packet))
    i = pos % (len(s) - auth.TAG_LEN)
    s[i] ^= 1 << bit
    try:
        same = auth.mac(up_key(packet), s[:-32]) == bytes(s[-32:])
    except auth.AuthError:  # the message id no longer says a signed kind of packet
        same = False
    assert same == (i in MUTABLE)


def test_sequences_strictly_increase_and_resigning_changes_them():
    p = VALID[0]
    seqs = [struct.unpack(">Q", SIGNER.sign(p)[-40:-32])[0] for _ in range(1000)]
    assert all(b > a for a, b in zip(seqs, seqs[1:]))


def test_only_data_commands_and_replies_can_be_signed():
    with pytest.raises(auth.AuthError):
        SIGNER.sign(VALID[6])  # control NOOP: no route header
    with pytest.raises(auth.AuthError):
        SIGNER.sign(sign(VALID[0]))  # already signed
    with pytest.raises(auth.AuthError):
        auth.Signer(auth.link_id(1, 2), KEY)  # a link id is not a ground key id
    with pytest.raises(auth.AuthError):
        auth.Signer(1, KEY, satellite=True)  # nor a ground key id a satellite's
    assert auth.Signer(auth.link_id(1, 2), KEY, satellite=True).key_id == 0x80010002  # acting as satellite (1,2)
    assert SIGNER.maybe_sign(wire.SKYMEM_GET_CHUNK_CC, VALID[1]) != VALID[1]  # reads are signed too


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 7))
def test_signed_replies_check_and_any_other_bit_fails(pos, bit):
    route = wire.RouteHeader(wire.SKYMEM_GROUND_PLANE, 3, 1, 2, 1, 1, request_id=77)
    reply = SIGNER.sign(wire.encode_reply(route, wire.SKYMEM_REPLY_DATA, wire.SKYMEM_GET_CHUNK_CC,
                                          body=wire.make_desc(bytes(32), 0, 1, 5, b"abc").pack() + b"abc"))
    assert SIGNER.reply_ok(reply) and wire.decode_reply(reply).data == b"abc"
    assert not auth.Signer(SIGNER.key_id + 1, KEY).reply_ok(reply)  # another key id
    s = bytearray(reply)
    i = pos % (len(s) - auth.TAG_LEN)
    s[i] ^= 1 << bit
    r = wire.SKYMEM_TLM_HDR_LEN
    mutable = set(range(r + 8, r + 12)) | {r + 16, r + 17}  # via, ttl, hops
    assert SIGNER.reply_ok(bytes(s)) == (i in mutable)


def test_key_files(tmp_path):
    """The ground's file holds the link master and the masters; a satellite's only the keys of its own links and
    its own UP and DOWN keys (no master, nobody else's); old files and satellite files are refused as the
    ground's, in one line."""
    keys = auth.write_key_files(tmp_path, [(p, s) for p in range(3) for s in range(3)], key_ids=(7,))
    f = tmp_path / "constellation.keys"
    loaded = auth.load_keys(f)
    assert (loaded.link_master, loaded.masters) == (keys.link_master, keys.masters)
    assert (f.stat().st_mode & 0o777) == 0o600
    own = auth.satellite_key_file(tmp_path, 0, 1)
    assert (own.stat().st_mode & 0o777) == 0o600
    text = own.read_text()
    assert text.splitlines()[1] == "skymem-keys 4 satellite 0 1" and keys.masters[7].hex() not in text
    assert keys.link_master.hex() not in text
    links = sorted((line.split()[0], int(line.split()[1]), int(line.split()[2])) for line in text.splitlines()
                   if line.startswith("link-"))
    assert links == sorted((d, p, s) for d in ("link-in", "link-out") for p, s in [(0, 0), (0, 2), (1, 1), (2, 1)])
    assert auth.derive_link(keys.link_master, (0, 1), (1, 1)).hex() in text  # its own link out
    assert auth.derive_link(keys.link_master, (1, 1), (0, 1)).hex() in text  # and in
    assert auth.derive_link(keys.link_master, (1, 1), (2, 1)).hex() not in text  # another satellite's link
    assert auth.derive(keys.masters[7], auth.UP, 0, 1).hex() in text
    assert auth.derive(keys.masters[7], auth.UP, 0, 0).hex() not in text  # another satellite's key
    assert auth.Signer.from_file(f).key_id == 7
    assert auth.signer_from_env({"SKYMEM_AUTH_KEY_FILE": str(f)}).key_id == 7
    assert auth.signer_from_env({}) is None
    head = "skymem-keys 4 ground\n"
    for text, msg in [(f"1 {'00' * 16}\n", "line 1: an old key file .one key for both directions.*launch again"),
                      (own.read_text(), "a satellite's key file"), (head + "master 1 00\n", "16..64 bytes"),
                      (head + "x 1 00\n", "expected"), (head + "master 1 0g\n", "hex"),
                      (head + "master 0 " + "00" * 16 + "\n", "ground key id is 1"),
                      ("skymem-keys 3 ground\nisl 0 " + "00" * 16 + "\n", "version 3 key file"),
                      (head + f"link-master {'00' * 16}\nlink-master {'00' * 16}\n", "duplicate link master"),
                      (head + f"master 1 {'00' * 16}\nmaster 1 {'00' * 16}\n", "line 3: duplicate")]:
        f.write_text(text)
        with pytest.raises(auth.AuthError, match=msg):
            auth.load_keys(f)
    f.write_text(head + f"master 1 {'00' * 16}\nmaster 2 {'11' * 16}\n")
    with pytest.raises(auth.AuthError, match="2 ground keys"):
        auth.Signer.from_file(f)
    assert auth.Signer.from_file(f, 2).key_id == 2


def test_a_command_is_bound_to_its_destination_and_direction():
    """Items 3 and 7: a command's tag is made with its destination's UP key, so the same bytes do not verify
    under any other satellite's; a reply's with its source's DOWN key, which is not the UP key."""
    route = wire.RouteHeader(0, 1, wire.SKYMEM_GROUND_PLANE, 3, 0, 1, request_id=5)
    s = SIGNER.sign(wire.encode_data_command(wire.SKYMEM_NOOP_CC, route, b""))
    assert s[-32:] == auth.mac(auth.derive(KEY, auth.UP, 0, 1), s[:-32])
    assert s[-32:] != auth.mac(auth.derive(KEY, auth.UP, 0, 2), s[:-32])
    assert s[-32:] != auth.mac(auth.derive(KEY, auth.DOWN, 0, 1), s[:-32])
    assert s[-32:] != auth.mac(KEY, s[:-32])  # nor under the master itself
    assert len({auth.derive(KEY, d, p, q) for d in (auth.UP, auth.DOWN) for p in range(3) for q in range(3)}) == 18