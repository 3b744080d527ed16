"""`ObjectStore`: named objects of any size over the constellation (the paper's key-value store, §3.10).

key = SHA-256(name). An object is one block whose chunks are striped over the
N satellites nearest the ground host at put time (skymemory.store; chunk
i on the i mod N-th nearest). What `get` needs to find it again is a small
metadata block (JSON, one chunk) kept on R *home satellites* (default 3,
skymemory.store.object_homes: in different planes, on different hosts where
the constellation has them):

    metadata block hash = SHA-256(b"skymemory/meta\\0" + key)
    metadata = {"v": 1, "name", "key", "size", "sha256", "chunk_bytes", "chunk_count", "servers", "created_ms"}

Requests take the route asked for (skymemory.store.routes: direct, relay, or auto, the
default: each satellite's own ground link where the manifest gives it one, else up through
the overhead satellite and on over ISL). So any ground host holding the manifest can get
an object by name or key, without a local index: it asks every home for the metadata at once and takes
the first that answers, then reads the chunks from the listed servers and
checks the object's SHA-256. (Data does not migrate and is not replicated:
the servers are where the object was put; a dead server is a miss.)

Every operation has one deadline (`timeout_s`, the CLI's --timeout): it ends
in time with the data or with a `BlockMiss` that names the satellites that did
not answer. A put that fails evicts what it stored (`PutFailed` says how much),
keeping a slice of the deadline for that. Chunks move no faster than the link
carries them (the manifest's emulated bandwidth, or `pace_mbps`).

`ObjectStore` used to be called `KVStore` ("KV" means the KV cache everywhere
else); the old name still imports, with a DeprecationWarning, for one more release.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import threading
import time
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from skymemory.link.client import SkyMemoryClient
from skymemory.link.fastpath import NOT_FOUND
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest
from skymemory.protocol.errors import ChunkNotFound, SkyMemoryError
from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.contract import BlockMiss, BlockRecord
from skymemory.store.object_homes import DEFAULT_REPLICAS, home_satellites
from skymemory.store.progress import watch
from skymemory.store.routes import DEFAULT_ROUTE, check_route, uplinks, via_for_route

META_PREFIX = b"skymemory/meta\0"
DEFAULT_TIMEOUT_S = 30.0
RTO_S = 0.2  # the fast path resends what is unanswered after this long; the deadline, not a count, ends it
CLEANUP_SHARE = 0.25  # of a put's deadline kept for evicting what a failed put stored (at most CLEANUP_MAX_S)
CLEANUP_MAX_S = 1.0
# Paced at the link's rate, a put or get keeps the emulated link's queue (a token bucket of 64 KiB, then a
# queue) short. Unpaced, a burst of megabytes waits in that queue: everything after the bucket's depth is
# delayed past the resend timer, the resends queue behind it too, and chunks are given up while the link
# is still busy carrying their first copies. The pace is a little under the rate because the link also
# carries each chunk's headers and the requests and acknowledgements.
PACE_SHARE = 0.9

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


class PutFailed(SkyMemoryError):
    """A put that did not complete; what it had stored was evicted (`evicted` chunks from `satellites`;
    `not_evicted` names the satellites that could not be reached for that)."""

    def __init__(self, cause: BaseException, evicted: int, satellites: int, not_evicted: list[str]) -> None:
        self.cause, self.evicted, self.satellites, self.not_evicted = cause, evicted, satellites, not_evicted
        text = f"put failed: {cause}; evicted {evicted} chunks from {satellites} satellites"
        if not_evicted:
            text += f" (could not evict at {'; '.join(not_evicted)})"
        super().__init__(text)


class ObjectStore:
    """Named objects (`put(name, data)`, `get(key)`) striped over the satellites nearest at put time."""

    def __init__(self, manifest: Manifest, n_servers: int = 10, client_options: dict | None = None,
                 capture: list[bytes] | None = None, *, route: str = DEFAULT_ROUTE,
                 timeout_s: float = DEFAULT_TIMEOUT_S, replicas: int = DEFAULT_REPLICAS,
                 pace_mbps: float | None = None, say: Callable[[str], None] | None = None) -> None:
        """`pace_mbps`: each ground link's rate in Mbit/s (None: the manifest's emulated bandwidth, if any;
        0: unpaced). `say`: where progress and the reasons of failures go (the CLI's -v), or None."""
        if not 1 <= n_servers <= manifest.planes * manifest.sats:
            raise ValueError(f"servers must be 1..{manifest.planes * manifest.sats}, got {n_servers}")
        if not timeout_s > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout_s}")
        if pace_mbps is not None and not pace_mbps >= 0:
            raise ValueError(f"pace must be >= 0 Mbit/s, got {pace_mbps}")
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
        self.route = check_route(route)
        self.link_mbps = float(manifest.link.get("bandwidth_mbps") or 0) if pace_mbps is None else pace_mbps
        self.say = say

    def homes(self, key: bytes) -> list[Sat]:
        return home_satellites(key, self.m, self.replicas)

    def pace_Bps(self, servers) -> float:
        """Chunk bytes per second a transfer with `servers` may send: PACE_SHARE of the rate of every
        ground link it uses (0: unpaced, when the links have no set rate)."""
        if not self.link_mbps:
            return 0.0
        return PACE_SHARE * self.link_mbps * 1e6 / 8 * len(uplinks(self.route, self.m, servers))

    def _tell(self, text: str) -> None:
        if self.say is not None:
            self.say(text)

    # ---- the chunks: the block store's fast path, within the deadline -------------------------
    @contextlib.contextmanager
    def _store(self, servers, deadline: Deadline):
        left = deadline.left()
        # as many resends as fit in the deadline: a busy link must not run a fixed count out early
        fast = {"rto_s": RTO_S, "retries": min(1000, math.ceil(left / RTO_S) + 1)}
        store = ConstellationBlockStore.from_manifest(self.m, servers, route=self.route,
                                                      client_options=self.client_options, request_timeout_s=left,
                                                      fast_options=fast, pace_Bps=self.pace_Bps(servers))
        store.client.capture = self.capture
        try:
            yield store
        finally:
            store.close()
            self.counters.update(store.client.counters)
            fast = store.last_transfer  # each operation here makes at most one fast-path call
            if fast is not None:
                self.counters.update({"fastpath_packets_tx": fast.packets_tx, "fastpath_packets_rx": fast.packets_rx,
                                      "fastpath_replayed": fast.replayed, "fastpath_wrong_source": fast.wrong_source})

    # ---- the metadata: one chunk on every home, asked all at once ------------------------------
    def _client(self) -> SkyMemoryClient:
        c = self.c
        via = via_for_route(self.route, self.m)
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
        """Store `data` under `name`; the metadata goes to every home. When the chunks or every copy of the
        metadata could not be stored in time, what was stored is evicted and PutFailed says why and how
        much; meta["homes_failed"] lists the homes that did not take their copy."""
        start = time.monotonic()
        reserve = min(CLEANUP_MAX_S, CLEANUP_SHARE * self.timeout_s)
        work = Deadline(self.timeout_s - reserve)  # the rest is kept for the cleanup
        key = key_of(name)
        servers = self.c.nearest(self.n_servers, self.c.mission_ms())
        homes = self.homes(key)
        pace = self.pace_Bps(servers)
        self._tell(f"put: {len(data)} bytes to {len(servers)} satellites, route {self.route} "
                   f"(up {len(uplinks(self.route, self.m, servers))} ground links), "
                   + (f"paced to {pace / 1e6:.2f} MB/s" if pace else "unpaced") + f", deadline {self.timeout_s:g} s")
        try:
            return self._put(name, key, data, servers, homes, work)
        except (SkyMemoryError, BlockMiss, OSError, ValueError) as exc:
            self._tell(f"put: failed after {time.monotonic() - start:.2f} s: {exc}")
            cleanup = Deadline(self.timeout_s - (time.monotonic() - start))
            raise self._clean_up(key, servers, homes, exc, cleanup) from exc

    def _put(self, name: str, key: bytes, data: bytes, servers: list[Sat], homes: list[Sat], work: Deadline) -> dict:
        # the object's SHA-256 (for the metadata) is computed while the chunks travel: hashlib and the C
        # fast path both release the GIL, and on 100 MB the hash alone takes about as long as the transfer
        with ThreadPoolExecutor(1, thread_name_prefix="skymemory-sha256") as pool:
            digest = pool.submit(lambda: hashlib.sha256(data).hexdigest())
            with self._store(servers, work) as store, watch(store, "put", "acknowledged", self.say):
                rec = store.put_block(key, data)
            sha256 = digest.result()
        stats = store.last_transfer
        if stats is not None:
            self._tell(f"put: chunks stored ({stats.packets_tx} packets sent, {stats.retransmits} resends)")
        meta = {"v": 1, "name": name, "key": key.hex(), "size": len(data), "sha256": sha256,
                "chunk_bytes": rec.chunk_bytes, "chunk_count": rec.chunk_count, "servers": [list(s) for s in servers],
                "created_ms": rec.created_ms}
        blob = json.dumps(meta, separators=(",", ":")).encode()
        if len(blob) > self.m.chunk_size:
            raise ValueError(f"metadata of {len(blob)} bytes does not fit one {self.m.chunk_size}-byte chunk")

        async def store_copy(client: SkyMemoryClient, home: Sat) -> None:
            await client.set_chunk(home, meta_hash(key), 0, 1, blob, created_ms=rec.created_ms)

        outcome = asyncio.run(self._each_home(homes, store_copy, work, first_wins=False))
        stored = [h for h in homes if not isinstance(outcome[h], BaseException)]
        failed = [h for h in homes if h not in stored]
        for h in failed:
            self._tell(f"put: home {h} did not take the metadata: {outcome[h]}")
        if not stored:
            raise BlockMiss("timeout", f"the metadata could not be stored on any of its home satellites "
                            f"{_sats(homes)} within {self.timeout_s:g} s")
        meta["homes"] = [list(h) for h in stored]
        meta["homes_failed"] = [list(h) for h in failed]
        return meta

    def _clean_up(self, key: bytes, servers: list[Sat], homes: list[Sat], cause: BaseException,
                  deadline: Deadline) -> PutFailed:
        """Evict the object's chunks from its servers and its metadata from its homes, by `deadline`."""
        block, meta_block = key, meta_hash(key)

        async def evict(client: SkyMemoryClient, sat: Sat) -> int:
            purged = 0
            if sat in servers:
                purged += await client.evict_block(sat, block)
            if sat in homes:
                purged += await client.evict_block(sat, meta_block)
            return purged

        sats = list(dict.fromkeys([*servers, *homes]))
        outcome = asyncio.run(self._each_home(sats, evict, deadline, first_wins=False))
        purged = {s: n for s, n in outcome.items() if not isinstance(n, BaseException)}
        not_evicted = [f"{s}: {outcome[s]}" for s in sats if s not in purged]
        failed = PutFailed(cause, sum(purged.values()), sum(1 for n in purged.values() if n), not_evicted)
        self._tell(f"put: cleanup: {failed.evicted} chunks evicted from {failed.satellites} satellites"
                   + (f"; not evicted at {', '.join(not_evicted)}" if not_evicted else ""))
        return failed

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
        pace = self.pace_Bps(servers)
        self._tell(f"get: {meta['size']} bytes from {len(servers)} satellites (metadata from "
                   f"{tuple(meta['answered_by'])}), route {self.route}, "
                   + (f"paced to {pace / 1e6:.2f} MB/s" if pace else "unpaced")
                   + f", {deadline.left():.2f} s of the deadline left")
        with self._store(servers, deadline) as store, watch(store, "get", "received", self.say):
            try:
                data, sha256 = _fetch_hashing(store, rec)
            except BlockMiss as exc:
                stats = store.last_transfer
                if stats is not None:
                    self._tell(f"get: fast path ended {stats.outcome}: {stats.packets_rx} packets received, "
                               f"{stats.retransmits} re-requests, {stats.crc_failures} failed CRC32C, "
                               f"{stats.auth_failures} failed authentication")
                if deadline.passed():
                    raise BlockMiss("timeout", f"the object's chunks did not all arrive from {_sats(servers)} "
                                    f"within {self.timeout_s:g} s ({exc})") from None
                if exc.reason == "chunks-missing":  # the object is stored; some of its chunks are gone
                    raise BlockMiss(exc.reason, f"{meta['name']!r} is stored (metadata from "
                                    f"{tuple(meta['answered_by'])}) but {exc}") from None
                raise
        if sha256 != meta["sha256"]:
            raise BlockMiss("checksum", "object SHA-256 does not match its metadata")
        return data, meta


