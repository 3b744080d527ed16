"""A prompt's cached prefix, found and priced: one way for every engine.

KVCManager (transformers) and the vLLM connector's scheduler name a prompt's
blocks, look up their longest cached prefix and decide how much of it to load
through one PrefixFinder. What is theirs to say stays theirs: the rates they
decide on (a calibration of the device, or forwards the engine timed), which
records their store can read, and whether a failure raises (strict) or is a
miss.

  hashes(root, tokens, keys)   the chained hashes of the prompt's full blocks,
                               keyed to its tenant and adapter (kv.naming.extra_keys)
  lookup(root, hashes)         the longest prefix the ground index holds, and past
                               it, with records in orbit (kv.index.orbit_records), the
                               blocks other ground hosts stored: read through and
                               learnt into the index (wait=False: on a worker
                               thread, the answer "pending" until it is in); when
                               the index knows nothing of this root and a probe
                               store is given, the paper's binary search over
                               probe_block (§3.8 Get KVC 3-6), learnt into the index
  decide(rates, ...)           fetch, recompute, a split or a partial load, on
                               this finder's policy and its link estimate
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..decide.costmodel import Decision
from ..decide.policy import FetchPolicy, LinkEstimate
from ..naming.blocks import chain_hashes, split_blocks
from ..naming.extra_keys import RequestKeys
from ..store import BlockRecord, BlockStore
from .orbit_records import OrbitRecords
from .radix import IndexEntry, RadixIndex
from .saving import BlockFormat

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """The records of a prompt's longest cached prefix, and where they were found ("index", "orbit", "probe" or
    "none"). pending: an orbit lookup of the blocks after them runs (wait=False): ask again shortly."""
    records: list[BlockRecord]
    source: str
    pending: bool = False


NOTHING = Found([], "none")


class PrefixFinder:
    """Names, finds and prices one model's cached prefixes (one per engine and model)."""

    def __init__(self, index: RadixIndex, *, block_tokens: int, block_bytes: int, layers: int, policy: str = "auto",
                 link_name: str = "skymemory", probe: BlockStore | None = None,
                 form: BlockFormat | None = None, orbit: OrbitRecords | None = None) -> None:
        if probe is not None and form is None:
            raise ValueError("a probe store needs the block format its findings are indexed with (form=)")
        self.index = index
        self.block_tokens = block_tokens
        self.block_bytes = block_bytes
        self.layers = layers
        self.policy = FetchPolicy(policy)
        self.link = LinkEstimate(link_name)  # learns from the transfers its engine reports
        self.probe = probe  # a store to binary-search when the index knows nothing of a root (None: never)
        self.form = form  # what the index says of a block a probe found
        self.orbit = orbit  # records in orbit: the blocks other ground hosts stored (None: this index only)

    def hashes(self, root: bytes, tokens: list[int], keys: RequestKeys, n_blocks: int | None = None) -> list[bytes]:
        """The chain hashes of the first `n_blocks` full blocks of `tokens` (all of them by default), with the
        keys folded in where vLLM folds them. Raises Unkeyable for keys that cannot be formed."""
        blocks = split_blocks(tokens, self.block_tokens)
        if n_blocks is not None:
            blocks = blocks[:n_blocks]
        return chain_hashes(root, blocks, keys.per_block(len(blocks), self.block_tokens))

    def lookup(self, root: bytes, hashes: list[bytes], *, readable: Callable[[BlockRecord], bool] | None = None,
               strict: bool = False, what: str = "KV lookup", tenant: str | None = None, wait: bool = True,
               orbit: bool = True) -> Found:
        """The longest cached prefix of `hashes`, ended before the first record `readable` refuses (a record
        the caller's store cannot read: its prefix stops there). A failure (an unreadable index, a probe that
        timed out) is a miss, logged as `what` failing; strict raises it instead. tenant: whose records (they
        are sealed under its key). wait=False: never wait on the orbit (Found.pending instead). orbit=False:
        this host's index only."""
        if not hashes:
            return NOTHING
        try:
            found = self._lookup(root, hashes, tenant, wait, orbit)
        except Exception as exc:  # noqa: BLE001 - an unreadable index is a miss, never a stalled engine
            if strict:
                raise
            log.warning("%s failed (%r): a miss", what, exc)
            return NOTHING
        if readable is not None:
            end = next((i for i, r in enumerate(found.records) if not readable(r)), len(found.records))
            found = Found(found.records[:end], found.source if end else "none", found.pending)
        return found

    def _lookup(self, root: bytes, hashes: list[bytes], tenant: str | None, wait: bool, orbit: bool) -> Found:
        entries = self.index.longest_prefix(root, hashes)
        if orbit and self.orbit is not None and len(entries) < len(hashes):
            parent = entries[-1].block_hash if entries else root
            rest = hashes[len(entries):]
            if not wait:
                pending = self.orbit.find_later(parent, rest, tenant, self._learn)
                return Found([e.record for e in entries], "index" if entries else "none", pending)
            more = self.orbit.find(parent, rest, tenant)
            if more:
                self._learn(more)
                return Found([e.record for e in entries + more], "orbit")
        if entries or self.probe is None or self.index.knows_root(root):
            return Found([e.record for e in entries], "index" if entries else "none")
        return self._probe_search(root, hashes)

    def forget_absent(self, hashes: list[bytes]) -> None:
        """Blocks on their way into orbit: the next lookup asks for their records again (OrbitRecords.forget_absent)."""
        if self.orbit is not None:
            self.orbit.forget_absent(hashes)

    def _learn(self, entries: list[IndexEntry]) -> None:
        """Blocks found in orbit go into the local index: the next lookup of them is local."""
        if entries:
            self.index.insert_entries(entries)

    def _probe_search(self, root: bytes, hashes: list[bytes]) -> Found:
        """Binary search for the last block whose chunk 0 answers a probe; what it finds goes into the index."""
        probed: dict[int, BlockRecord] = {}
        low, high = 0, len(hashes)  # blocks [0, low) known cached; [high, n) known missing
        while low < high:
            middle = (low + high + 1) // 2  # candidate prefix length
            record = self.probe.probe_block(hashes[middle - 1])
            if record is not None:
                probed[middle - 1] = record
                low = middle
            else:
                high = middle - 1
        records = []
        for position in range(low):  # the blocks below the last hit: their records too
            record = probed.get(position) or self.probe.probe_block(hashes[position])
            if record is None:
                break
            records.append(record)
        self.index.insert_chain(root, [(record, self.form.meta(position)) for position, record in enumerate(records)])
        return Found(records, "probe" if records else "none")

    def decide(self, rates, *, prompt_tokens: int, cached_blocks: int, streaming: bool, mode: str | None = None,
               split: bool = False, near: bool = False, block_bytes: int | None = None) -> Decision:
        """How many of `cached_blocks` to load (kv.decide.policy.FetchPolicy.decide, on this finder's link estimate).

        rates: the engine's compute and rebuild rates (kv.decide.policy.EngineRates or a calibration's DeviceRates;
        None before they are known). near: a tier next to the model holds every one of those blocks.
        block_bytes: what one block of this prefix costs to fetch, when not this finder's block size (a grouped
        model's prefix fetches its window's blocks and one state: kv.decide.throughput.prefix_fetch_bytes per block)."""
        return self.policy.decide(rates, self.link, prompt_tokens=prompt_tokens, cached_blocks=cached_blocks,
                                  block_tokens=self.block_tokens, layers=self.layers,
                                  block_bytes=self.block_bytes if block_bytes is None else block_bytes,
                                  streaming=streaming, mode=mode, split=split, near=near)
