/*
 * skymem_hop.h -- one hop of a routed packet at one satellite: where it goes from here, for both runtimes.
 *
 * The native node (node_handlers.c's route_packet) and the cFS ISL_ROUTER (isl_router_forward.c) each
 * ask skymem_hop_decide, then do the I/O the answer names: hand it to this satellite, send it down the
 * ground link it names, or -- after skymem_hop_advance has spent a TTL and counted the hop, and
 * skymem_link_prepare has signed it for that link -- send it to the neighbour. A packet that goes nowhere
 * says why, and which NAK its sender may be owed (only a command, never gossip, and only where the
 * runtime is unkeyed and relayed it: keyed, a relay cannot verify what it would answer, PROTOCOL.md §5).
 */
#ifndef SKYMEM_HOP_H
#define SKYMEM_HOP_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_codec.h"
#include "skymem_router.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SKYMEM_HOP_HERE = 0,   /* for this satellite */
    SKYMEM_HOP_GROUND = 1, /* down this satellite's ground link, to station r->dst_sat */
    SKYMEM_HOP_LINK = 2,   /* to the neighbour (next_plane, next_sat), in direction dir */
    SKYMEM_HOP_DROP = 3    /* nowhere: why says so, nak is the reason a relayed command may be answered with */
} skymem_hop_kind_t;

typedef struct {
    skymem_hop_kind_t kind;
    skymem_dir_t dir;
    uint16_t next_plane, next_sat;
    uint8_t nak;     /* SKYMEM_NAK_* or 0 (DROP only) */
    const char *why; /* DROP only */
} skymem_hop_t;

/* Where a packet with route r goes from satellite (plane, sat) of a planes x sats torus: a reply for the
 * ground travels to the satellite holding that station's link (r->via), everything else to r->dst. */
skymem_hop_t skymem_hop_decide(uint16_t planes, uint16_t sats, uint16_t plane, uint16_t sat, const skymem_route_t *r,
                               int is_reply);

/* A LINK hop taken: the TTL spent and the hop counted in pkt's route header (a command's checksum fixed).
 * r is the route as parsed; returns SKYMEM_OK or the codec's error (the packet must then not be sent). */
int skymem_hop_advance(uint8_t *pkt, size_t len, const skymem_route_t *r);

#ifdef __cplusplus
}
#endif

#endif /* SKYMEM_HOP_H */
