"""`skymemory get` of something never stored, against real nodes: the message names what the user typed."""

from __future__ import annotations

import os
import subprocess
import sys

from skymemory.store.objects import key_of

from live import REPO


def get(key: str, manifest) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    return subprocess.run([sys.executable, "-m", "skymemory", "get", key, "--manifest", str(manifest)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_get_of_a_name_never_stored_names_that_name(constellation, tmp_path):
    manifest = constellation.save(tmp_path / "m.json")
    r = get("never-stored.bin", manifest)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "miss (not-found): nothing is stored under the name 'never-stored.bin'" in r.stderr
    assert key_of("never-stored.bin").hex() in r.stderr  # and the key it looked for, after the name
    key = key_of("another-name").hex()
    r = get(key, manifest)  # a key typed as a key: there is no name to repeat
    assert r.returncode == 1 and "under the name" not in r.stderr and f"no object with key {key}" in r.stderr
