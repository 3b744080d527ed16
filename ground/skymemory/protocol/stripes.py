"""Coded stripes: where a block's data and parity chunks go, and the Reed-Solomon code that makes them.

A block of C data chunks stored with parity m is cut into stripes of k data chunks (the last may have
fewer) and each stripe gets m parity chunks; any k chunks of a stripe give its data back (the C fast
path's skymem_stripe.c: Intel ISA-L's Cauchy Reed-Solomon). On the wire a stripe's chunks are consecutive
chunk ids: stripe s holds ids s*n .. s*n + w - 1 (n = k + m, w = r_s + m). Their roles are its r_s data
chunks in order, then its parity, rotated: role i is at position (i + shift) mod w, the shift stepping by
one n times over the block (skymem_stripe.h). Chunk id c goes to server c mod n, as every chunk does today
(store.contract), so:
- a full stripe's n chunks are on n distinct servers, the strategy's first n;
- every one of them holds parity in m n-ths of the stripes and data in the rest, in long runs: a healthy get
  (which asks no parity) reads from all n, not k of them, and asks each for a few spans;
- the satellites see ordinary chunks (a block of W chunks: `Stripes.wire_chunks`), and GET_CHUNKS,
  MIGRATE and EVICT_BLOCK need no change;
- m = 0 is today's layout exactly (one "stripe" per chunk, nothing added).

Parity is computed over a chunk's content before it is sealed, and is sealed like any chunk: a reader
opens every chunk it decodes from (protocol.seal), so what a decode gives back is authentic.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from skymemory.protocol.native import ffi, lib

MAX_STRIPE_CHUNKS = 32  # k + m at most (skymem_stripe.h): one chunk per satellite of a stripe
DEFAULT_PARITY = 2  # m: two satellites of a stripe may be lost, slow or lying
DEFAULT_DATA = 8  # k: with m = 2, a stripe on the 10 satellites a store uses by default


class StripeError(ValueError):
    """A stripe that cannot be coded or decoded (bad arguments, or fewer than k chunks intact)."""


@dataclass(frozen=True)
class Stripes:
    """The layout of one block: `data_chunks` data chunks in stripes of k data + m parity chunks."""

    k: int
    m: int
    data_chunks: int

    def __post_init__(self) -> None:
        if self.k < 1 or self.m < 0 or self.k + self.m > MAX_STRIPE_CHUNKS:
            raise StripeError(f"a stripe of {self.k} data and {self.m} parity chunks: k must be at least 1, m at "
                              f"least 0, and k + m at most {MAX_STRIPE_CHUNKS}")
        if self.data_chunks < 1:
            raise StripeError(f"a block has at least one data chunk, not {self.data_chunks}")

    @property
    def n(self) -> int:
        return self.k + self.m

    @property
    def count(self) -> int:
        """Stripes in the block."""
        return -(-self.data_chunks // self.k)

    def data_in(self, stripe: int) -> int:
        """Data chunks in stripe `stripe` (k, or fewer in the last)."""
        return min(self.k, self.data_chunks - stripe * self.k)

    @property
    def wire_chunks(self) -> int:
        """Chunks the satellites hold: the data's and the parity's."""
        return self.data_chunks + self.count * self.m

    def shift(self, stripe: int) -> int:
        """Stripe `stripe`'s rotation: the position of its first data chunk."""
        return stripe * self.n // self.count if self.m else 0

    def member(self, stripe: int, role: int) -> int:
        """The wire id of the chunk with role `role` in stripe `stripe` (its data chunks in order, then parity)."""
        width = self.data_in(stripe) + self.m
        return stripe * self.n + (role + self.shift(stripe)) % width

    def wire_id(self, data_chunk: int) -> int:
        """The chunk id on the wire of data chunk `data_chunk`."""
        return self.member(data_chunk // self.k, data_chunk % self.k)

    def wire_ids(self) -> np.ndarray:
        """Every data chunk's wire id, in data order (wire_id of each, at once). Read-only: one array per layout,
        kept (a get reads it a few times per block, and a block's layout recurs)."""
        return _wire_ids(self.k, self.m, self.data_chunks)

    def members(self, stripe: int) -> list[int]:
        """The wire ids of stripe `stripe`, by role: its data chunks, then its m parity chunks."""
        return [self.member(stripe, role) for role in range(self.data_in(stripe) + self.m)]

    @classmethod
    def from_wire(cls, wire_chunks: int, k: int, m: int) -> "Stripes":
        """The layout whose blocks the satellites hold as `wire_chunks` chunks (what a probe sees)."""
        full, rest = divmod(wire_chunks, k + m)
        if rest and rest <= m:
            raise StripeError(f"{wire_chunks} chunks cannot be a block in stripes of {k} + {m}")
        return cls(k, m, full * k + (rest - m if rest else 0))


@functools.lru_cache(maxsize=256)
def _wire_ids(k: int, m: int, data_chunks: int) -> np.ndarray:
    d = np.arange(data_chunks, dtype=np.int64)
    stripe, role = d // k, d % k
    width = np.minimum(k, data_chunks - stripe * k) + m
    stripes = -(-data_chunks // k)
    shift = stripe * (k + m) // stripes if m else 0
    ids = stripe * (k + m) + (role + shift) % width
    ids.flags.writeable = False
    return ids


def _pointers(rows: Sequence[np.ndarray]):
    return ffi.new("uint8_t *[]", [ffi.from_buffer("uint8_t[]", row) for row in rows])


def encode(data: Sequence[np.ndarray], m: int) -> list[np.ndarray]:
    """The m parity chunks of one stripe's data chunks (uint8 arrays of one length; pad a short one)."""
    k = len(data)
    length = _one_length(data)
    parity = [np.empty(length, dtype=np.uint8) for _ in range(m)]
    keep = [np.ascontiguousarray(d, dtype=np.uint8) for d in data]
    if lib.skymem_stripe_encode(k, m, length, _pointers(keep), _pointers(parity)) != 0:
        raise StripeError(f"cannot code a stripe of {k} data and {m} parity chunks")
    return parity


def decode(chunks: Sequence[np.ndarray], present: Sequence[bool], k: int) -> None:
    """Rebuild, in place, every data chunk of one stripe that is not present from the first k that are.

    chunks: the stripe's k data chunks then its parity chunks, uint8 arrays of one length (writable);
    present: which hold intact bytes. Raises StripeError when fewer than k are present."""
    m = len(chunks) - k
    length = _one_length(chunks)
    if len(present) != len(chunks):
        raise StripeError(f"{len(present)} presence flags for {len(chunks)} chunks")
    flags = ffi.new("uint8_t[]", [1 if p else 0 for p in present])
    status = lib.skymem_stripe_decode(k, m, length, _pointers(chunks), flags)
    if status == -2:
        raise StripeError(f"{sum(map(bool, present))} of a stripe's {len(chunks)} chunks are intact: "
                          f"its data needs {k}")
    if status != 0:
        raise StripeError(f"cannot decode a stripe of {k} data and {m} parity chunks")


def cut(payload, k: int, m: int, plain: int) -> list[bytes]:
    """The content of every chunk on the wire of `payload` coded in stripes of k + m, in wire order: each
    stripe's data chunks as they are (`plain` bytes, the last maybe fewer), then its m parity chunks (`plain`
    bytes each). What the C fast path sends, for code that moves chunks one by one (the rotating store)."""
    view = memoryview(payload).cast("B")
    layout = Stripes(k, m, max(1, -(-len(view) // plain)))
    out: list[bytes] = []
    for stripe in range(layout.count):
        first = stripe * k * plain
        data = [bytes(view[first + i * plain:first + (i + 1) * plain]) for i in range(layout.data_in(stripe))]
        rows = [_padded(d, plain) for d in data] + [np.zeros(plain, dtype=np.uint8)] * (k - len(data))
        by_role = data + [p.tobytes() for p in encode(rows, m)]
        in_place: list[bytes] = [b""] * len(by_role)
        for role, content in enumerate(by_role):
            in_place[layout.member(stripe, role) - stripe * layout.n] = content
        out += in_place
    return out


def join(layout: Stripes, contents: dict[int, bytes], plain: int, n_bytes: int | None) -> bytes:
    """The block's content from the chunks that came (wire id -> content): a stripe whose data chunks did not all
    come is rebuilt from any of its chunks, as many as it has data chunks. `n_bytes`: the block's size (None:
    the last data chunk must have come, its length tells). StripeError when a stripe has too few."""
    parts: list[bytes] = []
    for stripe in range(layout.count):
        ids = list(layout.members(stripe))
        r = layout.data_in(stripe)
        if all(i in contents for i in ids[:r]):
            parts += [contents[i] for i in ids[:r]]
            continue
        if len(set(ids) & contents.keys()) < r:
            raise StripeError(f"stripe {stripe}: {len(set(ids) & contents.keys())} of its {len(ids)} chunks came, "
                              f"its data needs {r}")
        rows = [_padded(contents.get(i, b""), plain) for i in ids[:r]]
        rows += [np.zeros(plain, dtype=np.uint8) for _ in range(layout.k - r)]
        rows += [_padded(contents.get(i, b""), plain) for i in ids[r:]]
        present = [i in contents for i in ids[:r]] + [True] * (layout.k - r) + [i in contents for i in ids[r:]]
        decode(rows, present, layout.k)
        parts += [rows[i].tobytes() for i in range(r)]
    last = layout.wire_id(layout.data_chunks - 1)
    if n_bytes is None:
        if last not in contents:
            raise StripeError("the block's size is unknown and its last data chunk was rebuilt")
        n_bytes = (layout.data_chunks - 1) * plain + len(contents[last])
    return b"".join(parts)[:n_bytes]


def _padded(chunk: bytes, plain: int) -> np.ndarray:
    row = np.zeros(plain, dtype=np.uint8)
    row[:len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
    return row


def _one_length(chunks: Sequence[np.ndarray]) -> int:
    lengths = {len(c) for c in chunks}
    if len(lengths) != 1 or 0 in lengths:
        raise StripeError(f"a stripe's chunks must all be one non-zero length, got {sorted(lengths)}")
    return lengths.pop()
