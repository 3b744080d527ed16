"""Placement strategies against the paper's Figures 13-15, plus chunk/server/torus helpers."""

from __future__ import annotations

import pytest

from skymemory.orbit import placement

# ---- the paper's figures, transcribed ------------------------------------------------
# Each grid is square with the centre satellite (the one overhead) in the middle;
# columns run west -> east (sat index +1), rows north -> south (plane index +1);
# "." is a satellite without a server.

FIGURE_13 = {  # rotation-aware: row-major over the LOS grid
    9: """
        1 2 3
        4 5 6
        7 8 9
    """,
    25: """
        1  2  3  4  5
        6  7  8  9  10
        11 12 13 14 15
        16 17 18 19 20
        21 22 23 24 25
    """,
    49: """
        1  2  3  4  5  6  7
        8  9  10 11 12 13 14
        15 16 17 18 19 20 21
        22 23 24 25 26 27 28
        29 30 31 32 33 34 35
        36 37 38 39 40 41 42
        43 44 45 46 47 48 49
    """,
    81: """
        1  2  3  4  5  6  7  8  9
        10 11 12 13 14 15 16 17 18
        19 20 21 22 23 24 25 26 27
        28 29 30 31 32 33 34 35 36
        37 38 39 40 41 42 43 44 45
        46 47 48 49 50 51 52 53 54
        55 56 57 58 59 60 61 62 63
        64 65 66 67 68 69 70 71 72
        73 74 75 76 77 78 79 80 81
    """,
}

FIGURE_14 = {  # hop-aware: concentric hop rings around the centre
    9: """
        .  .  6  .  .
        .  8  2  7  .
        .  5  1  3  9
        .  .  4  .  .
        .  .  .  .  .
    """,
    25: """
        .  .  .  14 .  .  .
        .  .  16 6  15 .  .
        .  18 8  2  7  17 .
        25 13 5  1  3  9  19
        .  24 12 4  10 20 .
        .  .  23 11 21 .  .
        .  .  .  22 .  .  .
    """,
    49: """
        .  .  .  .  .  42 .  .  .  .  .
        .  .  .  .  44 26 43 .  .  .  .
        .  .  .  46 28 14 27 45 .  .  .
        .  .  48 30 16 6  15 29 47 .  .
        .  .  32 18 8  2  7  17 31 49 .
        .  41 25 13 5  1  3  9  19 33 .
        .  .  40 24 12 4  10 20 34 .  .
        .  .  .  39 23 11 21 35 .  .  .
        .  .  .  .  38 22 36 .  .  .  .
        .  .  .  .  .  37 .  .  .  .  .
        .  .  .  .  .  .  .  .  .  .  .
    """,
    81: """
        .  .  .  .  .  .  62 .  .  .  .  .  .
        .  .  .  .  .  64 42 63 .  .  .  .  .
        .  .  .  .  66 44 26 43 65 .  .  .  .
        .  .  .  68 46 28 14 27 45 67 .  .  .
        .  .  70 48 30 16 6  15 29 47 69 .  .
        .  72 50 32 18 8  2  7  17 31 49 71 .
        .  61 41 25 13 5  1  3  9  19 33 51 73
        .  .  60 40 24 12 4  10 20 34 52 74 .
        .  .  .  59 39 23 11 21 35 53 75 .  .
        .  .  .  .  58 38 22 36 54 76 .  .  .
        .  .  .  .  81 57 37 55 77 .  .  .  .
        .  .  .  .  .  80 56 78 .  .  .  .  .
        .  .  .  .  .  .  79 .  .  .  .  .  .
    """,
}

FIGURE_15 = {  # rotation- and hop-aware: hop rings clipped to the sqrt(n) box, renumbered
    9: """
        7 2 6
        5 1 3
        9 4 8
    """,
    25: """
        23 15 6  14 22
        17 8  2  7  16
        13 5  1  3  9
        21 12 4  10 18
        25 20 11 19 24
    """,
    49: """
        47 39 27 14 26 38 46
        41 29 16 6  15 28 40
        31 18 8  2  7  17 30
        25 13 5  1  3  9  19
        37 24 12 4  10 20 32
        45 36 23 11 21 33 42
        49 44 35 22 34 43 48
    """,
    81: """
        79 71 59 43 26 42 58 70 78
        73 61 45 28 14 27 44 60 72
        63 47 30 16 6  15 29 46 62
        49 32 18 8  2  7  17 31 48
        41 25 13 5  1  3  9  19 33
        57 40 24 12 4  10 20 34 50
        69 56 39 23 11 21 35 51 64
        77 68 55 38 22 36 52 65 74
        81 76 67 54 37 53 66 75 80
    """,
}


