"""`ObjectStore`: named objects of any size over the constellation (the paper's key-value store, §3.10).

key = SHA-256(name). An object's data is one block whose chunks are striped over the
N satellites nearest the ground host at put time (skymemory.store; chunk
i on the i mod N-th nearest). What `get` needs to find it again is a small
metadata block (JSON, one chunk) kept on R *home satellites* (default 3,
skymemory.store.object_homes: in different planes, on different hosts where
the constellation has them).

Sealed (the default; skymemory.protocol.seal): every chunk a satellite keeps, the data's and the
metadata's, is AES-128-GCM ciphertext under the ground's content key (the manifest's
content_key_file, default tenant), so a satellite can neither read, alter nor swap them:

    metadata block hash = SHA-256(b"skymemory/meta\\0" + key)
    metadata = seal(chunk 0 of 1 of the metadata block,
                    {"v": 2, "name", "key", "version", "size", "sha256", "chunk_bytes", "chunk_count",
                     "parity", "servers", "created_ms"})
    data block hash = SHA-256(b"skymemory/object-data\\0" + key + version)

The metadata chunk's associated data binds the metadata block hash, hence the key. `version` is 16
random bytes (hex) drawn by each put; the data chunks' associated data binds the data block hash,
hence name and version: the data of another object, or of an earlier put of this name, never opens
as this one. `delete` replaces the metadata with a sealed tombstone {"v": 2, "name", "key", "deleted": true,
"created_ms"} and evicts the data. `chunk_bytes` is a chunk's size on the wire and `chunk_count` the sealed layout's
(ceil(size / (chunk_bytes - 32))). A put of a name already stored writes a new version and then
evicts the old version's data (best effort: when the old metadata could be read). A get asks every
home at once and takes the newest copy that opens among those that answer (a copy that does not
open is never used; another home's may be); when none opens, or a data chunk does not open, it is
a `BlockMiss("seal")` in one line naming the satellites, and nothing of the object is returned. The
object's SHA-256 is still checked, as an extra: the seal is what proves the bytes are the ground's.
What sealing cannot do: make a satellite answer (it can drop or delay), or tell an older genuine
copy of the metadata from the newest by itself. Freshness does that (skymemory.store.object_versions):
every version written or read here is noted, per key, in a ledger beside the content key file, and a
get whose newest copy is older than the ledger's is a `BlockMiss("stale")`, a deleted name's older copy
a `BlockMiss("deleted")`, each in one line naming the home.

Unsealed (`seal=False`, the CLI's --no-seal: for benchmarks that compare), as before sealing:

    metadata = {"v": 1, "name", "key", "size", "sha256", "chunk_bytes", "chunk_count", "servers", "created_ms"}

in the clear, the data block hash is the key, and the SHA-256 checked lives in metadata the
satellites hold (no defence against one that rewrites both). A sealed get refuses "v": 1 metadata
in one line ("stored before sealing; put it again"); an unsealed get refuses sealed metadata.

Requests take the route asked for (skymemory.store.routes: direct, relay, or auto, the
default: each satellite's own ground link where the manifest gives it one, else up through
the overhead satellite and on over ISL). So any ground host holding the manifest (and, sealed,
the content key file) can get an object by name or key, without a local index. (Data does not
migrate: the servers are where the object was put.) The data is stored in coded stripes (`parity`,
skymemory.protocol.stripes; default DEFAULT_PARITY = 2): stripes of k = N - parity data chunks and
`parity` parity chunks, each chunk of a stripe on a satellite of its own, so a get rebuilds what up
to `parity` dead, emptied or lying satellites no longer give ("parity" in the metadata; absent: 0).

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
import os
import threading
import time
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

import numpy as np

from skymemory.link.client import SkyMemoryClient
from skymemory.link.fastpath import NOT_FOUND, SEAL_OVERHEAD
from skymemory.protocol.seal_layout import ONE_CHUNK
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest
from skymemory.protocol.errors import ChunkNotFound, SkyMemoryError
from skymemory.protocol.stripes import MAX_STRIPE_CHUNKS
from skymemory.store.constellation import ConstellationBlockStore, check_parity, default_parity, stripe_width
from skymemory.store.contract import BlockMiss, BlockRecord
from skymemory.store.object_homes import DEFAULT_REPLICAS, home_satellites
from skymemory.store.object_versions import Seen, VersionLedger
from skymemory.store.progress import watch
from skymemory.store.routes import DEFAULT_ROUTE, check_route, uplinks, via_for_route

if TYPE_CHECKING:  # seal.py needs `cryptography`
    from skymemory.protocol.seal import Sealer

META_PREFIX = b"skymemory/meta\0"
DATA_PREFIX = b"skymemory/object-data\0"
META_VERSION = 2  # sealed metadata, versioned data
PLAIN_META_VERSION = 1  # in the clear (--no-seal, and everything stored before sealing)
VERSION_BYTES = 16
DEFAULT_TIMEOUT_S = 30.0
RTO_S = 0.2  # the fast path resends what is unanswered after this long; the deadline, not a count, ends it
ALIVE_WAIT_S = 0.3  # a repair's wait for a satellite's NOOP (three tries) before it counts it dead
# what a put writes in the metadata (a repair writes them again, with the servers it moved chunks to)
META_FIELDS = ("v", "name", "key", "version", "size", "sha256", "chunk_bytes", "chunk_count", "parity", "servers",
               "created_ms")
CLEANUP_SHARE = 0.25  # of a put's deadline kept for evicting what a failed put stored (at most CLEANUP_MAX_S)
CLEANUP_MAX_S = 1.0
# Once one home's copy of the metadata opened, how long a get waits for the other homes' (for the newest
# copy: a home that answers with an older genuine copy is outvoted by any other that answers in time)
READ_GRACE_S = 0.25
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


def data_hash(key: bytes, version: bytes) -> bytes:
    """The block hash of one version of an object's data (sealed objects; an unsealed one's is its key)."""
    return hashlib.sha256(DATA_PREFIX + key + version).digest()


def data_block_of(key: bytes, meta: dict) -> bytes:
    """Where the data of the object `meta` describes is stored: its version's block, or the key ("v": 1)."""
    if meta.get("v") == PLAIN_META_VERSION:
        return key
    return data_hash(key, bytes.fromhex(meta["version"]))