def _fetch_hashing(store: ConstellationBlockStore, rec: BlockRecord) -> tuple[bytearray, str]:
    """The block and its SHA-256, hashed as it lands: a thread hashes the chunks received contiguously
    from chunk 0 (the C path publishes that count) while the rest arrive, so on 100 MB the hash, about
    as long as the transfer, mostly overlaps it. Raises BlockMiss like get_block."""
    job = store.block_jobs([rec])[0]
    prefix = np.zeros(1, dtype=np.uint32)
    view = memoryview(job.buf)
    sha = hashlib.sha256()
    landed, failed = threading.Event(), threading.Event()

    def hash_prefix() -> None:
        done = 0
        while not failed.is_set():  # a failed transfer's bytes are not worth hashing
            last_look = landed.is_set()
            upto = min(int(prefix[0]) * job.chunk_bytes, job.n_bytes)
            if upto > done:
                sha.update(view[done:upto])  # releases the GIL
                done = upto
            elif last_look:
                return
            else:
                time.sleep(0.002)

    hasher = threading.Thread(target=hash_prefix, name="skymemory-sha256")
    hasher.start()
    try:
        store.fetch_jobs([job], prefix=prefix, **store.get_pacing())
    except BlockMiss as exc:
        failed.set()
        if exc.reason != "not-found" or job.status is None:
            raise
        # which satellites no longer hold their chunks (chunk i was on servers[i % n]): a user can look there
        gone = np.flatnonzero(job.status == NOT_FOUND)
        lost_on = sorted({tuple(job.servers[i % len(job.servers)]) for i in gone})
        raise BlockMiss("chunks-missing", f"{exc}, held by {_sats(lost_on)}") from None
    except BaseException:
        failed.set()
        raise
    finally:
        landed.set()
        hasher.join()
    return job.buf, sha.hexdigest()


def __getattr__(name: str):
    if name == "KVStore":  # the old name, kept for one release
        warnings.warn("skymemory.store.objects.KVStore is now ObjectStore; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        return ObjectStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
