"""Sealed content: every chunk a satellite keeps is AES-128-GCM ciphertext under a key only ground hosts hold.

A satellite stores and serves opaque chunks; what they mean is the ground's. So the ground seals each
chunk of every KV block and named object (data and metadata) before it leaves, and opens it when it
lands, under a key derived per tenant from a ground master that no satellite is given:

    tenant key = HKDF-SHA256(master[key id], salt "skymemory seal v1", info "tenant " + tenant), 16 bytes

A tenant is named by its cache salt (vLLM's `cache_salt`, `KVCManager.get_cache(cache_salt=)`); no salt
is the default tenant "". A sealed chunk on the wire:

    key id u32 BE | nonce (12 random bytes) | ciphertext (as long as the plaintext) | GCM tag (16)

and its associated data binds what the bytes are, so a satellite can neither read, alter, nor swap them
(another block's chunk, another position, a block of another size, another tenant's, the same block cut or
striped another way):

    "skymemory seal v2\\0" | block hash (32) | chunk id u32 | chunk count u32 | block size u64 | key id u32
    | chunk bytes u32 | stripe k u32 | stripe m u32                                 (all big-endian)

The last three are the block's `SealLayout`. Two layouts can give a block the same chunk count (7 data chunks:
one stripe of 7 + 2 parity, or stripes of 4 + 1 and 3 + 1, are 9 on the wire either way); without the layout in
the seal, a chunk that is data in one opens as parity in the other, and a reader rebuilds other bytes.

A chunk of `chunk_bytes` on the wire carries `plain_chunk_bytes(chunk_bytes)` = chunk_bytes - 32 bytes
of content. The nonce is random (never derived from the block: two encodings of one block, e.g. by two
engines, must not share one); at 2^32 seals per key the chance of a repeat is still below 2^-32, and
`skymemory keys rotate` starts a new key long before.

Keys over time: the ground's content key file (`ContentKeys`, mode 0600, named in the manifest as
`content_key_file`) holds masters by id; new chunks are sealed under the newest, a chunk names its id
and opens under that id's key for as long as the id is in the file (`rotate` adds one, `retire` drops
one). The C fast path (csrc/skymem_bulk_sealing.c) seals and opens with OpenSSL's libcrypto where chunks
are cut and land; this module does the same through `cryptography` (OpenSSL too) for the chunks Python
handles.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from skymemory.protocol.seal_layout import ONE_CHUNK, SealLayout  # noqa: F401 - what the seal binds

KEY_ID_LEN, NONCE_LEN, TAG_LEN = 4, 12, 16
OVERHEAD = KEY_ID_LEN + NONCE_LEN + TAG_LEN  # 32 bytes of every sealed chunk
KEY_LEN = 16  # AES-128
MASTER_LEN = 32
AAD_PREFIX = b"skymemory seal v2\0"
HKDF_SALT = b"skymemory seal v1"
FILE_HEADER = "skymem-content-keys 1"
DEFAULT_TENANT = ""
MAX_TENANT_BYTES = 1024


class SealError(ValueError):
    """A chunk that does not open: not sealed, an unknown key id, or altered (the tag does not match)."""


class KeyFileError(ValueError):
    """A content key file that cannot be read, in one line naming the file and line."""


def plain_chunk_bytes(chunk_bytes: int) -> int:
    """Content bytes a sealed chunk of `chunk_bytes` on the wire carries."""
    if chunk_bytes <= OVERHEAD:
        raise ValueError(f"a sealed chunk needs more than {OVERHEAD} bytes, got {chunk_bytes}")
    return chunk_bytes - OVERHEAD


def aad(block_hash: bytes, chunk_id: int, chunk_count: int, n_bytes: int, key_id: int, layout: SealLayout) -> bytes:
    """The associated data of one chunk (what the sealed bytes are bound to)."""
    return AAD_PREFIX + block_hash + struct.pack(">IIQIIII", chunk_id, chunk_count, n_bytes, key_id,
                                                 layout.chunk_bytes, layout.stripe_k, layout.stripe_m)


def check_tenant(tenant: str | None) -> str:
    tenant = DEFAULT_TENANT if tenant is None else tenant
    if not isinstance(tenant, str):
        raise TypeError(f"a tenant (cache salt) is a string, got {type(tenant).__name__}")
    if len(tenant.encode()) > MAX_TENANT_BYTES:
        raise ValueError(f"a tenant (cache salt) is at most {MAX_TENANT_BYTES} bytes")
    return tenant


@lru_cache(maxsize=1024)
def tenant_key(master: bytes, tenant: str) -> bytes:
    """The AES-128 key of `tenant` under one master (HKDF-SHA256): knowing one tenant's says nothing of
    another's, nor of the master."""
    return HKDF(algorithm=hashes.SHA256(), length=KEY_LEN, salt=HKDF_SALT,
                info=b"tenant " + tenant.encode()).derive(master)


