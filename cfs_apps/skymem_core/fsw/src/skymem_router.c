/* skymem_router.c -- +GRID next hop (paper section 4) with wrap-around both ways. */
#include "skymem_router.h"

/* d_north: going to lower plane numbers, wrapping from 0 to planes-1. */
uint32_t skymem_d_north(uint32_t planes, uint32_t o, uint32_t o_t)
{
    if (o_t < o) return o - o_t;
    if (o_t > o) return o + planes - o_t;
    return 0;
}

uint32_t skymem_d_south(uint32_t planes, uint32_t o, uint32_t o_t)
{
    if (o_t > o) return o_t - o;
    if (o_t < o) return planes - o + o_t;
    return 0;
}

/* d_west: going to lower sat numbers, wrapping from 0 to sats-1. (The authors'
 * simulator wraps west wrongly; this is the paper's formula.) */
uint32_t skymem_d_west(uint32_t sats, uint32_t s, uint32_t s_t)
{
    if (s_t < s) return s - s_t;
    if (s_t > s) return s + sats - s_t;
    return 0;
}

uint32_t skymem_d_east(uint32_t sats, uint32_t s, uint32_t s_t)
{
    if (s_t > s) return s_t - s;
    if (s_t < s) return sats - s + s_t;
    return 0;
}

skymem_dir_t skymem_next_dir(uint32_t planes, uint32_t sats, uint32_t plane, uint32_t sat, uint32_t dplane,
                             uint32_t dsat)
{
    uint32_t dn, ds, dw, de;
    if (plane >= planes || dplane >= planes || sat >= sats || dsat >= sats) return SKYMEM_DIR_NONE;
    dn = skymem_d_north(planes, plane, dplane);
    ds = skymem_d_south(planes, plane, dplane);
    dw = skymem_d_west(sats, sat, dsat);
    de = skymem_d_east(sats, sat, dsat);
    if (dn < ds) return SKYMEM_DIR_NORTH;
    if (ds < dn) return SKYMEM_DIR_SOUTH;
    if (dw < de) return SKYMEM_DIR_WEST;
    if (de < dw) return SKYMEM_DIR_EAST;
    /* Ties the paper leaves open: half way round an even ring. */
    if (plane != dplane) return SKYMEM_DIR_SOUTH;
    if (sat != dsat) return SKYMEM_DIR_EAST;
    return SKYMEM_DIR_NONE;
}

void skymem_neighbour(uint32_t planes, uint32_t sats, uint32_t plane, uint32_t sat, skymem_dir_t dir,
                      uint32_t *nplane, uint32_t *nsat)
{
    uint32_t p = plane, s = sat;
    switch (dir) {
    case SKYMEM_DIR_NORTH: p = (plane + planes - 1u) % planes; break;
    case SKYMEM_DIR_SOUTH: p = (plane + 1u) % planes; break;
    case SKYMEM_DIR_WEST: s = (sat + sats - 1u) % sats; break;
    case SKYMEM_DIR_EAST: s = (sat + 1u) % sats; break;
    default: break;
    }
    if (nplane) *nplane = p;
    if (nsat) *nsat = s;
}

uint32_t skymem_torus_hops(uint32_t planes, uint32_t sats, uint32_t plane, uint32_t sat, uint32_t dplane,
                           uint32_t dsat)
{
    uint32_t dn = skymem_d_north(planes, plane, dplane), ds = skymem_d_south(planes, plane, dplane);
    uint32_t dw = skymem_d_west(sats, sat, dsat), de = skymem_d_east(sats, sat, dsat);
    return (dn < ds ? dn : ds) + (dw < de ? dw : de);
}

const char *skymem_dir_name(skymem_dir_t dir)
{
    switch (dir) {
    case SKYMEM_DIR_NORTH: return "north";
    case SKYMEM_DIR_SOUTH: return "south";
    case SKYMEM_DIR_WEST: return "west";
    case SKYMEM_DIR_EAST: return "east";
    default: return "none";
    }
}
