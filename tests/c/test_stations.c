/* test_stations.c -- the ground stations a satellite has heard from (skymem_stations.h): a station keeps its
 * entry and is heard again; a new one takes a free entry, else the one heard from longest ago. */
#include <string.h>

#include "check.h"
#include "skymem_stations.h"

#define N 4u

int main(void)
{
    skymem_station_t t[N];
    int is_new = -1, a, b;
    uint16_t id;
    memset(t, 0, sizeof t);
    CHECK_EQ_INT(skymem_station_find(t, N, 1), -1);
    CHECK_EQ_INT(skymem_station_count(t, N), 0);
    a = skymem_station_learn(t, N, 1, 100, &is_new);
    CHECK(a >= 0);
    CHECK_EQ_INT(is_new, 1);
    CHECK_EQ_INT(skymem_station_learn(t, N, 1, 200, &is_new), a); /* heard again: the same entry */
    CHECK_EQ_INT(is_new, 0);
    for (id = 2; id <= N; id++) (void)skymem_station_learn(t, N, id, 100 + id, NULL);
    CHECK_EQ_INT(skymem_station_count(t, N), N);
    /* full: station 9 takes the entry heard from longest ago -- station 2 (102), not 1 (heard again at 200) */
    b = skymem_station_find(t, N, 2);
    CHECK_EQ_INT(skymem_station_learn(t, N, 9, 300, &is_new), b);
    CHECK_EQ_INT(is_new, 1);
    CHECK_EQ_INT(skymem_station_find(t, N, 2), -1);
    CHECK_EQ_INT(skymem_station_find(t, N, 1), a);
    CHECK_EQ_INT(skymem_station_count(t, N), N);
    CHECK_EQ_INT(skymem_station_learn(t, 0, 1, 0, NULL), -1);
    CHECK_EQ_INT(skymem_station_learn(NULL, N, 1, 0, NULL), -1);
    return check_report("stations");
}
