"""The tag of a signed packet, as the flight core computes it (skymem_auth_mac).

    S   = POLYVAL(H, M zero-padded to 16 bytes || LE64(8 * len(M)) || LE64(0))
    tag = AES-128_K1(S) || AES-128_K2(S)

M is the packet before the tag with the bytes relays rewrite taken as zero (a
command's checksum, the route header's via, ttl and hops); H is the first 16
bytes of HMAC-SHA256(key, "skymem auth v2 polyval") and K1 || K2 is
HMAC-SHA256(key, "skymem auth v2 tag"). POLYVAL is RFC 8452's polynomial hash,
AES-128 FIPS 197's; why this construction and what it guarantees: skymem_auth.h.

`MacKey` computes it with the C core through `skymemory._native` (carry-less
multiply and AES instructions where the CPU has them), or, in a source checkout
without the build, with the pure-Python code below (about 1.5 ms per 6 KiB
packet: fine for a few commands, not for bulk transfers, which need the build
anyway). The pure-Python code is also what the C is tested against.
"""

from __future__ import annotations

import hashlib
import hmac

from skymemory.protocol import wire
from skymemory.protocol.native import ffi, lib

HASH_LABEL = b"skymem auth v2 polyval"
TAG_LABEL = b"skymem auth v2 tag"
TAG_LEN = 32
_M64 = (1 << 64) - 1


_ROUTE_AT = {wire.SKYMEM_DATA_CMD_MID: wire.SKYMEM_CMD_HDR_LEN, wire.SKYMEM_REPLY_TLM_MID: wire.SKYMEM_TLM_HDR_LEN}


def route_at(packet: bytes | bytearray | memoryview) -> int:
    """Where the route header starts: after a command's 8-byte header or a reply's 16; ValueError otherwise."""
    mid = int.from_bytes(packet[:2], "big") if len(packet) >= 2 else -1
    at = _ROUTE_AT.get(mid)
    if at is None or len(packet) < at + wire.SKYMEM_ROUTE_HDR_LEN:
        raise ValueError("only data-plane commands and replies are signed")
    return at


def signed_bytes(packet_before_tag: bytes | bytearray | memoryview) -> bytes:
    """M: the bytes the tag covers, the ones relays rewrite zeroed."""
    b = bytearray(packet_before_tag)
    r = route_at(b)
    if r == wire.SKYMEM_CMD_HDR_LEN:
        b[7] = 0  # a command's checksum; a reply's byte 7 is part of its time stamp
    via, ttl = r + wire.SKYMEM_ROUTE_VIA_PLANE, r + wire.SKYMEM_ROUTE_TTL
    b[via:via + 4] = b"\0\0\0\0"
    b[ttl:ttl + 2] = b"\0\0"
    return bytes(b)


def _dot_table(h: int) -> list[int]:
    """The carry-less products i * h for every 4-bit i."""
    table = [0] * 16
    for i in range(1, 16):
        table[i] = table[i & (i - 1)] ^ (h << ((i & -i).bit_length() - 1))
    return table


def _dot(a: int, table: list[int]) -> int:
    """POLYVAL's dot(a, h) = a * h * x^-128 for h given by its _dot_table: the 256-bit carry-less
    product a nibble at a time, then the low two 64-bit words folded away (Montgomery)."""
    p = 0
    for shift in range(124, -4, -4):
        p = (p << 4) ^ table[(a >> shift) & 15]
    w0, w1, w2, w3 = p & _M64, (p >> 64) & _M64, (p >> 128) & _M64, p >> 192
    w1 ^= ((w0 << 57) ^ (w0 << 62) ^ (w0 << 63)) & _M64
    w2 ^= w0 ^ (w0 >> 7) ^ (w0 >> 2) ^ (w0 >> 1)
    w2 ^= ((w1 << 57) ^ (w1 << 62) ^ (w1 << 63)) & _M64
    w3 ^= w1 ^ (w1 >> 7) ^ (w1 >> 2) ^ (w1 >> 1)
    return w2 | (w3 << 64)


def polyval_py(h: bytes, data: bytes) -> bytes:
    """POLYVAL(H, data) for data a whole number of 16-byte blocks (RFC 8452 section 3)."""
    if len(h) != 16 or len(data) % 16:
        raise ValueError("POLYVAL takes a 16-byte H and whole 16-byte blocks")
    table, s = _dot_table(int.from_bytes(h, "little")), 0
    for i in range(0, len(data), 16):
        s = _dot(s ^ int.from_bytes(data[i:i + 16], "little"), table)
    return s.to_bytes(16, "little")


