"""General key-value store over the constellation (paper §3.10, last paragraph).

key = SHA-256(name). An object is one block whose chunks are striped over the
N satellites nearest the ground host at put time (skymemory.store; chunk
i on the i mod N-th nearest). What `get` needs to find it again is a small
metadata block (JSON, one chunk) stored at the key's *home satellite*:

    home index = first 4 bytes of the key (big-endian) mod (planes x sats)
    metadata block hash = SHA-256(b"skymemory/meta\\0" + key)
    metadata = {"v": 1, "name", "size", "sha256", "chunk_bytes", "servers", "created_ms"}

Requests go up the ground link of the overhead satellite and on over ISL
(`direct=True`: to each satellite's own ground link, the paper's ideal).
So any ground host holding the manifest can get an object by name or key,
without a local index: it reads the metadata from the home satellite, then
the chunks from the listed servers, and checks the object's SHA-256.
(Data does not migrate: the servers are where the object was put.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import Counter

from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import BlockMiss, BlockRecord

META_PREFIX = b"skymemory/meta\0"


def key_of(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def parse_key(text: str) -> bytes:
    """A 64-hex-digit key as is; anything else is a name and is hashed."""
    if len(text) == 64:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    return key_of(text)


def home_satellite(key: bytes, planes: int, sats: int) -> tuple[int, int]:
    i = int.from_bytes(key[:4], "big") % (planes * sats)
    return divmod(i, sats)


def meta_hash(key: bytes) -> bytes:
    return hashlib.sha256(META_PREFIX + key).digest()


class KVStore:
    def __init__(self, manifest: Manifest, n_servers: int = 10, client_options: dict | None = None,
                 capture: list[bytes] | None = None, direct: bool = False) -> None:
        if not 1 <= n_servers <= manifest.planes * manifest.sats:
            raise ValueError(f"servers must be 1..{manifest.planes * manifest.sats}, got {n_servers}")
        self.m = manifest
        self.c = manifest.constellation()
        self.n_servers = n_servers
        self.client_options = client_options or {}
        self.counters: Counter[str] = Counter()  # client counters summed over every operation
        # when a list: every packet the Python client sends and receives is appended; the C fast
        # path (bulk chunk transfers) bypasses it, its packets are only counted (fastpath_packets_*)
        self.capture = capture
        self.direct = direct  # each satellite over its own ground link, not all through the overhead one

    @contextlib.contextmanager
    def _store(self, servers):
        extra = {"via": None} if self.direct else {}
        store = ConstellationBlockStore.from_manifest(self.m, servers, client_options=self.client_options, **extra)
        store.client.capture = self.capture
        try:
            yield store
        finally:
            store.close()
            self.counters.update(store.client.counters)
            fast = store.last_transfer  # each operation here makes at most one fast-path call
            if fast is not None:
                self.counters.update({"fastpath_packets_tx": fast.packets_tx, "fastpath_packets_rx": fast.packets_rx})

    def put(self, name: str, data: bytes) -> dict:
        key = key_of(name)
        now = self.c.mission_ms()
        servers = self.c.nearest(self.n_servers, now)
        with self._store(servers) as store:
            rec = store.put_block(key, data)
        meta = {"v": 1, "name": name, "key": key.hex(), "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                "chunk_bytes": rec.chunk_bytes, "chunk_count": rec.chunk_count, "servers": [list(s) for s in servers],
                "created_ms": rec.created_ms}
        blob = json.dumps(meta, separators=(",", ":")).encode()
        if len(blob) > self.m.chunk_size:
            raise ValueError(f"metadata of {len(blob)} bytes does not fit one {self.m.chunk_size}-byte chunk")
        home = home_satellite(key, self.m.planes, self.m.sats)
        with self._store([home]) as store:
            store.put_block(meta_hash(key), blob)
        meta["home"] = list(home)
        return meta

    def meta(self, key: bytes) -> dict:
        home = home_satellite(key, self.m.planes, self.m.sats)
        with self._store([home]) as store:
            rec = store.probe_block(meta_hash(key))
            if rec is None:
                raise BlockMiss("not-found", f"no object with key {key.hex()} (metadata not at home satellite {home})")
            blob = store.get_block(rec)
        meta = json.loads(blob)
        if meta.get("v") != 1 or meta.get("key") != key.hex():
            raise BlockMiss("bad-metadata", "metadata block does not describe this key")
        meta["home"] = list(home)
        return meta

    def get(self, key: bytes) -> tuple[bytes, dict]:
        meta = self.meta(key)
        servers = [tuple(s) for s in meta["servers"]]
        rec = BlockRecord(key, meta["size"], meta["chunk_bytes"], meta["chunk_count"], meta["created_ms"],
                          "explicit", len(servers), servers[0])
        with self._store(servers) as store:
            data = store.get_block(rec)
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise BlockMiss("checksum", "object SHA-256 does not match its metadata")
        return data, meta
