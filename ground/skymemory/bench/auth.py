"""What command authentication costs: sets/s and gets/s with and without it, side by side.

Two identical constellations run at once, one with keys (SKYMEM_AUTH_KEYS) and
one without; the same client workload (6 KiB chunk SETs, then GETs of them,
`--window` requests in flight) alternates between them for `--rounds` rounds so
machine load hits both alike. With keys every request is signed and every reply
(6 KiB DATA replies included) signed by the satellite and checked by the client.
Also prints the Python signing cost per SET packet and the C tag of one (what a
satellite and the C fast path pay per packet) with each POLYVAL implementation
the CPU has, beside an HMAC-SHA256 of the whole packet (the tag before POLYVAL).

    skymemory bench auth [--ops 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path

from skymemory.argtypes import int_range
from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient, gather_limited
from skymemory.protocol import auth, wire

CHUNK = 6144


async def workload(cl: Cluster, signer, ops: int, window: int, salt: bytes) -> tuple[float, float]:
    data = os.urandom(CHUNK)
    sats = cl.satellites
    h = hashlib.sha256(salt).digest()
    async with SkyMemoryClient(cl.ground_addresses(), signer=signer, window=window, timeout=1.0, retries=6,
                               station_id=1) as c:
        t0 = time.perf_counter()
        await gather_limited((c.set_chunk(sats[k % len(sats)], h, k, ops, data) for k in range(ops)), window)
        t1 = time.perf_counter()
        got = await gather_limited((c.get_chunk(sats[k % len(sats)], h, k) for k in range(ops)), window)
        t2 = time.perf_counter()
    assert all(g == data for g in got)
    return ops / (t1 - t0), ops / (t2 - t1)


def _arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--ops", type=int_range(1, 10_000_000), default=3000)
    p.add_argument("--rounds", type=int_range(1, 1000), default=3)
    p.add_argument("--window", type=int_range(1, 4096), default=64)
    return p


def register(subparsers) -> None:
    p = subparsers.add_parser('auth', help='what command authentication costs: sets/s and gets/s with and without it',
                               description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p).set_defaults(func=lambda a: _main(a, p))


def _main(a, p: argparse.ArgumentParser) -> int:
    if a.ops < 1 or a.rounds < 1 or a.window < 1:
        p.error("--ops, --rounds and --window must be >= 1")
    budget = ["--memory-budget", str(max(64 << 20, 2 * a.ops * CHUNK)), "--delay-scale", "0"]
    with tempfile.TemporaryDirectory() as tmp:
        keys = auth.write_key_files(tmp, [(0, 0), (0, 1)])
        signer = auth.Signer(1, keys.masters[1])
        plain = Cluster(1, 2, budget).start_all()
        keyed = Cluster(1, 2, budget, keys=Path(tmp)).start_all()
        try:
            res = {"off": [], "on": []}
            for r in range(a.rounds):
                pair = (("off", plain, None), ("on", keyed, signer))
                for name, cl, s in (pair if r % 2 == 0 else pair[::-1]):  # off first, then on first, ...
                    res[name].append(asyncio.run(workload(cl, s, a.ops, a.window, b"%s%d" % (name.encode(), r))))
        finally:
            plain.close()
            keyed.close()
    # signing cost in Python, per 6 KiB SET_CHUNK packet
    route = wire.RouteHeader(dst_plane=0, dst_sat=1, src_plane=wire.SKYMEM_GROUND_PLANE, src_sat=1,
                             via_plane=wire.SKYMEM_NO_SAT, via_sat=wire.SKYMEM_NO_SAT, request_id=1)
    pkt = wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route,
                                   wire.set_chunk_body(wire.make_desc(b"\0" * 32, 0, 1, 0, bytes(CHUNK), 0), bytes(CHUNK)))
    n = 5000
    t0 = time.perf_counter()
    for _ in range(n):
        signer.sign(pkt)
    sign_us = (time.perf_counter() - t0) / n * 1e6

    def best(rows, i):  # the median round: robust to a machine shared with other work
        return statistics.median(r[i] for r in rows)

    print(f"auth cost: 1x2 satellites, {a.ops} x {CHUNK} B chunks, window {a.window}, median of {a.rounds} "
          f"interleaved rounds")
    print(f"{'':10s}{'sets/s':>10s}{'gets/s':>10s}")
    for name in ("off", "on"):
        print(f"auth {name:5s}{best(res[name], 0):10.0f}{best(res[name], 1):10.0f}")
    print(f"cost      {100 * (1 - best(res['on'], 0) / best(res['off'], 0)):9.1f}%"
          f"{100 * (1 - best(res['on'], 1) / best(res['off'], 1)):9.1f}%")
    print("all rounds (sets/s, gets/s): " + "; ".join(f"{k}: " + ", ".join(f"{s:.0f}/{g:.0f}" for s, g in v)
                                                        for k, v in res.items()))
    print(f"Python signing: {sign_us:.1f} us per {len(pkt)}-byte SET_CHUNK")
    for line in c_mac_costs(pkt, n):
        print(line)
    return 0


def c_mac_costs(pkt: bytes, n: int) -> list[str]:
    """The C tag of `pkt` (skymem_auth_mac: POLYVAL, then two AES-128 blocks), per packet, with each POLYVAL
    implementation this CPU has (AES on its instructions, or portable with the portable POLYVAL); beside it,
    HMAC-SHA256 over the whole packet (the tag before)."""
    from skymemory.protocol import native

    if not native.AVAILABLE or not hasattr(native.lib, "skymem_polyval_impl"):
        return ["C MAC: skymemory._native is not built"]
    ffi, lib = native.ffi, native.lib
    key, out, data = ffi.new("uint8_t[]", bytes(32)), ffi.new("uint8_t[32]"), ffi.from_buffer(pkt)
    mac_key = ffi.new("skymem_mac_key_t *")
    lib.skymem_mac_key_init(mac_key, key, 32)

    def per_packet_us(fn, reps):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) / reps * 1e6

    lines = []
    for level in (2, 1, 0):
        if lib.skymem_polyval_use_accel(level) != level:
            continue  # this CPU lacks it
        lib.skymem_aes_use_accel(level > 0)
        us = per_packet_us(lambda: lib.skymem_auth_mac(mac_key, data, len(pkt), out), n if level else max(1, n // 20))
        lines.append(f"C tag, POLYVAL ({ffi.string(lib.skymem_polyval_impl()).decode()}) + AES-128 "
                     f"({ffi.string(lib.skymem_aes_impl()).decode()}): {us:.2f} us per {len(pkt)}-byte packet "
                     f"= {len(pkt) / us:.0f} MB/s")
    lib.skymem_polyval_use_accel(2)
    lib.skymem_aes_use_accel(1)
    for accel in (1, 0):
        if not lib.skymem_sha256_use_accel(accel) and accel:
            lines.append("HMAC-SHA256 of the whole packet: this CPU has no SHA extensions")
            continue
        us = per_packet_us(lambda: lib.skymem_hmac_sha256(key, 32, data, len(pkt), out), n)
        lines.append(f"for comparison, HMAC-SHA256 of the whole packet ({ffi.string(lib.skymem_sha256_impl()).decode()}): "
                     f"{us:.2f} us = {len(pkt) / us:.0f} MB/s")
    lib.skymem_sha256_use_accel(1)
    return lines