def _sats(sats) -> str:
    return ", ".join(f"({p}, {s})" for p, s in sats)


def _json(blob: bytes) -> dict | None:
    try:
        meta = json.loads(blob)
    except (ValueError, UnicodeDecodeError):
        return None
    return meta if isinstance(meta, dict) else None


def _well_formed(meta: dict | None, key: bytes, v: int) -> bool:
    """Metadata of version `v` for `key` with the fields a get uses, of the right types (a sealed tombstone:
    its name and when the name was deleted)."""
    if meta is None or meta.get("v") != v or meta.get("key") != key.hex():
        return False
    if v == META_VERSION and meta.get("deleted") is True:
        created = meta.get("created_ms")
        return isinstance(meta.get("name"), str) and isinstance(created, int) and not isinstance(created, bool) \
            and created >= 0
    ints = ("size", "chunk_bytes", "chunk_count", "created_ms")
    if not all(isinstance(meta.get(f), int) and not isinstance(meta.get(f), bool) and meta[f] >= 0 for f in ints):
        return False
    servers = meta.get("servers")
    if not isinstance(servers, list) or not servers or not all(
            isinstance(s, list) and len(s) == 2 and all(isinstance(x, int) for x in s) for s in servers):
        return False
    repaired = meta.get("repaired_ms", 0)  # when a repair moved chunks (absent: never)
    if not isinstance(repaired, int) or isinstance(repaired, bool) or repaired < 0:
        return False
    parity = meta.get("parity", 0)  # coded stripes' m (metadata from before them has none: 0)
    if not isinstance(parity, int) or isinstance(parity, bool) or not 0 <= parity < min(len(servers),
                                                                                         MAX_STRIPE_CHUNKS):
        return False
    if v == META_VERSION:
        version = meta.get("version")
        if not isinstance(version, str) or len(version) != 2 * VERSION_BYTES:
            return False
        try:
            bytes.fromhex(version)
        except ValueError:
            return False
    return isinstance(meta.get("name"), str) and isinstance(meta.get("sha256"), str)


