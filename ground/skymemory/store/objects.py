"""General key-value store over the constellation (paper §3.10, last paragraph).

key = SHA-256(name). An object is one block whose chunks are striped over the
N satellites nearest the ground host at put time (skymemory.store; chunk
i on the i mod N-th nearest). What `get` needs to find it again is a small
metadata block (JSON, one chunk) kept on R *home satellites* (default 3,
skymemory.store.object_homes: in different planes, on different hosts where
the constellation has them):

    metadata block hash = SHA-256(b"skymemory/meta\\0" + key)
    metadata = {"v": 1, "name", "key", "size", "sha256", "chunk_bytes", "chunk_count", "servers", "created_ms"}

Requests go up the ground link of the overhead satellite and on over ISL
(`direct=True`: to each satellite's own ground link, the paper's ideal).
So any ground host holding the manifest can get an object by name or key,
without a local index: it asks every home for the metadata at once and takes
the first that answers, then reads the chunks from the listed servers and
checks the object's SHA-256. (Data does not migrate and is not replicated:
the servers are where the object was put; a dead server is a miss.)

Every operation has one deadline (`timeout_s`, the CLI's --timeout): it ends
in time with the data or with a `BlockMiss` that names the satellites that did
not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections import Counter

from skymemory.link.client import SkyMemoryClient
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest
from skymemory.protocol.errors import ChunkNotFound
from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import BlockMiss, BlockRecord
from skymemory.store.object_homes import DEFAULT_REPLICAS, home_satellites

META_PREFIX = b"skymemory/meta\0"
DEFAULT_TIMEOUT_S = 30.0

Sat = tuple[int, int]


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


def meta_hash(key: bytes) -> bytes:
    return hashlib.sha256(META_PREFIX + key).digest()


def _sats(sats) -> str:
    return ", ".join(f"({p}, {s})" for p, s in sats)


class Deadline:
    """One operation's time budget: what is left of it, at least a sliver so a call can still fail cleanly."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.001, self.end - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.end


