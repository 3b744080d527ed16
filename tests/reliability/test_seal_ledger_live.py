"""A streamed KV prefix whose chunk a captured satellite, its holder, rewrote (issue 34), on real nodes: the
stream fails on the seal, the prompt is computed, and the satellite that served the chunk is counted in the
ground index's seal-failure ledger, which `skymemory status` shows in its "seal fail" column.

The attacker (rewrite_held: the holder's store holds other bytes) and the constellation are test_sealed_content's
(test_sealed_kv does the same for a get_cache).
"""

from __future__ import annotations

import os

from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.transfer.streaming import generate_streaming
from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore

from kv_support import random_prompt, tiny
from test_sealed_content import ground_read, rewrite_held, skymemory, sky  # noqa: F401 - sky: the constellation

BLOCK = 16


def test_a_rewritten_chunk_of_a_streamed_prefix_is_counted_against_its_satellite(sky, tmp_path):  # noqa: F811
    m = Manifest.load(sky)
    model, tokenizer = tiny("fp32")
    with ConstellationBlockStore.nearest_from_manifest(m, 5) as store:
        manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                             policy="fetch")
        prompt = random_prompt(2 * BLOCK + 5, seed=3434)
        hashes = manager.add_blocks(prompt).hashes
        record = manager.index.get(hashes[1]).record
        holder = tuple(store._servers(record, m.constellation().mission_ms())[0])  # chunk 0 of block 1
        honest = ground_read(m, holder, hashes[1], 0)
        rewrite_held(m, holder, hashes[1], 0, record.chunk_count, os.urandom(len(honest)))

        tokens, result, _, failure = generate_streaming(manager, prompt, max_new_tokens=3)
        assert failure == "seal" and result.miss_reason == "stream failed: seal" and len(tokens) == 3
        assert store.seal_failures == {holder: 1}
        assert {sat: n for sat, (n, _) in manager.index.seal_failures().items()} == {holder: 1}
        # the one rule (kv.index.lost): the block that did not open leaves the index; the one before it arrived whole
        assert hashes[1] not in manager.index and hashes[0] in manager.index

    r = skymemory("status", "--manifest", str(sky), "--index-dir", str(tmp_path), cwd=tmp_path)
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr
    header, *rows = out.splitlines()
    end = header.index("seal fail") + len("seal fail")  # right-aligned columns
    counts = {(int(row.split()[0]), int(row.split()[1])): int(row[:end].split()[-1]) for row in rows[:9]}
    assert counts == {(p, s): int((p, s) == holder) for p in range(3) for s in range(3)}
    assert f"1 from {holder[0]}-{holder[1]} x1" in out
