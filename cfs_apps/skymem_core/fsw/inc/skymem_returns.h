/*
 * skymem_returns.h -- where the answers to a relayed request go back to, for both runtimes.
 *
 * A satellite that relays a ground station's command for another satellite (it came up this
 * satellite's ground link) cannot verify it: its destination's UP key made the tag. Its answers come
 * back through here all the same, and go to the address the command came from, kept per (station,
 * request id) for a while. The runtime keeps the addresses (a sockaddr on the native node, an
 * OS_SockAddr_t on cFS) in an array parallel to the slots; this is the choice of the slot. Only answers
 * relayed from another satellite use a slot: the satellite's own answers (to a command verified there) go to
 * the station's learned address, since any packet relayed through here may claim a request id's slot first
 * (N1 of issue 53: a forged relay packet took the answers of a GET_CHUNKS verified here).
 *
 * The first command to claim a (station, request id) keeps it until it expires: a packet forged later
 * with a request id seen on the wire takes neither the genuine request's answers nor aims them at
 * another host (issue 35, N1). Different requests do not block each other: a request probes
 * SKYMEM_RETURN_WAYS slots from its hash and takes a free or expired one, else the one expiring
 * soonest -- a flood of made-up request ids can push a genuine request out (its answers then go to the
 * station's verified address), never redirect it.
 */
#ifndef SKYMEM_RETURNS_H
#define SKYMEM_RETURNS_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#define SKYMEM_RETURN_WAYS 8u

typedef struct {
    uint8_t used;
    uint16_t station;
    uint32_t request_id;
    uint64_t expires_ms; /* the runtime's monotonic milliseconds */
} skymem_return_t;

/* The slot to remember (station, request_id)'s return address in, marked used until now_ms + ttl_ms:
 * the runtime then writes the address at that index. -1 when that request already holds a slot (first
 * come keeps it) or request_id is 0 (what an unset field reads as). n > 0. */
int skymem_return_claim(skymem_return_t *slots, uint32_t n, uint16_t station, uint32_t request_id, uint64_t now_ms,
                        uint64_t ttl_ms);
/* The index of the unexpired slot holding (station, request_id), or -1. */
int skymem_return_find(const skymem_return_t *slots, uint32_t n, uint16_t station, uint32_t request_id,
                       uint64_t now_ms);
#ifdef __cplusplus
}
#endif
#endif /* SKYMEM_RETURNS_H */
