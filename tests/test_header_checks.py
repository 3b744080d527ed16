"""Python's copy of the C headers is compared with them by the compiler at build time.

`_cffi_build.header_checks()` turns wire.py's (and auth.py's, fastpath.py's) constants, the cdef's
prototypes and its struct fields into C that compiles only where the headers agree. Here a copy
of cfs_apps/skymem_core gets one edit Python does not follow, and `_cffi_build.py --check` (the
extension's own translation unit, compiled without writing anything) must fail naming what
differs; the untouched copy must pass. The tree's `_native.abi3.so` is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "ground" / "skymemory" / "_cffi_build.py"


def check(core: Path) -> subprocess.CompletedProcess:
    # LC_ALL=C: the compiler quotes names with ASCII quotes, not the locale's
    env = {**os.environ, "SKYMEM_CORE_DIR": str(core), "LC_ALL": "C"}
    return subprocess.run([sys.executable, str(BUILD_SCRIPT), "--check"], env=env, cwd=core.parent,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def core(tmp_path) -> Path:
    copy = tmp_path / "skymem_core"
    for part in ("inc", "src"):
        shutil.copytree(REPO / "cfs_apps" / "skymem_core" / "fsw" / part, copy / "fsw" / part)
    return copy


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path.name} no longer has {old!r}: update this test"
    path.write_text(text.replace(old, new))


def test_unchanged_headers_pass(core):
    result = check(core)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("header, old, new, named", [
    # a message id and a payload limit of skymem_wire.h against wire.py
    ("skymem_wire.h", "#define SKYMEM_DATA_CMD_MID     0x1892u", "#define SKYMEM_DATA_CMD_MID     0x1895u",
     "SKYMEM_DATA_CMD_MID: skymemory/protocol/wire.py says 6290"),
    ("skymem_wire.h", "#define SKYMEM_MAX_CHUNK_DATA     60000u", "#define SKYMEM_MAX_CHUNK_DATA     60001u",
     "SKYMEM_MAX_CHUNK_DATA: skymemory/protocol/wire.py says 60000"),
    # a constant removed from the header that Python still uses
    ("skymem_wire.h", "#define SKYMEM_NAK_BUSY           10u\n", "", "'SKYMEM_NAK_BUSY' undeclared"),
    # auth.py's copy of skymem_auth.h
    ("skymem_auth.h", "#define SKYMEM_AUTH_SEQ_US 16u", "#define SKYMEM_AUTH_SEQ_US 8u",
     "SKYMEM_AUTH_SEQ_US: skymemory/protocol/auth.py says 16"),
    # a cdef prototype against the header's
    ("skymem_geometry.h", "double skymem_light_time_s(double distance_m)",
     "double skymem_light_time_s(float distance_m)", "conflicting types for 'skymem_light_time_s'"),
    # a field of a struct the cdef declares whole, and of one it declares in part (`...;`)
    ("skymem_codec.h", "    uint16_t data_len;\n", "    uint32_t data_len;\n",
     "skymem_chunk_desc_t.data_len: the cdef says uint16_t"),
    ("skymem_codec.h", "    uint32_t chunk_id;\n    uint32_t chunk_count;\n",
     "    uint32_t chunk_count;\n    uint32_t chunk_id;\n",
     "skymem_chunk_desc_t.chunk_id: the cdef puts it at offset 32"),
    ("skymem_codec.h", "    uint32_t uptime_s;\n} skymem_stats_t;", "    uint64_t uptime_s;\n} skymem_stats_t;",
     "skymem_stats_t.uptime_s: the cdef says uint32_t"),
])
def test_a_header_python_does_not_follow_fails_naming_it(core, header, old, new, named):
    edit(core / "fsw" / "inc" / header, old, new)
    result = check(core)
    assert result.returncode != 0, f"the check passed with {header} edited"
    assert named in result.stderr, result.stderr
