/* skymem_returns.c -- the return slots of relayed requests (skymem_returns.h). O(SKYMEM_RETURN_WAYS). */
#include "skymem_returns.h"

static uint32_t first_way(uint32_t n, uint16_t station, uint32_t request_id)
{
    return ((request_id * 0x9E3779B1u) ^ station) % n;
}

static int holds(const skymem_return_t *s, uint16_t station, uint32_t request_id, uint64_t now_ms)
{
    return s->used && s->station == station && s->request_id == request_id && now_ms < s->expires_ms;
}

int skymem_return_find(const skymem_return_t *slots, uint32_t n, uint16_t station, uint32_t request_id,
                       uint64_t now_ms)
{
    uint32_t i, at, ways = n < SKYMEM_RETURN_WAYS ? n : SKYMEM_RETURN_WAYS;
    if (slots == 0 || n == 0 || request_id == 0) return -1;
    at = first_way(n, station, request_id);
    for (i = 0; i < ways; i++)
        if (holds(&slots[(at + i) % n], station, request_id, now_ms)) return (int)((at + i) % n);
    return -1;
}

int skymem_return_claim(skymem_return_t *slots, uint32_t n, uint16_t station, uint32_t request_id, uint64_t now_ms,
                        uint64_t ttl_ms)
{
    uint32_t i, at, ways = n < SKYMEM_RETURN_WAYS ? n : SKYMEM_RETURN_WAYS, pick;
    if (slots == 0 || n == 0 || request_id == 0) return -1;
    if (skymem_return_find(slots, n, station, request_id, now_ms) >= 0) return -1; /* first come keeps it */
    at = first_way(n, station, request_id);
    pick = at;
    for (i = 0; i < ways; i++) { /* a free or expired way, else the one expiring soonest */
        uint32_t k = (at + i) % n;
        if (!slots[k].used || now_ms >= slots[k].expires_ms) {
            pick = k;
            break;
        }
        if (slots[k].expires_ms < slots[pick].expires_ms) pick = k;
    }
    slots[pick].used = 1;
    slots[pick].station = station;
    slots[pick].request_id = request_id;
    slots[pick].expires_ms = now_ms + ttl_ms;
    return (int)pick;
}
