"""KVCManager: the paper's interface (§3.3) on a transformers model.

    manager = KVCManager(model, tokenizer, store)
    manager.add_blocks(prompt)          # compute the prompt's KV once, store new full blocks
    result = manager.get_cache(prompt)  # the cached prefix worth fetching, as a DynamicCache
    result = manager.get_cache(prompt, streaming=True)  # the same, its layers streamed in during the forward
    model.generate(result.input_ids, **cache_arg(model, result.cache), ...)   # cache= or past_key_values=

Fetch or recompute: by default (policy="auto") `get_cache` fetches only what
beats recomputing on this host: all of the cached prefix, nothing, or a split
(the model recomputes the first blocks while the others are fetched on a
thread, and the two halves are joined into one cache; with streaming=True
the first blocks are fetched and the rest computed instead), from kv.decide.policy:
the device's compute and rebuild rates, calibrated once per model/device/dtype
and kept on disk, against the store's round trip and goodput measured from
its recent transfers. `result.decision` says what was decided and from which
inputs (`result.recompute_s` how long a split's own forward took);
policy="fetch" / "recompute" force it.

The path of a fetched prefix (kv.transfer.landing, kv.format.rebuild): the blocks land in one
reusable host buffer (pinned when the model is on CUDA; the constellation's C
path writes into it directly), each block is checked against the CRC32C of
its bytes as they arrived (folded from the chunks' CRCs: no second pass),
the buffer goes to the device in one copy, and each layer is rebuilt there
with one copy in the model's dtype.

`get_cache` never raises into generation (unless strict=True): a block that is
missing, late, truncated or corrupt ends the prefix there, is logged, evicted
from the constellation (lazy eviction, §3.9) and dropped from the local index
together with the blocks after it; the model then computes what is missing.

Lookup order (§3.8, §3.10): the local radix index first (no round trip); past
what it holds, the blocks' records in orbit (kv.index.orbit_records: what any other
ground host stored, one round trip to their home satellites, then learnt into
the local index); when it knows nothing about this model's chains, the paper's
binary search over `probe_block` of the hash list finds the longest cached prefix.

Models whose layers keep other state than K and V of every token (sliding windows, Mamba / gated
delta-net state, MLA's latent: kv.format.groups) have grouped blocks: kv.hf.grouped cuts, fetches
and rebuilds them (a window's blocks only; the state from the block that ended a stored prompt).
For them a stream is fetched whole (said once) and a prefix is never split; the tiers keep their blocks in rows
of the largest block's size.
An unsupported layer kind is refused when the manager is made, in one sentence.

Tenants and adapters (kv.naming.extra_keys): `cache_salt=` on get_cache / add_blocks /
generate_with_cache keys a prompt's blocks to that tenant, as vLLM's
"cache_salt" does, and the PEFT adapter active on the model (a PeftModel) is
folded into every block, by a fingerprint of its weights: a prefix is shared
with vLLM when both name the same salt and adapter, and never otherwise.
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

from ..decide.calibration import DeviceRates, disagrees, load_or_calibrate
from ..decide.costmodel import Decision
from ..decide.throughput import prefix_fetch_bytes
from ..format import codec, group_codec, rebuild
from ..format.groups import CacheLayout
from ..index import saving
from ..index.lookup import PrefixFinder
from ..index.lost import forget_from
from ..index.orbit_records import OrbitRecords
from ..index.radix import RadixIndex
from ..index.result import CacheResult, PrefixLookup
from ..index.saving import BlockFormat, BlockSave, SaveFailed
from ..model.cache_arg import cache_arg, cache_of
from ..model.models import cache_dir
from ..naming.blocks import model_fingerprint, root_hash, tokenizer_fingerprint, usable_blocks
from ..naming.extra_keys import RequestKeys, Unkeyable, active_adapter, base_model, say_once
from ..store import BlockMiss, BlockRecord, BlockStore, EvictionNotices, TenantSealing, make_miss
from ..transfer import landing
from ..transfer.streaming import get_cache_streaming
from ..transfer.tiers import BlockTiers
from .grouped import GroupedBlocks

log = logging.getLogger(__name__)

INTEGRITY = ("crc32c", "sha256")
DISAGREEMENTS = 2  # observed forwards in a row more than 2x off the rates: they are measured again


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

    store          a BlockStore (skymemory.store.contract, docs/CONTRACTS.md);
                   get_block must be thread-safe when fetch_workers > 1 (blocks
                   are fetched in parallel). Its optional capabilities are used
                   when it declares them: BulkBlockReads to land a prefix,
                   BulkBlockWrites to store a prompt's blocks in one call,
                   StreamedBlockReads for streaming=True, EvictionNotices to
                   keep the index free of blocks the store dropped
    block_tokens   tokens per block (the paper's 128)
    kv_dtype       how KV travels: fp16 (default), bf16, fp32, int8 (quanto), or
                   auto (the model's dtype: cached generation is then token-identical;
                   fp16 KV for an fp32 model rounds it, which can flip a near-tie)
    policy         "auto" (default): fetch, recompute or split, whichever is predicted fastest;
                   "fetch": always the whole cached prefix; "recompute": never
    integrity      "crc32c" (default: every block checked against the CRC of its bytes as
                   they arrived) or "sha256" (blocks also carry and are checked against
                   their SHA-256: one more pass over the bytes on both sides)
    index_dir      where the radix index file lives (default ~/.cache/skymemory/index)
    strict         raise BlockMiss instead of returning a shorter cache
    probe          binary-search the store with probe_block when the index knows
                   nothing about this model's chains
    orbit          keep every stored block's record in orbit and read through to the
                   records other ground hosts stored (kv.index.orbit_records): None (default)
                   when the store can keep them (ConstellationBlockStore.from_manifest),
                   False never, or an OrbitRecords to share
    device_rates   the calibration to decide with (default: kv.decide.calibration.load_or_calibrate,
                   measured at the first decision and kept on disk)
    device_tier_bytes, host_tier_bytes
                   copies of blocks kept near the model (kv.transfer.tiers; 0 = off, the default):
                   hot blocks in the model's device memory (LRU), and a host slab allocated
                   up front (pinned on CUDA) that loads at the host->device copy rate. A
                   serving host sets host_tier_bytes to the prefixes it wants at hand (Llama-3-8B
                   fp16: 128 KiB per token) and device_tier_bytes to the device memory it can
                   spare after weights and activations. Stored and fetched blocks are written
                   through to both; a host hit is promoted to the device tier; each block of a
                   prefix comes from the nearest tier that holds it, the rest from the store
                   (streaming=True reads the store only)

    The tokenizer's fingerprint is taken once here (a different tokenizer means
    a new manager); the model's is re-checked on every call (cheap: the weights
    digest is recomputed only when a tensor changed).
    """

    def __init__(
        self,
        model,
        tokenizer,
        store: BlockStore,
        *,
        block_tokens: int = 128,
        kv_dtype: str = "fp16",
        policy: str = "auto",
        integrity: str = "crc32c",
        index_dir: str | Path | None = None,
        strict: bool = False,
        probe: bool = True,
        fetch_workers: int = 4,
        index: RadixIndex | None = None,
        device_rates: DeviceRates | None = None,
        device_tier_bytes: int = 0,
        host_tier_bytes: int = 0,
        orbit: "OrbitRecords | bool | None" = None,
    ):
        if block_tokens <= 0:
            raise ValueError("block_tokens must be positive")
        if fetch_workers <= 0:
            raise ValueError("fetch_workers must be positive")
        if not isinstance(store, BlockStore):
            raise TypeError(f"store must be a BlockStore (put_block, get_block, probe_block, evict_block), "
                            f"not a {type(store).__name__}")
        self.model = model
        self.tokenizer = tokenizer
        self.store = store
        self.block_tokens = block_tokens
        if kv_dtype == "auto":  # the model's own precision: bit-exact prefixes
            kv_dtype = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(model.dtype, "fp16")
        self.kv_format = codec.check_format(kv_dtype)
        if integrity not in INTEGRITY:
            raise ValueError(f"unknown integrity check {integrity!r}; choose one of {', '.join(INTEGRITY)}")
        self.verify_sha256 = integrity == "sha256"
        # what each layer keeps (kv.format.groups): a model that is not all full attention of one K/V shape has grouped
        # blocks (kv.hf.grouped); a layer kind that cannot be rebuilt is refused here, in one sentence
        self.cache_layout = CacheLayout.of_model(base_model(model))
        self.grouped = None if self.cache_layout.dense else GroupedBlocks(
            self.cache_layout, block_tokens=block_tokens, kv_format=self.kv_format, sha256=self.verify_sha256)
        # a sealed store's blocks are named apart from plain ones: neither is ever taken for the other
        sealed = isinstance(store, TenantSealing) and store.sealed
        self.layout = codec.layout_name(self.verify_sha256, sealed) if self.grouped is None else \
            group_codec.layout_name(self.cache_layout, self.verify_sha256, sealed)
        self.block_format = BlockFormat(self.kv_format, self.layout, self.block_tokens)
        self._device_rates = device_rates
        self._rates_where = None  # (device, dtype) the rates were measured for; None: given by the caller
        self._rates_disagreed = 0  # forwards in a row that observe_forward found more than 2x off the rates
        self.strict = strict
        self.probe = probe
        self.fetch_workers = fetch_workers
        self.index = index if index is not None else RadixIndex(index_dir if index_dir is not None else cache_dir() / "index")
        if self.grouped is None:
            self.geometry = codec.BlockGeometry.from_config(model.config, block_tokens)
            self.block_bytes = codec.block_bytes(self.geometry, self.kv_format)
        else:  # the attention layers as a dense model's, for pricing (kv.decide.policy counts layers and bytes)
            first = self.cache_layout.attention[0] if self.cache_layout.attention else None
            self.geometry = codec.BlockGeometry(max(1, len(self.cache_layout.attention)), first.k_heads if first else 1,
                                                first.k_dim if first else 1, block_tokens)
            self.block_bytes = self.grouped.block_bytes
        # records in orbit: what other ground hosts stored is found here too
        self.orbit = orbit if isinstance(orbit, OrbitRecords) else None if orbit is False else (
            OrbitRecords.for_store(store))
        # naming, finding and pricing a prefix: kv.index.lookup, as the vLLM connector does it
        self.finder = PrefixFinder(self.index, block_tokens=block_tokens, block_bytes=self.block_bytes,
                                   layers=self.geometry.layers, policy=policy, link_name=type(store).__name__,
                                   probe=store if probe else None, form=self.block_format, orbit=self.orbit)
        self.policy, self.link = self.finder.policy, self.finder.link
        self.landing = landing.LandingBuffers(pin=torch.device(model.device).type == "cuda")
        # a split joins computed and loaded K/V by concatenation: right for a dense model only (a window layer
        # keeps its own window, a recurrent one its state), so grouped models are never split
        self.can_split = self.grouped is None
        # a grouped model's blocks differ in size (the one ending a prompt carries the state): rows of the largest
        self.tiers = BlockTiers(self.block_bytes if self.grouped is None else self.grouped.state_block_bytes,
                                model.device, device_bytes=device_tier_bytes, host_bytes=host_tier_bytes,
                                padded=self.grouped is not None)
        self._tokenizer_fp = tokenizer_fingerprint(tokenizer)
        self._said_no_streaming = False
        self.root = self.current_root()
        # a store that evicts on its own (RotatingBlockStore: LRU notices, lazy evictions)
        # tells us, so the index never points at a block that is gone
        if isinstance(store, EvictionNotices):
            store.subscribe_evictions(self.on_block_evicted)

    def on_block_evicted(self, block_hash: bytes) -> None:
        """The store dropped this block: forget it and every block after it in its chains."""
        self.tiers.discard(block_hash)  # no lookup reaches it once the index forgets it: free its copies
        removed = self.index.remove(block_hash)
        if removed:
            log.info("KV block %s evicted by the store: %d index entries dropped", block_hash.hex()[:16], removed)
            if self.orbit is not None:  # its record leaves its homes too (on a worker: this is the store's loop)
                self.orbit.forget_later([block_hash])

    # ------------------------------------------------------------------ hashing

    def current_root(self) -> bytes:
        """The chain root for the model as it is now (the weights digest is cached per model version).

        A PeftModel's root is its base model's (without the adapter layers): the adapter is keyed per block.
        """
        return root_hash(model_fingerprint(base_model(self.model)), self._tokenizer_fp, kv_format=self.kv_format,
                         block_tokens=self.block_tokens, layout=self.layout)

    def request_keys(self, cache_salt: str | None = None) -> RequestKeys:
        """What this model's blocks are keyed by besides their tokens: the salt, the active adapter
        (kv.naming.extra_keys). Raises Unkeyable for an adapter that cannot be keyed."""
        return RequestKeys(cache_salt=cache_salt or None, adapter=active_adapter(self.model))

    def token_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt).input_ids)
        return [int(t) for t in prompt]

    def block_hashes(self, token_ids: list[int], n_blocks: int | None = None, *,
                     cache_salt: str | None = None) -> list[bytes]:
        """The chain hashes of the prompt's full blocks (the first n_blocks), keyed to `cache_salt` and the
        model's active adapter. Raises Unkeyable when the adapter cannot be keyed."""
        keys = self.request_keys(cache_salt)
        self.root = self.current_root()  # follows in-place weight changes
        return self.finder.hashes(self.root, token_ids, keys, n_blocks)

    # ------------------------------------------------------------------ lookup

    def find_prefix(self, prompt: str | list[int], *, cache_salt: str | None = None) -> PrefixLookup:
        """Tokenise, hash the usable blocks and look their longest cached prefix up (get_cache's first half).

        An adapter that cannot be keyed is a miss (said once in the log; raised when strict)."""
        started = time.perf_counter()
        token_ids = self.token_ids(prompt)
        n_usable = usable_blocks(len(token_ids), self.block_tokens)
        try:
            hashes = self.block_hashes(token_ids, n_usable, cache_salt=cache_salt)
        except Unkeyable as exc:
            if self.strict:
                raise
            say_once(exc, "a prompt with ")
            hashes = []
        found = self.finder.lookup(self.root, hashes, strict=self.strict, tenant=cache_salt or None)
        input_ids = torch.tensor([token_ids], dtype=torch.long, device=self.model.device)
        return PrefixLookup(input_ids, n_usable, found.records, found.source, time.perf_counter() - started,
                            tenant=cache_salt or None)

    # ------------------------------------------------------------------ decide

    def device_rates(self) -> DeviceRates:
        """This model's compute and rebuild rates on its device (measured once, then read from disk;
        measured again when the forwards reported to observe_forward disagreed with them)."""
        where = (str(self.model.device), self.model.dtype)
        stale = self._rates_disagreed >= DISAGREEMENTS
        if stale or self._device_rates is None or (self._rates_where is not None and self._rates_where != where):
            self._device_rates = load_or_calibrate(self.model, kv_format=self.kv_format,
                                                   block_tokens=self.block_tokens, refresh=stale)
            self._rates_where = where  # measured here: measure again if the model moves
            self._rates_disagreed = 0
        return self._device_rates

    def observe_forward(self, new_tokens: int, context_tokens: int, seconds: float) -> None:
        """A forward over `new_tokens` with `context_tokens` cached that a caller timed (a prefill: context 0).

        When DISAGREEMENTS forwards in a row are more than 2x off what the rates predict (either way),
        the rates are measured again (and saved) here and now, so that no request's time to first token
        pays for it: a calibration taken on a loaded machine, or before the machine changed in a way
        its key cannot see, is not used for ever. Call it outside what you time (between requests, not
        between the parts of one). A measurement that fails keeps the rates (and the count starts again):
        it is never retried inside a request.
        """
        if self._device_rates is None or new_tokens <= 0 or seconds <= 0:
            return
        predicted = self._device_rates.prefill.forward_s(new_tokens, context_tokens)
        if not disagrees(predicted, seconds):
            self._rates_disagreed = 0
            return
        self._rates_disagreed += 1
        if self._rates_disagreed < DISAGREEMENTS:
            return
        log.warning("a forward over %d tokens (%d cached) took %.0f ms, the rates predict %.0f ms (%d in a row more "
                    "than 2x off): measuring the rates again", new_tokens, context_tokens, seconds * 1e3,
                    predicted * 1e3, DISAGREEMENTS)
        try:
            self.device_rates()
        except Exception as exc:  # noqa: BLE001 - a failed measurement must not fail the caller
            # stale rates would make the next decision (inside a request's timed get_cache) measure again
            self._rates_disagreed = 0
            log.warning("measuring the rates again failed (%r): keeping them until forwards disagree again", exc)

    def plan(self, found: PrefixLookup, *, streaming: bool = False, policy: str | None = None) -> Decision | None:
        """How many of the found blocks to fetch (None when nothing is cached)."""
        if not found.records:
            return None
        mode = policy or self.policy.mode
        rates, failed = None, None
        # every block in a tier near the model: priced as copies, not as a transfer over the store's link
        # (a stream reads the store whatever the tiers hold)
        near = not streaming and self.tiers.enabled and all(self.tiers.where(r.block_hash) for r in found.records)
        if mode == "auto" and (self.link.samples or near):
            try:
                rates = self.device_rates()
            except Exception as exc:  # noqa: BLE001 - a failed calibration must not fail the request
                if self.strict:
                    raise
                log.warning("calibrating this device failed (%r): fetching without a decision", exc)
                mode, failed = "fetch", f"calibration failed ({type(exc).__name__}: {exc}): fetching"
        priced = None
        if self.grouped is not None:  # what this prefix fetches, group by group, spread over its blocks
            fetch = prefix_fetch_bytes(self.cache_layout, len(found.records) * self.block_tokens, self.block_tokens,
                                       self.kv_format)
            priced = -(-fetch // len(found.records))
        decision = self.finder.decide(
            rates, prompt_tokens=found.input_ids.shape[1], cached_blocks=len(found.records), streaming=streaming,
            mode=mode, split=self.can_split and not streaming, near=near, block_bytes=priced)  # a stream: no split
        return decision if failed is None else dataclasses.replace(decision, reason=failed)

    # ------------------------------------------------------------------ get

    def get_cache(self, prompt: str | list[int], streaming: bool = False, *, policy: str | None = None,
                  cache_salt: str | None = None) -> CacheResult:
        """The cached prefix of the prompt worth fetching, as a DynamicCache (possibly empty).

        policy overrides the manager's for this call ("auto", "fetch", "recompute").
        cache_salt keys the lookup to a tenant: only blocks stored with the same salt
        (here or by vLLM with the same "cache_salt") are found.
        streaming=True returns at once with a StreamingCache whose layers arrive while
        the model runs (kv/transfer/streaming.py; needs a store with StreamedBlockReads). A failed
        stream then raises StreamFailed from the forward pass instead of shortening the
        prefix here: `streaming.generate_streaming` handles that (evict, recompute).
        """
        if streaming and self.grouped is not None:
            if not self._said_no_streaming:
                self._said_no_streaming = True
                log.warning("SkyMemory streams dense models' prefixes only; this model keeps %s, so its prefix is "
                            "fetched whole before the forward (said once)", self.cache_layout.in_words() + " layers")
        elif streaming:
            return get_cache_streaming(self, prompt, policy=policy, cache_salt=cache_salt)
        found = self.find_prefix(prompt, cache_salt=cache_salt)
        if self.grouped is not None:
            return self._get_grouped(found, policy)
        decision = self.plan(found, policy=policy)
        if decision is not None and decision.action == "split":
            return self._get_split(found, decision)
        records = found.records[: decision.fetch_blocks] if decision else []
        sources: dict[str, int] = {}
        cache, fetched, miss, retrieval_s, decode_s = self._fetch_prefix(records, sources, found.tenant)
        return self._result(found, decision, records, cache, recomputed=0, loaded=fetched, miss=miss,
                            sources=sources, retrieval_s=retrieval_s, decode_s=decode_s)

    def _get_grouped(self, found: PrefixLookup, policy: str | None) -> CacheResult:
        """get_cache for a grouped model (kv.hf.grouped): the usable prefix (with recurrent layers: up to the last
        block that carries the state), priced, and only the blocks it needs fetched and rebuilt."""
        found = dataclasses.replace(found, records=found.records[:self.grouped.usable(found.records)])
        decision = self.plan(found, policy=policy)
        wanted = decision.fetch_blocks if decision is not None else 0
        if self.cache_layout.states and wanted < len(found.records):
            wanted = 0  # a shorter prefix has no state to resume from
        first = self.cache_layout.first_needed(wanted, self.block_tokens)
        records = found.records[:wanted]
        fetched = self.grouped.fetch(self.store_for(found.tenant), records[first:], self.landing,
                                     prefix_blocks=wanted, model=self.model, workers=self.fetch_workers,
                                     tiers=self.tiers) if records else None
        cache, loaded, miss, retrieval_s, decode_s = DynamicCache(config=self.model.config), 0, None, 0.0, 0.0
        if fetched is not None:
            retrieval_s, decode_s = fetched.retrieval_s, fetched.decode_s
            if fetched.miss is None:
                cache, loaded = fetched.cache, wanted
                if fetched.sources["store"]:  # (a fetch from the tiers only is no sample of the link)
                    self.link.observe(fetched.bytes, fetched.retrieval_s, fetched.first_reply_s)
            else:
                position, reason, detail = fetched.miss
                miss = (first + position, reason, detail)
        result = self._result(found, decision, records, cache, recomputed=0, loaded=loaded, miss=miss,
                              sources=fetched.sources if loaded else {"store": 0}, retrieval_s=retrieval_s,
                              decode_s=decode_s)
        result.bytes_retrieved = fetched.bytes if fetched is not None and loaded else 0
        return result

    def _get_split(self, found: PrefixLookup, decision: Decision) -> CacheResult:
        """Run a split: recompute blocks [0, m) here while blocks [m, k) are fetched on a thread, then join them.

        The fetched blocks' keys were rotated at their absolute positions when they were stored,
        so blocks rebuilt on their own follow the computed ones as they are: the join is one
        concatenation per layer along the sequence axis. A miss in the fetched part ends the
        cache there (the m computed blocks, then the fetched ones before the miss).
        """
        m = decision.split_at
        records = found.records[: m + decision.fetch_blocks]
        computed_tokens = m * self.block_tokens
        side = torch.cuda.Stream(self.model.device) if self.model.device.type == "cuda" else None
        with ThreadPoolExecutor(1, thread_name_prefix="skymemory-split-fetch") as pool:
            sources: dict[str, int] = {}  # of the fetched part; the recomputed blocks come from no tier
            fetching = pool.submit(self._fetch_on, side, records[m:], sources, found.tenant)
            started = time.perf_counter()
            with torch.no_grad():
                out = self.model(input_ids=found.input_ids[:, :computed_tokens], use_cache=True, logits_to_keep=1)
            if found.input_ids.device.type == "cuda":  # the forward was only queued: time it to its end
                torch.cuda.synchronize(found.input_ids.device)
            recompute_s = time.perf_counter() - started
            loaded, fetched, miss, retrieval_s, decode_s = fetching.result()
        started = time.perf_counter()
        if side is not None:  # the join reads what the side stream wrote
            main = torch.cuda.current_stream(self.model.device)
            main.wait_stream(side)
            for layer in loaded.layers if fetched else ():
                layer.keys.record_stream(main)  # freed after the join: not reused before main has read it
                layer.values.record_stream(main)
        cache = cache_of(out)
        if fetched:
            cache = rebuild.to_cache([(torch.cat((head.keys, tail.keys), dim=-2),
                                       torch.cat((head.values, tail.values), dim=-2))
                                      for head, tail in zip(cache.layers, loaded.layers)], self.model.config)
        decode_s += time.perf_counter() - started
        return self._result(found, decision, records, cache, recomputed=m, loaded=fetched, miss=miss,
                            sources=sources, retrieval_s=retrieval_s, decode_s=decode_s, recompute_s=recompute_s)

    def _result(self, found: PrefixLookup, decision: Decision | None, records: list[BlockRecord], cache, *,
                recomputed: int, loaded: int, miss, sources: dict[str, int], retrieval_s: float, decode_s: float,
                recompute_s: float = 0.0) -> CacheResult:
        """The end of get_cache, a split's too: records[:recomputed] were computed here (a split),
        records[recomputed:recomputed + loaded] loaded; note their use, handle a miss (its position counts
        from the first loaded record), and say what the cache holds."""
        self.note_use(records[recomputed:recomputed + loaded])
        miss_reason = None
        if miss is not None:
            position, reason, detail = miss
            miss_reason = self._handle_miss(records, recomputed + position, reason, detail)
        elif len(found.records) < found.usable_blocks:
            miss_reason = "not-cached"
        covered = recomputed + loaded
        return CacheResult(
            cache=cache,
            input_ids=found.input_ids,
            prefix_tokens=covered * self.block_tokens,
            blocks=[r.block_hash for r in records[:covered]],
            usable_blocks=found.usable_blocks,
            miss_reason=miss_reason,
            source=found.source,
            lookup_s=found.lookup_s,
            retrieval_s=retrieval_s,
            recomputed_tokens=recomputed * self.block_tokens,
            recompute_s=recompute_s,
            decode_s=decode_s,
            bytes_retrieved=loaded * self.block_bytes,
            decision=decision,
            sources=sources,
        )

    def _fetch_on(self, stream, records: list[BlockRecord], sources: dict[str, int], tenant: str | None):
        """_fetch_prefix with its device work on `stream` (CUDA: a side stream, so that the copies and the
        relayout of a split's loaded blocks overlap the forward on the default stream; None: as it is)."""
        if stream is None:
            return self._fetch_prefix(records, sources, tenant)
        with torch.cuda.stream(stream):
            return self._fetch_prefix(records, sources, tenant)

    def store_for(self, tenant: str | None) -> BlockStore:
        """The store as `tenant` (a cache salt) reads and writes it: sealed under that tenant's key where the
        store seals (TenantSealing), the store itself otherwise."""
        return self.store.for_tenant(tenant) if tenant and isinstance(self.store, TenantSealing) else self.store

    def note_use(self, records: list[BlockRecord]) -> None:
        """These blocks were fetched: the index's last use of each is now (kv.index.saving.note_use)."""
        saving.note_use(self.index, (r.block_hash for r in records))

    def _sized(self, records: list[BlockRecord]) -> list[BlockRecord]:
        """Records with this model's block size (a probe may not know it: n_bytes -1)."""
        return [r if r.n_bytes >= 0 else dataclasses.replace(r, n_bytes=self.block_bytes) for r in records]

    def _fetch_prefix(self, records: list[BlockRecord], sources: dict[str, int] | None = None,
                      tenant: str | None = None):
        """Land, check and rebuild the blocks of `records` in order, up to the first that fails.

        Each block comes from the nearest copy: the device tier, the host tier, else the store
        (kv.transfer.tiers; all from the store when the tiers are off). Returns (cache, blocks in it,
        first failure as (position, reason, detail) or None, seconds getting the bytes, seconds
        checking and rebuilding); `sources`, when given, is filled with how many of the cache's
        blocks came from each of "device", "host" and "store". A store's miss has its BlockMiss as the
        detail (its text is the message, its `satellites` whom to blame); other details are text.
        """
        if not records:
            return DynamicCache(config=self.model.config), 0, None, 0.0, 0.0
        # a record of another size cannot be this model's block: the prefix ends before it
        usable = next((i for i, r in enumerate(records) if r.n_bytes not in (-1, self.block_bytes)), len(records))
        wrong_size = records[usable] if usable < len(records) else None
        records = self._sized(records[:usable])
        started = time.perf_counter()
        near, where = None, [None] * len(records)
        if self.tiers.enabled and records:  # bytes in a tier were checked when they entered it: not again
            near, where = self.tiers.gather([r.block_hash for r in records])
        far = [i for i, w in enumerate(where) if w is None]  # positions the store must send
        tiers_s = time.perf_counter() - started
        lease = self.landing.lease(max(1, len(far)), self.block_bytes)
        if far:
            arrival = landing.land(self.store_for(tenant), [records[i] for i in far], lease.raw,
                                   workers=self.fetch_workers)
        else:
            arrival = landing.Arrival(landing.Landed(0, []), 0.0, 0)
        landed = arrival.landed
        if far and landed.complete == len(far):
            self.link.observe(arrival.bytes, arrival.seconds, landed.first_reply_s)
            self._learn_sizes([records[i] for i in far])
        started = time.perf_counter()
        good_far, corrupt = rebuild.check_blocks(lease.raw, landed.block_crcs, self.geometry, self.kv_format,
                                                 verify_sha256=self.verify_sha256, authenticated=landed.sealed)
        miss = None  # positions are the prefix's: the store's blocks are a subset of them
        if corrupt is not None:
            miss = (far[good_far], "corrupt", corrupt)
        elif landed.miss is not None:
            miss = (far[landed.complete], landed.miss.reason, landed.miss)
        elif wrong_size is not None:
            miss = (usable, "incomplete", f"record says {wrong_size.n_bytes} bytes, the model's block is "
                                          f"{self.block_bytes}")
        good = miss[0] if miss is not None else len(records)
        far_good = [i for i in far if i < good]
        cache, event = DynamicCache(config=self.model.config), None
        if good:
            if near is None:  # all from the store: the landed buffer is the prefix, one copy to the device
                on_device = rebuild.to_device(lease.raw[:good], self.model.device)
                far_rows = on_device
            else:  # the store's blocks join the tiers' in their buffer, one copy per consecutive run
                on_device = near[:good]
                _copy_runs(lease.raw, far_good, on_device)
                far_rows = [on_device[i] for i in far_good]
            if on_device.device.type == "cuda":  # after it the lease may be written again
                event = torch.cuda.Event()
                event.record()
            if far_good and self.tiers.enabled:  # write-through of what the store sent (checked above)
                self.tiers.put([records[i].block_hash for i in far_good], host_rows=lease.raw[:len(far_good)],
                               device_rows=far_rows)
            cache = rebuild.to_cache(rebuild.rebuild_layers(on_device, self.geometry, self.kv_format,
                                                            self.model.dtype), self.model.config)
        self.landing.give_back(lease, event)
        if sources is not None:
            for name in ("device", "host"):
                sources[name] = sum(1 for w in where[:good] if w == name)
            sources["store"] = len(far_good)
        return cache, good, miss, tiers_s + arrival.seconds, time.perf_counter() - started

    def _learn_sizes(self, records: list[BlockRecord]) -> None:
        """Records from probe_block may not know the block size (-1); the index keeps the real one."""
        for record in records:
            entry = self.index.get(record.block_hash)
            if entry is not None and entry.record.n_bytes < 0:
                self.index.insert(entry.parent, dataclasses.replace(entry.record, n_bytes=self.block_bytes),
                                  entry.meta)

    def _handle_miss(self, records: list[BlockRecord], position: int, reason: str, detail: str | BlockMiss) -> str:
        """Log, evict the failed block and the ones after it (lazy eviction), correct the index; a block that did
        not open ("seal") is noted against the satellites that served it in the index's seal-failure ledger."""
        failed = records[position]
        log.warning("KV block %s (position %d) missing: %s %s", failed.block_hash.hex()[:16], position, reason, detail)
        satellites = detail.satellites if isinstance(detail, BlockMiss) else ()
        forget_from(self.store, self.index, records, position, reason, satellites, self.orbit)
        if self.strict:
            raise make_miss(reason, f"block {failed.block_hash.hex()[:16]}: {reason} {detail}")
        return reason

    # ------------------------------------------------------------------ add

    def add_blocks(self, prompt: str | list[int], *, cache: DynamicCache | None = None,
                   cache_salt: str | None = None) -> AddResult:
        """Store the prompt's full blocks that are not cached yet.

        The KV comes from one forward pass over the full blocks, or from `cache`
        when given (e.g. the cache a generate() call just filled for this prompt).
        cache_salt keys the blocks to a tenant (get_cache finds them with the same salt only).
        An adapter that cannot be keyed stores nothing (result.error says why; raised when strict).
        """
        token_ids = self.token_ids(prompt)
        try:
            hashes = self.block_hashes(token_ids, cache_salt=cache_salt)
        except Unkeyable as exc:
            if self.strict:
                raise
            say_once(exc, "a prompt with ")
            return AddResult(blocks_total=len(token_ids) // self.block_tokens, blocks_cached_before=0,
                             blocks_stored=0, error=f"not keyed: {exc}")
        result = AddResult(blocks_total=len(hashes), blocks_cached_before=0, blocks_stored=0, hashes=hashes)
        if not hashes:
            return result
        first_new = len(self.finder.lookup(self.root, hashes, strict=self.strict, what="KV lookup before add",
                                           tenant=cache_salt or None).records)
        result.blocks_cached_before = first_new
        if first_new == len(hashes):
            return result

        n_tokens = len(hashes) * self.block_tokens
        started = time.perf_counter()
        if self.grouped is not None:  # its own forward: the blocks' window K/V and the state after the last
            try:
                payloads = self.grouped.encode_prompt(self.model, token_ids, first_new, len(hashes))
            except Exception as exc:  # noqa: BLE001 - said in the result, as an encoding failure below is
                if self.strict:
                    raise
                log.warning("encoding KV blocks %d-%d failed: %s: %s", first_new, len(hashes) - 1,
                            type(exc).__name__, exc)
                payloads, result.error = [], f"{type(exc).__name__}: {exc}"
            result.compute_s = time.perf_counter() - started
            return self._store_payloads(result, payloads, hashes, first_new, cache_salt)
        if cache is None or cache.get_seq_length() < n_tokens:
            ids = torch.tensor([token_ids[:n_tokens]], dtype=torch.long, device=self.model.device)
            with torch.no_grad():
                cache = cache_of(self.model(input_ids=ids, use_cache=True))
        result.compute_s = time.perf_counter() - started

        started = time.perf_counter()
        payloads = []
        for position in range(first_new, len(hashes)):  # up to the first the cache cannot give (a sliding window's)
            try:
                payloads += codec.encode_cache_blocks(cache, self.block_tokens, position, 1, self.kv_format,
                                                      sha256=self.verify_sha256)
            except Exception as exc:  # noqa: BLE001 - the blocks before it are still worth storing
                if self.strict:
                    raise
                log.warning("encoding KV block %d failed: %r", position, exc)
                result.error = f"{type(exc).__name__}: {exc}"
                break
        result.encode_s = time.perf_counter() - started
        return self._store_payloads(result, payloads, hashes, first_new, cache_salt)

    def _store_payloads(self, result: AddResult, payloads: list[bytes], hashes: list[bytes], first_new: int,
                        cache_salt: str | None) -> AddResult:
        """Store and index encoded blocks first_new, first_new + 1, ... of a chain (add_blocks' second half)."""
        saves = [BlockSave(hashes[position], self.root if position == 0 else hashes[position - 1], position, payload)
                 for position, payload in enumerate(payloads, start=first_new)]
        started = time.perf_counter()
        try:  # sealed under this tenant's key where the store seals
            saving.save_blocks(self.store_for(cache_salt), self.index, saves, self.block_format, self.tiers,
                               self.orbit, cache_salt or None)
            result.blocks_stored = len(saves)
        except SaveFailed as exc:  # later blocks are useless without this one: stop
            if self.strict:
                raise exc.__cause__ from None
            result.blocks_stored = exc.saved
            log.warning("storing KV block %d failed: %s", first_new + exc.saved, exc)
            result.error = result.error or str(exc)
        result.store_s = time.perf_counter() - started
        result.bytes_stored = sum(len(p) for p in payloads[:result.blocks_stored])
        return result


def _copy_runs(landed: torch.Tensor, positions: list[int], out: torch.Tensor) -> None:
    """out[positions[j]] = landed[j] for the first len(positions) landed rows, one copy per consecutive run."""
    start = 0
    for end in range(1, len(positions) + 1):
        if end < len(positions) and positions[end] == positions[end - 1] + 1:
            continue
        first = positions[start]
        out[first:first + end - start].copy_(landed[start:end], non_blocking=landed.is_pinned())
        start = end


@dataclass
class GenerationResult:
    output_ids: torch.Tensor  # [1, prompt + new]
    new_tokens: list[int]
    text: str
    lookup: CacheResult
    added: AddResult | None
    generate_s: float


def generate_with_cache(
    manager: KVCManager, prompt: str | list[int], *, max_new_tokens: int = 30, store_new: bool = True,
    cache_salt: str | None = None, **generate_kwargs
) -> GenerationResult:
    """get_cache -> greedy generate with the prefix -> store the prompt's new full blocks from the same cache
    (both keyed to `cache_salt`)."""
    lookup = manager.get_cache(prompt, cache_salt=cache_salt)
    generate_kwargs.setdefault("do_sample", False)
    started = time.perf_counter()
    with torch.no_grad():
        output = manager.model.generate(
            lookup.input_ids,
            attention_mask=lookup.attention_mask,
            **cache_arg(manager.model, lookup.cache),
            max_new_tokens=max_new_tokens,
            return_dict_in_generate=True,
            **generate_kwargs,
        )
    generate_s = time.perf_counter() - started
    added = None
    full_blocks = len(lookup.input_ids[0]) // manager.block_tokens
    if store_new and full_blocks > len(lookup.blocks):
        added = manager.add_blocks(lookup.input_ids[0].tolist(), cache=cache_of(output), cache_salt=cache_salt)
    new_tokens = output.sequences[0, lookup.input_ids.shape[1] :].tolist()
    text = manager.tokenizer.decode(new_tokens, skip_special_tokens=True)
    return GenerationResult(output.sequences, new_tokens, text, lookup, added, generate_s)
