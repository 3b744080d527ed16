"""Shared helpers for the KV-layer tests (the small embedded model, prompts, stores)."""

from __future__ import annotations

import dataclasses
import random

import torch

from skymemory.kv.model.models import load_model
from skymemory.kv.store import BlockMiss, BlockStore, MemoryBlockStore, make_miss

# The test model is tiny: one thread is faster than two, and on a shared, loaded
# machine every multi-threaded op can stall for milliseconds.
torch.set_num_threads(1)

_MODELS: dict = {}


def tiny(dtype: str = "fp32"):
    """(model, tokenizer) of embedded-tiny on the CPU, built once per dtype per test session."""
    if dtype not in _MODELS:
        _MODELS[dtype] = load_model("embedded-tiny", device="cpu", dtype=dtype)
    return _MODELS[dtype]


def random_prompt(n_tokens: int, seed: int) -> list[int]:
    """BOS followed by n_tokens-1 random byte tokens."""
    rng = random.Random(seed)
    return [1] + [rng.randrange(3, 259) for _ in range(n_tokens - 1)]


class FailingStore(BlockStore):
    """A store that keeps only the BlockStore contract, whose get_block fails for chosen hashes in a chosen way.

    Without BulkBlockReads the KV layer lands blocks one by one and checks each one's bytes
    itself. The blocks are kept in a MemoryBlockStore (`self.memory`).
    """

    def __init__(self, probe_knows_size: bool = True):
        self.memory = MemoryBlockStore()
        self.fail: dict[bytes, str] = {}  # hash -> "miss", "timeout", "truncate", "corrupt"
        self.evicted: list[bytes] = []
        self.probe_knows_size = probe_knows_size  # False: like a multi-chunk probe (n_bytes -1)

    def put_block(self, block_hash, payload):
        return self.memory.put_block(block_hash, payload)

    def probe_block(self, block_hash):
        record = self.memory.probe_block(block_hash)
        if record is not None and not self.probe_knows_size:
            record = dataclasses.replace(record, n_bytes=-1)
        return record

    def get_block(self, record):
        mode = self.fail.get(record.block_hash)
        payload = self.memory.get_block(record)
        if mode == "miss":
            raise make_miss("not-found")
        if mode == "timeout":
            raise TimeoutError("no reply within 2 s")
        if mode == "truncate":
            return payload[:-100]
        if mode == "corrupt":
            damaged = bytearray(payload)
            damaged[-1] ^= 0x01
            return bytes(damaged)
        return payload

    def evict_block(self, record):
        self.evicted.append(record.block_hash)
        self.memory.evict_block(record)


__all__ = ["tiny", "random_prompt", "FailingStore", "MemoryBlockStore", "BlockMiss"]
