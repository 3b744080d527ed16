"""Where the chunks of a block live: placement strategies and locating at time t.

Vocabulary (paper §3.4-3.7, docs/placement.md):

* A *server* is a logical chunk destination, numbered 1..n.  Chunk ``c``
  (0-based) goes to server ``c mod n + 1``, so chunk 0 is on server 1.
* An *offset* ``(east, south)`` places a server relative to the *centre*, the
  satellite overhead the ground host (or the satellite hosting the LLM):
  east = +1 satellite along the plane (sat index + 1), south = +1 plane.
* Satellites are ``(plane, sat)``, 0-based, on a torus of ``planes x sats``.
* The *LOS box* of the ground-hosted strategies is ``w = ceil(sqrt(n))``
  columns wide.  Every rotation step (orbital period / sats per plane) the
  overhead satellite moves one column west (sat - 1); the chunks on the box's
  east column then move ``w`` columns west, in the same plane, to the column
  that enters the box (paper Figure 8).

Strategies:

``baseline``      rotation-unaware striping: server 1 is the centre, servers
                  2..n continue row-major (east along the plane, then the next
                  plane south) in a ``w``-wide block whose top-left corner is
                  the centre.  Never migrates.
``rotation``      row-major over the LOS box (Figure 13).  Migrates.
``hop``           concentric hop rings around the centre (Figure 14), for an
                  LLM on board the centre satellite.  Never migrates.
``rotation-hop``  hop rings clipped to the ``w x w`` LOS box, renumbered
                  (Figure 15).  Migrates.

For ``n`` that is not a perfect square the box is ``w = ceil(sqrt(n))`` wide
and the fill order is cut after ``n`` servers.  A box of even width has its
extra column (and row) on the west (north) side: the overhead point drifts
west through the step, so that box is centred on the middle of the step.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Protocol

STRATEGIES = ("baseline", "rotation", "hop", "rotation-hop")
MIGRATING_STRATEGIES = frozenset({"rotation", "rotation-hop"})
MAX_SERVERS = 10_000

Offset = tuple[int, int]
Satellite = tuple[int, int]


def check_strategy(strategy: str) -> str:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown placement strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    return strategy


def check_n_servers(n_servers: int) -> int:
    if isinstance(n_servers, bool) or not isinstance(n_servers, numbers.Integral):
        raise ValueError(f"number of servers must be an integer, got {n_servers!r}")
    if not 1 <= n_servers <= MAX_SERVERS:
        raise ValueError(f"number of servers must be in 1..{MAX_SERVERS}, got {n_servers}")
    return n_servers


def box_width(n_servers: int) -> int:
    """Width (and height) of the LOS box: ceil(sqrt(n))."""
    check_n_servers(n_servers)
    return math.isqrt(n_servers - 1) + 1


def _centred_range(width: int) -> tuple[int, int]:
    """Offsets [low, high] of `width` cells around 0; the extra cell of an even width goes west/north."""
    low = -(width // 2)
    return low, low + width - 1


def box_columns(n_servers: int) -> tuple[int, int]:
    """East offsets (first, last) of the LOS box columns."""
    return _centred_range(box_width(n_servers))


def hop_ring(d: int) -> list[Offset]:
    """The 4d satellites d hops from the centre, in the paper's ring order (Figure 14).

    North tip (0,-d); for k = 1..d-1 the pair (+k, -(d-k)), (-k, -(d-k));
    east tip (+d, 0); (d-k, +k) for k = 1..d-1; south tip (0, +d);
    (-k, d-k) for k = 1..d-1; west tip (-d, 0).
    """
    if d < 0:
        raise ValueError("ring index must be >= 0")
    if d == 0:
        return [(0, 0)]
    ring: list[Offset] = [(0, -d)]
    for k in range(1, d):
        ring += [(k, -(d - k)), (-k, -(d - k))]
    ring.append((d, 0))
    ring += [(d - k, k) for k in range(1, d)]
    ring.append((0, d))
    ring += [(-k, d - k) for k in range(1, d)]
    ring.append((-d, 0))
    return ring


def _rings_clipped(n_servers: int, low: int | None, high: int | None) -> list[Offset]:
    """First n offsets of the ring order, keeping only those inside [low, high]^2 (if given)."""
    result: list[Offset] = []
    d = 0
    while len(result) < n_servers:
        for east, south in hop_ring(d):
            if low is not None and not (low <= east <= high and low <= south <= high):
                continue
            result.append((east, south))
            if len(result) == n_servers:
                break
        d += 1
    return result


def offsets(strategy: str, n_servers: int) -> list[Offset]:
    """(east, south) offset of each server from the centre satellite, server 1 first."""
    check_strategy(strategy)
    check_n_servers(n_servers)
    w = box_width(n_servers)
    if strategy == "hop":
        return _rings_clipped(n_servers, None, None)
    if strategy == "rotation-hop":
        low, high = _centred_range(w)
        return _rings_clipped(n_servers, low, high)
    if strategy == "rotation":
        rows = -(-n_servers // w)
        x0, _ = _centred_range(w)
        y0, _ = _centred_range(rows)
        return [(x0 + i % w, y0 + i // w) for i in range(n_servers)]
    # baseline: the centre is the top-left corner of a w-wide row-major block
    return [(i % w, i // w) for i in range(n_servers)]


def max_hops(strategy: str, n_servers: int) -> int:
    """Bound on the +GRID hops from the current centre to any server, at any time.

    For the migrating strategies the servers stay within the LOS box columns
    and their own rows (migration only rotates columns), so the bound is taken
    over that rectangle; for the static ones it is over the offsets.
    """
    offs = offsets(strategy, n_servers)
    if strategy in MIGRATING_STRATEGIES:
        x0, x1 = box_columns(n_servers)
        ys = [y for _, y in offs]
        return max(abs(x0), abs(x1)) + max(abs(min(ys)), abs(max(ys)))
    return max(abs(x) + abs(y) for x, y in offs)


def gossip_radius(strategy: str, n_servers: int) -> int:
    """Hops an EVICT_BLOCK gossip must travel so that, started from any server
    of the block, it reaches every other server (at any rotation step).

    For the migrating strategies a chunk may briefly be on both the leaving
    east column and the entering west column, so the span is w + 1 columns.
    """
    offs = offsets(strategy, n_servers)
    ys = [y for _, y in offs]
    if strategy in MIGRATING_STRATEGIES:
        return box_width(n_servers) + (max(ys) - min(ys))
    return max(abs(ax - bx) + abs(ay - by) for ax, ay in offs for bx, by in offs)


# ---- chunks and servers ----------------------------------------------------


def chunk_server(chunk_id: int, n_servers: int) -> int:
    """1-based server of a 0-based chunk id: chunk_id mod n + 1."""
    check_n_servers(n_servers)
    if chunk_id < 0:
        raise ValueError(f"chunk id must be >= 0, got {chunk_id}")
    return chunk_id % n_servers + 1


def server_chunks(server: int, n_servers: int, chunk_count: int) -> tuple[int, int, int]:
    """Chunks held by a 1-based server, as (first, count, stride) like GET_CHUNKS/MIGRATE."""
    check_n_servers(n_servers)
    if not 1 <= server <= n_servers:
        raise ValueError(f"server must be in 1..{n_servers}, got {server}")
    if chunk_count < 0:
        raise ValueError("chunk count must be >= 0")
    first = server - 1
    count = 0 if first >= chunk_count else (chunk_count - first + n_servers - 1) // n_servers
    return first, count, n_servers


# ---- the torus ----------------------------------------------------------------


def check_torus(planes: int, sats: int) -> None:
    for name, value in (("planes", planes), ("sats", sats)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_satellite(satellite: Satellite, planes: int, sats: int) -> Satellite:
    check_torus(planes, sats)
    plane, sat = satellite
    if not (0 <= plane < planes and 0 <= sat < sats):
        raise ValueError(f"satellite {satellite} outside the {planes}x{sats} grid (0-based)")
    return plane, sat


def satellite_at(centre: Satellite, offset: Offset, planes: int, sats: int) -> Satellite:
    """Absolute (plane, sat) of an (east, south) offset from the centre, wrapping both ways."""
    plane, sat = check_satellite(centre, planes, sats)
    east, south = offset
    return (plane + south) % planes, (sat + east) % sats


def torus_delta(a: int, b: int, size: int) -> int:
    """Shortest signed step count from a to b on a ring of `size` (ties go positive)."""
    d = (b - a) % size
    return d - size if d > size // 2 else d


def check_fits(strategy: str, n_servers: int, planes: int, sats: int) -> None:
    """Raise ValueError unless the layout (and, if it migrates, its box) fits on the torus
    without two servers landing on one satellite."""
    check_torus(planes, sats)
    offs = offsets(strategy, n_servers)
    xs = [x for x, _ in offs]
    ys = [y for _, y in offs]
    width = box_width(n_servers) if strategy in MIGRATING_STRATEGIES else max(xs) - min(xs) + 1
    height = max(ys) - min(ys) + 1
    if width > sats or height > planes:
        raise ValueError(
            f"{strategy} layout of {n_servers} servers needs {height} planes x {width} sats; "
            f"the grid is {planes}x{sats}"
        )


# ---- rotation over time -------------------------------------------------------


def rotation_step_index(mission_ms: float, step_ms: float) -> int:
    """Global rotation step at a mission time: floor(mission_ms / step_ms).

    Steps are counted from mission time 0, the same for every block and every
    process, so a block's step at creation and the step now are comparable.
    """
    if not step_ms > 0:
        raise ValueError(f"rotation step must be positive, got {step_ms} ms")
    if mission_ms < 0:
        raise ValueError(f"mission time must be >= 0, got {mission_ms} ms")
    return math.floor(mission_ms / step_ms)


def steps_elapsed(created_ms: float, now_ms: float, step_ms: float) -> int:
    if now_ms < created_ms:
        raise ValueError(f"now ({now_ms} ms) is before the block was created ({created_ms} ms)")
    return rotation_step_index(now_ms, step_ms) - rotation_step_index(created_ms, step_ms)


def current_offsets(strategy: str, n_servers: int, steps: int) -> list[Offset]:
    """Server offsets relative to the *current* overhead satellite after `steps` rotation steps.

    Migrating strategies: each step the east column moves w columns west, so a
    server's column is the one box column congruent to its original column
    mod w.  Static strategies: the centre moves one sat west per step and the
    servers stay put, i.e. they drift one column east relative to the centre.
    """
    if steps < 0:
        raise ValueError("steps must be >= 0")
    offs = offsets(strategy, n_servers)
    if strategy in MIGRATING_STRATEGIES:
        x0, _ = box_columns(n_servers)
        w = box_width(n_servers)
        return [(x0 + (x - x0 + steps) % w, y) for x, y in offs]
    return [(x + steps, y) for x, y in offs]


def overhead_after(centre: Satellite, steps: int, planes: int, sats: int) -> Satellite:
    """The overhead satellite `steps` rotation steps after `centre` was overhead."""
    plane, sat = check_satellite(centre, planes, sats)
    return plane, (sat - steps) % sats


class PlacedBlock(Protocol):
    """What locating needs from a block record (skymemory.store.BlockRecord has it)."""

    chunk_count: int
    created_ms: int
    strategy: str
    n_servers: int
    centre: tuple[int, int]


@dataclass(frozen=True)
class Rotation:
    """The constellation facts locating needs."""

    planes: int
    sats: int
    step_ms: float  # orbital period / sats per plane, in ms

    def __post_init__(self) -> None:
        check_torus(self.planes, self.sats)
        if not self.step_ms > 0:
            raise ValueError(f"rotation step must be positive, got {self.step_ms} ms")


def locate_servers(block: PlacedBlock, now_ms: float, rotation: Rotation) -> list[Satellite]:
    """Current satellite of each server of a block (server 1 first), without any network."""
    check_fits(block.strategy, block.n_servers, rotation.planes, rotation.sats)
    steps = steps_elapsed(block.created_ms, now_ms, rotation.step_ms)
    centre = check_satellite(tuple(block.centre), rotation.planes, rotation.sats)
    if block.strategy in MIGRATING_STRATEGIES:
        here = overhead_after(centre, steps, rotation.planes, rotation.sats)
        return [satellite_at(here, o, rotation.planes, rotation.sats)
                for o in current_offsets(block.strategy, block.n_servers, steps)]
    return [satellite_at(centre, o, rotation.planes, rotation.sats)
            for o in offsets(block.strategy, block.n_servers)]


def block_satellites(block: PlacedBlock, now_ms: float, rotation: Rotation) -> list[Satellite]:
    """The satellites holding at least one chunk of the block now, sorted: where a
    direct (radius 0) EVICT_BLOCK must go when the ground propagates an eviction itself."""
    servers = locate_servers(block, now_ms, rotation)
    return sorted(set(servers[: min(block.n_servers, block.chunk_count)]))


def locate_chunks(block: PlacedBlock, now_ms: float, rotation: Rotation) -> list[Satellite]:
    """Current satellite of every chunk of a block, indexed by 0-based chunk id."""
    if block.chunk_count < 0:
        raise ValueError("chunk count must be >= 0")
    servers = locate_servers(block, now_ms, rotation)
    return [servers[c % block.n_servers] for c in range(block.chunk_count)]


def server_grid(strategy: str, n_servers: int) -> dict[Offset, int]:
    """Offset -> server number; handy for drawing and for comparing with the paper's figures."""
    return {o: i + 1 for i, o in enumerate(offsets(strategy, n_servers))}


def render_grid(strategy: str, n_servers: int, steps: int = 0) -> list[list[int | None]]:
    """Rows (north to south) of server numbers over the layout's bounding box; None = no server."""
    grid = {o: i + 1 for i, o in enumerate(current_offsets(strategy, n_servers, steps))}
    xs = [x for x, _ in grid]
    ys = [y for _, y in grid]
    return [[grid.get((x, y)) for x in range(min(xs), max(xs) + 1)] for y in range(min(ys), max(ys) + 1)]
