"""Build hook: compile the flight codec into `skymemory._native` with cffi.

All metadata lives in pyproject.toml; this file only adds `cffi_modules`. When
the core C sources are absent (a partial checkout) the extension is skipped
with a warning and the pure-Python codec is used; set SKYMEM_REQUIRE_NATIVE=1
to make that an error instead.
"""

import os
import sys

from setuptools import setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ground", "skymemory"))
import _cffi_build  # noqa: E402  (the build script, imported by path: the package is not installed yet)

if _cffi_build.sources_present():
    setup(cffi_modules=["ground/skymemory/_cffi_build.py:ffibuilder"])
else:
    if os.environ.get("SKYMEM_REQUIRE_NATIVE") == "1":
        raise SystemExit(f"skymem_core C sources not found under {_cffi_build.CORE}")
    print(f"warning: skymem_core C sources not found under {_cffi_build.CORE}; "
          "building skymemory without the native codec", file=sys.stderr)
    setup()
