"""Block store and the `skymemory put/get` key-value store against real nodes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import BlockMiss
from skymemory.store.object_homes import home_satellites
from skymemory.store.objects import key_of

from live import REPO


def test_block_striped_over_los_satellites_roundtrips(constellation):
    m = constellation
    c = m.constellation()
    servers = c.nearest(6)
    payload = os.urandom(300_000)
    h = hashlib.sha256(payload).digest()
    with ConstellationBlockStore.from_manifest(m, servers) as store:
        rec = store.put_block(h, payload)
        assert store.sealed  # on by default: each chunk carries 32 bytes of seal besides its content
        assert rec.chunk_count == -(-len(payload) // (m.chunk_size - 32))
        assert store.get_block(rec) == payload
        probed = store.probe_block(h)
        assert (probed.chunk_count, probed.n_bytes) == (rec.chunk_count, len(payload))
        store.evict_block(rec)
        with pytest.raises(BlockMiss) as e:
            store.get_block(rec)
        assert e.value.reason == "not-found"


def cli(*args: str, manifest) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    return subprocess.run([sys.executable, "-m", "skymemory", *args, "--manifest", str(manifest)],
                          capture_output=True, env=env, timeout=120)


def test_put_get_cli_roundtrip(constellation, tmp_path):
    manifest = tmp_path / "m.json"
    constellation.save(manifest)
    src = tmp_path / "object.bin"
    src.write_bytes(os.urandom(200_000))
    r = cli("put", str(src), "--name", "my-object", "--servers", "5", manifest=manifest)
    assert r.returncode == 0, r.stderr.decode()
    key = r.stdout.decode().strip()
    assert key == key_of("my-object").hex()
    out = tmp_path / "back.bin"
    for name_or_key in ("my-object", key):
        r = cli("get", name_or_key, "-o", str(out), manifest=manifest)
        assert r.returncode == 0, r.stderr.decode()
        assert out.read_bytes() == src.read_bytes()
    r = cli("put", str(src), "--name", "direct-object", "--route", "direct", "-v", "--capture", str(tmp_path / "cap.bin"),
            manifest=manifest)
    assert r.returncode == 0, r.stderr.decode()
    # the capture holds what went through the Python client and says the bulk path is not in it
    assert b"packets of the Python client to" in r.stderr and b"bulk packets are not captured" in r.stderr
    assert b"fastpath_packets_tx" in r.stderr
    r = cli("get", "direct-object", "-o", str(out), manifest=manifest)  # metadata says where: any route works
    assert r.returncode == 0 and out.read_bytes() == src.read_bytes()
    r = cli("get", "no-such-object", manifest=manifest)
    assert r.returncode == 1 and b"miss (not-found)" in r.stderr
    r = cli("status", manifest=manifest)
    assert r.returncode == 0 and b"16/16 satellites answered" in r.stdout
    homes = home_satellites(key_of("my-object"), constellation)
    assert len(homes) == 3 and all(h in [(e.plane, e.sat) for e in constellation.satellites] for h in homes)
