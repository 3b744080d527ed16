"""KVCManager: the paper's interface (§3.3) on a transformers model.

    manager = KVCManager(model, tokenizer, store)
    manager.add_blocks(prompt)          # compute the prompt's KV once, store new full blocks
    result = manager.get_cache(prompt)  # longest cached prefix as a DynamicCache
    result = manager.get_cache(prompt, streaming=True)  # the same, its layers streamed in during the forward
    model.generate(result.input_ids, past_key_values=result.cache, ...)

`get_cache` never raises into generation (unless strict=True): a block that is
missing, late, truncated or corrupt ends the prefix there, is logged, evicted
from the constellation (lazy eviction, §3.9) and dropped from the local index
together with the blocks after it; the model then computes what is missing.

Lookup order (§3.8, §3.10): the local radix index first (no round trip); when
it knows nothing about this model's chains, the paper's binary search over
`probe_block` of the hash list finds the longest cached prefix.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import DynamicCache

from . import codec
from .blocks import chain_hashes, model_fingerprint, root_hash, split_blocks, tokenizer_fingerprint, usable_blocks
from .models import cache_dir
from .radix import RadixIndex
from .store import BlockMiss, BlockRecord, make_miss

log = logging.getLogger(__name__)

LAYOUT = f"layer-major-v{codec.VERSION}"


@dataclass
class CacheResult:
    """What get_cache found. `cache` is single-use: generate() appends to it."""

    cache: DynamicCache
    input_ids: torch.Tensor  # [1, n] the whole prompt, on the model's device
    prefix_tokens: int  # tokens covered by `cache`
    blocks: list[bytes]  # hashes of the blocks in `cache`, in order
    usable_blocks: int  # full blocks the prompt could have used
    miss_reason: str | None  # None: every usable block was found
    source: str  # "index", "probe" or "none"
    lookup_s: float = 0.0
    retrieval_s: float = 0.0
    decode_s: float = 0.0
    bytes_retrieved: int = 0

    @property
    def hit(self) -> bool:
        return self.prefix_tokens > 0

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.ones_like(self.input_ids)


@dataclass
class PrefixLookup:
    """A prompt's tokens and the records of its longest cached prefix (nothing fetched yet)."""

    input_ids: torch.Tensor  # [1, n] the whole prompt, on the model's device
    usable_blocks: int  # full blocks the prompt could use
    records: list[BlockRecord]  # the longest cached prefix, in order
    source: str  # "index", "probe" or "none"
    lookup_s: float


@dataclass
class AddResult:
    blocks_total: int  # full blocks in the prompt
    blocks_cached_before: int  # already in the cache (not stored again)
    blocks_stored: int
    bytes_stored: int = 0
    compute_s: float = 0.0
    encode_s: float = 0.0
    store_s: float = 0.0
    error: str | None = None
    hashes: list[bytes] = field(default_factory=list, repr=False)


