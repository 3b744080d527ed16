/*
 * skymem_router.h -- +GRID (2-D torus) routing, paper section 4.
 *
 * Satellites are (plane, sat); plane 0..planes-1 (north/south), sat
 * 0..sats-1 (west/east along a plane). Both dimensions wrap around.
 * North = plane - 1, south = plane + 1, west = sat - 1, east = sat + 1 (mod).
 */
#ifndef SKYMEM_ROUTER_H
#define SKYMEM_ROUTER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SKYMEM_DIR_NONE = 0, /* already at the destination */
    SKYMEM_DIR_NORTH = 1,
    SKYMEM_DIR_SOUTH = 2,
    SKYMEM_DIR_WEST = 3,
    SKYMEM_DIR_EAST = 4
} skymem_dir_t;

/* Distances (hops) going only that way, with wrap-around (paper d_north ...). */
uint32_t skymem_d_north(uint32_t planes, uint32_t o, uint32_t o_t);
uint32_t skymem_d_south(uint32_t planes, uint32_t o, uint32_t o_t);
uint32_t skymem_d_west(uint32_t sats, uint32_t s, uint32_t s_t);
uint32_t skymem_d_east(uint32_t sats, uint32_t s, uint32_t s_t);

/* Next hop direction from (plane, sat) toward (dplane, dsat). The paper's rule,
 * in this order: north if d_north < d_south; south if d_south < d_north;
 * west if d_west < d_east; east if d_east < d_west. Ties the paper leaves
 * open (equal non-zero distances, i.e. exactly half way round an even ring)
 * go south, then east. Every step shortens the torus distance by one, so a
 * path always arrives after skymem_torus_hops() steps.
 * Coordinates out of range return SKYMEM_DIR_NONE. */
skymem_dir_t skymem_next_dir(uint32_t planes, uint32_t sats, uint32_t plane, uint32_t sat, uint32_t dplane,
                             uint32_t dsat);

/* The neighbour in direction dir (wraps). */
void skymem_neighbour(uint32_t planes, uint32_t sats, uint32_t plane, uint32_t sat, skymem_dir_t dir,
                      uint32_t *nplane, uint32_t *nsat);

/* Torus Manhattan distance = hops the router takes. */
uint32_t skymem_torus_hops(uint32_t planes, uint32_t sats, uint32_t plane, uint32_t sat, uint32_t dplane,
                           uint32_t dsat);

const char *skymem_dir_name(skymem_dir_t dir);

#ifdef __cplusplus
}
#endif
#endif
