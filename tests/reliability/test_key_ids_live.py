"""K1 (issue 53): a content key id is never given to a second master.

Before: `keys retire` of the newest id, then `keys rotate`, gave that same id to a new master. A chunk sealed
under the retired master then names an id the ground holds, fails to open under the new master ("altered"),
and the satellite that keeps it is blamed for bytes it never touched. Now the key file remembers the ids it
retired (`retired N` lines): a rotation takes the next id never used, and such a chunk names an id the ground
no longer holds, which is what it is.

On a launched constellation (its manifest names the ground's key file), through the `skymemory keys` command.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from live import REPO, launched

from skymemory.orbit.manifest import Manifest
from skymemory.protocol.seal import ONE_CHUNK, ContentKeys, SealError

BLOCK = bytes(range(32))


def _keys(manifest: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "skymemory", "keys", *args, "--manifest", str(manifest)],
                          capture_output=True, text=True, timeout=60, env={**os.environ,
                                                                          "PYTHONPATH": str(REPO / "ground")})
    assert done.returncode == 0, done.stderr
    return done


def test_a_retired_key_id_is_never_given_to_a_new_master(node_built, tmp_path):
    with launched(tmp_path, 1, 2) as manifest:
        key_file = Path(Manifest.load(manifest).content_key_file)
        assert "key id 2" in _keys(manifest, "rotate").stdout
        sealed_under_2 = ContentKeys.load(key_file).sealer("t").seal_chunk(BLOCK, 0, 1, 5, b"hello",
                                                                           layout=ONE_CHUNK)
        _keys(manifest, "retire", "2")  # the newest id: 1 seals again
        rotated = _keys(manifest, "rotate")
        assert "key id 3" in rotated.stdout, rotated.stdout  # (was: key id 2, a new master under the old id)
        keys = ContentKeys.load(key_file)
        assert sorted(keys.masters) == [1, 3] and keys.retired == {2}
        assert "retired 2" in key_file.read_text()
        with pytest.raises(SealError, match="sealed under key id 2, which this ground does not hold"):
            keys.sealer("t").open_chunk(BLOCK, 0, 1, 5, sealed_under_2, layout=ONE_CHUNK)  # (was: "altered")
        _keys(manifest, "retire", "1")
        assert "key id 4" in _keys(manifest, "rotate").stdout  # every id once, whatever was retired
