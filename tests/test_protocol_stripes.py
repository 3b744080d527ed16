"""protocol.stripes: the layout of coded stripes, and the Reed-Solomon code (Intel ISA-L through the C fast path)
that gives a stripe's data back from any k of its chunks."""

import itertools
import os

import numpy as np
import pytest

from skymemory.protocol.stripes import MAX_STRIPE_CHUNKS, StripeError, Stripes, cut, decode, encode, join


def test_no_parity_is_todays_layout():
    layout = Stripes(k=10, m=0, data_chunks=23)
    assert layout.wire_chunks == 23 and [layout.wire_id(d) for d in range(23)] == list(range(23))


def test_stripes_hold_their_data_then_their_parity_rotated_over_distinct_servers():
    layout = Stripes(k=8, m=2, data_chunks=20)  # stripes of 8, 8 and 4 data chunks, shifted by 0, 3 and 6
    assert (layout.count, layout.n, layout.wire_chunks) == (3, 10, 26)
    assert [layout.shift(s) for s in range(3)] == [0, 3, 6]
    assert layout.members(0) == list(range(10))
    assert layout.members(1) == [13, 14, 15, 16, 17, 18, 19, 10, 11, 12]  # data at 3..10, parity at 0..2
    assert layout.members(2) == [20, 21, 22, 23, 24, 25]  # 4 data + 2 parity: shift 6 mod 6
    assert [layout.wire_id(d) for d in (0, 7, 8, 16, 19)] == [0, 7, 13, 20, 23]
    for k, m in [(8, 2), (4, 1), (3, 3), (1, 2)]:
        for data_chunks in range(1, 40):
            layout = Stripes(k, m, data_chunks)
            wire = sorted(w for s in range(layout.count) for w in layout.members(s))
            assert wire == list(range(layout.wire_chunks))  # every id once, none past the count
            for s in range(layout.count):  # a stripe never has two chunks on one server (id mod n)
                assert len({w % layout.n for w in layout.members(s)}) == len(layout.members(s))
            data_ids = [layout.wire_id(d) for d in range(data_chunks)]
            assert list(layout.wire_ids()) == data_ids
            assert Stripes.from_wire(layout.wire_chunks, k, m) == layout


