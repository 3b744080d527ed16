"""Authenticated commands and replies, ground side: the trailer of skymem_wire.h.

A signed data-plane command or reply ends with 44 bytes: u32 key_id, u64
sequence and a 32-byte tag over every byte before it, with the bytes
satellites rewrite on the way taken as zero -- a command's cFS checksum (byte 7),
the route header's via (4 bytes), ttl and hops -- so the tag still holds after
any number of ISL hops. The tag is POLYVAL under AES-128
(`skymemory.protocol.mac`). The route flag AUTH (0x01) is set, the length field
grows by 44 and a command's checksum is brought up to date. The C side is
cfs_apps/skymem_core/fsw/src/skymem_auth.c.

With keys, a satellite takes no command unsigned (reads included) and signs
every reply; the ground keeps only replies signed with its own key whose
sequence is fresh for the satellite that signed it (`Signer.check_reply`: per
satellite, the replay windows the satellites keep for commands, the core's code,
with a floor at the signer's start less the satellites' clock error, `reply_floor`),
and the client takes one only as the answer of a request still waiting (its
request id, random per request) sent to that satellite, signed after the newest
reply from it the client had taken when that request left (`Signer.reply_top`).

Sequence numbers are Unix time in units of SEQ_US microseconds, made strictly
increasing per signer: several clients sharing a key need no shared counter,
and a satellite refuses anything signed before it started. A retry is signed afresh (a resend
of the same bytes would be a replay).

Keys, one per association and direction (as CCSDS SDLS, 355.0-B, and NASA
CryptoLib keep a security association per link and direction). A ground key id
(a station's, 1 by default) has a master only the ground holds; from it the
ground derives, per satellite, UP (ground -> that satellite: signs the commands
for it, which it verifies) and DOWN (that satellite -> ground: it signs its
replies, the ground checks them) with `derive`. What satellites send each other is
signed per ISL link and direction, hop by hop (skymem_link.h), with keys `derive_link`
makes from the ground's link master; a link key's id in a trailer is the link id of
the satellite that signed it (`link_id`). A satellite's key file holds its own UP and
DOWN keys and the keys of its own links only: it cannot sign a command for another
satellite, nor a reply as another, nor talk to any satellite but its neighbours, and a
command signed for one satellite is no good at any other.

Key files (docs/PROTOCOL.md, "Key files") start with a version line:
"skymem-keys 4 ground" (the ground's: `link-master HEX`, `master KEY_ID HEX` lines;
`load_keys`) or "skymem-keys 4 satellite PLANE SAT" (`link-in`/`link-out PLANE SAT HEX`
per neighbour, `up`, `down` lines; the satellites read them, skymem_auth.c). An older
file (version 3's one ISL key shared by every satellite, or no header) is refused in
one line that says to launch again.
The launcher writes the ground's file and one per satellite (`write_key_files`)
and names the ground's in the manifest (`signer_for_manifest`);
`SKYMEM_AUTH_KEY_FILE` (and `SKYMEM_AUTH_KEY_ID` when the file holds several
ground keys) turn signing on for any other `SkyMemoryClient`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import threading
import time
from pathlib import Path

from skymemory.protocol import wire
from skymemory.protocol.mac import MacKey, route_at
from skymemory.protocol.native import ffi, lib, xor_checksum

# skymem_auth.h's values, compiled against it at build time (_cffi_build.MIRRORS)
SEQ_US = 16  # one sequence number = this many microseconds (SKYMEM_AUTH_SEQ_US)
TRAILER_LEN = 44
TAG_LEN = 32  # skymemory.protocol.mac.TAG_LEN
LINK_BIT = 0x80000000  # key ids with it are link ids (SKYMEM_AUTH_LINK_BIT); ground key ids are below
KEY_MIN, KEY_MAX = 16, 64
REPLAY_WINDOW = 32768  # sequences remembered below the newest from a source (SKYMEM_AUTH_WINDOW)
AUTH_E_REPLAY = -5  # SKYMEM_AUTH_E_REPLAY
# how far behind the ground's clock a satellite's may be when it signs a reply: the satellites' own allowance
# for clock error (skymem_sat.h's SKYMEM_SAT_SEQ_AHEAD_US), taken off the floor of a Signer's reply windows
REPLY_SKEW_US = 1_000_000
KEY_FILE_VERSION = 4
GROUND_HEADER = f"skymem-keys {KEY_FILE_VERSION} ground"
SATELLITE_HEADER = f"skymem-keys {KEY_FILE_VERSION} satellite"
UP, DOWN = "up", "down"  # ground -> satellite, satellite -> ground (skymem_auth.h's SKYMEM_KEY_UP / _DOWN)
# Signer.check_reply's verdicts
REPLY_OK, REPLY_REPLAYED, REPLY_FORGED = "ok", "replayed", "forged"
# commands a keyed satellite refuses unsigned (skymem_auth_required): every one
SIGNED_CCS = frozenset(range(wire.SKYMEM_NUM_CC))


def _route_at(packet: bytes | bytearray) -> int:
    """Where the route header starts: after a command's 8-byte header or a reply's 16; AuthError otherwise."""
    try:
        return route_at(packet)
    except ValueError as exc:
        raise AuthError(str(exc)) from None


class AuthError(ValueError):
    """A key file or a packet that cannot be signed."""


def derive(master: bytes, direction: str, plane: int, sat: int) -> bytes:
    """A satellite's UP or DOWN key under a ground master: HMAC-SHA256(master, "skymem key v3 " + direction +
    " " + BE16 plane + BE16 sat), 32 bytes. One satellite's keys say nothing of another's, nor of the master."""
    if direction not in (UP, DOWN):
        raise ValueError(f"direction must be {UP!r} or {DOWN!r}, got {direction!r}")
    label = f"skymem key v{KEY_FILE_VERSION} {direction} ".encode() + struct.pack(">HH", plane, sat)
    return hmac.new(master, label, hashlib.sha256).digest()


def link_id(plane: int, sat: int) -> int:
    """The key id a link trailer signed by satellite (plane, sat) carries (skymem_auth_link_id)."""
    if not (0 <= plane < 0x8000 and 0 <= sat <= 0xFFFE):
        raise ValueError(f"no link id for satellite ({plane},{sat}): plane must be < 32768")
    return LINK_BIT | plane << 16 | sat


def derive_link(link_master: bytes, sender, receiver) -> bytes:
    """The key of the ISL link sender -> receiver (each a (plane, sat)): HMAC-SHA256(link_master,
    "skymem key v4 link " + BE16 x 4). The sender signs with it (its LINK_OUT), the receiver checks (LINK_IN)."""
    label = f"skymem key v{KEY_FILE_VERSION} link ".encode() + struct.pack(">HHHH", *sender, *receiver)
    return hmac.new(link_master, label, hashlib.sha256).digest()


def neighbours(plane: int, sat: int, planes: int, sats: int) -> list[tuple[int, int]]:
    """The distinct +GRID neighbours of (plane, sat) on a planes x sats torus (skymem_neighbour): north and
    south in its plane, west and east across planes, with wrap-around; none where the ring is one wide."""
    found = []
    for p, s in ((plane, (sat + 1) % sats), (plane, (sat - 1) % sats), ((plane - 1) % planes, sat),
                 ((plane + 1) % planes, sat)):
        if (p, s) != (plane, sat) and (p, s) not in found:
            found.append((p, s))
    return found


class GroundKeys:
    """What the ground holds: the link master (the satellites' link keys come from it) and each ground key id's
    master."""

    def __init__(self, link_master: bytes, masters: dict[int, bytes]) -> None:
        self.link_master, self.masters = link_master, dict(masters)

    @classmethod
    def new(cls, key_ids=(1,)) -> "GroundKeys":
        return cls(os.urandom(32), {k: os.urandom(32) for k in key_ids})

    def ground_text(self) -> str:
        return (f"# SkyMemory keys of the ground: the link master and each ground key's master (docs/PROTOCOL.md)\n"
                f"{GROUND_HEADER}\nlink-master {self.link_master.hex()}\n"
                + "".join(f"master {k} {v.hex()}\n" for k, v in sorted(self.masters.items())))

    def satellite_text(self, plane: int, sat: int, planes: int, sats: int) -> str:
        """The key file of satellite (plane, sat) of a planes x sats torus: the keys of its links to its neighbours
        (both directions) and its own UP and DOWN keys, nothing else."""
        me = (plane, sat)
        lines = [f"# SkyMemory keys of satellite ({plane},{sat}): its links, and UP/DOWN per ground key "
                 "(docs/PROTOCOL.md)", f"{SATELLITE_HEADER} {plane} {sat}"]
        for other in neighbours(plane, sat, planes, sats):
            lines += [f"link-in {other[0]} {other[1]} {derive_link(self.link_master, other, me).hex()}",
                      f"link-out {other[0]} {other[1]} {derive_link(self.link_master, me, other).hex()}"]
        for k, master in sorted(self.masters.items()):
            lines += [f"up {k} {derive(master, UP, plane, sat).hex()}",
                      f"down {k} {derive(master, DOWN, plane, sat).hex()}"]
        return "\n".join(lines) + "\n"


def _write_private(path: str | os.PathLike, text: str) -> None:
    """text into path, mode 0600 from its creation on (an old file is replaced, whatever its mode)."""
    Path(path).unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def satellite_key_file(directory: str | os.PathLike, plane: int, sat: int) -> Path:
    """Where `write_key_files` puts satellite (plane, sat)'s key file."""
    return Path(directory) / "satellites" / f"{plane}-{sat}.keys"


def write_key_files(directory: str | os.PathLike, satellites, key_ids=(1,)) -> GroundKeys:
    """Fresh keys: the ground's file directory/constellation.keys and each satellite's own
    (`satellite_key_file`), all mode 0600. Returns what the ground holds."""
    keys = GroundKeys.new(key_ids)
    directory = Path(directory)
    satellites = list(satellites)
    planes = max(p for p, _ in satellites) + 1 if satellites else 0
    sats = max(s for _, s in satellites) + 1 if satellites else 0
    (directory / "satellites").mkdir(parents=True, exist_ok=True)
    _write_private(directory / "constellation.keys", keys.ground_text())
    for plane, sat in satellites:
        _write_private(satellite_key_file(directory, plane, sat), keys.satellite_text(plane, sat, planes, sats))
    return keys


def load_keys(path: str | os.PathLike) -> GroundKeys:
    """Parses the ground's key file; raises AuthError in one line naming the file and line."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise AuthError(f"cannot read auth key file {path}: {exc.strerror}") from None
    link_master, masters, header = None, {}, False
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        where = f"{path} line {lineno}"
        if not header:
            if parts[0].isdigit():
                raise AuthError(f"{where}: an old key file (one key for both directions, no "
                                f"\"{GROUND_HEADER}\" header): launch again to make per-link keys")
            if parts[:1] == ["skymem-keys"] and parts[1:2] == ["3"]:
                raise AuthError(f"{where}: a version 3 key file (one ISL key shared by every satellite): "
                                "launch again to make per-link keys")
            if parts[:2] == ["skymem-keys", str(KEY_FILE_VERSION)] and parts[2:3] == ["satellite"]:
                raise AuthError(f"{where}: a satellite's key file; the ground signs with its own "
                                f"(the manifest's auth_key_file)")
            if parts != GROUND_HEADER.split():
                raise AuthError(f"{where}: expected \"{GROUND_HEADER}\" (key file version {KEY_FILE_VERSION}); "
                                "launch again to make new keys")
            header = True
            continue
        if parts[0] == "link-master" and len(parts) == 2:
            hex_key, key_id = parts[1], None
        elif parts[0] == "master" and len(parts) == 3 and parts[1].isdigit():
            hex_key, key_id = parts[2], int(parts[1])
            if not 0 < key_id < LINK_BIT:
                raise AuthError(f"{where}: a ground key id is 1..{LINK_BIT - 1}")
        else:
            raise AuthError(f"{where}: expected \"link-master HEX\" or \"master KEY_ID HEX\"")
        try:
            key = bytes.fromhex(hex_key)
        except ValueError:
            raise AuthError(f"{where}: key is not an even number of hex digits") from None
        if not KEY_MIN <= len(key) <= KEY_MAX:
            raise AuthError(f"{where}: key must be {KEY_MIN}..{KEY_MAX} bytes, got {len(key)}")
        if key_id in masters or (key_id is None and link_master is not None):
            raise AuthError(f"{where}: duplicate " + ("link master" if key_id is None else f"key id {key_id}"))
        if key_id is None:
            link_master = key
        else:
            masters[key_id] = key
    if not header:
        raise AuthError(f"{path}: no keys (expected \"{GROUND_HEADER}\")")
    return GroundKeys(link_master if link_master is not None else b"", masters)


def reply_floor(start_us: int) -> int:
    """The floor of the reply windows of a Signer made at start_us (Unix microseconds): a reply whose
    sequence is at or below it was signed before the signer existed, but for the satellites' clock error
    (REPLY_SKEW_US), and is refused as stale. 0 (no floor) for start_us 0. skymem_reply_window_floor's."""
    start, skew = start_us // SEQ_US, REPLY_SKEW_US // SEQ_US
    return 0 if start_us == 0 or start <= skew else start - skew


def mac(key: bytes, packet_before_tag: bytes | bytearray) -> bytes:
    """The tag over a signed packet's bytes before the tag, mutable bytes zeroed (a Signer keeps its
    key derived; this derives it for one packet)."""
    _route_at(packet_before_tag)
    return MacKey(key).tag(packet_before_tag)


class Signer:
    """Signs data-plane commands with one ground key, and checks the replies signed under it.

    `key` is the ground master of `key_id`: a command is signed with the UP key of the satellite it is
    for, a reply checked with the DOWN key of the satellite it comes from (`derive`, each kept once made).
    `satellite=True` takes a link id (`link_id`) and one link key used as it is (`derive_link`): for tools
    and tests that act as a satellite talking to one neighbour over one link.
    """

    def __init__(self, key_id: int, key: bytes, *, satellite: bool = False) -> None:
        if satellite != bool(key_id & LINK_BIT) or not 0 < key_id <= 0xFFFFFFFF:
            raise AuthError(f"a ground key id is 1..{LINK_BIT - 1}, a link id (satellite=True) has bit 31 set; "
                            f"got {key_id}")
        if not KEY_MIN <= len(key) <= KEY_MAX:
            raise AuthError(f"key must be {KEY_MIN}..{KEY_MAX} bytes, got {len(key)}")
        self.key_id = key_id
        self._master = bytes(key)
        self._link = MacKey(key) if satellite else None
        self._keys: dict[tuple[str, int, int], MacKey] = {}  # (direction, plane, sat) -> derived, made ready
        self._last_seq = 0
        self._seq_lock = threading.Lock()  # the client's loop and fast-path threads sign at once
        # the replies' replay windows, per satellite, shared by the client and the fast path (check_reply)
        # (the C fast path's skymem_reply_window_t *; None without the build). They start with a floor, this
        # signer's start less the satellites' clock error (reply_floor): a reply signed before it is stale --
        # without one, a reply captured earlier would open a satellite's window and answer a new request that
        # drew its (random) request id.
        self.started_us = time.time_ns() // 1000
        self.reply_floor = reply_floor(self.started_us)
        self.reply_window = None
        if lib is not None:
            window = lib.skymem_reply_window_new(key_id, self.started_us)
            if window == ffi.NULL:
                raise MemoryError("no memory for the replies' replay windows")
            self.reply_window = ffi.gc(window, lib.skymem_reply_window_free)
        self._py_windows: dict[tuple[int, int], tuple[int, set[int]]] = {}  # without the build: src -> (top, seen)

    def mac_key(self, direction: str, plane: int, sat: int) -> MacKey:
        """The UP or DOWN key of satellite (plane, sat), derived once (a satellite's signer: its one link key)."""
        if self._link is not None:
            return self._link
        k = self._keys.get((direction, plane, sat))
        if k is None:
            # setdefault: threads deriving the same key at once all get the one object the dict keeps (the fast
            # path hands C the address of its key schedule: a copy dropped by a racing thread would be freed)
            k = self._keys.setdefault((direction, plane, sat), MacKey(derive(self._master, direction, plane, sat)))
        return k

    def _key_for(self, packet: bytes | bytearray) -> MacKey:
        """The key of a packet's direction (skymem_auth_key_use): a command's destination's UP key, a
        reply's source's DOWN key."""
        r = _route_at(packet)
        field = wire.SKYMEM_ROUTE_DST_PLANE if r == wire.SKYMEM_CMD_HDR_LEN else wire.SKYMEM_ROUTE_SRC_PLANE
        plane, sat = struct.unpack_from(">HH", packet, r + field)
        return self.mac_key(UP if r == wire.SKYMEM_CMD_HDR_LEN else DOWN, plane, sat)

    @classmethod
    def from_file(cls, path: str | os.PathLike, key_id: int | None = None) -> "Signer":
        keys = load_keys(path)
        if key_id is None:
            ground = sorted(keys.masters)
            if len(ground) != 1:
                raise AuthError(f"{path}: holds {len(ground)} ground keys; say which (SKYMEM_AUTH_KEY_ID)")
            key_id = ground[0]
        if key_id not in keys.masters:
            raise AuthError(f"{path}: no ground key id {key_id}")
        return cls(key_id, keys.masters[key_id])

    def next_seq(self) -> int:
        return self.reserve(1)

    def reserve(self, count: int) -> int:
        """The first of `count` consecutive fresh sequences, none of which this signer gives out again."""
        if count < 1:
            raise ValueError("count must be >= 1")
        with self._seq_lock:
            first = max(self._last_seq + 1, time.time_ns() // 1000 // SEQ_US)
            self._last_seq = first + count - 1
            return first

    def release(self, first: int, count: int, used: int) -> None:
        """Give back the unused end of a reservation (first, count) of which `used` were signed with,
        when nothing was reserved after it: the sequences stay near the clock, so another process
        signing with the same key and station is not left behind a satellite's replay window."""
        with self._seq_lock:
            if self._last_seq == first + count - 1 and 0 <= used < count:
                self._last_seq = first + used - 1

    def sign(self, packet: bytes, seq: int | None = None) -> bytes:
        """Returns packet (an unsigned data-plane command, or a reply) with the trailer appended."""
        r = _route_at(packet)
        flags = r + wire.SKYMEM_ROUTE_FLAGS
        if packet[flags] & wire.SKYMEM_RF_AUTH:
            raise AuthError("packet is already signed")
        if len(packet) + TRAILER_LEN > wire.SKYMEM_MAX_PACKET:
            raise AuthError("no room for the trailer")
        seq = self.next_seq() if seq is None else seq
        mac_key = self._key_for(packet)
        c_key = mac_key.c_key
        if c_key is not None:  # the core's skymem_auth_sign_with: one call instead of four passes here
            b = bytearray(len(packet) + TRAILER_LEN)
            b[:len(packet)] = packet
            if lib.skymem_auth_sign_with(c_key, self.key_id, seq, ffi.from_buffer(b), len(packet), len(b)) < 0:
                raise AuthError("packet cannot be signed")
            return bytes(b)
        b = bytearray(packet)
        b[flags] |= wire.SKYMEM_RF_AUTH
        b += struct.pack(">IQ", self.key_id, seq)
        struct.pack_into(">H", b, 4, len(b) + TAG_LEN - 7)
        b += mac_key.tag(b)
        if r == wire.SKYMEM_CMD_HDR_LEN:
            b[7] = 0
            b[7] = xor_checksum(bytes(b))
        return bytes(b)

    def maybe_sign(self, cc: int, packet: bytes) -> bytes:
        """Signs the commands a keyed satellite requires signed: every data-plane command."""
        return self.sign(packet) if cc in SIGNED_CCS else packet

    def reply_ok(self, packet: bytes) -> bool:
        """True when `packet` is a reply signed under this signer's key id with the DOWN key of the satellite
        it names as its source (the tag checked in constant time)."""
        if len(packet) < wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_HDR_LEN + TRAILER_LEN or \
                int.from_bytes(packet[:2], "big") != wire.SKYMEM_REPLY_TLM_MID or \
                not packet[wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_FLAGS] & wire.SKYMEM_RF_AUTH:
            return False
        if int.from_bytes(packet[-TRAILER_LEN:-TRAILER_LEN + 4], "big") != self.key_id:
            return False
        mac_key = self._key_for(packet)
        if mac_key.c_key is not None:
            return lib.skymem_auth_check_reply(mac_key.c_key, self.key_id, ffi.from_buffer(packet), len(packet)) == 0
        return hmac.compare_digest(mac_key.tag(packet[:-TAG_LEN]), packet[-TAG_LEN:])
    def reply_top(self, src: tuple[int, int]) -> int:
        """The newest sequence taken from satellite `src` (check_reply), or the floor when none yet (L1 of
        issue 53). A satellite's sequences only grow, so its genuine reply to a request sent after this was read
        carries a higher one: a reply at or below it answers no such request, whatever its request id
        (the client's and the fast path's per-request floor). skymem_reply_window_top's."""
        if self.reply_window is not None:
            return lib.skymem_reply_window_top(self.reply_window, src[0], src[1])
        with self._seq_lock:
            top, seen = self._py_windows.get(tuple(src), (0, set()))
        return max(top if seen else 0, self.reply_floor)

    def check_reply(self, packet: bytes) -> str:
        """REPLY_OK when `packet` is a reply signed with this key whose sequence is fresh for the satellite
        that signed it (its source): above the floor (reply_floor: not signed before this signer started),
        never seen from it, and not REPLAY_WINDOW or more below the newest seen from it. The sequence is then
        recorded, so the same reply answers nothing again.
        REPLY_REPLAYED for a right tag on a stale sequence; REPLY_FORGED for anything else (unsigned,
        another key, altered). Unlike reply_ok, a check that holds changes the windows."""
        if self.reply_window is not None:  # the core's windows (skymem_auth_verify_with), as the satellites'
            if len(packet) < wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_HDR_LEN or \
                    int.from_bytes(packet[:2], "big") != wire.SKYMEM_REPLY_TLM_MID:
                return REPLY_FORGED
            rc = lib.skymem_reply_window_check(self.reply_window, self._key_for(packet).c_key, ffi.from_buffer(packet),
                                               len(packet), 0, 0, ffi.NULL)
            return REPLY_OK if rc == 0 else REPLY_REPLAYED if rc == AUTH_E_REPLAY else REPLY_FORGED
        r = wire.SKYMEM_TLM_HDR_LEN
        if not self.reply_ok(packet) or \
                int.from_bytes(packet[r + wire.SKYMEM_ROUTE_DST_PLANE:][:2], "big") != wire.SKYMEM_GROUND_PLANE:
            return REPLY_FORGED
        src = (int.from_bytes(packet[r + wire.SKYMEM_ROUTE_SRC_PLANE:][:2], "big"),
               int.from_bytes(packet[r + wire.SKYMEM_ROUTE_SRC_SAT:][:2], "big"))
        seq = int.from_bytes(packet[-TRAILER_LEN + 4:-TAG_LEN], "big")
        with self._seq_lock:  # the same rules as skymem_auth.c's window_seen / window_record
            top, seen = self._py_windows.get(src, (0, set()))
            if seq <= self.reply_floor or seq in seen or (seen and seq <= top and top - seq >= REPLAY_WINDOW):
                return REPLY_REPLAYED
            seen.add(seq)
            if seq > top:
                top = seq
                if len(seen) > 2 * REPLAY_WINDOW:
                    seen = {s for s in seen if top - s < REPLAY_WINDOW}
            self._py_windows[src] = (top, seen)
        return REPLY_OK


def strip_trailer(packet: bytes) -> bytes:
    """A checked signed reply as if it had been sent unsigned (trailer off, length field and AUTH flag
    back): for decoders that know only the unsigned layout (the ccsdspy definitions)."""
    r = _route_at(packet)
    if not packet[r + wire.SKYMEM_ROUTE_FLAGS] & wire.SKYMEM_RF_AUTH:
        return packet
    b = bytearray(packet[:-TRAILER_LEN])
    b[r + wire.SKYMEM_ROUTE_FLAGS] &= ~wire.SKYMEM_RF_AUTH & 0xFF
    struct.pack_into(">H", b, 4, len(b) - 7)
    if r == wire.SKYMEM_CMD_HDR_LEN:
        b[7] = 0
        b[7] = xor_checksum(bytes(b))
    return bytes(b)


def signer_for_manifest(manifest) -> Signer | None:
    """The ground signer of a launched constellation: its key file, named in the manifest ("" = insecure)."""
    path = getattr(manifest, "auth_key_file", "")
    return Signer.from_file(path) if path else None


def signer_from_env(env: dict[str, str] | None = None) -> Signer | None:
    """A Signer from SKYMEM_AUTH_KEY_FILE (+ SKYMEM_AUTH_KEY_ID), or None when unset."""
    env = os.environ if env is None else env
    path = env.get("SKYMEM_AUTH_KEY_FILE")
    if not path:
        return None
    key_id = env.get("SKYMEM_AUTH_KEY_ID")
    if key_id is not None and not key_id.isdigit():
        raise AuthError(f"SKYMEM_AUTH_KEY_ID must be a number, got {key_id!r}")
    return Signer.from_file(path, int(key_id) if key_id else None)
