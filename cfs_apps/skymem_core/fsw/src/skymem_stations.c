/* skymem_stations.c -- the ground stations a satellite has heard from (skymem_stations.h). O(n). */
#include "skymem_stations.h"

int skymem_station_find(const skymem_station_t *t, uint32_t n, uint16_t id)
{
    uint32_t i;
    for (i = 0; t != 0 && i < n; i++)
        if (t[i].used && t[i].id == id) return (int)i;
    return -1;
}

int skymem_station_learn(skymem_station_t *t, uint32_t n, uint16_t id, uint64_t now_ms, int *is_new)
{
    int at = skymem_station_find(t, n, id);
    uint32_t i;
    if (t == 0 || n == 0) return -1;
    if (is_new != 0) *is_new = at < 0;
    if (at < 0) { /* a free entry, else the one heard from longest ago */
        at = 0;
        for (i = 0; i < n; i++) {
            if (!t[i].used) {
                at = (int)i;
                break;
            }
            if (t[i].heard_ms < t[at].heard_ms) at = (int)i;
        }
    }
    t[at].used = 1;
    t[at].id = id;
    t[at].heard_ms = now_ms;
    return at;
}

uint32_t skymem_station_count(const skymem_station_t *t, uint32_t n)
{
    uint32_t i, k = 0;
    for (i = 0; t != 0 && i < n; i++) k += t[i].used != 0;
    return k;
}
