"""Round trips that show a launched constellation serves data byte-exact, whatever runs it
(native processes, containers, ssh hosts): a named object and a real KV block.

object_round_trip(manifest, size_bytes, servers) -> RoundTrip
    `skymemory put` / `get`'s path (store.objects.ObjectStore): random bytes striped over the
    `servers` satellites nearest the ground host, requests through the overhead satellite and
    the ISLs, fetched back and compared.
kv_block_round_trip(manifest, servers, index_dir) -> RoundTrip
    The KV layer's path: one 128-token block of the embedded-tiny model's KV (fp32, so a
    fetched block can be compared bit for bit) stored by KVCManager.add_blocks, fetched by
    get_cache; the block's bytes must equal the encoding of the model's own KV and the
    fetched tensors the model's own tensors.

Not a benchmark command itself (no `register`): `bench boot` and the launcher's live tests use it.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from skymemory.kv.model.cache_arg import cache_of
from skymemory.orbit.manifest import Manifest

KV_BLOCK_TOKENS = 128


@dataclass
class RoundTrip:
    what: str
    n_bytes: int
    put_s: float
    get_s: float
    exact: bool

    def describe(self) -> str:
        return (f"{self.what}: {self.n_bytes / 1e6:.2f} MB put {self.put_s:.2f} s, get {self.get_s:.2f} s, "
                f"byte-exact: {self.exact}")


def object_round_trip(m: Manifest, size_bytes: int, servers: int, name: str = "round-trip-object") -> RoundTrip:
    from skymemory.store.objects import ObjectStore

    data = os.urandom(size_bytes)
    kv = ObjectStore(m, min(servers, m.planes * m.sats))
    t = time.perf_counter()
    kv.put(name, data)
    put_s = time.perf_counter() - t
    t = time.perf_counter()
    back, _ = kv.get(hashlib.sha256(name.encode()).digest())
    get_s = time.perf_counter() - t
    return RoundTrip(f"object over {servers} satellites", len(data), put_s, get_s, back == data)


def kv_block_round_trip(m: Manifest, servers: int, index_dir: Path) -> RoundTrip:
    import torch

    from skymemory.kv.format.codec import encode_cache_blocks
    from skymemory.kv.hf.manager import KVCManager
    from skymemory.kv.model.models import load_model
    from skymemory.store.constellation import ConstellationBlockStore

    model, tokenizer = load_model("embedded-tiny", device="cpu", dtype="fp32")
    prompt = [1] + [3 + (i * 7919) % 256 for i in range(KV_BLOCK_TOKENS)]  # one full block and one token more
    with torch.no_grad():
        own = cache_of(model(input_ids=torch.tensor([prompt[:KV_BLOCK_TOKENS]]), use_cache=True))
    expected = encode_cache_blocks(own, KV_BLOCK_TOKENS, 0, 1, "fp32")[0]
    nearest = m.constellation().nearest(min(servers, m.planes * m.sats))
    with ConstellationBlockStore.from_manifest(m, nearest) as store:
        manager = KVCManager(model, tokenizer, store, block_tokens=KV_BLOCK_TOKENS, kv_dtype="fp32", policy="fetch",
                             index_dir=index_dir, strict=True)
        t = time.perf_counter()
        added = manager.add_blocks(prompt)
        put_s = time.perf_counter() - t
        t = time.perf_counter()
        hit = manager.get_cache(prompt)
        get_s = time.perf_counter() - t
        record = manager.find_prefix(prompt).records[0]
        stored = bytes(store.get_block(record))
    tensors_exact = hit.prefix_tokens == KV_BLOCK_TOKENS and all(
        torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values) for a, b in zip(hit.cache.layers, own.layers))
    exact = added.blocks_stored == 1 and stored == expected and tensors_exact
    return RoundTrip(f"KV block ({KV_BLOCK_TOKENS} tokens of embedded-tiny, fp32)", len(expected), put_s, get_s, exact)
