"""Integrity end to end: CRC32C is checked by the satellite at SET and by the
ground at GET, and a KV block that arrives intact by CRC but altered (a chunk
corrupted before its CRC was computed: satellite memory, a faulty relay that
recomputed it) is refused by the KV codec's digest before any tensor is built."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
import torch

from skymemory.kv.format import codec, rebuild
from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import wire
from skymemory.protocol.errors import NakError

H = hashlib.sha256(b"integrity").digest()
N = 16


def run(coro):
    return asyncio.run(coro)


def test_satellite_refuses_a_chunk_whose_crc_does_not_match(node_built):
    with Cluster(1, 2, ["--delay-scale", "0"]) as cl:
        async def go():
            async with SkyMemoryClient(cl.ground_addresses(), timeout=0.5, retries=2) as c:
                desc = wire.make_desc(H, 0, 1, 0, b"good data", 0)
                body = wire.set_chunk_body(desc, b"bad! data")  # same length, other bytes
                reply = await c._request(wire.SKYMEM_SET_CHUNK_CC, (0, 1), body, via=(0, 0), block_hash=H)
                return reply

        with pytest.raises(NakError) as e:
            run(go())
        assert e.value.reason == wire.SKYMEM_NAK_BAD_CRC


def test_ground_never_returns_corrupted_chunk_data(node_built):
    # every packet a node sends has one bit flipped with probability 0.3
    with Cluster(1, 2, ["--delay-scale", "0", "--corrupt", "0.3"]) as cl:
        data = bytes(range(256)) * 24

        async def go():
            async with SkyMemoryClient(cl.ground_addresses(), timeout=0.2, min_timeout=0.02, retries=8, backoff=1.2) as c:
                outcomes = []
                for k in range(N):
                    try:
                        await c.set_chunk((0, 1), H, k, N, data, via=(0, 0))
                    except Exception:  # noqa: BLE001 -- reported failure is fine
                        pass
                for k in range(N):
                    try:
                        outcomes.append(await c.get_chunk((0, 1), H, k, via=(0, 0)) == data)
                    except Exception:  # noqa: BLE001
                        outcomes.append(None)
                return outcomes, c.counters["crc_failures"]

        outcomes, crc_failures = run(go())
    assert False not in outcomes  # exact or a clean miss, never wrong bytes
    assert outcomes.count(True) > 0
    assert crc_failures > 0  # corruption did reach the ground and was caught there


def test_crc_valid_but_altered_kv_block_is_refused(node_built):
    g = torch.Generator().manual_seed(1)
    layers = [(torch.randn(2, 8, 4, generator=g), torch.randn(2, 8, 4, generator=g)) for _ in range(2)]
    block = codec.encode_block(layers, "fp16")
    size = 100
    chunks = [block[i:i + size] for i in range(0, len(block), size)]
    with Cluster(1, 2, ["--delay-scale", "0"]) as cl:
        async def go():
            async with SkyMemoryClient(cl.ground_addresses(), timeout=0.5, retries=4) as c:
                for k, chunk in enumerate(chunks):
                    if k == len(chunks) - 1:  # altered before its CRC was computed: the CRC is valid
                        chunk = chunk[:-1] + bytes([chunk[-1] ^ 0x40])
                    await c.set_chunk((0, 1), H, k, len(chunks), chunk)
                return b"".join([await c.get_chunk((0, 1), H, k) for k in range(len(chunks))])

        fetched = run(go())
    assert len(fetched) == len(block) and fetched != block
    with pytest.raises(codec.CodecError, match="CRC32C"):  # the block-level check, in the header
        rebuild.decode_block(fetched)
    assert len(rebuild.decode_block(block).layers) == 2  # the intact block decodes
