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
satellite, the replay windows the satellites keep for commands, the core's code),
and the client takes one only as the answer of a request still waiting (its
request id, random per request) sent to that satellite.

Sequence numbers are Unix time in units of SEQ_US microseconds, made strictly
increasing per signer: several clients sharing a key need no shared counter,
and a satellite refuses anything signed before it started. A retry is signed afresh (a resend
of the same bytes would be a replay).

Key files are lines "key_id hex_key" (16..64 bytes, '#' comments). Key id 0 is
the constellation key, for satellites only; a ground station signs with its own
id. The launcher makes a key file per constellation and names it in the manifest
(`signer_for_manifest`); `SKYMEM_AUTH_KEY_FILE` (and `SKYMEM_AUTH_KEY_ID` when
the file holds several ground keys) turn signing on for any other
`SkyMemoryClient`.
"""

from __future__ import annotations

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
CONSTELLATION_KEY_ID = 0
KEY_MIN, KEY_MAX = 16, 64
REPLAY_WINDOW = 32768  # sequences remembered below the newest from a source (SKYMEM_AUTH_WINDOW)
AUTH_E_REPLAY = -5  # SKYMEM_AUTH_E_REPLAY
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


def load_keys(path: str | os.PathLike) -> dict[int, bytes]:
    """Parses a key file into {key_id: key}; raises AuthError naming the line."""
    keys: dict[int, bytes] = {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise AuthError(f"cannot read auth key file {path}: {exc.strerror}") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[0].isdigit():
            raise AuthError(f"{path} line {lineno}: expected \"key_id hex_key\"")
        key_id = int(parts[0])
        if key_id > 0xFFFFFFFF:
            raise AuthError(f"{path} line {lineno}: key id is not a u32")
        try:
            key = bytes.fromhex(parts[1])
        except ValueError:
            raise AuthError(f"{path} line {lineno}: key is not an even number of hex digits") from None
        if not KEY_MIN <= len(key) <= KEY_MAX:
            raise AuthError(f"{path} line {lineno}: key must be {KEY_MIN}..{KEY_MAX} bytes, got {len(key)}")
        if key_id in keys:
            raise AuthError(f"{path} line {lineno}: duplicate key id {key_id}")
        keys[key_id] = key
    return keys


def mac(key: bytes, packet_before_tag: bytes | bytearray) -> bytes:
    """The tag over a signed packet's bytes before the tag, mutable bytes zeroed (a Signer keeps its
    key derived; this derives it for one packet)."""
    _route_at(packet_before_tag)
    return MacKey(key).tag(packet_before_tag)


class Signer:
    """Signs data-plane commands with one ground-station key, and checks the replies signed with it.

    `satellite=True` allows the constellation key (id 0): for tools and tests that act as a satellite.
    """

    def __init__(self, key_id: int, key: bytes, *, satellite: bool = False) -> None:
        if not (0 <= key_id if satellite else 0 < key_id) or key_id > 0xFFFFFFFF:
            raise AuthError(f"ground key id must be 1..2^32-1 (0 is the constellation key), got {key_id}")
        if not KEY_MIN <= len(key) <= KEY_MAX:
            raise AuthError(f"key must be {KEY_MIN}..{KEY_MAX} bytes, got {len(key)}")
        self.key_id = key_id
        self.mac_key = MacKey(key)  # derived once; its c_key is what the C fast path signs with
        self._last_seq = 0
        self._seq_lock = threading.Lock()  # the client's loop and fast-path threads sign at once
        # the replies' replay windows, per satellite, shared by the client and the fast path (check_reply)
        # (the C fast path's skymem_reply_window_t *; None without the build)
        self.reply_window = None
        if lib is not None:
            window = lib.skymem_reply_window_new(key_id, key, len(key))
            if window == ffi.NULL:
                raise MemoryError("no memory for the replies' replay windows")
            self.reply_window = ffi.gc(window, lib.skymem_reply_window_free)
        self._py_windows: dict[tuple[int, int], tuple[int, set[int]]] = {}  # without the build: src -> (top, seen)

    @classmethod
    def from_file(cls, path: str | os.PathLike, key_id: int | None = None) -> "Signer":
        keys = load_keys(path)
        if key_id is None:
            ground = sorted(k for k in keys if k != CONSTELLATION_KEY_ID)
            if len(ground) != 1:
                raise AuthError(f"{path}: holds {len(ground)} ground keys; say which (SKYMEM_AUTH_KEY_ID)")
            key_id = ground[0]
        if key_id not in keys:
            raise AuthError(f"{path}: no key id {key_id}")
        return cls(key_id, keys[key_id])

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
        c_key = self.mac_key.c_key
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
        b += self.mac_key.tag(b)
        if r == wire.SKYMEM_CMD_HDR_LEN:
            b[7] = 0
            b[7] = xor_checksum(bytes(b))
        return bytes(b)

    def maybe_sign(self, cc: int, packet: bytes) -> bytes:
        """Signs the commands a keyed satellite requires signed: every data-plane command."""
        return self.sign(packet) if cc in SIGNED_CCS else packet

    def reply_ok(self, packet: bytes) -> bool:
        """True when `packet` is a reply signed with this signer's key (the tag checked in constant time)."""
        if len(packet) < wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_HDR_LEN + TRAILER_LEN or \
                int.from_bytes(packet[:2], "big") != wire.SKYMEM_REPLY_TLM_MID or \
                not packet[wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_FLAGS] & wire.SKYMEM_RF_AUTH:
            return False
        if int.from_bytes(packet[-TRAILER_LEN:-TRAILER_LEN + 4], "big") != self.key_id:
            return False
        if self.mac_key.c_key is not None:
            return lib.skymem_auth_check_reply(self.mac_key.c_key, self.key_id, ffi.from_buffer(packet),
                                               len(packet)) == 0
        return hmac.compare_digest(self.mac_key.tag(packet[:-TAG_LEN]), packet[-TAG_LEN:])


    def check_reply(self, packet: bytes) -> str:
        """REPLY_OK when `packet` is a reply signed with this key whose sequence is fresh for the satellite
        that signed it (its source): never seen from it, and not REPLAY_WINDOW or more below the newest
        seen from it. The sequence is then recorded, so the same reply answers nothing again.
        REPLY_REPLAYED for a right tag on a stale sequence; REPLY_FORGED for anything else (unsigned,
        another key, altered). Unlike reply_ok, a check that holds changes the windows."""
        if self.reply_window is not None:  # the core's windows (skymem_auth_verify), as the satellites'
            rc = lib.skymem_reply_window_check(self.reply_window, ffi.from_buffer(packet), len(packet), 0, 0,
                                               ffi.NULL)
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
            if seq == 0 or seq in seen or (seen and seq <= top and top - seq >= REPLAY_WINDOW):
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


def write_key_file(path: str | os.PathLike, key_ids: list[int]) -> dict[int, bytes]:
    """Writes fresh random 32-byte keys (mode 0600) and returns them: for tests and the launcher."""
    keys = {k: os.urandom(32) for k in key_ids}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# SkyMemory auth keys: key_id hex_key (0 = constellation key)\n")
        for k, v in keys.items():
            f.write(f"{k} {v.hex()}\n")
    return keys
