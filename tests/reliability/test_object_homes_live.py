"""Named objects survive dead home satellites (issue 15): the metadata is on three homes, a get
succeeds while any one of them answers, and with none it ends by its deadline naming all three.

Real skymem_node processes (skymemory.launcher.cluster), killed with SIGKILL. The object's name
is picked so its homes are neither its chunk servers nor the ground-link satellite: the chunks
are not replicated (a dead server is a miss by design), the metadata is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from skymemory.launcher.cluster import Cluster
from skymemory.protocol.seal import ContentKeys
from skymemory.store.contract import BlockMiss
from skymemory.store.objects import ObjectStore, key_of

SERVERS = 4
DATA = os.urandom(300_000)


def _pick_name(kv: ObjectStore, prefix: str) -> tuple[str, list]:
    """An object name whose homes miss the chunk servers and the satellite holding the ground link."""
    c = kv.c
    busy = set(c.nearest(SERVERS)) | {c.overhead()}
    for i in range(1000):
        name = f"{prefix}-{i}"
        homes = kv.homes(key_of(name))
        if not busy & set(homes):
            return name, homes
    raise AssertionError("no name with homes away from the servers")


@pytest.fixture(scope="module")
def cluster(node_built, tmp_path_factory):
    cl = Cluster(4, 4).start_all()
    # a Cluster writes no content keys (the launcher does): the ground's own, for sealed objects
    cl.content_key_file = str(ContentKeys.new().save(tmp_path_factory.mktemp("ground") / "content.keys"))
    try:
        yield cl
    finally:
        cl.close()


def manifest_of(cluster: Cluster):
    m = cluster.manifest()
    m.content_key_file = cluster.content_key_file
    return m


def test_get_works_while_one_home_answers_and_names_them_all_when_none_does(cluster, tmp_path):
    kv = ObjectStore(manifest_of(cluster), SERVERS, timeout_s=20)
    name, homes = _pick_name(kv, "object")
    meta = kv.put(name, DATA)
    assert sorted(map(tuple, meta["homes"])) == sorted(homes) and meta["homes_failed"] == []
    assert len({p for p, _ in homes}) == 3  # three planes

    for dead in (1, 2):  # one home down, then two: the survivor answers
        cluster.kill(homes[dead - 1])
        data, got = kv.get(key_of(name))
        assert data == DATA
        assert tuple(got["answered_by"]) in homes[dead:]

    cluster.kill(homes[2])  # none left: a clean miss by the deadline, naming every home
    timeout = 2.0
    quick = ObjectStore(manifest_of(cluster), SERVERS, timeout_s=timeout)
    t0 = time.monotonic()
    with pytest.raises(BlockMiss) as miss:
        quick.get(key_of(name))
    elapsed = time.monotonic() - t0
    assert miss.value.reason == "unreachable"
    for h in homes:
        assert str(h) in str(miss.value)
    # it waits for the deadline (a home may answer late), and ends soon after it; the upper bound
    # only tells "ended by its deadline" from "hung for the client's retries" (a minute before)
    assert timeout - 0.1 <= elapsed < timeout + 10, elapsed

    # the same through the command line: exit 1, one line on stderr naming the three homes
    manifest = manifest_of(cluster).save(tmp_path / "manifest.json")
    r = subprocess.run([sys.executable, "-m", "skymemory", "get", name, "-o", str(tmp_path / "out.bin"),
                        "--timeout", "2", "--manifest", str(manifest)], capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "did not answer within 2 s" in lines[0] and "Traceback" not in r.stderr
    assert set(re.findall(r"\((\d+), (\d+)\)", lines[0])) == {(str(p), str(s)) for p, s in homes}
    assert not (tmp_path / "out.bin").exists()

    for h in homes:  # back, but empty: every home now says it does not hold the metadata
        cluster.start(h)
    cluster.wait_healthy(homes, 30)
    with pytest.raises(BlockMiss) as miss:
        ObjectStore(manifest_of(cluster), SERVERS, timeout_s=20).get(key_of(name))
    assert miss.value.reason == "not-found"


def test_put_with_a_dead_home_stores_the_other_copies(cluster):
    kv = ObjectStore(manifest_of(cluster), SERVERS, timeout_s=20)
    name, homes = _pick_name(kv, "second-object")
    cluster.kill(homes[0])
    try:
        meta = kv.put(name, DATA)
        assert meta["homes_failed"] == [list(homes[0])]
        assert kv.get(key_of(name))[0] == DATA
    finally:
        cluster.start(homes[0])
        cluster.wait_healthy([homes[0]], 30)