class KVCManager:
    """Caches a model's prompt KV in a block store (one manager per model + tokenizer).

    store          anything with put_block / get_block / probe_block / evict_block
                   (docs/CONTRACTS.md); get_block must be thread-safe when
                   fetch_workers > 1 (blocks are fetched in parallel)
    block_tokens   tokens per block (the paper's 128)
    kv_dtype       how KV travels: fp16 (default), bf16, fp32, int8 (quanto), or
                   auto (the model's dtype: cached generation is then token-identical;
                   fp16 KV for an fp32 model rounds it, which can flip a near-tie)
    index_dir      where the radix index file lives (default ~/.cache/skymemory/index)
    strict         raise BlockMiss instead of returning a shorter cache
    probe          binary-search the store with probe_block when the index knows
                   nothing about this model's chains

    The tokenizer's fingerprint is taken once here (a different tokenizer means
    a new manager); the model's is re-checked on every call (cheap: the weights
    digest is recomputed only when a tensor changed).
    """

    def __init__(
        self,
        model,
        tokenizer,
        store,
        *,
        block_tokens: int = 128,
        kv_dtype: str = "fp16",
        index_dir: str | Path | None = None,
        strict: bool = False,
        probe: bool = True,
        fetch_workers: int = 4,
        index: RadixIndex | None = None,
    ):
        if block_tokens <= 0:
            raise ValueError("block_tokens must be positive")
        if fetch_workers <= 0:
            raise ValueError("fetch_workers must be positive")
        self.model = model
        self.tokenizer = tokenizer
        self.store = store
        self.block_tokens = block_tokens
        if kv_dtype == "auto":  # the model's own precision: bit-exact prefixes
            kv_dtype = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(model.dtype, "fp16")
        self.kv_format = codec.check_format(kv_dtype)
        self.strict = strict
        self.probe = probe
        self.fetch_workers = fetch_workers
        self.index = index if index is not None else RadixIndex(index_dir if index_dir is not None else cache_dir() / "index")
        self.geometry = codec.BlockGeometry.from_config(model.config, block_tokens)
        self._tokenizer_fp = tokenizer_fingerprint(tokenizer)
        self.root = self.current_root()
        # a store that evicts on its own (RotatingBlockStore: LRU notices, lazy evictions)
        # tells us, so the index never points at a block that is gone
        subscribe = getattr(store, "subscribe_evictions", None)
        if callable(subscribe):
            subscribe(self.on_block_evicted)

    def on_block_evicted(self, block_hash: bytes) -> None:
        """The store dropped this block: forget it and every block after it in its chains."""
        removed = self.index.remove(block_hash)
        if removed:
            log.info("KV block %s evicted by the store: %d index entries dropped", block_hash.hex()[:16], removed)

    # ------------------------------------------------------------------ hashing

    def current_root(self) -> bytes:
        """The chain root for the model as it is now (the weights digest is cached per model version)."""
        return root_hash(
            model_fingerprint(self.model), self._tokenizer_fp, kv_format=self.kv_format, block_tokens=self.block_tokens
        )

    def token_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt).input_ids)
        return [int(t) for t in prompt]

    def block_hashes(self, token_ids: list[int], n_blocks: int | None = None) -> list[bytes]:
        blocks = split_blocks(token_ids, self.block_tokens)
        if n_blocks is not None:
            blocks = blocks[:n_blocks]
        self.root = self.current_root()  # follows in-place weight changes
        return chain_hashes(self.root, blocks)

    # ------------------------------------------------------------------ lookup

    def find_prefix(self, prompt: str | list[int]) -> PrefixLookup:
        """Tokenise, hash the usable blocks and look their longest cached prefix up (get_cache's first half)."""
        started = time.perf_counter()
        token_ids = self.token_ids(prompt)
        n_usable = usable_blocks(len(token_ids), self.block_tokens)
        records, source = self._lookup_or_miss(self.block_hashes(token_ids, n_usable), "KV lookup")
        input_ids = torch.tensor([token_ids], dtype=torch.long, device=self.model.device)
        return PrefixLookup(input_ids, n_usable, records, source, time.perf_counter() - started)

    def _lookup_or_miss(self, hashes: list[bytes], what: str) -> tuple[list[BlockRecord], str]:
        """_lookup, with a failure (a probe timing out, say) a miss unless strict."""
        try:
            return self._lookup(hashes)
        except Exception as exc:  # noqa: BLE001 - a failed probe is a miss, not a crash
            if self.strict:
                raise
            log.warning("%s failed: %r", what, exc)
            return [], "none"

    def _lookup(self, hashes: list[bytes]) -> tuple[list[BlockRecord], str]:
        """Records of the longest cached prefix of `hashes`, and where they came from."""
        entries = self.index.longest_prefix(self.root, hashes)
        if entries or not self.probe or not hashes or self.index.knows_root(self.root):
            return [e.record for e in entries], "index" if entries else "none"
        return self._probe_search(hashes)

    def _probe_search(self, hashes: list[bytes]) -> tuple[list[BlockRecord], str]:
        """Paper §3.8 Get KVC 3-6: binary search for the last block whose chunk 0 answers a probe."""
        probed: dict[int, BlockRecord] = {}
        low, high = 0, len(hashes)  # blocks [0, low) known cached; [high, n) known missing
        while low < high:
            middle = (low + high + 1) // 2  # candidate prefix length
            record = self.store.probe_block(hashes[middle - 1])
            if record is not None:
                probed[middle - 1] = record
                low = middle
            else:
                high = middle - 1
        records = []
        for position in range(low):  # the blocks below the last hit: their records too
            record = probed.get(position) or self.store.probe_block(hashes[position])
            if record is None:
                break
            records.append(record)
        parent = self.root
        for position, record in enumerate(records):  # warm the index
            self.index.insert(parent, record, self._meta(position), save=False)
            parent = record.block_hash
        if records:
            self.index.save()
        return records, "probe" if records else "none"

    def _meta(self, position: int) -> dict:
        return {"kv_format": self.kv_format, "layout": LAYOUT, "tokens": self.block_tokens, "position": position}

    # ------------------------------------------------------------------ get

    def get_cache(self, prompt: str | list[int], streaming: bool = False) -> CacheResult:
        """The longest cached prefix of the prompt as a DynamicCache (possibly empty).

        streaming=True returns at once with a StreamingCache whose layers arrive while
        the model runs (kv/streaming.py; needs a store with the C fast path). A failed
        stream then raises StreamFailed from the forward pass instead of shortening the
        prefix here: `streaming.generate_streaming` handles that (evict, recompute).
        """
        if streaming:
            from .streaming import get_cache_streaming  # late import: streaming imports this module

            return get_cache_streaming(self, prompt)
        found = self.find_prefix(prompt)
        records, n_usable = found.records, found.usable_blocks

        blocks, sizes, miss, retrieval_s, decode_s = self._retrieve(records)
        started = time.perf_counter()
        cache = codec.blocks_to_cache(blocks, self.model.config, self.model.dtype, self.model.device)
        decode_s += time.perf_counter() - started

        self._learn_sizes(records[: len(blocks)], sizes)
        miss_reason = None
        if miss is not None:
            miss_reason = self._handle_miss(records, *miss)
        elif len(blocks) < n_usable:
            miss_reason = "not-cached"
        return CacheResult(
            cache=cache,
            input_ids=found.input_ids,
            prefix_tokens=len(blocks) * self.block_tokens,
            blocks=[r.block_hash for r in records[: len(blocks)]],
            usable_blocks=n_usable,
            miss_reason=miss_reason,
            source=found.source,
            lookup_s=found.lookup_s,
            retrieval_s=retrieval_s,
            decode_s=decode_s,
            bytes_retrieved=sum(sizes),
        )

    def _retrieve(self, records: list[BlockRecord]):
        """Fetch all blocks in parallel, verify and decode them in order as they arrive.

        Returns (decoded blocks, their sizes, first failure as (position, reason, detail) or None,
        seconds waiting for the store, seconds decoding). Stops at the first failure: later
        blocks are useless without it.
        """
        blocks: list[codec.DecodedBlock] = []
        sizes: list[int] = []
        if not records:
            return blocks, sizes, None, 0.0, 0.0
        started = time.perf_counter()
        decode_s, miss = 0.0, None
        workers = min(self.fetch_workers, len(records))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kv-fetch") as pool:
            futures = [pool.submit(self.store.get_block, record) for record in records]
            for position, future in enumerate(futures):
                miss, seconds = self._receive(position, records[position], future, blocks, sizes)
                decode_s += seconds
                if miss is not None:
                    for later in futures[position + 1 :]:
                        later.cancel()
                    break
        return blocks, sizes, miss, time.perf_counter() - started - decode_s, decode_s

    def _receive(self, position, record, future, blocks, sizes):
        """Wait for one block, check and decode it, append it to blocks/sizes.

        Returns (failure as (position, reason, detail) or None, seconds spent decoding).
        """
        try:
            payload = future.result()
        except BlockMiss as exc:
            return (position, getattr(exc, "reason", "") or "miss", str(exc)), 0.0
        except Exception as exc:  # noqa: BLE001 - timeouts, socket errors: all misses
            return (position, type(exc).__name__, str(exc)), 0.0
        expected = record.n_bytes  # -1: unknown (a record from probe_block)
        if expected >= 0 and len(payload) != expected:
            return (position, "incomplete", f"{len(payload)} of {expected} bytes"), 0.0
        started = time.perf_counter()
        try:
            block = codec.decode_block(payload, self.geometry, dtype=torch.float32)
            if block.header.kv_format != self.kv_format:
                raise codec.CodecError(f"block is {block.header.kv_format}, expected {self.kv_format}")
        except codec.CodecError as exc:
            return (position, "corrupt", str(exc)), time.perf_counter() - started
        blocks.append(block)
        sizes.append(len(payload))
        return None, time.perf_counter() - started

    def _learn_sizes(self, records: list[BlockRecord], sizes: list[int]) -> None:
        """Records from probe_block may not know the block size (-1); the index keeps the real one."""
        changed = False
        for record, size in zip(records, sizes):
            entry = self.index.get(record.block_hash)
            if record.n_bytes < 0 and entry is not None:
                self.index.insert(entry.parent, dataclasses.replace(record, n_bytes=size), entry.meta, save=False)
                changed = True
        if changed:
            self.index.save()

    def _handle_miss(self, records: list[BlockRecord], position: int, reason: str, detail: str) -> str:
        """Log, evict the failed block and the ones after it (lazy eviction), correct the index."""
        failed = records[position]
        log.warning("KV block %s (position %d) missing: %s %s", failed.block_hash.hex()[:16], position, reason, detail)
        for record in records[position:]:
            try:
                self.store.evict_block(record)
            except Exception as exc:  # noqa: BLE001 - eviction is best effort
                log.info("evicting %s failed: %r", record.block_hash.hex()[:16], exc)
        self.index.remove(failed.block_hash)
        if self.strict:
            raise make_miss(reason, f"block {failed.block_hash.hex()[:16]}: {reason} {detail}")
        return reason

    # ------------------------------------------------------------------ add

    def add_blocks(self, prompt: str | list[int], *, cache: DynamicCache | None = None) -> AddResult:
        """Store the prompt's full blocks that are not cached yet.

        The KV comes from one forward pass over the full blocks, or from `cache`
        when given (e.g. the cache a generate() call just filled for this prompt).
        """
        token_ids = self.token_ids(prompt)
        hashes = self.block_hashes(token_ids)
        result = AddResult(blocks_total=len(hashes), blocks_cached_before=0, blocks_stored=0, hashes=hashes)
        if not hashes:
            return result
        known, _ = self._lookup_or_miss(hashes, "KV lookup before add")
        first_new = len(known)
        result.blocks_cached_before = first_new
        if first_new == len(hashes):
            return result

        n_tokens = len(hashes) * self.block_tokens
        started = time.perf_counter()
        if cache is None or cache.get_seq_length() < n_tokens:
            ids = torch.tensor([token_ids[:n_tokens]], dtype=torch.long, device=self.model.device)
            with torch.no_grad():
                cache = self.model(input_ids=ids, use_cache=True).past_key_values
        result.compute_s = time.perf_counter() - started

        parent = self.root if first_new == 0 else hashes[first_new - 1]

        def indexed(position: int, record, payload: bytes) -> None:
            nonlocal parent
            self.index.insert(parent, record, self._meta(position), save=False)
            parent = hashes[position]
            result.blocks_stored += 1
            result.bytes_stored += len(payload)

        put_blocks = getattr(self.store, "put_blocks", None)  # all blocks' chunks in flight at once
        try:
            if put_blocks is not None:
                started = time.perf_counter()
                payloads = codec.encode_cache_blocks(cache, self.block_tokens, first_new, len(hashes) - first_new,
                                                     self.kv_format)
                result.encode_s += time.perf_counter() - started
                started = time.perf_counter()
                records = put_blocks(list(zip(hashes[first_new:], payloads)))
                result.store_s += time.perf_counter() - started
                for position, (record, payload) in enumerate(zip(records, payloads), start=first_new):
                    indexed(position, record, payload)
            else:  # block by block: the blocks stored before a failure stay indexed
                for position in range(first_new, len(hashes)):
                    started = time.perf_counter()
                    (payload,) = codec.encode_cache_blocks(cache, self.block_tokens, position, 1, self.kv_format)
                    result.encode_s += time.perf_counter() - started
                    started = time.perf_counter()
                    record = self.store.put_block(hashes[position], payload)
                    result.store_s += time.perf_counter() - started
                    indexed(position, record, payload)
        except Exception as exc:  # noqa: BLE001 - later blocks are useless without this one: stop
            if self.strict:
                raise
            log.warning("storing KV block %d failed: %r", first_new + result.blocks_stored, exc)
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.index.save()
        return result


