"""A second process finds what the first stored: every store the README or the vLLM connector names.

Each store is made fresh in a process of its own, as a user's second run makes it: one process puts
a block and exits; another, started afterwards, reads it by its record from its first call. And the
README's Python example, saved as a file and run twice in two fresh processes against one
constellation: the second run fetches every block from the satellites.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from live import REPO, launched

# how each store is made in a fresh process, from a manifest `m` (the README's and the connector's ways)
STORES = {
    "RotatingBlockStore": 'RotatingBlockStore(m, strategy="rotation-hop", n_servers=9)',
    "ConstellationBlockStore.nearest_from_manifest": "ConstellationBlockStore.nearest_from_manifest(m, 10)",
}

PROCESS = """
import dataclasses, json, os, sys
from concurrent.futures import ThreadPoolExecutor
from skymemory.orbit.manifest import Manifest
from skymemory.store import BlockRecord, ConstellationBlockStore, RotatingBlockStore
m = Manifest.load(sys.argv[1])
store = {make}  # no `with`: the README's example does not enter it either
if sys.argv[2] == "put":
    record = store.put_block(bytes.fromhex(sys.argv[3]), bytes.fromhex(sys.argv[4]))
    print(json.dumps({{**dataclasses.asdict(record), "block_hash": record.block_hash.hex()}}))
else:
    fields = json.loads(sys.argv[3])
    record = BlockRecord(**{{**fields, "block_hash": bytes.fromhex(fields["block_hash"]),
                            "centre": tuple(fields["centre"])}})
    # from several threads at once, as the KV layer's fetch workers make a fresh store's first calls
    with ThreadPoolExecutor(4) as pool:
        got = set(map(bytes, pool.map(store.get_block, [record] * 4)))
    assert len(got) == 1
    print(got.pop().hex())
store.close()
"""


@pytest.fixture(scope="module")
def sky(node_path, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("second-process")
    with launched(tmp, 5, 5) as manifest:
        yield manifest


def _python(code: str, *args: str, env: dict | None = None, timeout: float = 300) -> str:
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PYTHONPATH": str(REPO / "ground"), **(env or {})})
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    return run.stdout


@pytest.mark.parametrize("store", list(STORES))
def test_a_fresh_process_reads_what_another_stored(sky, store):
    code = PROCESS.format(make=STORES[store])
    block_hash, payload = os.urandom(32), os.urandom(20_000)
    record = _python(code, str(sky), "put", block_hash.hex(), payload.hex()).strip()
    assert bytes.fromhex(_python(code, str(sky), "get", record).strip()) == payload


def readme_example(manifest: Path) -> str:
    """The README's Python example as it is written, pointed at this test's constellation."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"From Python, the cache goes straight.*?```python\n(.*?)```", readme, re.S)
    assert block, "README.md has no Python example after 'From Python, the cache goes straight'"
    code = block.group(1)
    assert '"run/manifest.json"' in code
    return code.replace('"run/manifest.json"', json.dumps(str(manifest)))


def test_the_readmes_example_run_twice_fetches_every_block_in_the_second_process(sky, tmp_path):
    example = tmp_path / "example.py"
    # what the example printed, and where the blocks of its cache came from (the test's own lines)
    example.write_text(readme_example(sky) + textwrap.dedent("""
        import json as _json
        print("RESULT", _json.dumps({"described": hit.describe(), "sources": hit.sources,
                                     "blocks": len(hit.blocks), "usable": hit.usable_blocks}))
        store.close()
    """))
    env = {"SKYMEMORY_CACHE": str(tmp_path / "cache")}  # one index (and calibration) for both runs

    def run() -> dict:
        out = _python(example.read_text(), env=env, timeout=600)
        return json.loads(out.split("RESULT ", 1)[1].splitlines()[0])

    first, second = run(), run()
    assert first["usable"] > 0 and first["blocks"] == first["usable"]
    assert second["blocks"] == second["usable"] == first["usable"]
    assert second["sources"].get("store") == second["blocks"], second  # every block from the satellites
    assert second["described"].startswith(f"fetch {second['blocks']}/{second['blocks']}"), second
    assert "planned" not in second["described"], second