def _xtime(x: int) -> int:
    return ((x << 1) ^ (0x1B if x & 0x80 else 0)) & 0xFF


def _make_sbox() -> bytes:
    """AES's S-box: the inverse in GF(2^8) (through powers of the generator 3), then the affine map."""
    exp, log, x = [0] * 255, [0] * 256, 1
    for i in range(255):
        exp[i], log[x] = x, i
        x ^= _xtime(x)
    box = []
    for v in range(256):
        inv = exp[(255 - log[v]) % 255] if v else 0
        box.append(inv ^ 0x63 ^ _rotl8(inv, 1) ^ _rotl8(inv, 2) ^ _rotl8(inv, 3) ^ _rotl8(inv, 4))
    return bytes(box)


def _rotl8(x: int, k: int) -> int:
    return ((x << k) | (x >> (8 - k))) & 0xFF


_SBOX = _make_sbox()


def aes128_encrypt_py(key: bytes, block: bytes) -> bytes:
    """AES-128 of one 16-byte block (FIPS 197), the state column-major as in the standard."""
    if len(key) != 16 or len(block) != 16:
        raise ValueError("AES-128 takes a 16-byte key and a 16-byte block")
    round_keys, rcon = [list(key)], 1
    for _ in range(10):
        p = round_keys[-1]
        k = [p[0] ^ _SBOX[p[13]] ^ rcon, p[1] ^ _SBOX[p[14]], p[2] ^ _SBOX[p[15]], p[3] ^ _SBOX[p[12]]]
        for i in range(4, 16):
            k.append(p[i] ^ k[i - 4])
        round_keys.append(k)
        rcon = _xtime(rcon)
    s = [b ^ k for b, k in zip(block, round_keys[0])]
    for r in range(1, 11):
        t = [_SBOX[s[4 * ((c + i) % 4) + i]] for c in range(4) for i in range(4)]  # SubBytes, ShiftRows
        if r < 10:  # MixColumns
            for c in range(0, 16, 4):
                a0, a1, a2, a3 = t[c:c + 4]
                every = a0 ^ a1 ^ a2 ^ a3
                t[c:c + 4] = [a0 ^ every ^ _xtime(a0 ^ a1), a1 ^ every ^ _xtime(a1 ^ a2),
                              a2 ^ every ^ _xtime(a2 ^ a3), a3 ^ every ^ _xtime(a3 ^ a0)]
        s = [a ^ k for a, k in zip(t, round_keys[r])]
    return bytes(s)


def _derive(key: bytes) -> tuple[bytes, bytes]:
    h = hmac.new(key, HASH_LABEL, hashlib.sha256).digest()[:16]
    if not any(h):
        h = b"\x01" + h[1:]  # H = 0 would hash everything to 0 (as skymem_mac_key_init)
    return h, hmac.new(key, TAG_LABEL, hashlib.sha256).digest()


def tag_py(key: bytes, packet_before_tag: bytes | bytearray | memoryview) -> bytes:
    """The tag in pure Python, from the definition above."""
    h, tag_keys = _derive(key)
    m = signed_bytes(packet_before_tag)
    s = polyval_py(h, m + bytes(-len(m) % 16) + (8 * len(m)).to_bytes(8, "little") + bytes(8))
    return aes128_encrypt_py(tag_keys[:16], s) + aes128_encrypt_py(tag_keys[16:], s)


class MacKey:
    """One key made ready to sign and check with (derived once: H's powers, the keyed HMAC)."""

    def __init__(self, key: bytes) -> None:
        self._key = bytes(key)
        self.c_key = None  # the C core's skymem_mac_key_t *, for the fast path (None without the build)
        if lib is not None:
            self.c_key = ffi.new("skymem_mac_key_t *")
            lib.skymem_mac_key_init(self.c_key, self._key, len(self._key))

    def tag(self, packet_before_tag: bytes | bytearray | memoryview) -> bytes:
        route_at(packet_before_tag)
        if self.c_key is None:
            return tag_py(self._key, packet_before_tag)
        out = ffi.new("uint8_t[32]")
        view = memoryview(packet_before_tag).cast("B")
        lib.skymem_auth_mac(self.c_key, ffi.from_buffer(view), len(view), out)
        return bytes(out)