def parse_figure(text: str) -> dict[tuple[int, int], int]:
    """(east, south) offset from the middle cell -> server number."""
    rows = [line.split() for line in text.strip().splitlines()]
    size = len(rows)
    assert size % 2 == 1 and all(len(r) == size for r in rows), "figure grids are odd squares"
    half = size // 2
    return {(x - half, y - half): int(v) for y, row in enumerate(rows) for x, v in enumerate(row) if v != "."}


def layout(strategy: str, n: int) -> dict[tuple[int, int], int]:
    offs = placement.offsets(strategy, n)
    assert len(set(offs)) == n, "no two servers share a satellite"
    return {o: i + 1 for i, o in enumerate(offs)}


@pytest.mark.parametrize("n", [9, 25, 49, 81])
def test_rotation_matches_figure_13(n):
    assert layout("rotation", n) == parse_figure(FIGURE_13[n])


@pytest.mark.parametrize("n", [9, 25, 49, 81])
def test_hop_matches_figure_14(n):
    assert layout("hop", n) == parse_figure(FIGURE_14[n])


@pytest.mark.parametrize("n", [9, 25, 49, 81])
def test_rotation_hop_matches_figure_15(n):
    assert layout("rotation-hop", n) == parse_figure(FIGURE_15[n])


def test_figure_15_3x3_as_in_design():
    assert placement.render_grid("rotation-hop", 9) == [[7, 2, 6], [5, 1, 3], [9, 4, 8]]


# ---- hop rings for every n ----------------------------------------------------------


def ring_order_key(offset: tuple[int, int]):
    """DESIGN.md's ring order stated as a sort key: north half top-down (east before west),
    east tip, south-east quarter top-down, south tip, south-west quarter bottom-up, west tip."""
    x, y = offset
    if y < 0:
        return (0, y, -x)
    if y == 0 and x > 0:
        return (1, 0, 0)
    if x > 0:
        return (2, y, 0)
    if x == 0:
        return (3, 0, 0)
    if y > 0:
        return (4, -y, 0)
    return (5, 0, 0)


@pytest.mark.parametrize("n", range(1, 122))
def test_hop_rings_complete_and_ordered(n):
    offs = placement.offsets("hop", n)
    assert len(offs) == n and len(set(offs)) == n
    rings = [abs(x) + abs(y) for x, y in offs]
    assert rings == sorted(rings), "each ring complete before the next starts"
    last = rings[-1]
    for d in range(last):
        assert rings.count(d) == max(1, 4 * d), f"ring {d} complete"
    for d in range(last + 1):
        in_ring = [o for o in offs if abs(o[0]) + abs(o[1]) == d]
        assert in_ring == sorted(in_ring, key=ring_order_key), f"ring {d} in the paper's order"
    assert offs == placement.offsets("hop", 121)[:n], "a smaller layout is a prefix of a larger one"


def test_hop_ring_sizes():
    assert placement.hop_ring(0) == [(0, 0)]
    assert placement.hop_ring(1) == [(0, -1), (1, 0), (0, 1), (-1, 0)]
    for d in range(1, 12):
        ring = placement.hop_ring(d)
        assert len(ring) == 4 * d == len(set(ring))
        assert all(abs(x) + abs(y) == d for x, y in ring)


# ---- n that is not a perfect square, and invalid n ---------------------------------------


def test_non_square_rotation_box():
    # n = 10: box 4 wide (extra column on the west), 3 rows, fill truncated after 10
    assert placement.box_width(10) == 4
    assert placement.box_columns(10) == (-2, 1)
    assert placement.render_grid("rotation", 10) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, None, None]]
    assert placement.offsets("rotation", 10)[:2] == [(-2, -1), (-1, -1)]


