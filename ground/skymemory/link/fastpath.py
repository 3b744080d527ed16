"""The fast block path: whole blocks in one C call (`skymem_bulk_get` / `skymem_bulk_set`).

The C side (csrc/skymem_bulk.c, compiled into `skymemory._native`) sends
GET_CHUNKS per server (or SET_CHUNK per chunk) with sendmmsg, receives the
replies with recvmmsg straight into the caller's buffer, checks request id,
block hash, chunk id, length and CRC32C, re-asks for what is overdue, and
fills a per-chunk status array. A reply counts only when it comes from the
satellite asked (a route NAK from any: see client.py). With a signer (a keyed
constellation) every request is signed in C and a reply counts only when signed
with the same key and with a sequence fresh for its satellite (the signer's
reply windows, shared with the asyncio client). Request ids are base..base+n
within a call, the base random per call.

With a sealer (`get(..., sealer=)` / `set(..., sealer=)`, a
`skymemory.protocol.seal.Sealer`: one tenant's content keys) the chunks travel
and are kept sealed with AES-128-GCM, in seal.py's format byte for byte
(csrc/skymem_seal.c, OpenSSL's libcrypto): set seals each chunk in C as it
leaves, get opens each chunk in C straight into the buffer. Such
a job is `BlockJob(..., sealed=True)`: its `chunk_bytes` is the size on the
wire, of which `seal.OVERHEAD` (32) bytes are the seal's, and its buffer holds
the content (`n_bytes`). A chunk that arrives intact but does not open (altered
on the satellite, another block's or position's, an unknown key id) is
SEAL_FAILED, zeros in the buffer, and counted in `seal_failures`: it is not
asked again, the satellite would send the same bytes.

Python only builds the job description
(a few objects per *block*) and reads the result; the GIL is released
during the call, so a streaming reader can watch `prefix` advance.

Each call uses its own UDP socket: calls from several threads never see each
other's replies, and late replies of a finished call land nowhere.
"""

from __future__ import annotations

import ipaddress
import random
import socket
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from skymemory.protocol import auth, native, wire
from skymemory.protocol.stripes import Stripes

if TYPE_CHECKING:  # seal.py needs `cryptography`, which only a sealed call uses
    from skymemory.protocol.seal import Sealer

    from .bell import ProgressBell

Sat = tuple[int, int]

PENDING, OK, NOT_FOUND, SEAL_FAILED, UNNEEDED, HELD = 0, 1, 2, 3, 4, 6
REBUILT = 0x80  # a flag over a coded data chunk's status: rebuilt from its stripe (PENDING, NOT_FOUND or SEAL_FAILED)
DONE, INCOMPLETE, REFUSED = 0, 1, 2
E_CRYPTO = -4
_ERRORS = {-1: "bad arguments", -2: "out of memory", -3: "socket error", E_CRYPTO: "libcrypto failed"}
SEAL_MAX_KEYS = 16  # content key ids a sealed call takes (the C key table's size)
SEAL_OVERHEAD = 32  # = seal.OVERHEAD: key id, nonce and tag of every sealed chunk
RCVBUF = 32 * 1024 * 1024
GET_WINDOW_MAX = 24 * 1024 * 1024  # a get's default bytes in flight, at most (the socket's buffer may cap it)
SET_WINDOW = 8 * 1024 * 1024  # a set's default: the satellites' receive buffers bound it, and we cannot see them
MIN_WINDOW = 64 * 1024


def require_native():
    """The compiled module, or a loud error: the block store has no slow fallback."""
    if not native.AVAILABLE or not hasattr(native.lib, "skymem_bulk_get"):
        raise ImportError("skymemory._native (with skymem_bulk) is not built: install the package with "
                          "`pip install -e .` (or `make venv`), which compiles it; the pure-Python path is "
                          "only for single-chunk commands")
    return native.ffi, native.lib


