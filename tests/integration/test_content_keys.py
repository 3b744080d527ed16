"""The ground's content keys (issue 34): the launcher makes them for the ground only, `skymemory keys` changes
them over time, and no satellite is given any of them."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from live import REPO, launched

from skymemory.orbit.manifest import Manifest
from skymemory.protocol.seal import ContentKeys, tenant_key


def _keys(manifest: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skymemory", "keys", *args, "--manifest", str(manifest)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO / "ground")})


@pytest.mark.parametrize("insecure", [False, True])
def test_the_launcher_makes_content_keys_for_the_ground_alone(node_path, tmp_path, insecure):
    with launched(tmp_path, 2, 2, *(["--insecure"] if insecure else [])) as path:
        m = Manifest.load(path)
        key_file = Path(m.content_key_file)
        assert key_file.parent == Path(m.run_dir) and stat.S_IMODE(key_file.stat().st_mode) == 0o600
        keys = ContentKeys.load(key_file)
        secrets = [master.hex() for master in keys.masters.values()]
        secrets += [tenant_key(master, "").hex() for master in keys.masters.values()]
        # every file a satellite is given (its own key file), and everything else in the run directory
        # but the ground's own files, holds none of them
        ground_files = {key_file, Path(m.auth_key_file) if m.auth_key_file else None, Path(path)}
        others = [p for p in Path(m.run_dir).rglob("*") if p.is_file() and p not in ground_files]
        assert others
        for other in others:
            text = other.read_bytes().hex() + other.read_text(errors="replace")
            assert not any(secret in text for secret in secrets), other


def test_keys_rotate_list_and_retire(node_path, tmp_path):
    with launched(tmp_path, 1, 2) as path:
        listed = _keys(path, "list")
        assert listed.returncode == 0 and listed.stdout.split() == ["1", "seals", "new", "chunks"]
        rotated = _keys(path, "rotate")
        assert rotated.returncode == 0 and "key id 2" in rotated.stdout
        assert _keys(path, "list").stdout.splitlines() == ["1", "2  seals new chunks"]
        only = _keys(path, "retire", "3")
        assert only.returncode == 1 and "no content key id 3" in only.stderr and "Traceback" not in only.stderr
        retired = _keys(path, "retire", "1")
        assert retired.returncode == 0 and "key id 1 retired" in retired.stdout
        last = _keys(path, "retire", "2")
        assert last.returncode == 1 and "rotate first" in last.stderr
        key_file = Path(Manifest.load(path).content_key_file)
        assert sorted(ContentKeys.load(key_file).masters) == [2]
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