@dataclass
class ContentKeys:
    """The ground's content masters by key id (the newest seals; every id in the file opens)."""

    masters: dict[int, bytes] = field(default_factory=dict)
    path: Path | None = None
    # ids retired from this file: never given to a new master (a chunk sealed under one would otherwise fail to
    # open under the new master as "altered", and the satellite holding it be blamed)
    retired: set[int] = field(default_factory=set)

    @classmethod
    def new(cls) -> "ContentKeys":
        return cls({1: os.urandom(MASTER_LEN)})

    @property
    def current_id(self) -> int:
        if not self.masters:
            raise KeyFileError(f"{self.path or 'content keys'}: no key left (every id was retired)")
        return max(self.masters)

    def rotate(self) -> int:
        """A new master under the next id (new chunks are sealed under it); returns the id."""
        key_id = max(self.masters.keys() | self.retired, default=0) + 1
        if key_id > 0xFFFFFFFF:
            raise KeyFileError("no key id left")
        self.masters[key_id] = os.urandom(MASTER_LEN)
        return key_id

    def retire(self, key_id: int) -> None:
        """Forget a key id: chunks sealed under it no longer open (they are misses)."""
        if key_id not in self.masters:
            raise KeyFileError(f"no content key id {key_id} (ids: {', '.join(map(str, sorted(self.masters)))})")
        if len(self.masters) == 1:
            raise KeyFileError(f"key id {key_id} is the only one: rotate first, then retire it")
        del self.masters[key_id]
        self.retired.add(key_id)

    def sealer(self, tenant: str | None = None) -> "Sealer":
        """Seals and opens the chunks of one tenant."""
        tenant = check_tenant(tenant)
        return Sealer({k: tenant_key(m, tenant) for k, m in self.masters.items()}, self.current_id, tenant)

    # ---- the file ---------------------------------------------------------------------------------------
    def text(self) -> str:
        return (f"# SkyMemory content keys: ground hosts only, never a satellite (ground/skymemory/protocol/seal.py)\n"
                f"{FILE_HEADER}\n" + "".join(f"seal {k} {m.hex()}\n" for k, m in sorted(self.masters.items()))
                + "".join(f"retired {k}\n" for k in sorted(self.retired)))

    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write the file (mode 0600 from its creation on), replacing it in one rename."""
        path = Path(path or self.path or "")
        if not path.name:
            raise ValueError("no path to save the content keys to")
        tmp = path.with_name(path.name + ".new")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.text())
        os.replace(tmp, path)
        self.path = path
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ContentKeys":
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise KeyFileError(f"cannot read content key file {path}: {exc.strerror}") from None
        masters: dict[int, bytes] = {}
        retired: set[int] = set()
        header = False
        for lineno, line in enumerate(text.splitlines(), 1):
            parts = line.split("#", 1)[0].split()
            if not parts:
                continue
            where = f"{path} line {lineno}"
            if not header:
                if parts != FILE_HEADER.split():
                    raise KeyFileError(f"{where}: expected \"{FILE_HEADER}\"")
                header = True
                continue
            if len(parts) == 2 and parts[0] == "retired" and parts[1].isdigit():
                key_id = int(parts[1])
                if not 1 <= key_id <= 0xFFFFFFFF or key_id in masters or key_id in retired:
                    raise KeyFileError(f"{where}: a retired key id must be 1..2^32-1, appear once and hold no key, "
                                       f"got {key_id}")
                retired.add(key_id)
                continue
            if len(parts) != 3 or parts[0] != "seal" or not parts[1].isdigit():
                raise KeyFileError(f"{where}: expected \"seal KEY_ID HEX\" or \"retired KEY_ID\"")
            key_id = int(parts[1])
            if not 1 <= key_id <= 0xFFFFFFFF or key_id in masters or key_id in retired:
                raise KeyFileError(f"{where}: key id must be 1..2^32-1 and appear once, got {key_id}")
            try:
                master = bytes.fromhex(parts[2])
            except ValueError:
                raise KeyFileError(f"{where}: key is not an even number of hex digits") from None
            if len(master) != MASTER_LEN:
                raise KeyFileError(f"{where}: a master is {MASTER_LEN} bytes, got {len(master)}")
            masters[key_id] = master
        if not masters:
            raise KeyFileError(f"{path}: no content key (expected \"{FILE_HEADER}\" and \"seal KEY_ID HEX\" lines)")
        return cls(masters, path, retired)


class Sealer:
    """One tenant's keys: seals chunks under the current id, opens a chunk under the id it names."""

    def __init__(self, keys: dict[int, bytes], current_id: int, tenant: str = DEFAULT_TENANT) -> None:
        if current_id not in keys:
            raise ValueError(f"current key id {current_id} has no key")
        self.keys = dict(keys)
        self.current_id = current_id
        self.tenant = tenant
        self._aead = {k: AESGCM(v) for k, v in self.keys.items()}

    def seal_chunk(self, block_hash: bytes, chunk_id: int, chunk_count: int, n_bytes: int, plain: bytes, *,
                   layout: SealLayout) -> bytes:
        key_id = self.current_id
        head = struct.pack(">I", key_id) + os.urandom(NONCE_LEN)
        return head + self._aead[key_id].encrypt(head[KEY_ID_LEN:], bytes(plain),
                                                 aad(block_hash, chunk_id, chunk_count, n_bytes, key_id, layout))

    def open_chunk(self, block_hash: bytes, chunk_id: int, chunk_count: int, n_bytes: int, sealed, *,
                   layout: SealLayout) -> bytes:
        sealed = bytes(sealed)
        if len(sealed) < OVERHEAD:
            raise SealError(f"a sealed chunk is at least {OVERHEAD} bytes, got {len(sealed)}")
        (key_id,) = struct.unpack_from(">I", sealed)
        cipher = self._aead.get(key_id)
        if cipher is None:
            raise SealError(f"sealed under key id {key_id}, which this ground does not hold (retired, or another "
                            "constellation's)")
        try:
            return cipher.decrypt(sealed[KEY_ID_LEN:KEY_ID_LEN + NONCE_LEN], sealed[KEY_ID_LEN + NONCE_LEN:],
                                  aad(block_hash, chunk_id, chunk_count, n_bytes, key_id, layout))
        except InvalidTag:
            raise SealError("the chunk does not open: altered, or not this block's chunk "
                            f"{chunk_id} of {chunk_count} cut as {layout}") from None

    def seal_block(self, block_hash: bytes, payload: bytes, chunk_bytes: int) -> list[bytes]:
        """A block's sealed chunks, each at most `chunk_bytes` on the wire (uncoded)."""
        plain = plain_chunk_bytes(chunk_bytes)
        count = max(1, -(-len(payload) // plain))
        view, layout = memoryview(payload), SealLayout(chunk_bytes)
        return [self.seal_chunk(block_hash, i, count, len(payload), view[i * plain:(i + 1) * plain], layout=layout)
                for i in range(count)]

    def open_block(self, block_hash: bytes, chunks: list, n_bytes: int, chunk_bytes: int) -> bytes:
        """The block from its sealed chunks, in order (SealError names the first that does not open)."""
        layout = SealLayout(chunk_bytes)
        return b"".join(self.open_chunk(block_hash, i, len(chunks), n_bytes, c, layout=layout)
                        for i, c in enumerate(chunks))

    def c_keys(self) -> list[tuple[int, bytes]]:
        """(key id, AES key) pairs for the C fast path, the current id first."""
        return [(self.current_id, self.keys[self.current_id])] + [(k, v) for k, v in self.keys.items()
                                                                   if k != self.current_id]


NO_KEY_FILE = ("names no content key file (it was written before sealing): launch the constellation again, "
               "or pass --no-seal to store in the clear")


def content_keys_for_manifest(manifest) -> ContentKeys:
    """The ground's content keys of a launched constellation (the manifest's content_key_file), read again
    when the file changes (`skymemory keys rotate` in another process)."""
    path = getattr(manifest, "content_key_file", "")
    if not path:
        raise KeyFileError(f"the manifest {NO_KEY_FILE}")
    return _load_fresh(str(path))


def _load_fresh(path: str) -> ContentKeys:
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError as exc:
        raise KeyFileError(f"cannot read content key file {path}: {exc.strerror}") from None
    return _load_stamped(path, stamp)


@lru_cache(maxsize=16)
def _load_stamped(path: str, _stamp: int) -> ContentKeys:
    return ContentKeys.load(path)


def sealer_for_manifest(manifest, tenant: str | None = None, *, seal: bool = True) -> Sealer | None:
    """The sealer of `tenant` on a launched constellation; None when `seal` is False (--no-seal: content
    travels and rests in the clear, for benchmarks that compare)."""
    if not seal:
        return None
    return content_keys_for_manifest(manifest).sealer(tenant)
