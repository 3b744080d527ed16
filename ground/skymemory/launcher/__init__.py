"""The constellation launcher behind tools/launch_constellation.py.

start: boot one process per satellite (native nodes on loopback by default,
       network namespaces, ssh hosts, cFS executables, docker or a swarm stack), write the
       manifest, health-check every satellite with a data-plane NOOP, print a
       summary; then stay in the foreground until Ctrl-C (and tear down), or
       exit with --detach.
stop:  tear down what a manifest describes and verify no process is left.
status: which of a manifest's processes are alive.
"""

from __future__ import annotations

import sys

from skymemory.launcher.common import LaunchError, rss_kib  # noqa: F401  (re-exported)
from skymemory.launcher.options import parse_args
from skymemory.launcher.start import start
from skymemory.launcher.stop import status, stop


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.action == "stop":
            return stop(args.manifest, quiet=args.quiet)
        if args.action == "status":
            return status(args.manifest)
        return start(args)
    except (RuntimeError, OSError, ValueError) as exc:  # LaunchError, missing files, failed boot...
        print(f"launch_constellation: {exc}", file=sys.stderr)
        return 1
