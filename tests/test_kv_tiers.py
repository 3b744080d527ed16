"""Memory tiers (kv.transfer.tiers): the device and pinned host copies of blocks in front of the store.

The tier structures on their own (LRU order, the byte bound, whole-block eviction, bad sizes,
concurrent use), then through KVCManager: write-through on add_blocks, promotion on a hit, a
prefix drawn from several tiers and the store rebuilt like a fetched one, eviction notices.
On a CPU the host slab is not pinned and the "device" is the host: the logic is the same.
"""

import threading

import pytest
import torch

from kv_support import FailingStore, MemoryBlockStore, random_prompt, tiny
from skymemory.kv.model.cache_arg import cache_arg
from skymemory.kv.decide.calibration import DeviceRates
from skymemory.kv.decide.costmodel import PrefillModel, RebuildModel
from skymemory.kv.hf.manager import KVCManager
from skymemory.kv.transfer.tiers import BlockTiers, DeviceTier, HostTier
from skymemory.store.contract import EvictionNotices

BLOCK = 16
H = [bytes([i]) * 32 for i in range(8)]  # block hashes for the structure tests


def _row(value: int, size: int = 8) -> torch.Tensor:
    return torch.full((size,), value, dtype=torch.uint8)


def _manager(tmp_path, store, **kwargs):
    """Fetch always (these tests are about where the bytes come from); fp32 KV of the fp32 model: exact."""
    model, tokenizer = tiny("fp32")
    return KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", policy="fetch",
                      index_dir=tmp_path, **kwargs)


def _block_bytes(tmp_path) -> int:
    """Encoded bytes of one block of the test model (what the tier sizes are counted in)."""
    return _manager(tmp_path / "size", MemoryBlockStore()).block_bytes


def _greedy(model, ids, cache=None, new_tokens=6):
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **cache_arg(model, cache),
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    return out[0, ids.shape[1]:].tolist()


# ---------------------------------------------------------------------------- the structures


def test_device_tier_keeps_the_most_recently_used_blocks_within_its_bytes():
    tier = DeviceTier(capacity_bytes=20, block_bytes=8, device="cpu")  # room for 2 whole blocks of 8
    tier.put(H[0], _row(0))
    tier.put(H[1], _row(1))
    assert torch.equal(tier.get(H[0]), _row(0))  # H[0] is now the most recently used
    tier.put(H[2], _row(2))  # full: the least recently used (H[1]) goes, whole
    assert H[1] not in tier and H[0] in tier and H[2] in tier
    assert tier.get(H[1]) is None
    stats = tier.stats()
    assert (stats.hits, stats.misses, stats.evictions, stats.blocks, stats.bytes) == (1, 1, 1, 2, 16)


def test_device_tier_keeps_its_own_copy():
    """A block put from a row of a larger buffer is copied: the buffer may be reused at once."""
    buffer = torch.stack([_row(5), _row(6)])
    tier = DeviceTier(capacity_bytes=16, block_bytes=8, device="cpu")
    tier.put(H[0], buffer[1])
    buffer.zero_()
    assert torch.equal(tier.get(H[0]), _row(6))


def test_host_tier_is_one_slab_allocated_up_front_whose_slots_are_reused_in_lru_order():
    tier = HostTier(capacity_bytes=3 * 8 + 5, block_bytes=8)  # 3 slots; the 5 spare bytes are not a block
    assert tuple(tier.slab.shape) == (3, 8) and not tier.pinned  # nothing to pin without CUDA
    for i in range(3):
        tier.put(H[i], _row(i))
    assert tier.slot(H[0]) is not None  # H[0] used: H[1] is now the oldest
    freed = tier._slots[H[1]]
    tier.put(H[3], bytes([3]) * 8)  # bytes as they come from the encoder
    assert H[1] not in tier and tier._slots[H[3]] == freed  # the evicted block's slot, whole
    assert torch.equal(tier.slab[freed], _row(3))
    stats = tier.stats()
    assert (stats.evictions, stats.blocks, stats.bytes, stats.capacity_bytes) == (1, 3, 24, 24)


