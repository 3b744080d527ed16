"""What the dashboard costs the satellites: each node's CPU time with and without it, in the same run.

    skymemory bench dashboard                      # boots a 19x5 native constellation
    skymemory bench dashboard --manifest run/manifest.json --seconds 30

Boots a constellation with the launcher (or uses --manifest), stores one block
on the 9 nearest satellites and indexes it beside the manifest, then
alternates phases of `--seconds` each, `--rounds` times: without the
dashboard, and with `skymemory dashboard` running and one page connected over
its WebSocket with that block selected (so the holders also get the page's
PROBEs). A node's CPU time is read from /proc/PID/schedstat (nanoseconds)
before and after each phase; the table gives the nodes' mean and largest CPU
use in percent of one core, and the dashboard process's own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skymemory.argtypes import float_range, input_file, int_range
from skymemory.kv.index.radix import RadixIndex
from skymemory.launcher.processes import free_port_bases
from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore


def cpu_ns(pid: int) -> int:
    """CPU time a process has used so far, in nanoseconds (schedstat; else stat's clock ticks)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 10**9 // os.sysconf("SC_CLK_TCK")


def launch(tmp: Path, planes: int, sats: int) -> Path:
    isl, ground = free_port_bases(planes * sats)
    manifest = tmp / "manifest.json"
    subprocess.run([sys.executable, "-m", "skymemory.launcher", "--planes", str(planes),
                    "--sats", str(sats), "--detach", "--quiet", "--manifest", str(manifest), "--isl-port-base",
                    str(isl), "--ground-port-base", str(ground), "--health-timeout", "60"], check=True, timeout=300)
    return manifest


def stop(manifest: Path) -> None:
    subprocess.run([sys.executable, "-m", "skymemory.launcher", "stop", "--manifest",
                    str(manifest)], check=False, timeout=120)


def store_one_block(m: Manifest, manifest_path: Path) -> str:
    servers = m.constellation().nearest(min(9, m.planes * m.sats))
    with ConstellationBlockStore.from_manifest(m, servers) as store:
        record = store.put_block(os.urandom(32), os.urandom(200_000))
    RadixIndex(manifest_path.parent).insert(b"\0" * 32, record, {"position": 0})
    return record.block_hash.hex()


def measure(pids: list[int], seconds: float) -> list[float]:
    """Each process's CPU use over `seconds` of wall time, in percent of one core."""
    before, t0 = [cpu_ns(p) for p in pids], time.monotonic()
    time.sleep(seconds)
    after, t1 = [cpu_ns(p) for p in pids], time.monotonic()
    return [100.0 * (a - b) / 1e9 / (t1 - t0) for a, b in zip(after, before)]


async def page(url: str, block: str, stop: asyncio.Event) -> int:
    """What a browser tab does to the server: hold the WebSocket open, select a block, read every push."""
    import aiohttp

    pushes = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)) as http:
        async with http.ws_connect(url + "ws", timeout=10) as ws:
            await ws.send_json({"select": block})
            while not stop.is_set():
                try:
                    await asyncio.wait_for(ws.receive(), 2.0)
                    pushes += 1
                except asyncio.TimeoutError:
                    pass
    return pushes


def with_dashboard(manifest: Path, block: str, node_pids: list[int], seconds: float) -> tuple[list[float], float, int]:
    """Node CPU use with the dashboard running and a page open; also the dashboard's own, and the pushes read."""
    from skymemory.dashboard.alongside import DashboardProcess  # the dashboard extra: imported when run

    dashboard = DashboardProcess("--manifest", manifest, "--port", 0)
    url = dashboard.start()
    try:
        time.sleep(2.0)  # past its first poll rounds

        async def run():
            stop = asyncio.Event()
            reader = asyncio.ensure_future(page(url, block, stop))
            usage = await asyncio.get_running_loop().run_in_executor(
                None, measure, [*node_pids, dashboard.proc.pid], seconds)
            stop.set()
            return usage, await reader

        usage, pushes = asyncio.run(run())
    finally:
        dashboard.stop()
    return usage[:-1], usage[-1], pushes


def _arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    ap.add_argument("--manifest", type=input_file, default=None, help="a running constellation (default: boot one)")
    ap.add_argument("--planes", type=int_range(1, 1024), default=19)
    ap.add_argument("--sats", type=int_range(1, 1024), default=5)
    ap.add_argument("--seconds", type=float_range(0, 86_400, open_minimum=True), default=20.0,
                    help="length of each phase (default 20)")
    ap.add_argument("--rounds", type=int_range(1, 1000), default=2, help="without/with pairs (default 2)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    return ap


def register(subparsers) -> None:
    ap = subparsers.add_parser('dashboard', help='what the dashboard costs the satellites: node CPU with and without it',
                               description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(ap).set_defaults(func=lambda args: _main(args, ap))


def _main(args, ap: argparse.ArgumentParser) -> int:

    with tempfile.TemporaryDirectory(prefix="skymemory-dashboard-cpu-") as tmp:
        manifest = args.manifest or launch(Path(tmp), args.planes, args.sats)
        try:
            m = Manifest.load(manifest)
            pids = [e.pid for e in m.satellites if e.pid]
            if len(pids) != len(m.satellites):
                print("skymemory bench dashboard: the manifest lacks local node pids (ssh hosts?)", file=sys.stderr)
                return 2
            block = store_one_block(m, Path(manifest))
            without, with_, own, pushes = [], [], [], 0
            for _ in range(args.rounds):
                without += [measure(pids, args.seconds)]
                nodes, dashboard_cpu, n = with_dashboard(Path(manifest), block, pids, args.seconds)
                with_.append(nodes)
                own.append(dashboard_cpu)
                pushes += n
        finally:
            if args.manifest is None:
                stop(manifest)

    def per_node(phases: list[list[float]]) -> list[float]:
        return [sum(p[i] for p in phases) / len(phases) for i in range(len(phases[0]))]

    a, b = per_node(without), per_node(with_)
    extra = [y - x for x, y in zip(a, b)]
    n = len(a)
    print(f"dashboard CPU cost, {m.planes}x{m.sats} {m.runtime} constellation, {args.rounds} x {args.seconds:g} s "
          f"per phase, one page connected with a block selected ({pushes} pushes received)")
    print(f"{'':32s}{'node mean':>12s}{'node max':>12s}   (% of one core)")
    print(f"{'without the dashboard':32s}{sum(a) / n:12.3f}{max(a):12.3f}")
    print(f"{'with the dashboard':32s}{sum(b) / n:12.3f}{max(b):12.3f}")
    print(f"{'extra per node':32s}{sum(extra) / n:12.3f}{max(extra):12.3f}")
    print(f"the dashboard process itself: {sum(own) / len(own):.1f} % of one core")
    if args.json:
        print(json.dumps({"planes": m.planes, "sats": m.sats, "seconds": args.seconds, "rounds": args.rounds,
                          "node_mean_without": sum(a) / n, "node_mean_with": sum(b) / n,
                          "extra_mean": sum(extra) / n, "extra_max": max(extra),
                          "dashboard_process": sum(own) / len(own)}))
    return 0

