/*
 * skymem_link.h -- what goes onto an ISL link: the hop-by-hop half of authentication (skymem_auth.h).
 *
 * Satellites sign what they send each other (migration sets and their answers, gossip evictions) with
 * the key of the link they send it over, and the satellite at the other end checks it with the same
 * link's key, as CCSDS SDLS keeps a security association per link and direction. A packet that crosses
 * several links is checked and signed again at every satellite on the way. So a satellite's key file
 * lets its holder talk to its own four neighbours, as that satellite, and to nobody else.
 *
 * What a ground station sends a satellite, and what a satellite answers a station, is signed end to end
 * (UP and DOWN keys): it crosses the links as it is, checked only where it ends. It must carry a trailer
 * under a ground key id all the same: nothing unsigned goes onto a link of a keyed constellation.
 *
 * Both runtimes call skymem_link_prepare for every packet they put on a link (the native node's
 * route_packet, the cFS ISL_ROUTER's RoutePacket); the satellite a packet is for checks its last hop
 * with skymem_sat (the link key's replay window is the one of the neighbour that signed it).
 */
#ifndef SKYMEM_LINK_H
#define SKYMEM_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_auth.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the packet travels satellite to satellite (signed per link), 0 when a ground station is at one
 * end (signed end to end), -1 when it is neither a data command nor a routed reply. */
int skymem_link_is_isl(const uint8_t *pkt, size_t len);

/* Signs pkt (unsigned) for the link from a's owner to neighbour (next_plane, next_sat): that link's
 * LINK_OUT key, the owner's link id in the trailer. Returns the new length or SKYMEM_AUTH_E_*. */
int skymem_link_sign(const skymem_auth_t *a, uint16_t next_plane, uint16_t next_sat, uint64_t seq, uint8_t *pkt,
                     size_t len, size_t cap);


/* Makes pkt ready for the link to (next_plane, next_sat), keys on. A satellite-to-satellite packet that
 * came in over a link (relayed != 0) is checked first -- the last hop's link key, its replay window, the
 * clock (skymem_auth_set_clock) -- and its trailer removed; then it is signed for the next link. One from
 * the ground, or for it, passes as it is, if it carries a ground key's trailer. Returns the length to
 * send, or SKYMEM_AUTH_E_* (send nothing: the caller counts it and drops it). */
int skymem_link_prepare(skymem_auth_t *a, int relayed, uint16_t next_plane, uint16_t next_sat, uint64_t now_us,
                        uint8_t *pkt, size_t len, size_t cap);

/* 1 when a satellite's ring (skymem_auth_load_text, its owner set) holds an UP and a DOWN key and both
 * keys of its link to every neighbour on a planes x sats torus: what a runtime checks before turning
 * authentication on, as a file without them would leave the satellite deaf to the ground or to a
 * neighbour without a word. 0 otherwise. */
int skymem_link_keys_complete(const skymem_auth_t *a, uint16_t planes, uint16_t sats);

#ifdef __cplusplus
}
#endif

#endif /* SKYMEM_LINK_H */