class KVStore:
    def __init__(self, manifest: Manifest, n_servers: int = 10, client_options: dict | None = None,
                 capture: list[bytes] | None = None, direct: bool = False, *,
                 timeout_s: float = DEFAULT_TIMEOUT_S, replicas: int = DEFAULT_REPLICAS) -> None:
        if not 1 <= n_servers <= manifest.planes * manifest.sats:
            raise ValueError(f"servers must be 1..{manifest.planes * manifest.sats}, got {n_servers}")
        if not timeout_s > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout_s}")
        self.m = manifest
        self.c = manifest.constellation()
        self.n_servers = n_servers
        self.client_options = client_options or {}
        self.timeout_s = timeout_s
        self.replicas = replicas
        self.counters: Counter[str] = Counter()  # client counters summed over every operation
        # when a list: every packet the Python client sends and receives is appended; the C fast
        # path (bulk chunk transfers) bypasses it, its packets are only counted (fastpath_packets_*)
        self.capture = capture
        self.direct = direct  # each satellite over its own ground link, not all through the overhead one

    def homes(self, key: bytes) -> list[Sat]:
        return home_satellites(key, self.m, self.replicas)

    # ---- the chunks: the block store's fast path, within the deadline -------------------------
    @contextlib.contextmanager
    def _store(self, servers, deadline: Deadline):
        extra = {"via": None} if self.direct else {}
        store = ConstellationBlockStore.from_manifest(self.m, servers, client_options=self.client_options,
                                                      request_timeout_s=deadline.left(), **extra)
        store.client.capture = self.capture
        try:
            yield store
        finally:
            store.close()
            self.counters.update(store.client.counters)
            fast = store.last_transfer  # each operation here makes at most one fast-path call
            if fast is not None:
                self.counters.update({"fastpath_packets_tx": fast.packets_tx, "fastpath_packets_rx": fast.packets_rx})

    # ---- the metadata: one chunk on every home, asked all at once ------------------------------
    def _client(self) -> SkyMemoryClient:
        c = self.c
        via = None if self.direct else (lambda _dst: c.overhead())
        options = {"timeout": 0.5, "retries": 1000, **self.client_options}  # the deadline, not a count, ends it
        client = SkyMemoryClient(self.m.ground_addresses(), via=via, mission_ms=c.mission_ms,
                                 bind=(self.m.ground_host, 0), **{"signer": signer_for_manifest(self.m), **options})
        client.capture = self.capture
        return client

    async def _each_home(self, homes: list[Sat], ask, deadline: Deadline, first_wins: bool) -> dict:
        """Run ask(client, home) for every home at once until the deadline; returns home -> result, or the
        exception it ended with (TimeoutError: no answer). first_wins: stop at the first success;
        otherwise, once one home succeeded, the others get a grace of a few times that (at least 1 s)
        instead of the whole deadline, so one dead home does not hold the operation up."""
        async with self._client() as client:
            tasks = {asyncio.ensure_future(ask(client, h)): h for h in homes}
            outcome: dict = {}
            pending = set(tasks)
            start = time.monotonic()
            end = deadline.end
            try:
                while pending:
                    done, pending = await asyncio.wait(pending, timeout=max(0.001, end - time.monotonic()),
                                                       return_when=asyncio.FIRST_COMPLETED)
                    if not done:
                        break
                    for t in done:
                        outcome[tasks[t]] = t.exception() or t.result()
                    if any(not isinstance(v, BaseException) for v in outcome.values()):
                        if first_wins:
                            break
                        end = min(end, time.monotonic() + max(1.0, 4 * (time.monotonic() - start)))
            finally:
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                self.counters.update(client.counters)
        for h in homes:
            outcome.setdefault(h, TimeoutError(f"{h} did not answer"))
        return outcome

    def put(self, name: str, data: bytes) -> dict:
        """Store `data` under `name`; the metadata goes to every home. Raises (SkyMemoryError, BlockMiss,
        ValueError) when the chunks or every copy of the metadata could not be stored in time; meta
        ["homes_failed"] lists the homes that did not take their copy."""
        deadline = Deadline(self.timeout_s)
        key = key_of(name)
        servers = self.c.nearest(self.n_servers, self.c.mission_ms())
        with self._store(servers, deadline) as store:
            rec = store.put_block(key, data)
        meta = {"v": 1, "name": name, "key": key.hex(), "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                "chunk_bytes": rec.chunk_bytes, "chunk_count": rec.chunk_count, "servers": [list(s) for s in servers],
                "created_ms": rec.created_ms}
        blob = json.dumps(meta, separators=(",", ":")).encode()
        if len(blob) > self.m.chunk_size:
            raise ValueError(f"metadata of {len(blob)} bytes does not fit one {self.m.chunk_size}-byte chunk")
        homes = self.homes(key)

        async def store_copy(client: SkyMemoryClient, home: Sat) -> None:
            await client.set_chunk(home, meta_hash(key), 0, 1, blob, created_ms=rec.created_ms)

        outcome = asyncio.run(self._each_home(homes, store_copy, deadline, first_wins=False))
        stored = [h for h in homes if not isinstance(outcome[h], BaseException)]
        failed = [h for h in homes if h not in stored]
        if not stored:
            raise BlockMiss("timeout", f"the metadata could not be stored on any of its home satellites "
                            f"{_sats(homes)} within {self.timeout_s:g} s")
        meta["homes"] = [list(h) for h in stored]
        meta["homes_failed"] = [list(h) for h in failed]
        return meta

    def meta(self, key: bytes, deadline: Deadline | None = None) -> dict:
        """The object's metadata from the first home that has it; BlockMiss naming the homes otherwise."""
        deadline = deadline or Deadline(self.timeout_s)
        homes = self.homes(key)
        want = meta_hash(key)

        async def read_copy(client: SkyMemoryClient, home: Sat) -> dict:
            blob = await client.get_chunk(home, want, 0)
            meta = json.loads(blob)
            if meta.get("v") != 1 or meta.get("key") != key.hex():
                raise BlockMiss("bad-metadata", f"the metadata at {home} does not describe this key")
            return meta

        outcome = asyncio.run(self._each_home(homes, read_copy, deadline, first_wins=True))
        for h in homes:
            if isinstance(outcome[h], dict):
                meta = outcome[h]
                meta["homes"] = [list(x) for x in homes]
                meta["answered_by"] = list(h)
                return meta
        silent = [h for h in homes if isinstance(outcome[h], TimeoutError)]  # RequestTimeout is one too
        without = [h for h in homes if isinstance(outcome[h], ChunkNotFound)]
        other = [h for h in homes if h not in silent and h not in without]
        if not silent and not other:
            raise BlockMiss("not-found", f"no object with key {key.hex()}: none of its home satellites "
                            f"{_sats(homes)} holds its metadata")
        parts = []
        if silent:
            parts.append(f"{_sats(silent)} did not answer within {deadline.seconds:g} s")
        if without:
            parts.append(f"{_sats(without)} do not hold it")
        parts += [f"{h}: {outcome[h]}" for h in other]
        raise BlockMiss("unreachable" if silent else "bad-metadata",
                        f"the metadata of key {key.hex()[:16]}... could not be read from its home satellites: "
                        + "; ".join(parts))

    def get(self, key: bytes) -> tuple[bytes, dict]:
        deadline = Deadline(self.timeout_s)
        meta = self.meta(key, deadline)
        servers = [tuple(s) for s in meta["servers"]]
        rec = BlockRecord(key, meta["size"], meta["chunk_bytes"], meta["chunk_count"], meta["created_ms"],
                          "explicit", len(servers), servers[0])
        with self._store(servers, deadline) as store:
            try:
                data = store.get_block(rec)
            except BlockMiss as exc:
                if deadline.passed():
                    raise BlockMiss("timeout", f"the object's chunks did not all arrive from {_sats(servers)} "
                                    f"within {self.timeout_s:g} s ({exc})") from None
                raise
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise BlockMiss("checksum", "object SHA-256 does not match its metadata")
        return data, meta
