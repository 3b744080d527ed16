"""The tag (skymemory.protocol.mac): the pure-Python definition against RFC 8452 and FIPS 197, and against
the C core with every POLYVAL and AES implementation this CPU has, on commands and replies of every length
class."""

import random

import pytest

from skymemory.protocol import mac, wire
from skymemory.protocol.native import lib

RFC8452_H = bytes.fromhex("25629347589242761d31f826ba4b757b")
RFC8452_X = bytes.fromhex("4f4f95668c83dfb6401762bb2d01a262d1a24ddd2721d006bbe45f20d3c9f362")


def test_polyval_matches_rfc_8452_appendix_a():
    assert mac.polyval_py(RFC8452_H, RFC8452_X).hex() == "f7a3b47b846119fae5b7866cf5e5b77e"


def test_aes_matches_fips_197_appendix_c1():
    key, plain = bytes(range(16)), bytes.fromhex("00112233445566778899aabbccddeeff")
    assert mac.aes128_encrypt_py(key, plain).hex() == "69c4e0d86a7b0430d8cdb78070b4c55a"


def test_polyval_refuses_partial_blocks():
    with pytest.raises(ValueError):
        mac.polyval_py(RFC8452_H, b"\0" * 17)


def _packet(rng: random.Random, n: int, reply: bool) -> bytearray:
    pkt = bytearray(rng.randbytes(n))
    mid = wire.SKYMEM_REPLY_TLM_MID if reply else wire.SKYMEM_DATA_CMD_MID
    pkt[0:2] = mid.to_bytes(2, "big")
    return pkt


@pytest.mark.skipif(lib is None, reason="skymemory._native is not built")
@pytest.mark.parametrize("level", [0, 1, 2])
def test_c_tag_equals_the_python_definition(level):
    if lib.skymem_polyval_use_accel(level) != level:
        lib.skymem_polyval_use_accel(2)
        pytest.skip(f"this CPU has no POLYVAL level {level}")
    lib.skymem_aes_use_accel(level > 0)  # the portable AES with the portable POLYVAL, the instructions with the others
    rng = random.Random(level)
    try:
        for n in [36, 47, 48, 49, 63, 64, 65, 100, 527, 528, 529, 1000, 6228]:
            for reply in (False, True):
                key = rng.randbytes(rng.choice([16, 32, 64]))
                pkt = _packet(rng, n, reply)
                assert mac.MacKey(key).tag(pkt) == mac.tag_py(key, pkt), (n, reply)
    finally:
        lib.skymem_polyval_use_accel(2)
        lib.skymem_aes_use_accel(1)


def test_rewritten_bytes_do_not_change_the_tag_and_others_do():
    rng = random.Random(5)
    key = rng.randbytes(32)
    pkt = _packet(rng, 90, reply=False)
    tag = mac.tag_py(key, pkt)
    rewritten = bytearray(pkt)
    route = wire.SKYMEM_CMD_HDR_LEN
    for off in [7] + [route + wire.SKYMEM_ROUTE_VIA_PLANE + i for i in range(4)] + \
            [route + wire.SKYMEM_ROUTE_TTL, route + wire.SKYMEM_ROUTE_TTL + 1]:
        rewritten[off] ^= 0x5A
    assert mac.tag_py(key, rewritten) == tag
    changed = bytearray(pkt)
    changed[60] ^= 1
    assert mac.tag_py(key, changed) != tag
    assert mac.tag_py(key, pkt + b"\0") != tag  # zero padding is not the same packet: the length block
