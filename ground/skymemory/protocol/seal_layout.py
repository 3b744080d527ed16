"""How a block is cut into chunks, as every sealed chunk binds it (protocol/seal.py's associated data).

Two layouts can give one block the same chunk count (7 data chunks: one stripe of 7 + 2 parity, or stripes of
4 + 1 and 3 + 1, are 9 on the wire either way). A chunk sealed under one layout must not open under another, or a
chunk that is data in one is read as parity in the other and a reader rebuilds other bytes. Kept apart from the
cipher (seal.py), so that a store names its blocks' layouts without loading it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SealLayout:
    """How a block is cut into chunks, bound into every chunk's seal (skymem_seal.h's skymem_seal_layout_t).

    chunk_bytes: every chunk but the last, on the wire (0: a record sealed as one chunk on its own, whatever its
    length); stripe_k, stripe_m: data and parity chunks a stripe (0, 0: uncoded)."""

    chunk_bytes: int
    stripe_k: int = 0
    stripe_m: int = 0

    def __post_init__(self) -> None:
        if not self.stripe_m:
            object.__setattr__(self, "stripe_k", 0)  # uncoded is (0, 0), whatever k a caller had at hand

    @classmethod
    def of_record(cls, record) -> "SealLayout":
        """A BlockRecord's layout: its chunk size and, coded, its stripes."""
        return cls(record.chunk_bytes, record.stripe_data, record.parity)


ONE_CHUNK = SealLayout(0)  # a record or an object's metadata, sealed as one chunk on its own