def test_parity_rotates_so_every_server_holds_data_in_few_runs():
    """A healthy get reads no parity: with the parity on the same satellites in every stripe, it would read from k
    of the n (measured: 8% slower than from all 10). Rotated, each server holds about as much data, in at most two
    runs of stripes (its parity in one run between them), so a get asks each for few spans."""
    layout = Stripes(k=8, m=2, data_chunks=472)  # a KV block of TinyLlama's: 59 stripes
    per_server = [[d for d in range(472) if layout.wire_id(d) % 10 == server] for server in range(10)]
    assert max(map(len, per_server)) - min(map(len, per_server)) <= 8
    for ids in per_server:
        stripes = [d // 8 for d in ids]
        runs = 1 + sum(b - a > 1 for a, b in zip(stripes, stripes[1:]))
        assert runs <= 2


def test_c_and_python_place_every_chunk_alike():
    from skymemory.protocol.native import ffi, lib
    c_layout = ffi.new("skymem_stripe_layout_t *")
    for k, m in [(8, 2), (4, 1), (3, 3), (1, 2), (7, 2), (10, 0)]:
        for data_chunks in list(range(1, 45)) + [472, 2731]:
            layout = Stripes(k, m, data_chunks)
            assert lib.skymem_stripe_layout(k, m, data_chunks, c_layout) == 0
            assert [lib.skymem_stripe_wire_id(c_layout, d) for d in range(data_chunks)] == list(layout.wire_ids())
            data_of = {w: d for d, w in enumerate(layout.wire_ids())}
            expected = [data_of.get(w, 0xFFFFFFFF) for w in range(layout.wire_chunks)]
            assert [lib.skymem_stripe_data_index(c_layout, w) for w in range(layout.wire_chunks)] == expected
            every = ffi.new("uint32_t[]", layout.wire_chunks)  # the one-pass table a get classifies chunks by
            lib.skymem_stripe_data_indexes(c_layout, every)
            assert list(every) == expected


def test_a_chunk_count_no_layout_makes_is_refused():
    with pytest.raises(StripeError, match="cannot be a block"):
        Stripes.from_wire(12, 8, 2)  # a last stripe of 2 chunks would have no data
    for k, m in [(0, 2), (8, -1), (MAX_STRIPE_CHUNKS, 1)]:
        with pytest.raises(StripeError, match="k must be"):
            Stripes(k, m, 5)


def _stripe(k, m, length, seed):
    rng = np.random.default_rng(seed)
    data = [rng.integers(0, 256, length, dtype=np.uint8) for _ in range(k)]
    return data + encode(data, m)


@pytest.mark.parametrize("k,m", [(8, 2), (4, 1), (1, 2), (6, 4), (10, 0)])
def test_any_k_chunks_of_a_stripe_give_its_data_back(k, m):
    whole = _stripe(k, m, 6112, seed=k * 10 + m)
    assert all(p.any() for p in whole[k:])  # parity is made, not zeros
    for lost in range(m + 1):
        for gone in itertools.combinations(range(k + m), lost):
            chunks = [c.copy() for c in whole]
            for i in gone:
                chunks[i][:] = 0xAA  # what a dead satellite's chunk holds: nothing of it is used
            decode(chunks, [i not in gone for i in range(k + m)], k)
            assert all(np.array_equal(a, b) for a, b in zip(chunks[:k], whole[:k])), gone


def test_a_shortened_stripe_codes_its_absent_data_as_zeros():
    k, m, length = 8, 2, 64
    rng = np.random.default_rng(3)
    data = [rng.integers(0, 256, length, dtype=np.uint8) for _ in range(3)]  # a last stripe of 3 data chunks
    zeros = [np.zeros(length, dtype=np.uint8) for _ in range(k - 3)]
    parity = encode(data + zeros, m)
    chunks = [data[0].copy(), np.zeros(length, np.uint8), np.zeros(length, np.uint8)] + zeros + parity
    decode(chunks, [True, False, False] + [True] * (k - 3) + [True, True], k)
    assert np.array_equal(chunks[1], data[1]) and np.array_equal(chunks[2], data[2])


def test_too_few_intact_chunks_is_an_error_not_wrong_bytes():
    chunks = _stripe(8, 2, 32, seed=5)
    with pytest.raises(StripeError, match="7 of a stripe's 10 chunks are intact: its data needs 8"):
        decode(chunks, [True] * 7 + [False] * 3, 8)
    with pytest.raises(StripeError, match="one non-zero length"):
        encode([np.zeros(4, np.uint8), np.zeros(5, np.uint8)], 2)


def test_the_stripes_benchmark_times_coding_beside_sealing_and_checks_what_it_decoded():
    from skymemory.bench.stripes import measure, table

    row = measure(512, 4, 1, repeats=2, rounds=1)
    assert row["encode_GBps"] > 0 and row["decode_GBps"] > 0 and row["seal_GBps"] > 0
    assert "| 512 | 4 + 1 |" in table([row])


@pytest.mark.parametrize("size", [1, 999, 1000, 7_777, 20_000])
def test_cut_and_join_give_the_block_back_from_any_r_of_each_stripe(size):
    payload = os.urandom(size)
    k, m, plain = 3, 2, 1000
    contents = cut(payload, k, m, plain)
    layout = Stripes(k, m, max(1, -(-size // plain)))
    assert len(contents) == layout.wire_chunks
    assert b"".join(contents[layout.wire_id(d)] for d in range(layout.data_chunks)) == payload
    everything = dict(enumerate(contents))
    assert join(layout, everything, plain, size) == payload
    for stripe in range(layout.count):  # the first m chunks of every stripe lost (data first): rebuilt
        for i in list(layout.members(stripe))[:m]:
            del everything[i]
    assert join(layout, everything, plain, size) == payload
    del everything[list(layout.members(0))[m]]  # one more of stripe 0: fewer than its data count
    with pytest.raises(StripeError):
        join(layout, everything, plain, size)