@dataclass
class GenerationResult:
    output_ids: torch.Tensor  # [1, prompt + new]
    new_tokens: list[int]
    text: str
    lookup: CacheResult
    added: AddResult | None
    generate_s: float


def generate_with_cache(
    manager: KVCManager, prompt: str | list[int], *, max_new_tokens: int = 30, store_new: bool = True, **generate_kwargs
) -> GenerationResult:
    """get_cache -> greedy generate with the prefix -> store the prompt's new full blocks from the same cache."""
    lookup = manager.get_cache(prompt)
    generate_kwargs.setdefault("do_sample", False)
    started = time.perf_counter()
    with torch.no_grad():
        output = manager.model.generate(
            lookup.input_ids,
            attention_mask=lookup.attention_mask,
            past_key_values=lookup.cache,
            max_new_tokens=max_new_tokens,
            return_dict_in_generate=True,
            **generate_kwargs,
        )
    generate_s = time.perf_counter() - started
    added = None
    full_blocks = len(lookup.input_ids[0]) // manager.block_tokens
    if store_new and full_blocks > len(lookup.blocks):
        added = manager.add_blocks(lookup.input_ids[0].tolist(), cache=output.past_key_values)
    new_tokens = output.sequences[0, lookup.input_ids.shape[1] :].tolist()
    text = manager.tokenizer.decode(new_tokens, skip_special_tokens=True)
    return GenerationResult(output.sequences, new_tokens, text, lookup, added, generate_s)
