"""A prompt's cached prefix in orbit, as the decode site's connector would find it.

The connector's scheduler names a request's blocks with its ServedModel's chain root and a PrefixFinder
(kv.engine, kv.index.lookup), its cache salt folded in as its tenant, and looks them up in the ground index and
past it in the records in orbit (integrations.vllm.worker.open_orbit). The router builds the same pieces from
the same settings (the decode site's kv_connector_extra_config, ConnectorConfig) and the model folder's
config, so it counts the blocks the decode site would load, without naming a block itself.

Only a dense model's blocks are named here: a model with sliding-window or recurrent layers is served by vLLM
with several page tables, whose block layout only the engine knows (integrations.vllm.kv_groups).
"""

from __future__ import annotations

import logging
from pathlib import Path

from skymemory.integrations.vllm.config import ConnectorConfig
from skymemory.integrations.vllm.worker import open_store
from skymemory.kv.engine import FULL, OrbitRecords, RequestKeys, ServedModel, UnsupportedModel, open_index
from skymemory.kv.format.groups import layer_kinds
from skymemory.kv.index.lookup import PrefixFinder
from skymemory.kv.paged.paged_scheduler import PLACEMENT
from skymemory.orbit.manifest import Manifest
from skymemory.store.contract import BlockRecord

log = logging.getLogger(__name__)

BLOCK_TOKENS = 128  # the connector requires vLLM's block size to be SkyMemory's block
DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
MAX_LOOKUPS = 64  # an orbit lookup asks at most kv.index.orbit_records.MAX_ASKED records: a long prompt takes several


def _readable(record: BlockRecord) -> bool:
    """The decode site's store reads a block from its record only when it was placed as that store places."""
    return record.strategy == PLACEMENT


def model_dtype(hf_config, asked: str | None) -> str:
    """fp16 | bf16 | fp32: `asked` (the decode site's --dtype), else the model's own (as vLLM's "auto" takes it)."""
    if asked:
        if asked not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {asked!r}")
        return asked
    own = str(getattr(hf_config, "torch_dtype", None) or getattr(hf_config, "dtype", None) or "float16")
    own = own.removeprefix("torch.")
    return next((name for name, torch_name in DTYPES.items() if torch_name == own), "fp16")


class OrbitPrefix:
    """cached_blocks(prompt, salt): the leading full blocks of `prompt` the decode site would find cached."""

    def __init__(self, model_dir: str | Path, config: ConnectorConfig, *, dtype: str | None = None,
                 station_id: int) -> None:
        """config: the decode site's connector settings (its model, kv_format, seal, index_dir, the
        constellation and route); station_id: this router's own ground-station id for its lookups (apart from
        the sites' connectors')."""
        import torch
        from transformers import AutoConfig

        hf_config = AutoConfig.from_pretrained(str(model_dir))
        text_config = hf_config.get_text_config()
        kinds = {kind for kind, _ in layer_kinds(text_config, config.model)}
        if kinds != {FULL}:
            raise UnsupportedModel(f"the router names the blocks of models with full attention only; {config.model} "
                                   f"has {', '.join(sorted(kinds - {FULL}))} layers (vLLM's block layout for them "
                                   "is the engine's to say)")
        self.config = config
        self.served = ServedModel.of(config.model, text_config, block_tokens=BLOCK_TOKENS,
                                     kv_format=config.kv_format, sealed=config.seal)
        self.dtype = model_dtype(text_config, dtype)
        self.root = self.served.root(getattr(torch, DTYPES[self.dtype]))
        self.block_tokens = BLOCK_TOKENS
        self.block_bytes = self.served.block_bytes
        self.manifest = Manifest.load(config.manifest)
        self.index = open_index(config.index_dir)
        self.store = open_store(config, self.manifest, station_id) if config.orbit_index else None
        orbit = OrbitRecords(self.store) if self.store is not None else None
        self.finder = PrefixFinder(self.index, block_tokens=BLOCK_TOKENS, block_bytes=self.block_bytes,
                                   layers=self.served.geometry.layers, orbit=orbit)

    def hashes(self, prompt: list[int], cache_salt: str | None) -> list[bytes]:
        """The chain hashes of the prompt's blocks the engine may load (never its last token's), keyed to its salt."""
        usable = max(0, (len(prompt) - 1) // self.block_tokens)
        return self.finder.hashes(self.root, prompt, RequestKeys(cache_salt=cache_salt or None), usable)

    def cached_blocks(self, prompt: list[int], cache_salt: str | None = None) -> int:
        """How many leading full blocks of `prompt` are cached (ground index, then the records in orbit: each
        lookup bounded by orbit_records.TIMEOUT_S; a failure is a miss)."""
        hashes = self.hashes(prompt, cache_salt)
        tenant = cache_salt or None
        found = 0
        for _ in range(MAX_LOOKUPS):  # what a lookup found in orbit is in the index: the next goes on from there
            records = self.finder.lookup(self.root, hashes, readable=_readable, tenant=tenant,
                                         what="router: prefix lookup").records
            if len(records) <= found:
                break
            found = len(records)
            if found >= len(hashes):
                break
        return found

    def stored(self, prompt: list[int], cache_salt: str | None = None) -> None:
        """A prefill site has just stored the prompt's blocks: their absence, learnt when the prompt was routed,
        is forgotten (kv.index.orbit_records remembers an absent block NEGATIVE_S), so the next lookup asks."""
        self.finder.forget_absent(self.hashes(prompt, cache_salt))

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