def test_a_journaled_host_tier_says_what_entered_and_left_it_since_it_was_last_asked():
    tiers = BlockTiers(8, "cpu", host_bytes=2 * 8, journal=True)  # 2 slots
    tiers.put([b"a", b"b"], host_rows=[bytes(8), bytes(8)])
    assert tiers.take_host_changes() == {b"a": True, b"b": True}
    assert tiers.take_host_changes() == {}  # taken: nothing new since
    tiers.put([b"c"], host_rows=[bytes(8)])  # full: the least recently used, a, leaves
    tiers.discard(b"b")
    tiers.put([b"b"], host_rows=[bytes(8)])  # left and came back: held at the end is what counts
    assert tiers.take_host_changes() == {b"a": False, b"b": True, b"c": True}
    plain = BlockTiers(8, "cpu", host_bytes=2 * 8)  # no journal (KVCManager's): nothing kept, nothing said
    plain.put([b"a"], host_rows=[bytes(8)])
    assert plain.take_host_changes() == {} and plain.host_tier._changes is None


def test_host_tier_copies_rows_out_whether_or_not_their_slots_are_consecutive():
    tier = HostTier(capacity_bytes=4 * 8, block_bytes=8)
    for i in range(4):
        tier.put(H[i], _row(10 + i))
    out = torch.zeros((5, 8), dtype=torch.uint8)
    slots = [tier.slot(H[0]), tier.slot(H[1]), tier.slot(H[3]), tier.slot(H[2])]  # 0, 1 | 3 | 2
    tier.copy_out(slots, [0, 1, 2, 4], out)
    assert [int(out[i, 0]) for i in range(5)] == [10, 11, 13, 0, 12]


