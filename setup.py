"""Build hook: compile the flight codec into `skymemory._native` with cffi.

All metadata lives in pyproject.toml; this file only adds `cffi_modules`. The
extension is required: the block store's fast path (skymem_bulk) is in it, so
an install without the C sources (a partial checkout) stops with an error
instead of quietly producing a slow package.
"""

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ground", "skymemory"))
import _cffi_build  # noqa: E402  (the build script, imported by path: the package is not installed yet)

if not _cffi_build.sources_present():
    raise SystemExit(f"error: the C sources of skymemory._native are missing (looked in {_cffi_build.CORE} "
                     f"and {_cffi_build.CSRC}); install from a full checkout or sdist")
setup(cffi_modules=["ground/skymemory/_cffi_build.py:ffibuilder"])
