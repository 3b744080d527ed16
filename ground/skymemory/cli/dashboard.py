"""`skymemory dashboard`: serve the live web view of a constellation on http://127.0.0.1:PORT/.

    skymemory dashboard --manifest run/manifest.json              # a running constellation
    skymemory dashboard --events out/ttft.jsonl                    # follow a bench ttft / demo run (--events FILE)
    skymemory dashboard --manifest M --kv-index ~/.cache/skymemory/index   # another ground KV index

The page shows the planes x sats torus live (every satellite's STATS, four
times a second), the line-of-sight box and the overhead satellite turning,
MIGRATE and eviction activity, the ground KV index and where a selected
block's chunks are, and the TTFT of a running benchmark. It listens on
127.0.0.1 only, answers only requests for localhost, 127.0.0.1 or ::1
(--allow-host NAME adds a name, e.g. one a proxy forwards) and only its own
page's WebSocket, so another site's page cannot use it (DNS rebinding, a
cross-site WebSocket). Ctrl-C stops it. Exit status: 0 when stopped, 1 on an
error, 3 when the port is in use.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import re
import signal
import sys
from pathlib import Path

from skymemory.argtypes import int_range, positive_int
from skymemory.orbit import placement
from skymemory.orbit.manifest import Manifest, default_manifest_path

DEFAULT_PORT = 8050
PORT_IN_USE = 3  # exit status when the port is taken, so a parent (skymemory demo) can name its own option for it
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
HOST_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")  # a DNS name (docker's "_" too); no wildcard, port or scheme


def host_name(text: str) -> str:
    """argparse type of --allow-host: one host name or IP address, as a Host: header names it (lower case,
    an IPv6 address without brackets). A URL, a port or a wildcard is refused: the name must be exact."""
    name = text.strip().lower()
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(bare))
    if len(name) <= 253 and HOST_NAME.fullmatch(name):
        return name
    raise argparse.ArgumentTypeError(f"not a host name or address: {text!r} (give the name alone, e.g. "
                                     "dash.example.org: no scheme, port, path or wildcard)")


def register(subparsers) -> None:
    p = subparsers.add_parser("dashboard", help="live web view: satellites, chunks, migrations, KV cache, TTFT",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--manifest", type=Path, default=None,
                   help="launch manifest (default: the one a benchmark announces in --events; without --events, "
                        "$SKYMEM_MANIFEST or run/manifest.json)")
    p.add_argument("--events", type=Path, default=None, metavar="FILE",
                   help="the JSON-lines event file of a running `bench ttft` / `demo` (--events FILE) to follow")
    p.add_argument("--kv-index", type=Path, default=None, metavar="PATH",
                   help="the ground KV index: its folder or its file kv-index.sqlite (default: the index in the "
                        "manifest's folder)")
    p.add_argument("--port", type=int_range(0, 65535), default=DEFAULT_PORT,
                   help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--allow-host", action="append", type=host_name, default=[], metavar="NAME",
                   help="also answer requests that name this host, e.g. through a proxy (repeatable; by default only "
                        "localhost, 127.0.0.1 and ::1, so that no other site reaches it by DNS rebinding)")
    p.add_argument("--servers", type=positive_int, default=None,
                   help="servers a block is striped over, which sizes the line-of-sight box (default: the "
                        "benchmark's, else 9)")
    p.add_argument("--strategy", choices=placement.STRATEGIES, default="rotation-hop",
                   help="placement strategy of the line-of-sight box (default rotation-hop)")
    p.set_defaults(func=run)


def run(args) -> int:
    manifest = args.manifest
    if manifest is None and args.events is None:
        manifest = default_manifest_path()
    if manifest is not None:
        try:
            Manifest.load(manifest)  # a bad path or file is said now, not on the page
        except (FileNotFoundError, ValueError, TypeError) as exc:
            print(f"skymemory dashboard: {exc}", file=sys.stderr)
            return 1
    if args.events is not None and not args.events.parent.is_dir():
        print(f"skymemory dashboard: no directory {args.events.parent} for the event file", file=sys.stderr)
        return 1
    try:
        return asyncio.run(_serve(args, manifest))
    except KeyboardInterrupt:
        return 0


async def _serve(args, manifest: Path | None) -> int:
    from skymemory.dashboard import Dashboard

    dashboard = Dashboard(manifest=manifest, events=args.events, kv_index=args.kv_index, strategy=args.strategy,
                          servers=args.servers, allowed_hosts=args.allow_host)
    try:
        port = await dashboard.start(args.port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:  # most often a dashboard already running there
            print(f"skymemory dashboard: cannot listen on 127.0.0.1:{args.port}: the port is in use (another "
                  "dashboard?); choose another with --port N (0: any free port)", file=sys.stderr)
            return PORT_IN_USE
        print(f"skymemory dashboard: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    print(f"dashboard: http://127.0.0.1:{port}/", flush=True)
    try:
        await stop.wait()
    finally:
        await dashboard.stop()
    return 0
