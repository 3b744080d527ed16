"""`skymemory put` and `get` against real nodes: what they say is about what the user typed (a name never stored,
a --servers the constellation cannot give), and nothing is said about what the user did not ask for."""

from __future__ import annotations

import os
import subprocess
import sys

from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import BlockRecord
from skymemory.store.objects import ObjectStore, key_of

from live import REPO, launched


def skymemory(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    return subprocess.run([sys.executable, "-m", "skymemory", *argv], capture_output=True, text=True, env=env,
                          timeout=120, cwd=cwd)


def get(key: str, manifest) -> subprocess.CompletedProcess:
    return skymemory("get", key, "--manifest", str(manifest))


def test_get_of_a_name_never_stored_names_that_name(constellation, tmp_path):
    manifest = constellation.save(tmp_path / "m.json")
    r = get("never-stored.bin", manifest)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "miss (not-found): nothing is stored under the name 'never-stored.bin'" in r.stderr
    assert key_of("never-stored.bin").hex() in r.stderr  # and the key it looked for, after the name
    key = key_of("another-name").hex()
    r = get(key, manifest)  # a key typed as a key: there is no name to repeat
    assert r.returncode == 1 and "under the name" not in r.stderr and f"no object with key {key}" in r.stderr


def test_put_on_a_small_constellation_stripes_over_all_and_warns_only_when_asked_for_more(node_path, tmp_path):
    (tmp_path / "file.bin").write_bytes(os.urandom(50_000))
    with launched(tmp_path, 1, 3) as manifest:
        r = skymemory("put", "file.bin", "--manifest", str(manifest), cwd=tmp_path)
        assert r.returncode == 0 and r.stderr.startswith(  # 9 data chunks, each its stripe with 2 parity chunks
            "stored 'file.bin': 50000 bytes in 27 chunks (stripes of 1 data + 2 parity) on 3 satellites"), \
            r.stderr  # the key on stdout, the report on stderr, nothing before it
        r = skymemory("put", "file.bin", "--servers", "5", "--manifest", str(manifest), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stderr.splitlines()[0] == ("skymemory put: 5 servers asked, the constellation has 3 satellites: "
                                            "striping over 3"), r.stderr
        assert "on 3 satellites" in r.stderr.splitlines()[1]


def test_get_of_an_object_that_lost_chunks_says_it_is_stored_and_where_they_were(node_path, tmp_path):
    (tmp_path / "file.bin").write_bytes(os.urandom(50_000))
    with launched(tmp_path, 1, 3) as manifest:
        r = skymemory("put", "file.bin", "--parity", "0", "--manifest", str(manifest), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        victim = (0, 1)
        block = bytes.fromhex(ObjectStore(Manifest.load(manifest), 3).meta(key_of("file.bin"))["block"])
        with ConstellationBlockStore.from_manifest(Manifest.load(manifest), [victim]) as one:  # no gossip
            one.evict_block(BlockRecord(block, 50_000, one.chunk_bytes, 1, 0, "explicit", 1, victim))
        r = skymemory("get", "file.bin", "-o", "copy.bin", "--manifest", str(manifest), cwd=tmp_path)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and not (tmp_path / "copy.bin").exists(), r.stderr
        assert r.stderr.startswith("skymemory get: miss (chunks-missing): 'file.bin' is stored (metadata from "), \
            r.stderr
        assert "3 of 9 chunks of block" in r.stderr and r.stderr.rstrip().endswith("missing, held by (0, 1)"), r.stderr
        assert "nothing is stored" not in r.stderr
