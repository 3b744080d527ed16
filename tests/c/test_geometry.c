/* test_geometry.c -- geometry against the patent's Starlink example and basic identities. */
#include <math.h>

#include "check.h"
#include "skymem_geometry.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#define NEAR(a, b, tol) CHECK(fabs((a) - (b)) <= (tol))

int main(void)
{
    double dm = skymem_intra_plane_distance_m(550e3, 22);
    double dn_max = skymem_inter_plane_distance_max_m(550e3, 72);
    double period = skymem_orbital_period_s(550e3);
    double r = 6371e3 + 550e3;
    /* Patent: Starlink shell h = 550 km, M = 22 satellites per plane -> D_M ~ 1,969,922 m. */
    NEAR(dm, 1969922.0, 1.0);
    /* Period of a 550 km orbit: about 95.5 minutes (matches geometry.py: 5730.127 s). */
    NEAR(period, 5730.127, 0.01);
    CHECK(skymem_orbital_period_s(0) < 0);
    /* D_N(t) at t=0, f=0 equals the maximum (cos^2 = 1), and never exceeds it. */
    NEAR(skymem_inter_plane_distance_m(550e3, 72, 22, 53.0 * M_PI / 180.0, 0.0, 0), dn_max, 1e-6);
    {
        int k;
        double lo = 1e30;
        for (k = 0; k < 100; k++) {
            double d = skymem_inter_plane_distance_m(550e3, 72, 22, 53.0 * M_PI / 180.0, period * k / 100.0, 0);
            CHECK(d <= dn_max + 1e-6);
            if (d < lo) lo = d;
        }
        /* minimum is dn_max * cos(i) (at a quarter period) */
        NEAR(lo, dn_max * cos(53.0 * M_PI / 180.0), dn_max * 0.002);
    }
    /* D_N at a quarter period: dn_max * |cos i| */
    NEAR(skymem_inter_plane_distance_m(550e3, 72, 22, 53.0 * M_PI / 180.0, period / 4.0, 0),
         dn_max * cos(53.0 * M_PI / 180.0), 1e-3);
    /* Chord of a hexagon = radius. */
    NEAR(skymem_intra_plane_distance_m(550e3, 6), r, 1e-6);
    NEAR(skymem_grid_distance_m(3.0, 4.0, 1, 1), 5.0, 1e-12);
    NEAR(skymem_slant_range_m(0.0, 550e3), 550e3, 1e-9);
    NEAR(skymem_light_time_s(299792458.0), 1.0, 1e-12);
    /* Golden values printed by ground/skymemory/geometry.py (same formulas, same constants). */
    NEAR(skymem_orbital_period_s(550e3), 5730.127089334606, 1e-6);
    NEAR(skymem_intra_plane_distance_m(550e3, 22), 1969921.9913788133, 1e-6);
    NEAR(skymem_inter_plane_distance_max_m(550e3, 72), 603779.5599109798, 1e-6);
    NEAR(skymem_inter_plane_distance_m(550e3, 72, 22, 53.0 * M_PI / 180.0, 1234.5, 1), 364857.470364992, 1e-6);
    NEAR(skymem_inter_plane_distance_m(1200e3, 19, 5, 87.9 * M_PI / 180.0, 777.0, 3), 497920.0843220467, 1e-6);
    NEAR(skymem_grid_distance_m(1e6, 2e6, 3, 4), 8544003.745317532, 1e-6);
    NEAR(skymem_slant_range_m(500e3, 550e3), 743303.4373659253, 1e-6);
    NEAR(skymem_light_time_s(1969922.0), 0.006570952495409341, 1e-15);
    return check_report("geometry");
}
