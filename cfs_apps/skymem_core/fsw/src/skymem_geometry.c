/* skymem_geometry.c -- same formulas and constants as ground/skymemory/geometry.py. */
#include "skymem_geometry.h"

#include <math.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

double skymem_orbital_period_s(double altitude_m)
{
    double r;
    if (!(altitude_m > 0)) return -1.0;
    r = SKYMEM_EARTH_RADIUS_M + altitude_m;
    return 2.0 * M_PI * sqrt(r * r * r / SKYMEM_EARTH_MU_M3_S2);
}

static double ring_chord_m(double altitude_m, unsigned n)
{
    if (n < 1) return -1.0;
    return (SKYMEM_EARTH_RADIUS_M + altitude_m) * sqrt(2.0 * (1.0 - cos(2.0 * M_PI / (double)n)));
}

double skymem_intra_plane_distance_m(double altitude_m, unsigned sats_per_plane)
{
    return ring_chord_m(altitude_m, sats_per_plane);
}

double skymem_inter_plane_distance_max_m(double altitude_m, unsigned planes) { return ring_chord_m(altitude_m, planes); }

double skymem_inter_plane_distance_m(double altitude_m, unsigned planes, unsigned sats_per_plane,
                                     double inclination_rad, double t_s, int walker_phase)
{
    double period = skymem_orbital_period_s(altitude_m), phase, c, si, ci, shape;
    if (period <= 0 || planes < 1 || sats_per_plane < 1) return -1.0;
    phase = 2.0 * M_PI * t_s / period + 2.0 * M_PI * (double)walker_phase / (double)sats_per_plane;
    c = cos(phase);
    si = sin(phase);
    ci = cos(inclination_rad);
    shape = c * c + ci * ci * si * si;
    return skymem_inter_plane_distance_max_m(altitude_m, planes) * sqrt(shape);
}

double skymem_grid_distance_m(double d_m, double d_n, int along_plane_hops, int across_plane_hops)
{
    return hypot(d_m * along_plane_hops, d_n * across_plane_hops);
}

double skymem_slant_range_m(double ground_distance_m, double altitude_m) { return hypot(ground_distance_m, altitude_m); }

double skymem_light_time_s(double distance_m) { return distance_m / SKYMEM_SPEED_OF_LIGHT; }
