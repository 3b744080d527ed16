"""Launcher benchmark: boot a grid detached, measure, optionally round-trip an object, stop, verify.

    PYTHONPATH=ground python -m skymemory.launcher.bench --planes 19 --sats 5 --object-mb 10 --servers 10
    PYTHONPATH=ground python -m skymemory.launcher.bench --planes 72 --sats 22

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

from skymemory.kvstore import KVStore
from skymemory.launcher import processes, rss_kib
from skymemory.launcher.common import pss_kib
from skymemory.manifest import Manifest

LAUNCHER = Path(__file__).resolve().parents[3] / "tools" / "launch_constellation.py"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m skymemory.launcher.bench", description=__doc__.split("\n")[0])
    p.add_argument("--planes", type=int, default=19)
    p.add_argument("--sats", type=int, default=5)
    p.add_argument("--object-mb", type=float, default=0.0, help="round-trip an object of this size (0 = skip)")
    p.add_argument("--servers", type=int, default=10)
    p.add_argument("launcher_args", nargs="*", help="after --: passed to the launcher")
    a = p.parse_args(argv)
    if a.object_mb < 0 or a.servers < 1:
        p.error("--object-mb must be >= 0 and --servers >= 1")
    with tempfile.TemporaryDirectory(prefix="skymem-bench-") as tmp:
        manifest = Path(tmp) / "manifest.json"
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, str(LAUNCHER), "--planes", str(a.planes), "--sats", str(a.sats),
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
                kv = KVStore(m, a.servers)
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
        finally:
            t = time.monotonic()
            r = subprocess.run([sys.executable, str(LAUNCHER), "stop", "--manifest", str(manifest)],
                               capture_output=True, text=True, timeout=300)
            left = [pid for pid in pids if processes.alive(pid)]
            print(f"stop: exit {r.returncode} in {time.monotonic() - t:.2f} s; processes left: {len(left)}")
            if r.returncode or left:
                code = 1
        return code


if __name__ == "__main__":
    sys.exit(main())
