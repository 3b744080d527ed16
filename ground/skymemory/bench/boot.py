"""Launcher benchmark: boot a grid detached, measure, optionally round-trip an object, stop, verify.

    skymemory bench boot --planes 19 --sats 5 --object-mb 10 --servers 10
    skymemory bench boot --planes 72 --sats 22
    skymemory bench boot --planes 128 --sats 128 --kv-block    # 16,384 satellites, a KV block round trip

Extra arguments after `--` go to the launcher (e.g. -- --netns 5 --ground-delay-ms 1.8).
Prints boot-to-healthy time, total RSS, put/get throughput, and whether any process was left.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skymemory.argtypes import float_range, int_range, positive_int
from skymemory.bench.roundtrip import kv_block_round_trip
from skymemory.launcher import processes, rss_kib
from skymemory.launcher.common import pss_kib
from skymemory.orbit.manifest import Manifest
from skymemory.store.objects import ObjectStore

LAUNCHER = ["-m", "skymemory.launcher"]


def _arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--planes", type=int_range(1, 1024), default=19)
    p.add_argument("--sats", type=int_range(1, 1024), default=5)
    p.add_argument("--object-mb", type=float_range(0, 4096), default=0.0,
                   help="round-trip an object of this size (0 = skip)")
    p.add_argument("--servers", type=positive_int, default=10)
    p.add_argument("--kv-block", action="store_true",
                   help="round-trip a KV block through KVCManager over the --servers nearest satellites "
                        "(bench/roundtrip.py)")
    p.add_argument("launcher_args", nargs="*", help="after --: passed to the launcher")
    return p


def register(subparsers) -> None:
    p = subparsers.add_parser('boot', help='boot a constellation detached: time to healthy, RSS, an object round trip, clean stop',
                               description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(p).set_defaults(func=lambda a: _main(a, p))


def _main(a, p: argparse.ArgumentParser) -> int:
    if a.object_mb < 0 or a.servers < 1:
        p.error("--object-mb must be >= 0 and --servers >= 1")
    with tempfile.TemporaryDirectory(prefix="skymem-bench-") as tmp:
        manifest = Path(tmp) / "manifest.json"
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, *LAUNCHER, "--planes", str(a.planes), "--sats", str(a.sats),
                            "--detach", "--quiet", "--manifest", str(manifest), *a.launcher_args],
                           capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - t0
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        print(r.stderr.strip().splitlines()[-1])
        m = Manifest.load(manifest)
        pids = [e.pid for e in m.satellites]
        rss, pss = rss_kib(pids), pss_kib(pids)
        print(f"launcher wall time {wall:.2f} s; {len(pids)} processes; RSS {rss / 1024:.1f} MiB "
              f"({rss / len(pids):.0f} KiB each), PSS {pss / 1024:.1f} MiB ({pss / len(pids):.0f} KiB each)")
        code = 0
        try:
            if a.object_mb > 0:
                data = os.urandom(int(a.object_mb * 1e6))
                kv = ObjectStore(m, a.servers)
                t = time.perf_counter()
                kv.put("bench-object", data)
                put_s = time.perf_counter() - t
                t = time.perf_counter()
                back, _ = kv.get(hashlib.sha256(b"bench-object").digest())
                get_s = time.perf_counter() - t
                exact = back == data
                code = 0 if exact else 1
                print(f"object {len(data) / 1e6:.1f} MB over {a.servers} satellites: put {put_s:.2f} s "
                      f"({len(data) / put_s / 1e6:.1f} MB/s), get {get_s:.2f} s ({len(data) / get_s / 1e6:.1f} MB/s), "
                      f"byte-exact: {exact}")
            if a.kv_block:
                trip = kv_block_round_trip(m, a.servers, Path(tmp) / "index")
                print(trip.describe())
                code = code or (0 if trip.exact else 1)
        finally:
            t = time.monotonic()
            r = subprocess.run([sys.executable, *LAUNCHER, "stop", "--manifest", str(manifest)],
                               capture_output=True, text=True, timeout=300)
            left = [pid for pid in pids if processes.alive(pid, "skymem_node")]  # not a reused pid
            print(f"stop: exit {r.returncode} in {time.monotonic() - t:.2f} s; processes left: {len(left)}")
            if r.returncode or left:
                code = 1
        return code

