"""The constellation as the ground sees it: grid, orbit, mission clock, overhead satellite.

Geometry comes from skymemory.orbit.geometry (one Python implementation of the
paper's formulas). Conventions (docs/CONTRACTS.md): satellites (plane, sat),
plane = row (north/south), sat = column (east/west along the plane). One
rotation step = orbital period / sats per plane; each step the satellite over
the ground host moves one column WEST, i.e. its sat index decreases by one.
Rotation steps are counted from mission time 0 (floor(mission_ms / step_ms)),
as skymemory.orbit.placement counts them, so every process agrees on the boundaries.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from skymemory.orbit import geometry

Sat = tuple[int, int]


def torus_delta(a: int, b: int, size: int) -> int:
    """Shortest signed step count from a to b on a ring of `size`."""
    d = (b - a) % size
    return d - size if d > size // 2 else d


@dataclass(frozen=True)
class Constellation:
    planes: int
    sats: int
    altitude_km: float = 550.0
    inclination_deg: float = 53.0
    walker_phase: int = 0
    epoch_ms: int = 0
    time_scale: float = 1.0
    overhead_at_epoch: Sat = (0, 0)

    def __post_init__(self) -> None:
        if self.planes < 1 or self.sats < 1:
            raise ValueError(f"grid must be at least 1x1, got {self.planes}x{self.sats}")
        if not 0 < self.altitude_km < 100_000:
            raise ValueError(f"altitude must be in (0, 100000) km, got {self.altitude_km}")
        if not 0 <= self.inclination_deg <= 180:
            raise ValueError(f"inclination must be 0..180 degrees, got {self.inclination_deg}")
        if not self.time_scale > 0:
            raise ValueError(f"time scale must be > 0, got {self.time_scale}")
        self.check(self.overhead_at_epoch)

    # ---- basics ------------------------------------------------------------------
    @property
    def altitude_m(self) -> float:
        return self.altitude_km * 1000.0

    @property
    def period_s(self) -> float:
        return geometry.orbital_period_s(self.altitude_m)

    @property
    def step_ms(self) -> float:
        """One rotation step: the time for the next satellite of a plane to come overhead."""
        return self.period_s * 1000.0 / self.sats

    def check(self, s: Sat) -> Sat:
        p, q = s
        if not (0 <= p < self.planes and 0 <= q < self.sats):
            raise ValueError(f"satellite {s} outside the {self.planes}x{self.sats} grid")
        return p, q

    def index(self, s: Sat) -> int:
        p, q = self.check(s)
        return p * self.sats + q

    def all_satellites(self) -> list[Sat]:
        return [(p, q) for p in range(self.planes) for q in range(self.sats)]

    # ---- time ----------------------------------------------------------------------
    def mission_ms(self, unix_ms: float | None = None) -> int:
        now = time.time() * 1000.0 if unix_ms is None else unix_ms
        return int(self.epoch_ms + self.time_scale * (now - self.epoch_ms))

    def step_index(self, mission_ms: float) -> int:
        return math.floor(mission_ms / self.step_ms)

    def overhead(self, mission_ms: float | None = None) -> Sat:
        """The satellite closest to the ground host at a mission time (default: now)."""
        t = self.mission_ms() if mission_ms is None else mission_ms
        steps = self.step_index(t) - self.step_index(self.epoch_ms)
        p, q = self.overhead_at_epoch
        return p, (q - steps) % self.sats

    def next_step_ms(self, mission_ms: float) -> float:
        """Mission time of the next rotation step boundary."""
        return (self.step_index(mission_ms) + 1) * self.step_ms

    # ---- line of sight --------------------------------------------------------------
    def los_window(self, width: int, height: int, mission_ms: float | None = None) -> list[Sat]:
        """A width (columns) x height (planes) box centred on the overhead satellite.

        An even size puts the extra column west / extra row north (as placement does).
        Row-major from the north-west corner.
        """
        if not (1 <= width <= self.sats and 1 <= height <= self.planes):
            raise ValueError(f"LOS window {width}x{height} does not fit the {self.planes}x{self.sats} grid")
        cp, cq = self.overhead(mission_ms)
        west, north = width // 2, height // 2
        return [((cp + dy) % self.planes, (cq + dx) % self.sats)
                for dy in range(-north, height - north) for dx in range(-west, width - west)]

    def hop_offset(self, a: Sat, b: Sat) -> tuple[int, int]:
        """(along-plane, across-plane) shortest signed hops from a to b on the torus."""
        return torus_delta(a[1], b[1], self.sats), torus_delta(a[0], b[0], self.planes)

    def hops(self, a: Sat, b: Sat) -> int:
        x, y = self.hop_offset(a, b)
        return abs(x) + abs(y)

    def nearest(self, n: int, mission_ms: float | None = None, centre: Sat | None = None) -> list[Sat]:
        """The n satellites closest to the ground host (straight-line distance, eq. 3/4),
        overhead first; ties broken by fewer hops, then north-west first. centre: the satellite overhead
        the ground host in question (default: this one's at mission_ms), e.g. another ground site's."""
        if not 1 <= n <= self.planes * self.sats:
            raise ValueError(f"n must be 1..{self.planes * self.sats}, got {n}")
        t = self.mission_ms() if mission_ms is None else mission_ms
        centre = self.overhead(t) if centre is None else (centre[0] % self.planes, centre[1] % self.sats)

        def key(s: Sat):
            x, y = self.hop_offset(centre, s)
            return (round(self.slant_range_m(s, t, centre), 3), abs(x) + abs(y), y, x)

        return sorted(self.all_satellites(), key=key)[:n]

    # ---- distances and latencies --------------------------------------------------------
    def d_m(self) -> float:
        return geometry.intra_plane_distance_m(self.altitude_m, self.sats)

    def d_n(self, mission_ms: float) -> float:
        return geometry.inter_plane_distance_m(self.altitude_m, self.planes, self.sats,
                                               math.radians(self.inclination_deg), mission_ms / 1000.0,
                                               self.walker_phase)

    def slant_range_m(self, s: Sat, mission_ms: float | None = None, centre: Sat | None = None) -> float:
        """Ground host to satellite s (eq. 3 for the ground distance, scaled to the surface, then eq. 4); centre:
        the satellite overhead that ground host (default: this one's)."""
        t = self.mission_ms() if mission_ms is None else mission_ms
        x, y = self.hop_offset(self.overhead(t) if centre is None else centre, s)
        at_orbit = geometry.grid_distance_m(self.d_m(), self.d_n(t), x, y)
        on_ground = at_orbit * geometry.EARTH_RADIUS_M / (geometry.EARTH_RADIUS_M + self.altitude_m)
        return geometry.slant_range_m(on_ground, self.altitude_m)

    def isl_path_m(self, a: Sat, b: Sat, mission_ms: float | None = None) -> float:
        """Length of the hop-by-hop ISL path (each along-plane hop D_M, each cross-plane hop D_N(t))."""
        t = self.mission_ms() if mission_ms is None else mission_ms
        x, y = self.hop_offset(a, b)
        return abs(x) * self.d_m() + abs(y) * self.d_n(t)

    def one_way_latency_s(self, dst: Sat, via: Sat | None = None, mission_ms: float | None = None) -> float:
        """Light time ground -> via (ground link) -> dst (ISL). via defaults to the overhead satellite."""
        t = self.mission_ms() if mission_ms is None else mission_ms
        v = self.overhead(t) if via is None else via
        return geometry.light_time_s(self.slant_range_m(v, t) + self.isl_path_m(v, dst, t))
