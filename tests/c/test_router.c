/* test_router.c -- +GRID routing: wraps both ways, hop counts = torus distance, termination. */
#include "check.h"
#include "skymem_router.h"

/* Walks the route and returns the hop count, or -1 if it did not arrive within planes*sats steps. */
static int walk(uint32_t P, uint32_t S, uint32_t p, uint32_t s, uint32_t dp, uint32_t ds)
{
    int hops = 0;
    while (hops <= (int)(P * S)) {
        uint32_t before = skymem_torus_hops(P, S, p, s, dp, ds), np, ns;
        skymem_dir_t d = skymem_next_dir(P, S, p, s, dp, ds);
        if (d == SKYMEM_DIR_NONE) return (p == dp && s == ds) ? hops : -1;
        skymem_neighbour(P, S, p, s, d, &np, &ns);
        if (skymem_torus_hops(P, S, np, ns, dp, ds) + 1 != before) return -2; /* every hop must make progress */
        p = np;
        s = ns;
        hops++;
    }
    return -1;
}

int main(void)
{
    static const uint32_t grids[][2] = {{1, 1}, {1, 5}, {4, 4}, {5, 5}, {3, 7}, {19, 5}, {6, 8}, {72, 22}};
    size_t g;
    uint32_t np, ns;
    /* explicit wraps on a 4x4 grid */
    CHECK_EQ_INT(skymem_next_dir(4, 4, 0, 0, 3, 0), SKYMEM_DIR_NORTH); /* north wrap 0 -> 3 */
    CHECK_EQ_INT(skymem_next_dir(4, 4, 3, 0, 0, 0), SKYMEM_DIR_SOUTH); /* south wrap 3 -> 0 */
    CHECK_EQ_INT(skymem_next_dir(4, 4, 0, 0, 0, 3), SKYMEM_DIR_WEST);  /* west wrap 0 -> 3 */
    CHECK_EQ_INT(skymem_next_dir(4, 4, 0, 3, 0, 0), SKYMEM_DIR_EAST);  /* east wrap 3 -> 0 */
    skymem_neighbour(4, 4, 0, 0, SKYMEM_DIR_WEST, &np, &ns);
    CHECK(np == 0 && ns == 3);
    skymem_neighbour(4, 4, 0, 0, SKYMEM_DIR_NORTH, &np, &ns);
    CHECK(np == 3 && ns == 0);
    skymem_neighbour(4, 4, 3, 3, SKYMEM_DIR_EAST, &np, &ns);
    CHECK(np == 3 && ns == 0);
    skymem_neighbour(4, 4, 3, 3, SKYMEM_DIR_SOUTH, &np, &ns);
    CHECK(np == 0 && ns == 3);
    /* paper distances */
    CHECK_EQ_INT(skymem_d_west(5, 1, 4), 2); /* 1 -> 0 -> 4 */
    CHECK_EQ_INT(skymem_d_east(5, 1, 4), 3);
    CHECK_EQ_INT(skymem_d_north(5, 1, 4), 2);
    CHECK_EQ_INT(skymem_d_south(5, 4, 1), 2);
    CHECK_EQ_INT(skymem_next_dir(5, 5, 2, 1, 2, 4), SKYMEM_DIR_WEST); /* west across the wrap is shorter */
    CHECK_EQ_INT(skymem_next_dir(5, 5, 2, 4, 2, 1), SKYMEM_DIR_EAST);
    /* ties half way round an even ring: south, then east */
    CHECK_EQ_INT(skymem_next_dir(4, 4, 0, 0, 2, 0), SKYMEM_DIR_SOUTH);
    CHECK_EQ_INT(skymem_next_dir(4, 4, 0, 0, 0, 2), SKYMEM_DIR_EAST);
    CHECK_EQ_INT(skymem_next_dir(4, 4, 0, 0, 2, 2), SKYMEM_DIR_SOUTH);
    /* vertical first when it has a strict preference */
    CHECK_EQ_INT(skymem_next_dir(5, 5, 0, 0, 1, 1), SKYMEM_DIR_SOUTH);
    CHECK_EQ_INT(skymem_next_dir(4, 4, 1, 1, 1, 1), SKYMEM_DIR_NONE);
    CHECK_EQ_INT(skymem_next_dir(4, 4, 4, 0, 0, 0), SKYMEM_DIR_NONE); /* out of range */
    CHECK_EQ_INT(skymem_torus_hops(19, 5, 0, 0, 18, 4), 2);
    CHECK_EQ_INT(skymem_torus_hops(72, 22, 0, 0, 36, 11), 47);
    /* exhaustive: every pair on several grids arrives in exactly torus-distance hops */
    for (g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        uint32_t P = grids[g][0], S = grids[g][1], p, s, dp, ds;
        int bad = 0;
        uint32_t step = (P * S > 200) ? 7 : 1; /* big grid: sample sources */
        for (p = 0; p < P; p++)
            for (s = 0; s < S; s += (P * S > 200 ? step : 1))
                for (dp = 0; dp < P; dp++)
                    for (ds = 0; ds < S; ds++) {
                        uint32_t dist = skymem_torus_hops(P, S, p, s, dp, ds);
                        uint32_t dv = skymem_d_north(P, p, dp) < skymem_d_south(P, p, dp) ? skymem_d_north(P, p, dp)
                                                                                           : skymem_d_south(P, p, dp);
                        uint32_t dh = skymem_d_west(S, s, ds) < skymem_d_east(S, s, ds) ? skymem_d_west(S, s, ds)
                                                                                         : skymem_d_east(S, s, ds);
                        if (dist != dv + dh || dist > P / 2 + S / 2) bad++;
                        if (walk(P, S, p, s, dp, ds) != (int)dist) bad++;
                    }
        CHECK_EQ_INT(bad, 0);
    }
    return check_report("router");
}