def open_metadata(key: bytes, blob: bytes, sealer: "Sealer | None", home: Sat) -> dict:
    """The metadata held at `home` for `key`, as stored (its "v" says sealed or not); BlockMiss otherwise:
    "seal" (sealed, and it does not open: altered, or not this key's), "sealed" (sealed, and no sealer to open
    it with: --no-seal), "bad-metadata" (in the clear, and not metadata of this key)."""
    blob = bytes(blob)
    if blob[:1] == b"{":  # JSON in the clear; a sealed chunk starts with its key id (u32, big-endian)
        meta = _json(blob)
        if _well_formed(meta, key, PLAIN_META_VERSION):
            return meta
        if sealer is not None:  # nothing but a "v": 1 copy is ever in the clear: this is not the ground's
            raise BlockMiss("seal", f"the metadata at {home} is not sealed and not an object's from before "
                            "sealing")
        raise BlockMiss("bad-metadata", f"the metadata at {home} does not describe this key")
    if sealer is None:
        raise BlockMiss("sealed", f"the metadata at {home} is sealed")
    from skymemory.protocol.seal import SealError

    try:
        plain = sealer.open_chunk(meta_hash(key), 0, 1, max(0, len(blob) - SEAL_OVERHEAD), blob, layout=ONE_CHUNK)
    except SealError as exc:
        miss = BlockMiss("seal", f"the metadata at {home} does not open ({exc})")
        miss.retired_key = str(exc).startswith("sealed under key id")  # not altered: a key this ground lacks
        raise miss from None
    meta = _json(plain)
    if not _well_formed(meta, key, META_VERSION):  # sealed by the ground, so this is a bug, not an attack
        raise BlockMiss("bad-metadata", f"the metadata at {home} opens but does not describe this key")
    return meta


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
                 pace_mbps: float | None = None, say: Callable[[str], None] | None = None,
                 seal: bool = True, parity: int | None = None, versions: VersionLedger | None = None) -> None:
        """`pace_mbps`: each ground link's rate in Mbit/s (None: the manifest's emulated bandwidth, if any;
        0: unpaced). `say`: where progress and the reasons of failures go (the CLI's -v), or None.
        `seal`: data and metadata sealed under the manifest's content keys (False: in the clear, "v": 1, as
        before sealing; for benchmarks that compare). `parity`: parity chunks per coded stripe of the data
        (skymemory.protocol.stripes; None: DEFAULT_PARITY, fewer when too few satellites; 0: none). `versions`:
        the newest version of each object this ground has seen (sealed only; None: the ledger beside the
        manifest's content key file, shared by every process of this ground host)."""
        n_servers = stripe_width(n_servers, manifest.planes * manifest.sats, say)
        parity = default_parity(n_servers) if parity is None else parity
        self.parity = check_parity(parity, n_servers, say)
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
        self.seal = seal
        if versions is None and seal and manifest.content_key_file:
            versions = VersionLedger.beside(manifest.content_key_file)
        self.versions = versions if seal else None
        self.counters: Counter[str] = Counter()  # client counters summed over every operation
        self._counters_lock = threading.Lock()  # a put reads the old metadata on a thread of its own
        # when a list: every packet the Python client sends and receives is appended; the C fast
        # path (bulk chunk transfers) bypasses it, its packets are only counted (fastpath_packets_*)
        self.capture = capture
        self.route = check_route(route)
        self.link_mbps = float(manifest.link.get("bandwidth_mbps") or 0) if pace_mbps is None else pace_mbps
        self.say = say

    def homes(self, key: bytes) -> list[Sat]:
        return home_satellites(key, self.m, self.replicas)

    def sealer(self) -> "Sealer | None":
        """The sealer of this store's objects (None with seal=False); KeyFileError, in one line, when the
        manifest names no content key file or it cannot be read."""
        if not self.seal:
            return None
        from skymemory.protocol.seal import sealer_for_manifest

        return sealer_for_manifest(self.m, seal=True)

    def pace_Bps(self, servers) -> float:
        """Chunk bytes per second a transfer with `servers` may send: PACE_SHARE of the rate of every
        ground link it uses (0: unpaced, when the links have no set rate)."""
        if not self.link_mbps:
            return 0.0
        return PACE_SHARE * self.link_mbps * 1e6 / 8 * len(uplinks(self.route, self.m, servers))

    def _tell(self, text: str) -> None:
        if self.say is not None:
            self.say(text)

    def _count(self, counters) -> None:
        with self._counters_lock:
            self.counters.update(counters)

    # ---- the chunks: the block store's fast path, within the deadline -------------------------
    @contextlib.contextmanager
    def _store(self, servers, deadline: Deadline, parity: int = 0):
        left = deadline.left()
        # as many resends as fit in the deadline: a busy link must not run a fixed count out early
        fast = {"rto_s": RTO_S, "retries": min(1000, math.ceil(left / RTO_S) + 1)}
        store = ConstellationBlockStore.from_manifest(self.m, servers, route=self.route, seal=self.seal,
                                                      client_options=self.client_options, request_timeout_s=left,
                                                      fast_options=fast, pace_Bps=self.pace_Bps(servers),
                                                      parity=parity)
        store.client.capture = self.capture
        try:
            yield store
        finally:
            store.close()
            self._count(store.client.counters)
            fast = store.last_transfer  # each operation here makes at most one fast-path call
            if fast is not None:
                self._count({"fastpath_packets_tx": fast.packets_tx, "fastpath_packets_rx": fast.packets_rx,
                             "fastpath_replayed": fast.replayed, "fastpath_wrong_source": fast.wrong_source})

    # ---- the metadata: one chunk on every home, asked all at once ------------------------------
    def _client(self) -> SkyMemoryClient:
        c = self.c
        via = via_for_route(self.route, self.m)
        # the deadline, not a count, ends it; the manifest's station id (a ground site's own) unless told one
        options = {"timeout": 0.5, "retries": 1000, "station_id": self.m.ground_station, **self.client_options}
        client = SkyMemoryClient(self.m.ground_addresses(), via=via, mission_ms=c.mission_ms,
                                 bind=(self.m.ground_host, 0), **{"signer": signer_for_manifest(self.m), **options})
        client.capture = self.capture
        return client

    async def _each_home(self, homes: list[Sat], ask, deadline: Deadline, first_wins: bool,
                         grace_min_s: float = 1.0) -> dict:
        """Run ask(client, home) for every home at once until the deadline; returns home -> result, or the
        exception it ended with (TimeoutError: no answer). first_wins: stop at the first success;
        otherwise, once one home succeeded, the others get a grace of a few times that (at least
        grace_min_s) instead of the whole deadline, so one dead home does not hold the operation up."""
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
                        end = min(end, time.monotonic() + max(grace_min_s, 4 * (time.monotonic() - start)))
            finally:
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                self._count(client.counters)
        for h in homes:
            outcome.setdefault(h, TimeoutError(f"{h} did not answer"))
        return outcome

    def _write_meta(self, key: bytes, meta: dict, homes: list[Sat], deadline: Deadline, sealer,
                    label: str) -> tuple[list[Sat], list[Sat]]:
        """Store the metadata (sealed with `sealer`, unless None) on every home at once; (homes that took it,
        homes that did not). BlockMiss("timeout") when none did. Sealed, the version written becomes the newest this
        ground has seen: no get here, nor on a ground host sharing the ledger, goes back behind it."""
        blob = json.dumps(meta, separators=(",", ":")).encode()
        want = meta_hash(key)
        if sealer is not None:
            blob = sealer.seal_chunk(want, 0, 1, len(blob), blob, layout=ONE_CHUNK)
        if len(blob) > self.m.chunk_size:
            raise ValueError(f"metadata of {len(blob)} bytes does not fit one {self.m.chunk_size}-byte chunk")

        async def store_copy(client: SkyMemoryClient, home: Sat) -> None:
            await client.set_chunk(home, want, 0, 1, blob, created_ms=meta["created_ms"])

        outcome = asyncio.run(self._each_home(homes, store_copy, deadline, first_wins=False))
        stored = [h for h in homes if not isinstance(outcome[h], BaseException)]
        failed = [h for h in homes if h not in stored]
        for h in failed:
            self._tell(f"{label}: home {h} did not take the metadata: {outcome[h]}")
        if not stored:
            raise BlockMiss("timeout", f"the metadata could not be stored on any of its home satellites "
                            f"{_sats(homes)} within {self.timeout_s:g} s")
        if self.versions is not None and sealer is not None:
            self.versions.note(key, Seen.of_meta(meta))
        return stored, failed

    # ---- put ---------------------------------------------------------------------------------
    def put(self, name: str, data: bytes) -> dict:
        """Store `data` under `name`; the metadata goes to every home. When the chunks or every copy of the
        metadata could not be stored in time, what was stored is evicted and PutFailed says why and how
        much; meta["homes_failed"] lists the homes that did not take their copy. Sealed, a put of a name
        already stored writes a new version and evicts the old one's data (meta["replaced"] says how much)."""
        sealer = self.sealer()  # a manifest without content keys fails here, in one line, before any transfer
        if self.versions is not None:  # and a ledger that cannot be written
            self.versions.check_writable()
        start = time.monotonic()
        reserve = min(CLEANUP_MAX_S, CLEANUP_SHARE * self.timeout_s)
        work = Deadline(self.timeout_s - reserve)  # the rest is kept for the cleanup
        key = key_of(name)
        version = os.urandom(VERSION_BYTES) if sealer is not None else b""
        block = data_hash(key, version) if sealer is not None else key
        servers = self.c.nearest(self.n_servers, self.c.mission_ms())
        homes = self.homes(key)
        pace = self.pace_Bps(servers)
        self._tell(f"put: {len(data)} bytes to {len(servers)} satellites, route {self.route} "
                   f"(up {len(uplinks(self.route, self.m, servers))} ground links), "
                   + (f"paced to {pace / 1e6:.2f} MB/s" if pace else "unpaced") + f", deadline {self.timeout_s:g} s, "
                   + ("sealed" if sealer is not None else "unsealed (--no-seal)"))
        sent_meta: list[bool] = []  # set once the metadata is on its way to the homes
        try:
            return self._put(name, key, version, block, data, servers, homes, work, sealer, sent_meta, start)
        except (SkyMemoryError, BlockMiss, OSError, ValueError) as exc:
            self._tell(f"put: failed after {time.monotonic() - start:.2f} s: {exc}")
            cleanup = Deadline(self.timeout_s - (time.monotonic() - start))
            raise self._clean_up(key, block, servers, homes if sent_meta else [], exc, cleanup) from exc

    def _put(self, name: str, key: bytes, version: bytes, block: bytes, data: bytes, servers: list[Sat],
             homes: list[Sat], work: Deadline, sealer, sent_meta: list[bool], start: float) -> dict:
        # the object's SHA-256 (for the metadata) is computed while the chunks travel: hashlib and the C
        # fast path both release the GIL, and on 100 MB the hash alone takes about as long as the transfer;
        # sealed, the metadata of the version this put replaces is read meanwhile too (to evict its data)
        pool = ThreadPoolExecutor(2, thread_name_prefix="skymemory-put")
        try:
            digest = pool.submit(lambda: hashlib.sha256(data).hexdigest())
            previous = pool.submit(self._previous, key, sealer, homes, work) if sealer is not None else None
            with self._store(servers, work, self.parity) as store, watch(store, "put", "acknowledged", self.say):
                rec = store.put_block(block, data)
            sha256 = digest.result()
            old = previous.result() if previous is not None else None
        finally:  # a failed transfer does not wait for the old metadata (its read ends by the deadline)
            pool.shutdown(wait=False, cancel_futures=True)
        stats = store.last_transfer
        if stats is not None:
            self._tell(f"put: chunks stored ({stats.packets_tx} packets sent, {stats.retransmits} resends)")
        meta = {"v": PLAIN_META_VERSION if sealer is None else META_VERSION, "name": name, "key": key.hex(),
                **({"version": version.hex()} if sealer is not None else {}), "size": len(data), "sha256": sha256,
                "chunk_bytes": rec.chunk_bytes, "chunk_count": rec.chunk_count, "parity": rec.parity,
                "servers": [list(s) for s in servers], "created_ms": rec.created_ms}
        sent_meta.append(True)
        stored, failed = self._write_meta(key, meta, homes, work, sealer, "put")
        meta["homes"] = [list(h) for h in stored]
        meta["homes_failed"] = [list(h) for h in failed]
        meta["sealed"] = sealer is not None
        meta["replaced"] = None
        if old is not None:  # the version this put replaced: its data is no longer any name's (best effort,
            # within what is left of the deadline and at most CLEANUP_MAX_S: the new version is stored already)
            left = min(CLEANUP_MAX_S, self.timeout_s - (time.monotonic() - start))
            meta["replaced"] = self._evict_old(key, old, block, Deadline(left))
        return meta

    def _previous(self, key: bytes, sealer, homes: list[Sat], deadline: Deadline) -> dict | None:
        """The metadata of the version a put replaces: the newest copy the homes hold that opens (or from
        before sealing), None when there is none or no home answered in time (nothing is evicted then)."""
        want = meta_hash(key)

        async def read_copy(client: SkyMemoryClient, home: Sat) -> dict | None:
            try:
                blob = await client.get_chunk(home, want, 0)
            except ChunkNotFound:
                return None  # an answer: this home holds no metadata of the name
            return open_metadata(key, blob, sealer, home)

        try:
            outcome = asyncio.run(self._each_home(homes, read_copy, deadline, first_wins=False))
        except Exception as exc:  # noqa: BLE001 - best effort: the put goes on without evicting
            self._tell(f"put: the metadata of the version replaced could not be read: {exc}")
            return None
        copies = [m for m in outcome.values() if isinstance(m, dict)]
        return max(copies, key=Seen.of_meta) if copies else None  # the order a get takes the newest by

    def _evict_old(self, key: bytes, old: dict, block: bytes, deadline: Deadline, label: str = "put") -> dict | None:
        """Evict the data of the version `old` describes (best effort, by `deadline`); what was done."""
        if old.get("deleted"):  # a tombstone: its data was evicted by the delete
            return None
        old_block = data_block_of(key, old)
        if old_block == block:
            return None
        servers = list(dict.fromkeys(tuple(s) for s in old["servers"]))

        async def evict(client: SkyMemoryClient, sat: Sat) -> int:
            return await client.evict_block(sat, old_block)

        try:
            outcome = asyncio.run(self._each_home(servers, evict, deadline, first_wins=False))
        except Exception as exc:  # noqa: BLE001 - best effort: the new version is stored
            self._tell(f"{label}: the data of the version replaced was not evicted: {exc}")
            return {"version": old.get("version"), "evicted": 0, "not_evicted": [list(s) for s in servers]}
        purged = {s: n for s, n in outcome.items() if not isinstance(n, BaseException)}
        missed = [s for s in servers if s not in purged]
        self._tell(f"{label}: the version replaced ({old.get('size')} bytes, created_ms {old.get('created_ms')}): "
                   f"{sum(purged.values())} chunks evicted"
                   + (f"; not evicted at {_sats(missed)}" if missed else ""))
        return {"version": old.get("version"), "evicted": sum(purged.values()),
                "not_evicted": [list(s) for s in missed]}

    def _clean_up(self, key: bytes, block: bytes, servers: list[Sat], homes: list[Sat], cause: BaseException,
                  deadline: Deadline) -> PutFailed:
        """Evict the object's chunks from its servers and its metadata from its homes (those the metadata was
        sent to: none when the chunks failed first, so an earlier version's metadata stays), by `deadline`."""
        meta_block = meta_hash(key)

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

    # ---- delete ------------------------------------------------------------------------------
    def delete(self, key: bytes) -> dict:
        """Delete the object: a sealed tombstone (its name and when) replaces the metadata on every home, and its
        data is evicted (best effort). A copy of any older version found later, by this ground host or one sharing
        its ledger, is refused as "deleted"; a put of the name stores it again. Returns {"name", "homes",
        "homes_failed", "evicted"}. BlockMiss when the object cannot be found (nothing to delete)."""
        sealer = self.sealer()
        if sealer is None:
            raise ValueError("delete writes a sealed tombstone: it needs sealing (without --no-seal)")
        if self.versions is not None:
            self.versions.check_writable()
        deadline = Deadline(self.timeout_s)
        meta = self.meta(key, deadline)
        now = max(self.c.mission_ms(), meta["created_ms"] + 1, meta.get("repaired_ms", 0) + 1)
        tombstone = {"v": META_VERSION, "name": meta["name"], "key": key.hex(), "deleted": True, "created_ms": now}
        stored, failed = self._write_meta(key, tombstone, self.homes(key), deadline, sealer, "delete")
        evicted = self._evict_old(key, meta, b"", Deadline(min(CLEANUP_MAX_S, deadline.left())), "delete")
        self._tell(f"delete: {meta['name']!r}: tombstone on {_sats(stored)}"
                   + (f"; not on {_sats(failed)}" if failed else ""))
        return {"name": meta["name"], "homes": [list(h) for h in stored], "homes_failed": [list(h) for h in failed],
                "evicted": evicted}

    # ---- get ---------------------------------------------------------------------------------
    def meta(self, key: bytes, deadline: Deadline | None = None) -> dict:
        """The object's metadata: the newest copy that opens among the homes that answer (sealed; unsealed,
        the newest "v": 1 copy); BlockMiss naming the homes otherwise ("seal" when copies answered and none
        opened, "unsealed" for an object stored before sealing, "sealed" for a sealed one read with
        seal=False). meta["seal_failed_at"] lists homes whose copy did not open when another's did."""
        sealer = self.sealer()
        deadline = deadline or Deadline(self.timeout_s)
        homes = self.homes(key)
        want = meta_hash(key)

        async def read_copy(client: SkyMemoryClient, home: Sat) -> dict:
            meta = open_metadata(key, await client.get_chunk(home, want, 0), sealer, home)
            if sealer is not None and meta["v"] == PLAIN_META_VERSION:
                raise BlockMiss("unsealed", f"the metadata at {home} was stored before sealing")
            return meta

        outcome = asyncio.run(self._each_home(homes, read_copy, deadline, first_wins=False,
                                              grace_min_s=READ_GRACE_S))
        opened = [h for h in homes if isinstance(outcome[h], dict)]
        bad_seal = [h for h in homes if isinstance(outcome[h], BlockMiss) and outcome[h].reason == "seal"]
        for h in bad_seal:
            self._tell(f"get: {outcome[h]}: not used")
        if opened:
            # the first of the newest (a repair's rewrite, which names the satellites it moved chunks to, is newer)
            home = max(opened, key=lambda h: Seen.of_meta(outcome[h]))
            meta = outcome[home]
            self._check_fresh(key, meta, home)
            meta["homes"] = [list(x) for x in homes]
            meta["answered_by"] = list(home)
            meta["sealed"] = sealer is not None
            meta["seal_failed_at"] = [list(h) for h in bad_seal]
            meta["block"] = data_block_of(key, meta).hex()
            return meta
        raise self._no_metadata(key, homes, outcome, deadline)

    def _check_fresh(self, key: bytes, meta: dict, home: Sat) -> None:
        """The newest copy the homes gave, against the newest this ground has seen: an older one is a rollback
        ("stale"), a tombstone or a copy older than one is "deleted"; what is read becomes the newest seen."""
        found = Seen.of_meta(meta)
        known = self.versions.note(key, found) if self.versions is not None else found
        name = meta["name"]
        if found < known:
            if known.deleted:
                raise BlockMiss("deleted", f"{name!r} was deleted at mission time {known.created_ms} ms; the metadata "
                                f"at {home} is of an older version ({found.says()}): not used")
            raise BlockMiss("stale", f"{name!r}: the metadata at {home} is of an older version ({found.says()}) than "
                            f"the newest this ground has seen ({known.says()}): not used (a home lost the newer "
                            f"copy, or a satellite planted an old one)")
        if found.deleted:
            raise BlockMiss("deleted", f"{name!r} was deleted at mission time {found.created_ms} ms (the tombstone "
                            f"at {home})")

    def _no_metadata(self, key: bytes, homes: list[Sat], outcome: dict, deadline: Deadline) -> BlockMiss:
        """The BlockMiss of a get that found no copy of the metadata to use, naming the homes."""
        def of(reason: str) -> list[Sat]:
            return [h for h in homes if isinstance(outcome[h], BlockMiss) and outcome[h].reason == reason]

        bad_seal, unsealed, sealed = of("seal"), of("unsealed"), of("sealed")
        silent = [h for h in homes if isinstance(outcome[h], TimeoutError)]  # RequestTimeout is one too
        without = [h for h in homes if isinstance(outcome[h], ChunkNotFound)]
        other = [h for h in homes if h not in (*bad_seal, *unsealed, *sealed, *silent, *without)]
        what = f"the metadata of key {key.hex()[:16]}..."
        if not silent and not other and not bad_seal and not unsealed and not sealed:
            return BlockMiss("not-found", f"no object with key {key.hex()}: none of its home satellites "
                             f"{_sats(homes)} holds its metadata")
        parts = []
        if silent:
            parts.append(f"{_sats(silent)} did not answer within {deadline.seconds:g} s")
        if without:
            parts.append(f"{_sats(without)} do not hold it")
        parts += [f"{h}: {outcome[h]}" for h in other]
        if bad_seal:  # never what a satellite wrote: the satellites named, nothing of their bytes
            why = ("sealed under a content key id this ground does not hold (retired, or another constellation's)"
                   if all(getattr(outcome[h], "retired_key", False) for h in bad_seal)
                   else "altered on the satellite, or not this object's")
            first = (f"{what} from satellite{'s' if len(bad_seal) > 1 else ''} {_sats(bad_seal)} does not open "
                     f"({why}): nothing of it is used")
            if unsealed:
                parts.insert(0, f"{_sats(unsealed)} hold it in the clear, as before sealing")
            return BlockMiss("seal", "; ".join([first, *parts]))
        if unsealed:
            return BlockMiss("unsealed", f"key {key.hex()[:16]}... was stored before sealing, or not by the ground: "
                             f"its metadata at {_sats(unsealed)} is in the clear and is not used; put it again")
        if sealed:
            return BlockMiss("sealed", f"key {key.hex()[:16]}... is sealed (its metadata at {_sats(sealed)}): get "
                             "it without --no-seal")
        return BlockMiss("unreachable" if silent else "bad-metadata",
                         f"{what} could not be read from its home satellites: " + "; ".join(parts))

    def get(self, key: bytes) -> tuple[bytes, dict]:
        deadline = Deadline(self.timeout_s)
        meta = self.meta(key, deadline)
        servers = [tuple(s) for s in meta["servers"]]
        block = bytes.fromhex(meta["block"])
        rec = BlockRecord(block, meta["size"], meta["chunk_bytes"], meta["chunk_count"], meta["created_ms"],
                          "explicit", len(servers), servers[0], meta.get("parity", 0))
        pace = self.pace_Bps(servers)
        self._tell(f"get: {meta['size']} bytes from {len(servers)} satellites (metadata from "
                   f"{tuple(meta['answered_by'])}), route {self.route}, "
                   + (f"paced to {pace / 1e6:.2f} MB/s" if pace else "unpaced")
                   + f", {deadline.left():.2f} s of the deadline left")
        with self._store(servers, deadline) as store, watch(store, "get", "received", self.say):
            try:
                data, sha256 = _fetch_hashing(store, rec)
                # coded: what was rebuilt around (chunks that did not open, or never came), for the caller to say
                meta["rebuilt"] = store.last_transfer.rebuilt if store.last_transfer is not None else 0
                meta["seal_failed_chunks_at"] = [list(s) for s in store.seal_failures]
            except BlockMiss as exc:
                stats = store.last_transfer
                if stats is not None:
                    self._tell(f"get: fast path ended {stats.outcome}: {stats.packets_rx} packets received, "
                               f"{stats.retransmits} re-requests, {stats.crc_failures} failed CRC32C, "
                               f"{stats.auth_failures} failed authentication")
                if exc.reason == "seal":  # a chunk came and did not open: the satellites named, no bytes used
                    raise BlockMiss("seal", f"{meta['name']!r} (metadata from {tuple(meta['answered_by'])}): "
                                    f"{exc}") from None
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

    # ---- repair ------------------------------------------------------------------------------
    def repair(self, key: bytes) -> dict:
        """Rebuild, from the rest of each stripe, the chunks of a coded object that dead or emptied satellites
        lost. A satellite that answers but no longer holds its chunks (restarted) is given them again; one that
        does not answer is replaced by the nearest live satellite the object does not use, and the metadata on
        every home then names it. Returns {"name", "moved": [[old, new], ...], "refilled": [sat, ...],
        "chunks": written}; both lists empty when nothing was lost. BlockMiss when the object cannot be read
        (more than `parity` of a stripe's satellites lost), is uncoded, or no live satellite is left to take
        a dead one's share."""
        deadline = Deadline(self.timeout_s)
        meta = self.meta(key, deadline)
        name, parity = meta["name"], meta.get("parity", 0)
        if not parity:
            raise BlockMiss("uncoded", f"{name!r} is stored without parity: nothing to rebuild lost chunks from "
                            "(put it again with --parity)")
        servers = [tuple(s) for s in meta["servers"]]
        block = bytes.fromhex(meta["block"])
        held = asyncio.run(self._holders(block, servers, meta["chunk_count"], deadline))
        silent = [s for s in servers if held[s] is None]
        emptied = [s for s in servers if held[s] is False]
        report = {"name": name, "moved": [], "refilled": [list(s) for s in emptied], "chunks": 0}
        if not silent and not emptied:
            self._tell(f"repair: {name!r}: every satellite of it holds its chunks")
            return report
        spares = asyncio.run(self._live_spares(servers, len(silent), deadline)) if silent else []
        if len(spares) < len(silent):
            raise BlockMiss("no-spare", f"{name!r}: {len(silent)} of its satellites do not answer "
                            f"({_sats(silent)}) and only {len(spares)} other satellites do")
        self._tell(f"repair: {name!r}: silent {_sats(silent) or 'none'}, emptied {_sats(emptied) or 'none'}; "
                   f"reading it from the rest of each stripe")
        rec = BlockRecord(block, meta["size"], meta["chunk_bytes"], meta["chunk_count"], meta["created_ms"],
                          "explicit", len(servers), servers[0], parity)
        with self._store(servers, deadline) as store:
            data, sha256 = _fetch_hashing(store, rec)
        if sha256 != meta["sha256"]:
            raise BlockMiss("checksum", "object SHA-256 does not match its metadata")
        moved = dict(zip(silent, spares))
        now_servers = [moved.get(s, s) for s in servers]
        lost = {i for i, s in enumerate(servers) if s in moved or s in emptied}
        ids = [c for c in range(rec.chunk_count) if c % len(servers) in lost]
        with self._store(now_servers, deadline) as store:
            store.restore_chunks(rec, data, ids)
        report["chunks"], report["moved"] = len(ids), [[list(a), list(b)] for a, b in moved.items()]
        if moved:  # the homes must name where the chunks are now
            fields = {k: meta[k] for k in META_FIELDS if k in meta}
            fields.update(servers=[list(s) for s in now_servers], repaired_ms=self.c.mission_ms())
            self._write_meta(key, fields, self.homes(key), deadline, self.sealer(), "repair")
        self._tell(f"repair: {name!r}: {len(ids)} chunks stored again "
                   + ", ".join([f"{a} -> {b}" for a, b in moved.items()] + [f"on {s}" for s in emptied]))
        return report

    async def _holders(self, block: bytes, servers: list[Sat], chunk_count: int,
                       deadline: Deadline) -> dict[Sat, bool | None]:
        """Per server: True when it holds its chunks of the block, False when it answers without them, None when
        it does not answer. A satellite keeps or drops a block's chunks whole, so its first one tells."""
        async with self._client() as client:
            async def one(j: int, sat: Sat) -> bool | None:
                if not await self._answers(client, sat, deadline):
                    return None
                if j >= chunk_count:
                    return True  # a block of fewer chunks than servers: nothing on this one
                try:
                    return await asyncio.wait_for(client.probe(sat, block, j), deadline.left()) is not None
                except (asyncio.TimeoutError, SkyMemoryError):
                    return None

            answers = await asyncio.gather(*(one(j, s) for j, s in enumerate(servers)))
            self._count(client.counters)
        return dict(zip(servers, answers))

    @staticmethod
    async def _answers(client: SkyMemoryClient, sat: Sat, deadline: Deadline) -> bool:
        """Whether `sat` answers a NOOP within a short wait (three tries): a dead satellite costs no more."""
        try:
            await client.noop(sat, timeout=min(ALIVE_WAIT_S, deadline.left()), retries=2)
            return True
        except SkyMemoryError:
            return False

    async def _live_spares(self, servers: list[Sat], n: int, deadline: Deadline) -> list[Sat]:
        """Up to n satellites that answer and are not among `servers`, nearest first."""
        others = [s for s in self.c.nearest(self.m.planes * self.m.sats) if s not in servers]
        async with self._client() as client:
            found: list[Sat] = []
            for start in range(0, len(others), n + 2):  # a few at once, nearest first
                batch = others[start:start + n + 2]
                answers = await asyncio.gather(*(self._answers(client, s, deadline) for s in batch))
                found += [s for s, ok in zip(batch, answers) if ok]
                if len(found) >= n:
                    break
            self._count(client.counters)
        return found[:n]


def _fetch_hashing(store: ConstellationBlockStore, rec: BlockRecord) -> tuple[bytearray, str]:
    """The block and its SHA-256, hashed as it lands: a thread hashes the chunks received contiguously
    from chunk 0 (the C path publishes that count; sealed, those chunks are opened) while the rest
    arrive, so on 100 MB the hash, about as long as the transfer, mostly overlaps it. Raises BlockMiss
    like get_block."""
    job = store.block_jobs([rec])[0]
    prefix = np.zeros(1, dtype=np.uint32)
    view = memoryview(job.buf)
    sha = hashlib.sha256()
    landed, failed = threading.Event(), threading.Event()
    plain = job.plain_chunk_bytes  # content bytes per chunk (sealed: the seal's 32 less than on the wire)

    def hash_prefix() -> None:
        done = 0
        while not failed.is_set():  # a failed transfer's bytes are not worth hashing
            last_look = landed.is_set()
            upto = min(int(prefix[0]) * plain, job.n_bytes)
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
