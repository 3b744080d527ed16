/* skymem_hop.c -- one hop of a routed packet (skymem_hop.h). */
#include "skymem_hop.h"
#include "skymem_wire.h"

static skymem_hop_t dropped(const skymem_route_t *r, int is_reply, uint8_t nak, const char *why)
{
    skymem_hop_t h;
    h.kind = SKYMEM_HOP_DROP;
    h.dir = SKYMEM_DIR_NONE;
    h.next_plane = h.next_sat = 0;
    h.nak = is_reply || (r->flags & SKYMEM_RF_GOSSIP) ? 0 : nak; /* replies and gossip are never answered */
    h.why = why;
    return h;
}

skymem_hop_t skymem_hop_decide(uint16_t planes, uint16_t sats, uint16_t plane, uint16_t sat, const skymem_route_t *r,
                               int is_reply)
{
    skymem_hop_t h;
    uint32_t np, ns;
    uint16_t tp = r->dst_plane, ts = r->dst_sat;
    h.dir = SKYMEM_DIR_NONE;
    h.next_plane = h.next_sat = 0;
    h.nak = 0;
    h.why = NULL;
    if (r->dst_plane == SKYMEM_GROUND_PLANE) {
        if (!is_reply) return dropped(r, is_reply, 0, "a command addressed to the ground");
        if (r->via_plane == plane && r->via_sat == sat) { /* we hold this station's link */
            h.kind = SKYMEM_HOP_GROUND;
            return h;
        }
        tp = r->via_plane;
        ts = r->via_sat;
    }
    if (tp == plane && ts == sat) {
        h.kind = SKYMEM_HOP_HERE;
        return h;
    }
    if (tp >= planes || ts >= sats) return dropped(r, is_reply, SKYMEM_NAK_NO_ROUTE, "no such satellite");
    if (r->ttl == 0) return dropped(r, is_reply, SKYMEM_NAK_TTL_EXPIRED, "TTL expired");
    h.kind = SKYMEM_HOP_LINK;
    h.dir = skymem_next_dir(planes, sats, plane, sat, tp, ts);
    skymem_neighbour(planes, sats, plane, sat, h.dir, &np, &ns);
    h.next_plane = (uint16_t)np;
    h.next_sat = (uint16_t)ns;
    return h;
}

int skymem_hop_advance(uint8_t *pkt, size_t len, const skymem_route_t *r)
{
    skymem_route_t next = *r;
    next.ttl--;
    if (next.hops < 255) next.hops++;
    return skymem_rewrite_route(pkt, len, &next);
}
