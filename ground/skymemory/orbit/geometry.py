"""Orbital geometry of a Walker-style LEO constellation (paper eqs. 1-4, patent D_N(t)).

Pure functions, SI units (metres, seconds, radians unless a name says otherwise).
The C core (`cfs_apps/skymem_core/fsw/src/skymem_geometry.c`) implements the
same formulas; a test checks the two agree.
"""

from __future__ import annotations

import math

EARTH_RADIUS_M = 6_371_000.0  # r_E, as in the paper and the patent's Starlink example
EARTH_MU_M3_S2 = 3.986004418e14  # standard gravitational parameter of the Earth
SPEED_OF_LIGHT_M_S = 299_792_458.0


def orbital_period_s(altitude_m: float) -> float:
    """Period of a circular orbit at this altitude (Kepler's third law)."""
    if altitude_m <= 0:
        raise ValueError(f"altitude must be positive, got {altitude_m} m")
    radius = EARTH_RADIUS_M + altitude_m
    return 2.0 * math.pi * math.sqrt(radius**3 / EARTH_MU_M3_S2)


def intra_plane_distance_m(altitude_m: float, sats_per_plane: int) -> float:
    """D_M: distance between neighbours in the same plane (paper eq. 1)."""
    if sats_per_plane < 1:
        raise ValueError("sats_per_plane must be >= 1")
    return (EARTH_RADIUS_M + altitude_m) * math.sqrt(2.0 * (1.0 - math.cos(2.0 * math.pi / sats_per_plane)))


def inter_plane_distance_max_m(altitude_m: float, planes: int) -> float:
    """D_N maximum: distance between neighbours in adjacent planes (paper eq. 2)."""
    if planes < 1:
        raise ValueError("planes must be >= 1")
    return (EARTH_RADIUS_M + altitude_m) * math.sqrt(2.0 * (1.0 - math.cos(2.0 * math.pi / planes)))


def inter_plane_distance_m(
    altitude_m: float,
    planes: int,
    sats_per_plane: int,
    inclination_rad: float,
    t_s: float,
    walker_phase: int = 0,
) -> float:
    """D_N(t): time-varying distance between neighbours in adjacent planes (patent text).

    D_N(t) = (r_E+h) sqrt(2[1-cos(2pi/N)] [cos^2(2pi t/T + 2pi f/M) + cos^2(i) sin^2(2pi t/T + 2pi f/M)])
    """
    period = orbital_period_s(altitude_m)
    phase = 2.0 * math.pi * t_s / period + 2.0 * math.pi * walker_phase / sats_per_plane
    shape = math.cos(phase) ** 2 + math.cos(inclination_rad) ** 2 * math.sin(phase) ** 2
    return inter_plane_distance_max_m(altitude_m, planes) * math.sqrt(shape)


def grid_distance_m(d_m: float, d_n: float, along_plane_hops: int, across_plane_hops: int) -> float:
    """Paper eq. 3: straight-line estimate from hop offsets.

    `along_plane_hops` counts satellites along a plane (spacing D_M),
    `across_plane_hops` counts planes (spacing D_N).
    """
    return math.hypot(d_m * along_plane_hops, d_n * across_plane_hops)


def slant_range_m(ground_distance_m: float, altitude_m: float) -> float:
    """Paper eq. 4: ground host to a satellite whose sub-point is `ground_distance_m` away."""
    return math.hypot(ground_distance_m, altitude_m)


def light_time_s(distance_m: float) -> float:
    return distance_m / SPEED_OF_LIGHT_M_S
