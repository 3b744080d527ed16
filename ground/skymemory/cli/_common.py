"""Helpers shared by the subcommands (not a subcommand: the name starts with _): the manifest option, tables.

argparse value types live in skymemory.argtypes (the launcher and the benchmarks use them too); the optional
dependency a command lacks, and how to install it, in skymemory.extras (the KV layer names it too).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skymemory.orbit.manifest import Manifest, default_manifest_path


def add_manifest_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manifest", type=Path, default=None,
                        help="launch manifest (default $SKYMEM_MANIFEST or run/manifest.json)")


def load_manifest(args: argparse.Namespace) -> Manifest:
    return Manifest.load(args.manifest or default_manifest_path())


def client_bind(manifest: Manifest) -> tuple[str, int]:
    return (manifest.ground_host, 0)


def table(rows: list[tuple]) -> str:
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)
