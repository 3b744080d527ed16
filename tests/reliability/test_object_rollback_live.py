"""R1 of issue 53 on real nodes: a named object never rolls back, and a deleted name stays deleted.

The attacker holds satellites/2-2.keys of a default (keyed, sealed) launch and a capture of the link: the
sealed metadata and data chunks of an earlier version of an object, each genuine ciphertext for its place.
Since R1's flight half a captured satellite can no longer replace a chunk another satellite holds, so the
earlier version is planted where the newer one is no longer held: the test evicts the newer metadata from
the homes first (standing for homes that restarted or dropped it), then the captured satellite's migration
SET_CHUNKs put the old copies there, relayed hop by hop. Every plant is read back by the ground before the
test goes on, so the attack is known to be in place.

What must hold: `skymemory get` (a process of its own, sharing the ground's ledger of versions with the one
that put) refuses the older version in one line, "stale", naming the home it came from, writes nothing;
after `skymemory delete`, a planted copy of the last version is "deleted". On 4feb281 the first get
returned the older version's 40,000 bytes, "sealed and verified".
"""

from __future__ import annotations

import os
import random
import time

from skymemory.orbit.manifest import Manifest
from skymemory.store.objects import ObjectStore, key_of, meta_hash

from test_sealed_content import (SERVERS, WAIT_S, CapturedSatellite, assert_refused, ground_evict, ground_read, put,
                                 sats_named, skymemory, sky)  # noqa: F401 - sky: the module's constellation


def plant(attacker: CapturedSatellite, target, block: bytes, chunk_id: int, chunk_count: int, data: bytes) -> None:
    """The captured satellite's migration SET_CHUNK of recorded bytes into `target`'s empty slot, sent again
    until the ground reads them back there."""
    deadline = time.monotonic() + WAIT_S
    while ground_read(attacker.m, target, block, chunk_id) != data:
        assert time.monotonic() < deadline, f"the captured satellite's plant never landed at {target}"
        attacker.migrate(target, block, chunk_id, chunk_count, data, random.getrandbits(32) | 1)


def captured(m: Manifest, name: str) -> tuple[dict, dict, dict]:
    """What a capture of the link holds of the object's current version: its metadata, raw, per home; its data
    chunks, raw, per chunk id (with the satellite each is on); and the metadata as the ground reads it."""
    store = ObjectStore(m, SERVERS)
    key = key_of(name)
    meta = store.meta(key)
    homes = {tuple(h): ground_read(m, tuple(h), meta_hash(key), 0) for h in meta["homes"]}
    servers = [tuple(s) for s in meta["servers"]]
    block = bytes.fromhex(meta["block"])
    chunks = {cid: (servers[cid % len(servers)], ground_read(m, servers[cid % len(servers)], block, cid))
              for cid in range(meta["chunk_count"])}
    assert all(homes.values()) and all(c for _, c in chunks.values())
    return homes, chunks, meta


def replant(m: Manifest, name: str, homes: dict, chunks: dict, meta: dict) -> None:
    attacker = CapturedSatellite(m)
    key = key_of(name)
    for home, blob in homes.items():
        ground_evict(m, home, meta_hash(key))  # the newer copy is gone there
        plant(attacker, home, meta_hash(key), 0, 1, blob)
    block = bytes.fromhex(meta["block"])
    for cid, (sat, chunk) in chunks.items():  # the put that replaced this version evicted its data
        plant(attacker, sat, block, cid, meta["chunk_count"], chunk)


def test_an_older_version_planted_back_is_refused_and_a_deleted_name_stays_deleted(sky, tmp_path):  # noqa: F811
    m = Manifest.load(sky)
    name = "rollback.bin"
    v1, v2 = os.urandom(40_000), os.urandom(80_000)
    put(sky, tmp_path, name, v1)
    homes_v1, chunks_v1, meta_v1 = captured(m, name)
    put(sky, tmp_path, name, v2)
    homes_v2, chunks_v2, meta_v2 = captured(m, name)
    assert meta_v2["created_ms"] > meta_v1["created_ms"]

    replant(m, name, homes_v1, chunks_v1, meta_v1)
    assert all(ground_read(m, h, meta_hash(key_of(name)), 0) == blob for h, blob in homes_v1.items())
    line = assert_refused(sky, tmp_path, name, "stale", set())
    print(line)
    assert sats_named(line) & set(homes_v1), "the home the old copy came from is named"
    assert "older version" in line and str(meta_v2["created_ms"]) in line

    # the newest again on its homes (a put), then deleted: a planted copy of it is refused as deleted
    put(sky, tmp_path, name, v2)
    homes_v3, chunks_v3, meta_v3 = captured(m, name)
    r = skymemory("delete", name, "--manifest", str(sky), cwd=tmp_path)
    assert r.returncode == 0 and r.stderr.startswith(f"deleted {name!r}: tombstone on "), r.stderr
    deleted = assert_refused(sky, tmp_path, name, "deleted", set())
    replant(m, name, homes_v3, chunks_v3, meta_v3)
    line = assert_refused(sky, tmp_path, name, "deleted", set())
    print(deleted)
    print(line)
    assert "older version" in line
