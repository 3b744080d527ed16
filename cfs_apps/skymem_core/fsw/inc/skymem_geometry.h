/*
 * skymem_geometry.h -- orbital geometry, the C twin of ground/skymemory/geometry.py
 * (paper eqs. 1-4, patent D_N(t)). SI units. Same constants as the Python module.
 */
#ifndef SKYMEM_GEOMETRY_H
#define SKYMEM_GEOMETRY_H

#ifdef __cplusplus
extern "C" {
#endif

#define SKYMEM_EARTH_RADIUS_M   6371000.0
#define SKYMEM_EARTH_MU_M3_S2   3.986004418e14
#define SKYMEM_SPEED_OF_LIGHT   299792458.0

/* Circular orbit period (s); returns -1 if altitude_m <= 0. */
double skymem_orbital_period_s(double altitude_m);
/* D_M: neighbours in the same plane (eq. 1). */
double skymem_intra_plane_distance_m(double altitude_m, unsigned sats_per_plane);
/* D_N max: neighbours in adjacent planes (eq. 2). */
double skymem_inter_plane_distance_max_m(double altitude_m, unsigned planes);
/* D_N(t) (patent): time-varying inter-plane distance. */
double skymem_inter_plane_distance_m(double altitude_m, unsigned planes, unsigned sats_per_plane,
                                     double inclination_rad, double t_s, int walker_phase);
/* eq. 3 */
double skymem_grid_distance_m(double d_m, double d_n, int along_plane_hops, int across_plane_hops);
/* eq. 4 */
double skymem_slant_range_m(double ground_distance_m, double altitude_m);
double skymem_light_time_s(double distance_m);

#ifdef __cplusplus
}
#endif
#endif