@dataclass
class BlockJob:
    """One block to move: where its bytes are, and which satellites hold its chunks."""

    block_hash: bytes
    buf: bytearray | memoryview | np.ndarray  # get: filled; set: read (sealed: the content)
    n_bytes: int
    chunk_bytes: int  # sealed: on the wire, SEAL_OVERHEAD more than the content it carries
    servers: Sequence[Sat]  # chunk i -> servers[i % len(servers)]
    created_ms: int = 0
    status: np.ndarray = field(default=None)  # uint8 per chunk, PENDING / OK / NOT_FOUND / SEAL_FAILED
    chunk_crcs: np.ndarray | None = None  # get, optional: uint32 per chunk, its verified CRC32C as it arrived
    # (sealed: as the satellite declares it; the seal, not the CRC, vouches for a chunk that opens)
    sealed: bool = False  # moved with a sealer: chunks sealed on the wire (see the module docstring)
    # coded stripes (protocol.stripes): `parity` chunks per stripe of `stripe_data` data chunks; 0: none. Then
    # chunk_count and status count the wire's chunks, data and parity, and buf holds the data's content only.
    parity: int = 0
    stripe_data: int = 0

    @property
    def plain_chunk_bytes(self) -> int:
        """Content bytes per chunk (data chunk i holds buf[i * plain_chunk_bytes:][:plain_chunk_bytes])."""
        return self.chunk_bytes - SEAL_OVERHEAD if self.sealed else self.chunk_bytes

    @property
    def data_chunk_count(self) -> int:
        return max(1, -(-self.n_bytes // self.plain_chunk_bytes))

    @property
    def stripes(self) -> Stripes | None:
        """The coded layout (None: every chunk is data, stored once)."""
        return Stripes(self.stripe_data, self.parity, self.data_chunk_count) if self.parity else None

    @property
    def chunk_count(self) -> int:
        """Chunks on the wire (coded: data and parity)."""
        stripes = self.stripes
        return self.data_chunk_count if stripes is None else stripes.wire_chunks

    def data_status(self) -> np.ndarray:
        """Each data chunk's status, in data order (coded: flagged REBUILT when rebuilt from its stripe's others)."""
        if not self.parity:
            return self.status[:self.chunk_count]
        return self.status[self.stripes.wire_ids()]

    def complete(self) -> bool:
        """Every byte of the block is in buf: each data chunk arrived intact, or was rebuilt from its stripe."""
        data = self.data_status()
        return bool(np.all((data == OK) | (data & REBUILT != 0)))

    def __post_init__(self) -> None:
        if len(self.block_hash) != wire.SKYMEM_BLOCK_HASH_LEN:
            raise ValueError("block hash must be 32 bytes")
        if not 1 <= self.chunk_bytes <= wire.SKYMEM_MAX_CHUNK_DATA:
            raise ValueError(f"chunk_bytes must be 1..{wire.SKYMEM_MAX_CHUNK_DATA}")
        if self.sealed and self.chunk_bytes <= SEAL_OVERHEAD:
            raise ValueError(f"a sealed chunk needs more than {SEAL_OVERHEAD} bytes, got {self.chunk_bytes}")
        if len(memoryview(self.buf).cast("B")) < self.n_bytes:
            raise ValueError("buffer shorter than n_bytes")
        if not self.servers:
            raise ValueError("a block needs at least one server")
        if self.parity and len(self.servers) < self.parity + self.stripe_data:
            raise ValueError(f"a stripe of {self.stripe_data} + {self.parity} chunks needs as many distinct servers, "
                             f"the block has {len(self.servers)}")
        if self.parity:  # a layout that cannot be is a StripeError here, not bad arguments in C
            Stripes(self.stripe_data, self.parity, self.data_chunk_count)
        if self.status is None:
            self.status = np.zeros(self.chunk_count, dtype=np.uint8)
        if self.chunk_crcs is not None and (self.chunk_crcs.dtype != np.uint32 or len(self.chunk_crcs) < self.chunk_count
                                            or not self.chunk_crcs.flags.c_contiguous):
            raise ValueError("chunk_crcs must be a contiguous uint32 array with one entry per chunk")

    def block_crc32c(self) -> int:
        """CRC32C of the whole block, folded from the chunks' CRCs (every chunk must have arrived).

        Sealed: of the sealed chunks end to end, as they travel (the CRCs cover the ciphertext).
        Coded: folded from the data chunks', in data order; with a chunk rebuilt (it never travelled: it has
        no CRC), of the content in buf, read once (sealed too: the content, then, not the ciphertext)."""
        ffi, lib = require_native()
        data = self.data_status()
        if self.parity and not bool(np.all(data == OK)):
            return int(lib.skymem_bulk_crc32c(ffi.from_buffer(self.buf), self.n_bytes))
        if self.chunk_crcs is None:
            raise ValueError("the job was fetched without chunk_crcs")
        count = len(data)
        crcs = self.chunk_crcs if not self.parity else np.ascontiguousarray(self.chunk_crcs[self.stripes.wire_ids()])
        total = self.n_bytes + (SEAL_OVERHEAD * count if self.sealed else 0)
        return int(lib.skymem_crc32c_fold(ffi.from_buffer("uint32_t[]", crcs), count, self.chunk_bytes, total))


@dataclass
class TransferStats:
    rc: int
    packets_rx: int
    packets_tx: int
    bytes_rx: int
    crc_failures: int
    retransmits: int
    ignored: int
    nak_status: int = 0  # SKYMEM_NAK_* of the refusal when rc == REFUSED (set only)
    window_bytes: int = 0  # bytes in flight the call allowed
    first_reply_s: float = 0.0  # get: start -> first valid reply (a round trip plus service time)
    auth_failures: int = 0  # replies refused for their trailer (unsigned, another key, altered)
    replayed: int = 0  # replies with a right tag and a sequence their satellite used before (or too old)
    wrong_source: int = 0  # replies from another satellite than the one asked
    seal_failures: int = 0  # get, sealed: chunks that came intact and did not open (SEAL_FAILED)
    rebuilt: int = 0  # get, coded: data chunks rebuilt from their stripes' other chunks
    parity_asked: int = 0  # get, coded: parity chunks asked (a healthy constellation's get asks none)

    @property
    def outcome(self) -> str:
        return {DONE: "done", INCOMPLETE: "incomplete", REFUSED: "refused"}.get(self.rc, _ERRORS.get(self.rc, "?"))


class BulkTransfer:
    """Moves blocks between this host and the satellites with the C fast path."""

    def __init__(
        self,
        addresses: Mapping[Sat, tuple[str, int]],
        *,
        via: Sat | Callable[[Sat], Sat] | None = None,
        station_id: int = 0,
        bind_host: str = "127.0.0.1",
        rto_s: float = 0.2,
        retries: int = 8,
        deadline_s: float = 120.0,
        window_bytes: int | None = None,
        signer: auth.Signer | None = None,
        hedge_s: float | None = None,
    ) -> None:
        self.ffi, self.lib = require_native()
        if rto_s <= 0 or deadline_s <= 0 or retries < 0 or (window_bytes is not None and window_bytes < 1):
            raise ValueError("rto_s and deadline_s must be > 0, retries >= 0, window_bytes >= 1 (or None)")
        if hedge_s is not None and hedge_s < 0:
            raise ValueError("hedge_s must be >= 0 (0: a coded get asks the parity with the data)")
        # coded gets: a satellite silent this long has its stripes' parity asked (well before a resend would)
        self.hedge_s = rto_s / 2 if hedge_s is None else hedge_s
        self.addresses = dict(addresses)
        self.via = via
        self.station_id = station_id
        self.bind_host = bind_host
        self.rto_s = rto_s
        self.retries = retries
        self.deadline_s = deadline_s
        self.window_bytes = window_bytes  # None: chosen per call (_window)
        # with a signer every request is signed in C and every reply checked (keyed satellites refuse
        # unsigned requests and sign their replies)
        self.signer = signer
        self._ids = random.SystemRandom()  # request ids from the OS: unguessable, and not repeated by a fork
        self._ids_lock = threading.Lock()
        self._ipv4: dict[str, int] = {}  # host -> IPv4 as an integer (resolved once)

    def _via(self, dst: Sat) -> Sat:
        if self.via is None:
            return dst
        return self.via(dst) if callable(self.via) else self.via

    def _socket(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:  # SO_RCVBUFFORCE (33): a burst of replies from ten satellites must not overflow
            sock.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), RCVBUF)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.bind((self.bind_host, 0))
        return sock

    def _window(self, fn_name: str, sock: socket.socket, asked: int | None = None) -> int:
        """Bytes in flight for one call: as asked or configured, else for a get what this socket can hold.

        A get's replies may all arrive before the C loop reads any, so the window must fit the
        receive buffer the kernel actually granted (SO_RCVBUFFORCE needs CAP_NET_ADMIN; without
        it the buffer is net.core.rmem_max). Linux reports twice the size set, the other half
        covering each datagram's overhead, so half the reported size bounds the payload.
        On a 70 ms link a window is what limits a get: 8 MiB per round trip is ~120 MB/s.
        """
        if asked is not None or self.window_bytes is not None:
            return asked if asked is not None else self.window_bytes
        if fn_name == "skymem_bulk_set":
            return SET_WINDOW
        granted = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        return max(MIN_WINDOW, min(GET_WINDOW_MAX, granted // 2))

    def _servers(self, jobs: Sequence[BlockJob]):
        """The C server table (one entry per distinct satellite) and each job's first entry."""
        ffi = self.ffi
        table: list[Sat] = []
        firsts = []
        for job in jobs:
            firsts.append(len(table))
            table.extend(tuple(s) for s in job.servers)
        servers = ffi.new("skymem_bulk_server_t[]", max(1, len(table)))
        for i, sat in enumerate(table):
            via = tuple(self._via(sat))
            try:
                host, port = self.addresses[via]
            except KeyError:
                raise ValueError(f"no ground address for satellite {via}") from None
            s = servers[i]
            s.plane, s.sat = sat
            s.via_plane, s.via_sat = via
            if host not in self._ipv4:
                self._ipv4[host] = int(ipaddress.IPv4Address(socket.gethostbyname(host)))
            s.ipv4 = self._ipv4[host]
            s.port = port
            if self.signer is not None:  # its own keys: UP signs what it is asked, DOWN checks its answers
                s.up_key = self.signer.mac_key(auth.UP, *sat).c_key
                s.down_key = self.signer.mac_key(auth.DOWN, *sat).c_key
                s.reply_floor = self.signer.reply_top(sat)  # what it signed before this call: answers nothing
        return servers, len(table), firsts

    def _seal_keys(self, sealer: Sealer):
        """The C key table (skymem_seal_keys_t) of a Sealer's keys, the sealing id first."""
        keys = sealer.c_keys()
        if not 1 <= len(keys) <= SEAL_MAX_KEYS:
            raise ValueError(f"the fast path takes 1..{SEAL_MAX_KEYS} content key ids, the sealer has {len(keys)}: "
                             "retire old ones (`skymemory keys retire`)")
        table = self.ffi.new("skymem_seal_keys_t *")
        table.n_keys = len(keys)
        for i, (key_id, key) in enumerate(keys):
            if not 0 <= key_id <= 0xFFFFFFFF or len(key) != 16:
                raise ValueError(f"content key id {key_id}: an id is 32 bits and an AES-128 key 16 bytes")
            table.keys[i].id = key_id
            self.ffi.memmove(table.keys[i].key, key, 16)
        return table

    def _run(self, fn_name: str, jobs: Sequence[BlockJob], prefix: np.ndarray | None, wave_chunks: int,
             deadline_s: float | None, pace_Bps: float = 0.0, window_bytes: int | None = None,
             sealer: Sealer | None = None, wave_doubling: bool = False, hedge_s: float | None = None,
             bell: ProgressBell | None = None) -> TransferStats:
        ffi, lib = self.ffi, self.lib
        for job in jobs:
            if job.sealed != (sealer is not None):
                raise ValueError("a sealed job (BlockJob(sealed=True)) moves only with a sealer" if job.sealed else
                                 "with a sealer every job is BlockJob(..., sealed=True) (chunk_bytes on the wire)")
        servers, n_servers, firsts = self._servers(jobs)
        blocks = ffi.new("skymem_bulk_block_t[]", max(1, len(jobs)))
        keep = []  # cffi buffers must outlive the call
        prefix_ptr = ffi.NULL
        if prefix is not None:
            if prefix.dtype != np.uint32 or len(prefix) < len(jobs) or not prefix.flags.c_contiguous:
                raise ValueError("prefix must be a contiguous uint32 array with one entry per block")
            prefix_buf = ffi.from_buffer(prefix, require_writable=True)
            keep.append(prefix_buf)
            prefix_ptr = ffi.cast("uint32_t *", prefix_buf)
        for i, job in enumerate(jobs):
            b = blocks[i]
            h = ffi.new("uint8_t[]", bytes(job.block_hash))
            buf = ffi.from_buffer(job.buf, require_writable=fn_name == "skymem_bulk_get")
            st = ffi.from_buffer(job.status, require_writable=True)
            keep += [h, buf, st]
            b.hash, b.buf, b.n_bytes = h, buf, job.n_bytes
            b.chunk_bytes, b.chunk_count = job.chunk_bytes, job.chunk_count
            b.server0, b.n_servers = firsts[i], len(job.servers)
            b.created_ms, b.status = job.created_ms, st
            b.stripe_k, b.stripe_m = (job.stripe_data, job.parity) if job.parity else (0, 0)
            b.prefix = prefix_ptr + i if prefix is not None else ffi.NULL
            if job.chunk_crcs is not None:
                crcs = ffi.from_buffer("uint32_t[]", job.chunk_crcs, require_writable=True)
                keep.append(crcs)
                b.chunk_crcs = crcs
        opts = ffi.new("skymem_bulk_opts_t *")
        with self._ids_lock:
            opts.request_id = self._ids.randrange(1, 2**31)
        opts.station_id = self.station_id
        opts.wave_chunks = wave_chunks
        opts.wave_doubling = int(wave_doubling)
        opts.pace_Bps = pace_Bps
        opts.rto_s = self.rto_s
        opts.deadline_s = deadline_s or self.deadline_s
        opts.max_retries = self.retries
        opts.hedge_s = self.hedge_s if hedge_s is None else hedge_s
        if bell is not None:
            opts.progress_want, opts.progress_fd = bell.opts()
        seal_keys = self._seal_keys(sealer) if sealer is not None else None
        if seal_keys is not None:
            opts.seal = seal_keys
        if self.signer is not None:
            # every send may be a resend: reserve a fresh sequence for each possible one
            opts.keyed, opts.auth_key_id = 1, self.signer.key_id
            opts.replies = self.signer.reply_window
            sends = (sum(job.chunk_count for job in jobs) if fn_name == "skymem_bulk_set"
                     else lib.skymem_bulk_get_requests(blocks, len(jobs), wave_chunks, int(wave_doubling)))
            # coded: a request reopened for parity (once per stripe of it at most) asks again without a retry
            reopens = max((job.parity for job in jobs), default=0)
            opts.auth_seq_count = max(1, sends) * (self.retries + 1 + reopens)
            opts.auth_seq_first = self.signer.reserve(opts.auth_seq_count)
        try:
            with self._socket() as sock:
                opts.fd = sock.fileno()
                opts.window_bytes = self._window(fn_name, sock, window_bytes)
                rc = getattr(lib, fn_name)(servers, n_servers, blocks, len(jobs), opts)
        finally:
            if seal_keys is not None:  # the keys' copy is not left in freed memory (C wipes its own)
                ffi.memmove(seal_keys, bytes(ffi.sizeof("skymem_seal_keys_t")), ffi.sizeof("skymem_seal_keys_t"))
        if self.signer is not None:
            self.signer.release(opts.auth_seq_first, opts.auth_seq_count, opts.auth_seq_used)
        if rc < 0:
            raise OSError(f"{fn_name}: {_ERRORS.get(rc, rc)}")
        return TransferStats(rc, opts.packets_rx, opts.packets_tx, opts.bytes_rx, opts.crc_failures,
                             opts.retransmits, opts.ignored, opts.nak_status, opts.window_bytes, opts.first_reply_s,
                             opts.auth_failures, opts.replayed, opts.wrong_source, opts.seal_failures,
                             opts.rebuilt, opts.parity_asked)

    def get(self, jobs: Sequence[BlockJob], *, prefix: np.ndarray | None = None, wave_chunks: int = 0,
            wave_doubling: bool = False, deadline_s: float | None = None, pace_Bps: float = 0.0,
            window_bytes: int | None = None, sealer: Sealer | None = None,
            hedge_s: float | None = None, bell: ProgressBell | None = None) -> TransferStats:
        """Fill each job's buffer; `status` says which chunks came (OK) or are gone (NOT_FOUND).

        A coded job (`parity` > 0) is whole when `complete()`: a stripe needs only as many of its
        chunks as it has data chunks, the others rebuilt (REBUILT) and the rest not waited for
        (UNNEEDED); its parity is asked only when a data chunk is gone or its satellite has been
        silent for `hedge_s` (default: the transfer's; 0 asks the parity with the data).

        With `sealer` (a `skymemory.protocol.seal.Sealer`; every job `sealed=True`)
        each chunk is opened into the buffer, and one that came but does not open is
        SEAL_FAILED (zeros in the buffer; `seal_failures` counts them).
        `prefix[i]` (optional) is advanced, while the call runs, to the number of
        chunks of block i received (and opened) contiguously from chunk 0, and `bell` (a
        link.bell.ProgressBell, with `prefix`) rung once every prefix reaches what its reader waits for;
        `wave_chunks` > 0
        asks chunk ids in waves across blocks (chunks 0..wave-1 of every block first),
        each twice as wide as the one before with `wave_doubling`;
        `pace_Bps` > 0 asks the waves after the first no faster than that many
        bytes per second, so that replies arrive in the order asked; `window_bytes`
        overrides the bytes in flight for this call.
        """
        if pace_Bps < 0:
            raise ValueError("pace_Bps must be >= 0")
        if window_bytes is not None and window_bytes < 1:
            raise ValueError("window_bytes must be >= 1")
        if hedge_s is not None and hedge_s < 0:
            raise ValueError("hedge_s must be >= 0")
        if bell is not None and prefix is None:
            raise ValueError("a bell rings for the prefixes: pass prefix with it")
        return self._run("skymem_bulk_get", jobs, prefix, wave_chunks, deadline_s, pace_Bps, window_bytes, sealer,
                         wave_doubling, hedge_s, bell)

    def set(self, jobs: Sequence[BlockJob], *, deadline_s: float | None = None, pace_Bps: float = 0.0,
            sealer: Sealer | None = None) -> TransferStats:
        """Store every chunk; `status` OK = acknowledged, NOT_FOUND = given up after the retries.

        With `sealer` (a `skymemory.protocol.seal.Sealer`; every job `sealed=True`) the
        chunks are sealed under its current key id as they leave (each send, resends
        too, under a nonce of its own: any of them opens).
        `pace_Bps` > 0 sends new chunks no faster than that many bytes per second (a link
        that queues a burst delays its tail past the resend timer; see skymem_bulk.h)."""
        if pace_Bps < 0:
            raise ValueError("pace_Bps must be >= 0")
        return self._run("skymem_bulk_set", jobs, None, 0, deadline_s, pace_Bps, sealer=sealer)