def test_non_square_rotation_hop_is_truncated_box_order():
    for n in range(1, 122):
        w = placement.box_width(n)
        low, high = -(w // 2), w - 1 - w // 2
        offs = placement.offsets("rotation-hop", n)
        assert offs == placement.offsets("rotation-hop", w * w)[:n]
        assert all(low <= x <= high and low <= y <= high for x, y in offs)
        assert offs[0] == (0, 0)
    assert placement.render_grid("rotation-hop", 5) == [[None, 2, None], [5, 1, 3], [None, 4, None]]


def test_baseline_starts_at_centre_row_major():
    assert placement.offsets("baseline", 9) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (0, 2), (1, 2), (2, 2)]
    assert placement.offsets("baseline", 5) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1)]


@pytest.mark.parametrize("bad", [0, -1, placement.MAX_SERVERS + 1, 2.0, True, "9", None])
def test_invalid_n_servers(bad):
    with pytest.raises(ValueError):
        placement.offsets("hop", bad)


def test_unknown_strategy():
    with pytest.raises(ValueError, match="unknown placement strategy"):
        placement.offsets("spiral", 9)


def test_square_n_fills_box_for_both_ground_strategies():
    for w in range(1, 11):
        n = w * w
        assert set(placement.offsets("rotation", n)) == set(placement.offsets("rotation-hop", n))


# ---- hop bounds ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "strategy,n,hops,radius",
    [("rotation-hop", 9, 2, 5), ("rotation", 9, 2, 5), ("hop", 9, 2, 4), ("baseline", 9, 4, 4),
     ("hop", 25, 3, 6), ("hop", 81, 6, 12), ("rotation-hop", 81, 8, 17), ("rotation-hop", 10, 4, 7),
     ("hop", 1, 0, 0), ("rotation-hop", 1, 0, 1)],
)
def test_max_hops_and_gossip_radius(strategy, n, hops, radius):
    assert placement.max_hops(strategy, n) == hops
    assert placement.gossip_radius(strategy, n) == radius


def test_max_hops_bounds_every_step():
    for strategy in placement.MIGRATING_STRATEGIES:
        for n in (5, 9, 10, 25, 30):
            w = placement.box_width(n)
            for steps in range(2 * w):
                offs = placement.current_offsets(strategy, n, steps)
                assert max(abs(x) + abs(y) for x, y in offs) <= placement.max_hops(strategy, n)
                # while migrating, the east column's chunks are also on the entering column
                x0, x1 = placement.box_columns(n)
                held = offs + [(x0 - 1, y) for x, y in offs if x == x1]
                assert max(abs(ax - bx) + abs(ay - by) for ax, ay in held for bx, by in held) <= \
                    placement.gossip_radius(strategy, n)


# ---- chunks, servers, torus ----------------------------------------------------------


def test_chunk_server_is_mod_n_one_based():
    assert [placement.chunk_server(c, 4) for c in range(9)] == [1, 2, 3, 4, 1, 2, 3, 4, 1]
    with pytest.raises(ValueError):
        placement.chunk_server(-1, 4)


def test_server_chunks_cover_every_chunk_once():
    for n in (1, 3, 9, 25):
        for chunk_count in (0, 1, 2, 8, 9, 10, 26, 100):
            seen = []
            for server in range(1, n + 1):
                first, count, stride = placement.server_chunks(server, n, chunk_count)
                ids = [first + i * stride for i in range(count)]
                assert all(placement.chunk_server(c, n) == server for c in ids)
                seen += ids
            assert sorted(seen) == list(range(chunk_count))
    with pytest.raises(ValueError):
        placement.server_chunks(0, 9, 5)


def test_satellite_at_wraps_both_ways():
    assert placement.satellite_at((0, 0), (-1, -1), 5, 7) == (4, 6)
    assert placement.satellite_at((4, 6), (1, 1), 5, 7) == (0, 0)
    assert placement.satellite_at((2, 3), (2, -1), 5, 7) == (1, 5)
    with pytest.raises(ValueError):
        placement.satellite_at((5, 0), (0, 0), 5, 7)


def test_torus_delta():
    assert placement.torus_delta(0, 8, 15) == -7
    assert placement.torus_delta(0, 7, 15) == 7
    assert placement.torus_delta(14, 0, 15) == 1
    assert placement.torus_delta(3, 3, 15) == 0


def test_check_fits():
    placement.check_fits("rotation-hop", 81, 9, 9)
    with pytest.raises(ValueError, match="needs"):
        placement.check_fits("rotation-hop", 81, 9, 8)
    with pytest.raises(ValueError, match="needs"):
        placement.check_fits("hop", 81, 12, 15)  # diamond spans 13 planes
    with pytest.raises(ValueError):
        placement.check_fits("hop", 9, 0, 5)


