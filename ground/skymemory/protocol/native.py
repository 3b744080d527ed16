"""The C codec through cffi (`skymemory._native`), with pure-Python fallbacks.

`skymemory._native` is compiled at install time from the flight software's core
sources (see `_cffi_build.py`); setup.py refuses to install without it. In a
source checkout run with PYTHONPATH=ground and no build, the codec helpers
below fall back to pure Python (`AVAILABLE` says which is active), but the
block store's fast path does not: `skymemory.link.fastpath.require_native` raises.
"""

from __future__ import annotations

import numpy as np

try:  # the compiled binding, built by setup.py (cffi_modules)
    from skymemory import _native as _compiled  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the install
    _compiled = None

AVAILABLE = _compiled is not None
ffi = _compiled.ffi if _compiled is not None else None
lib = _compiled.lib if _compiled is not None else None

# ---- CRC32C (Castagnoli, reflected polynomial 0x82F63B78) -------------------


def _make_tables() -> list[list[int]]:
    base = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        base.append(c)
    tables = [base]
    for k in range(1, 8):  # slicing-by-8 tables
        prev = tables[k - 1]
        tables.append([(prev[n] >> 8) ^ base[prev[n] & 0xFF] for n in range(256)])
    return tables


_T = _make_tables()


def crc32c_py(data: bytes, crc: int = 0) -> int:
    """Pure-Python CRC32C (slicing-by-8); the reference the C version is checked against."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _T
    crc ^= 0xFFFFFFFF
    mv = memoryview(data)
    n8 = len(mv) // 8 * 8
    for i in range(0, n8, 8):
        lo = crc ^ (mv[i] | mv[i + 1] << 8 | mv[i + 2] << 16 | mv[i + 3] << 24)
        crc = (
            t7[lo & 0xFF] ^ t6[(lo >> 8) & 0xFF] ^ t5[(lo >> 16) & 0xFF] ^ t4[lo >> 24]
            ^ t3[mv[i + 4]] ^ t2[mv[i + 5]] ^ t1[mv[i + 6]] ^ t0[mv[i + 7]]
        )
    for i in range(n8, len(mv)):
        crc = (crc >> 8) ^ t0[(crc ^ mv[i]) & 0xFF]
    return crc ^ 0xFFFFFFFF


def _find_native_crc():
    if lib is None:
        return None
    # the core's CRC uses the CPU's CRC32C instruction where there is one (same result)
    fn = getattr(lib, "skymem_bulk_crc32c", None) or getattr(lib, "skymem_crc32c", None)
    if fn is None:
        return None

    def crc32c_native(data, crc: int = 0) -> int:
        if crc:
            return crc32c_py(data, crc)
        view = memoryview(data).cast("B")
        return int(fn(ffi.from_buffer(view), len(view)))

    return crc32c_native


crc32c = _find_native_crc() or crc32c_py


def _multmodp(a: int, b: int) -> int:
    """a * b modulo the CRC32C polynomial (reflected), as skymem_crc32c.c computes it."""
    m, p = 1 << 31, 0
    while m and a:
        if a & m:
            p ^= b
            a ^= m
        m >>= 1
        b = (b >> 1) ^ 0x82F63B78 if b & 1 else b >> 1
    return p


def crc32c_combine_py(crc_a: int, crc_b: int, len_b: int) -> int:
    """CRC32C of A || B from crc(A), crc(B) and len(B): the reference for skymem_crc32c_combine."""
    result, square = 1 << 31, 1 << 23  # x^0 and x^8
    while len_b:
        if len_b & 1:
            result = _multmodp(square, result)
        square = _multmodp(square, square)
        len_b >>= 1
    return _multmodp(result, crc_a) ^ crc_b


if lib is not None and hasattr(lib, "skymem_crc32c_combine"):
    def crc32c_combine(crc_a: int, crc_b: int, len_b: int) -> int:
        """CRC32C of A || B from crc(A), crc(B) and len(B), without the bytes."""
        return int(lib.skymem_crc32c_combine(crc_a, crc_b, len_b))
else:  # pragma: no cover - depends on the install
    crc32c_combine = crc32c_combine_py


def xor_checksum(packet: bytes | bytearray | memoryview) -> int:
    """cFS command checksum: 0xFF XOR every byte (byte 7 taken as it is given)."""
    arr = np.frombuffer(packet, dtype=np.uint8)
    return 0xFF ^ int(np.bitwise_xor.reduce(arr)) if len(arr) else 0xFF
