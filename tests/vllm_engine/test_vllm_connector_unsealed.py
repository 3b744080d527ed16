"""The connector's "seal": false, end to end: a real vLLM engine stores a prefix in the clear, and only a store that
does not seal finds and reads it (its blocks are named apart from sealed ones, kv.format.codec.layout_name).

One engine in a fresh process (serve_job.py, as test_vllm_connector.py runs them), then KVCManager in this one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from skymemory.kv.format import codec
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.model.models import load_model, save_model_dir
from skymemory.kv.index.radix import RadixIndex
from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore

from kv_support import random_prompt

SERVE_JOB = Path(__file__).with_name("serve_job.py")
BLOCK = 128
SERVERS = 5
PROMPT = random_prompt(300, seed=11)  # 2 usable blocks


def test_an_unsealed_connector_stores_blocks_only_an_unsealed_store_reads(node_path, sky, tmp_path):
    model = save_model_dir("embedded-small", tmp_path / "model" / "embedded-small")
    index = tmp_path / "index"
    extra = {"manifest": str(sky), "model": "embedded-small", "index_dir": str(index), "servers": SERVERS,
             "seal": False}
    job = {"model": str(model), "out": str(tmp_path / "U.out.json"), "engines": [
        {"name": "U", "connector": extra, "requests": [{"name": "P", "ids": PROMPT, "max_tokens": 4}]}]}
    (tmp_path / "U.json").write_text(json.dumps(job))
    with open(tmp_path / "U.log", "w") as log:
        code = subprocess.run([sys.executable, str(SERVE_JOB), str(tmp_path / "U.json")], stdout=log,
                              stderr=subprocess.STDOUT, timeout=600).returncode
    assert code == 0, (tmp_path / "U.log").read_text()[-6000:]
    entries = RadixIndex(index).newest(10)
    assert len(entries) == 2 and {e.meta["layout"] for e in entries} == {codec.layout_name(sealed=False)}

    m = Manifest.load(sky)
    hf, tokenizer = load_model("embedded-small", "cpu", "fp32")
    for seal, found in ((False, 2 * BLOCK), (True, 0)):  # the sealed store's blocks are named apart: a miss
        with ConstellationBlockStore.nearest_from_manifest(m, SERVERS, seal=seal,
                                                           client_options={"station_id": 65}) as store:
            manager = KVCManager(hf, tokenizer, store, kv_dtype="fp16", index=RadixIndex(index), policy="fetch")
            hit = manager.get_cache(PROMPT)
            assert hit.prefix_tokens == found, (seal, hit.miss_reason)
            if found:  # read from the satellites and decoded: stored in the clear, as this store reads
                assert hit.source == "index" and hit.bytes_retrieved > 0