# ---- locating at mission time t ----------------------------------------------------------

from dataclasses import dataclass  # noqa: E402


@dataclass(frozen=True)
class Block:
    strategy: str
    n_servers: int
    centre: tuple[int, int]
    created_ms: int
    chunk_count: int


# Figure 7: the 3x3 rotation-hop layout with satellite 4 of plane 3 overhead on a 7x9 grid.
FIG7 = Block("rotation-hop", 9, (3, 4), created_ms=500, chunk_count=9)
ROT = placement.Rotation(planes=7, sats=9, step_ms=1000)


def test_locate_at_creation_is_the_layout():
    servers = placement.locate_servers(FIG7, 900, ROT)
    assert servers == [(3, 4), (2, 4), (3, 5), (4, 4), (3, 3), (2, 5), (2, 3), (4, 5), (4, 3)]


def test_locate_after_one_step_is_figure_8():
    before = placement.locate_servers(FIG7, 999, ROT)
    after = placement.locate_servers(FIG7, 1000, ROT)
    moved = {s + 1: (a, b) for s, (a, b) in enumerate(zip(before, after)) if a != b}
    # paper: chunk 6 (sat 5, orb 2) -> (2, 2), 3: (5, 3) -> (2, 3), 8: (5, 4) -> (2, 4)  [(sat, orb)]
    assert moved == {6: ((2, 5), (2, 2)), 3: ((3, 5), (3, 2)), 8: ((4, 5), (4, 2))}


def test_locate_after_box_width_steps_is_shifted_layout():
    start = placement.locate_servers(FIG7, 500, ROT)
    later = placement.locate_servers(FIG7, 3500, ROT)  # 3 steps = box width
    assert later == [(p, (s - 3) % 9) for p, s in start]


def test_locate_wraps_round_the_plane():
    block = Block("rotation-hop", 9, (0, 0), created_ms=0, chunk_count=9)
    servers = placement.locate_servers(block, 1000, ROT)
    assert servers[0] == (0, 0)  # the centre chunk stays until its column leaves
    assert servers[2] == (0, 7)  # east column (sat 1) moved 3 west: sat -2 wraps to 7
    assert servers[6] == (6, 8)  # north-west corner: plane -1 -> 6, sat -1 -> 8


@pytest.mark.parametrize("strategy", ["hop", "baseline"])
def test_static_strategies_never_move(strategy):
    block = Block(strategy, 25, (3, 4), created_ms=0, chunk_count=40)
    rot = placement.Rotation(planes=9, sats=11, step_ms=250.5)
    first = placement.locate_chunks(block, 0, rot)
    assert placement.locate_chunks(block, 10_000_000, rot) == first


def test_block_satellites_for_direct_eviction():
    assert placement.block_satellites(FIG7, 500, ROT) == sorted(placement.locate_servers(FIG7, 500, ROT))
    small = Block("hop", 25, (3, 4), created_ms=0, chunk_count=3)
    assert placement.block_satellites(small, 0, ROT) == [(2, 4), (3, 4), (3, 5)]


def test_locate_chunks_follow_servers():
    block = Block("rotation", 9, (3, 4), created_ms=0, chunk_count=20)
    servers = placement.locate_servers(block, 5000, ROT)
    chunks = placement.locate_chunks(block, 5000, ROT)
    assert chunks == [servers[c % 9] for c in range(20)]


def test_steps_count_global_step_boundaries():
    assert placement.steps_elapsed(999, 1000, 1000) == 1
    assert placement.steps_elapsed(1000, 1999, 1000) == 0
    assert placement.rotation_step_index(382_600.0 * 3 + 1, 382_600.0) == 3


def test_locate_rejects_bad_input():
    with pytest.raises(ValueError, match="before the block was created"):
        placement.locate_servers(FIG7, 100, ROT)
    with pytest.raises(ValueError):
        placement.Rotation(planes=7, sats=9, step_ms=0)
    with pytest.raises(ValueError):
        placement.locate_servers(Block("rotation-hop", 9, (7, 0), 0, 9), 0, ROT)  # plane outside grid
    with pytest.raises(ValueError, match="needs"):
        placement.locate_servers(Block("rotation-hop", 100, (3, 4), 0, 9), 0, ROT)  # box wider than 9 sats