@pytest.mark.parametrize("make, match", [
    (lambda: DeviceTier(7, 8, "cpu"), "device_tier_bytes=7 is below one block"),
    (lambda: HostTier(0, 8), "host_tier_bytes=0 is below one block"),
    (lambda: HostTier(-8, 8), "host_tier_bytes=-8 is below one block"),
    (lambda: DeviceTier(16.0, 8, "cpu"), "device_tier_bytes must be a whole number of bytes"),
    (lambda: HostTier(16, 0), "block size must be positive"),
])
def test_bad_tier_sizes_are_refused_with_the_cause(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_a_block_of_another_size_is_refused():
    tier = BlockTiers(8, "cpu", host_bytes=16)
    with pytest.raises(ValueError, match="a block of this model is 8 uint8 bytes, got 7"):
        tier.put([H[0]], host_rows=[bytes(7)])


def test_gather_promotes_host_hits_to_the_device_tier():
    tiers = BlockTiers(8, "cpu", device_bytes=16, host_bytes=32)
    tiers.put(H[:2], host_rows=[_row(1), _row(2)])  # written through: in both
    tiers.device_tier.discard(H[0])
    out, where = tiers.gather([H[0], H[1], H[5]])
    assert where == ["host", "device", None]
    assert [int(out[i, 0]) for i in range(2)] == [1, 2]  # row 2 is left for the store
    assert tiers.where(H[0]) == "device"
    stats = tiers.stats()
    assert stats["device"]["hits"] == 1 and stats["host"]["hits"] == 1 and stats["host"]["misses"] == 1


def test_the_tiers_stay_consistent_under_concurrent_puts_gathers_and_discards():
    """Small tiers and many threads: every gathered row is the block its hash names, nothing raises."""
    tiers = BlockTiers(64, "cpu", device_bytes=3 * 64, host_bytes=5 * 64)
    hashes = [bytes([i]) * 32 for i in range(12)]
    errors = []

    def work(seed: int) -> None:
        try:
            for step in range(300):
                i = (seed * 7 + step) % len(hashes)
                tiers.put([hashes[i]], host_rows=[_row(i, 64)])
                if step % 5 == 0:
                    tiers.discard(hashes[(i + 3) % len(hashes)])
                picked = [hashes[(i + k) % len(hashes)] for k in range(4)]
                out, where = tiers.gather(picked)
                for position, source in enumerate(where):
                    if source is not None:
                        expected = (i + position) % len(hashes)
                        assert bool((out[position] == expected).all()), (source, position, expected)
        except Exception as exc:  # noqa: BLE001 - reported below from the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors[0]
    stats = tiers.stats()
    assert stats["device"]["blocks"] <= 3 and stats["host"]["blocks"] <= 5


# ---------------------------------------------------------------------------- through KVCManager


def test_tiers_are_off_by_default(tmp_path):
    manager = _manager(tmp_path, MemoryBlockStore())
    assert not manager.tiers.enabled and manager.tiers.stats() == {}
    manager.add_blocks(random_prompt(2 * BLOCK + 3, seed=1))
    assert manager.get_cache(random_prompt(2 * BLOCK + 3, seed=1)).sources == {"device": 0, "host": 0, "store": 2}


@pytest.mark.parametrize("option", ["device_tier_bytes", "host_tier_bytes"])
def test_a_tier_smaller_than_one_block_is_refused_by_the_manager(tmp_path, option):
    with pytest.raises(ValueError, match=f"{option}=100 is below one block"):
        _manager(tmp_path, MemoryBlockStore(), **{option: 100})


def test_add_blocks_writes_through_to_both_tiers(tmp_path):
    store, block = MemoryBlockStore(), _block_bytes(tmp_path)
    manager = _manager(tmp_path, store, device_tier_bytes=8 * block, host_tier_bytes=8 * block)
    added = manager.add_blocks(random_prompt(3 * BLOCK + 2, seed=2))
    assert added.blocks_stored == 3 and store.puts == 3
    assert [manager.tiers.where(h) for h in added.hashes] == ["device"] * 3
    host = manager.tiers.host_tier
    for h in added.hashes:  # the very bytes the store holds
        assert bytes(host.slab[host._slots[h]].numpy()) == store.get_block(store.probe_block(h))


def test_a_fetched_prefix_is_promoted_and_the_next_hit_never_touches_the_store(tmp_path):
    store = MemoryBlockStore()
    prompt = random_prompt(4 * BLOCK + 5, seed=3)
    _manager(tmp_path, store).add_blocks(prompt)  # stored by another manager sharing the index: not in these tiers
    block = _block_bytes(tmp_path)
    manager = _manager(tmp_path, store, device_tier_bytes=2 * block, host_tier_bytes=8 * block)

    first = manager.get_cache(prompt)
    assert first.sources == {"device": 0, "host": 0, "store": 4} and store.gets == 4
    second = manager.get_cache(prompt)  # host holds all 4; the device the last 2 (its LRU bound)
    assert second.sources == {"device": 2, "host": 2, "store": 0} and store.gets == 4
    assert [manager.tiers.where(h) for h in second.blocks[:2]] == ["device", "device"]  # promoted on the hit
    ids = second.input_ids
    reference = _greedy(manager.model, ids)
    assert _greedy(manager.model, ids, first.cache) == reference
    assert _greedy(manager.model, ids, second.cache) == reference


def test_a_prefix_from_every_tier_and_the_store_rebuilds_equal_to_a_fetched_one(tmp_path):
    store = MemoryBlockStore()
    prompt = random_prompt(6 * BLOCK + 7, seed=4)
    plain = _manager(tmp_path, store)
    added = plain.add_blocks(prompt)
    fetched = plain.get_cache(prompt)
    assert fetched.prefix_tokens == 6 * BLOCK

    block = plain.block_bytes
    manager = _manager(tmp_path, store, device_tier_bytes=2 * block, host_tier_bytes=2 * block)
    payload = {h: store.get_block(store.probe_block(h)) for h in added.hashes}
    manager.tiers.device_tier.put(added.hashes[0], payload[added.hashes[0]])  # device: blocks 0 and 3
    manager.tiers.device_tier.put(added.hashes[3], payload[added.hashes[3]])
    manager.tiers.host_tier.put(added.hashes[1], payload[added.hashes[1]])  # host: 1 and 4
    manager.tiers.host_tier.put(added.hashes[4], payload[added.hashes[4]])
    gets = store.gets

    mixed = manager.get_cache(prompt)
    assert mixed.sources == {"device": 2, "host": 2, "store": 2}  # the store: blocks 2 and 5
    assert store.gets == gets + 2 and mixed.prefix_tokens == 6 * BLOCK and mixed.miss_reason is None
    for got, want in zip(mixed.cache.layers, fetched.cache.layers):
        assert torch.equal(got.keys, want.keys) and torch.equal(got.values, want.values)
    ids = mixed.input_ids
    assert _greedy(manager.model, ids, mixed.cache) == _greedy(manager.model, ids)


def test_a_corrupt_block_from_the_store_ends_a_mixed_prefix_and_enters_no_tier(tmp_path):
    store = FailingStore()
    prompt = random_prompt(4 * BLOCK + 3, seed=5)
    added = _manager(tmp_path, store).add_blocks(prompt)
    block = _block_bytes(tmp_path)
    manager = _manager(tmp_path, store, device_tier_bytes=4 * block)
    manager.tiers.put([added.hashes[0], added.hashes[3]],
                      host_rows=[store.memory.get_block(store.memory.probe_block(h))
                                 for h in (added.hashes[0], added.hashes[3])])
    store.fail[added.hashes[2]] = "corrupt"  # block 1 comes whole from the store, block 2 damaged

    result = manager.get_cache(prompt)
    assert result.prefix_tokens == 2 * BLOCK and result.miss_reason == "corrupt"
    assert result.sources == {"device": 1, "host": 0, "store": 1}
    assert manager.tiers.where(added.hashes[1]) == "device"  # checked, so written through
    assert manager.tiers.where(added.hashes[2]) is None
    assert store.evicted[0] == added.hashes[2]  # the store's copy from the failure on, as without tiers


def _deciding_manager(tmp_path, store, link_seconds_per_block: float, link_rtt_s: float = 0.0):
    """An auto manager with a host tier for 8 blocks, given rates (16 ms to recompute a block of 16
    tokens, a free rebuild) and a store link that moved a block in `link_seconds_per_block`."""
    block = _block_bytes(tmp_path)
    model, tokenizer = tiny("fp32")
    rates = DeviceRates(PrefillModel(0.0, 1e-3, 0.0, "given"), RebuildModel(0.0, 1e12), [], {}, 0.0)
    manager = KVCManager(model, tokenizer, store, block_tokens=BLOCK, kv_dtype="fp32", index_dir=tmp_path,
                         device_rates=rates, host_tier_bytes=8 * block)
    for _ in range(16):
        manager.link.observe(block, link_rtt_s + link_seconds_per_block, link_rtt_s)
    return manager


def test_a_split_loads_its_fetched_blocks_from_the_tiers(tmp_path):
    """A split (recompute blocks 0-1, load 2-3 on a thread) takes the loaded part from the host tier."""
    store = MemoryBlockStore()
    manager = _deciding_manager(tmp_path, store, 0.016)  # a block loads as fast as it computes: split 2+2/4
    prompt = random_prompt(4 * BLOCK + 5, seed=22)
    added = manager.add_blocks(prompt)  # written through to the host tier
    manager.tiers.discard(added.hashes[0])  # not every block near: auto prices the store's link (else: fetch)
    gets = store.gets
    result = manager.get_cache(prompt)
    assert result.decision.describe() == "split 2+2/4" and result.prefix_tokens == 4 * BLOCK
    assert result.sources == {"device": 0, "host": 2, "store": 0} and store.gets == gets
    model = manager.model
    assert _greedy(model, result.input_ids, result.cache) == _greedy(model, result.input_ids)


def test_auto_prices_a_prefix_the_tiers_hold_as_copies_not_as_a_transfer(tmp_path):
    """Every block in the host tier: a store link slow enough to make auto recompute does not matter."""
    manager = _deciding_manager(tmp_path, MemoryBlockStore(), 9.0, link_rtt_s=1.0)  # 10 s a block
    prompt = random_prompt(4 * BLOCK + 5, seed=23)
    added = manager.add_blocks(prompt)
    near = manager.get_cache(prompt)
    assert near.decision.describe() == "fetch 4/4" and near.decision.inputs["link"] == "tiers"
    assert near.sources == {"device": 0, "host": 4, "store": 0}
    manager.tiers.discard(added.hashes[3])  # one block only in the store: its link is priced again
    far = manager.get_cache(prompt)
    assert far.decision.action == "recompute" and far.decision.inputs["link"] == "MemoryBlockStore"


class _Notifying(MemoryBlockStore, EvictionNotices):
    """A store that tells its listeners when it drops a block (as RotatingBlockStore does)."""

    def __init__(self):
        super().__init__()
        self.listeners = []

    def subscribe_evictions(self, callback):
        self.listeners.append(callback)

    def drop(self, block_hash: bytes) -> None:
        self.evict_block(self.probe_block(block_hash))
        for listener in self.listeners:
            listener(block_hash)


def test_an_eviction_notice_from_the_store_drops_the_tier_copies(tmp_path):
    store, block = _Notifying(), _block_bytes(tmp_path)
    manager = _manager(tmp_path, store, device_tier_bytes=8 * block, host_tier_bytes=8 * block)
    prompt = random_prompt(3 * BLOCK + 4, seed=6)
    added = manager.add_blocks(prompt)
    assert all(manager.tiers.where(h) == "device" for h in added.hashes)
    store.drop(added.hashes[1])
    assert manager.tiers.where(added.hashes[1]) is None
    assert added.hashes[1] not in manager.tiers.host_tier
    result = manager.get_cache(prompt)  # the index no longer lists blocks 1 and 2: only block 0 is used
    assert result.prefix_tokens == BLOCK and result.sources == {"device": 1, "host": 0, "store": 0}
