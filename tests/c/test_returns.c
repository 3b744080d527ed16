/* test_returns.c -- the return slots of relayed requests (skymem_returns.h): the first request to claim a
 * (station, request id) keeps it until it expires; different requests never block each other while a way
 * is free; when all ways are held the one expiring soonest gives way; request id 0 is never held. */
#include <string.h>

#include "check.h"
#include "skymem_returns.h"

#define N 64u
#define TTL 30000u

static skymem_return_t slots[N];

static void test_first_come_keeps_it(void)
{
    int i;
    memset(slots, 0, sizeof slots);
    i = skymem_return_claim(slots, N, 3, 1234, 1000, TTL);
    CHECK(i >= 0);
    CHECK_EQ_INT(skymem_return_find(slots, N, 3, 1234, 1000), i);
    /* the same request claimed again (a forged copy with the id seen on the wire): refused */
    CHECK_EQ_INT(skymem_return_claim(slots, N, 3, 1234, 2000, TTL), -1);
    CHECK_EQ_INT(skymem_return_find(slots, N, 3, 1234, 2000), i);
    /* another station's request with the same id is another request */
    CHECK(skymem_return_find(slots, N, 4, 1234, 2000) < 0);
    CHECK(skymem_return_claim(slots, N, 4, 1234, 2000, TTL) >= 0);
    /* expired: found no more, and claimed afresh */
    CHECK_EQ_INT(skymem_return_find(slots, N, 3, 1234, 1000 + TTL), -1);
    CHECK(skymem_return_claim(slots, N, 3, 1234, 1000 + TTL, TTL) >= 0);
}

static void test_requests_that_hash_alike_do_not_block_each_other(void)
{
    uint32_t id, found = 0;
    memset(slots, 0, sizeof slots);
    /* a quarter of the table, within one TTL: with one slot per hash some of these would collide and the
     * later one lose its answers; with the ways every one is held and found */
    for (id = 1; id <= N / 4; id++) CHECK(skymem_return_claim(slots, N, 1, id * 7919u, 5000, TTL) >= 0);
    for (id = 1; id <= N / 4; id++) found += skymem_return_find(slots, N, 1, id * 7919u, 5000) >= 0;
    CHECK_EQ_INT(found, N / 4);
    /* full: a new request takes the way expiring soonest, and is found */
    for (id = 1; id <= 4 * N; id++) (void)skymem_return_claim(slots, N, 9, id, 6000 + id, TTL);
    CHECK(skymem_return_claim(slots, N, 1, 999, 7000, TTL) >= 0);
    CHECK(skymem_return_find(slots, N, 1, 999, 7000) >= 0);
}

static void test_the_soonest_to_expire_gives_way(void)
{
    uint32_t id;
    int old, i;
    memset(slots, 0, sizeof slots);
    old = skymem_return_claim(slots, N, 2, 77, 0, TTL);
    for (id = 78; id < 78 + 4 * N; id++) (void)skymem_return_claim(slots, N, 2, id, 100 + id, TTL);
    /* 77, the oldest, was pushed out once its ways filled with newer ones: its answers go to the station */
    CHECK(old >= 0);
    CHECK_EQ_INT(skymem_return_find(slots, N, 2, 77, 1000), -1);
    i = skymem_return_find(slots, N, 2, 78 + 4 * N - 1, 1000);
    CHECK(i >= 0);
}

static void test_request_id_zero_and_empty_tables(void)
{
    memset(slots, 0, sizeof slots);
    CHECK_EQ_INT(skymem_return_claim(slots, N, 1, 0, 0, TTL), -1);
    CHECK_EQ_INT(skymem_return_find(slots, N, 1, 0, 0), -1);
    CHECK_EQ_INT(skymem_return_claim(slots, 0, 1, 5, 0, TTL), -1);
    CHECK_EQ_INT(skymem_return_claim(NULL, N, 1, 5, 0, TTL), -1);
    /* a table smaller than the ways */
    CHECK(skymem_return_claim(slots, 3, 1, 5, 0, TTL) >= 0);
    CHECK(skymem_return_find(slots, 3, 1, 5, 0) >= 0);
}

int main(void)
{
    test_first_come_keeps_it();
    test_requests_that_hash_alike_do_not_block_each_other();
    test_the_soonest_to_expire_gives_way();
    test_request_id_zero_and_empty_tables();
    return check_report("returns");
}
