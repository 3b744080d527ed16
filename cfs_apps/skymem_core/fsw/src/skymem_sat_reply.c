/*
 * skymem_sat_reply.c -- what a satellite says: its log lines, its signatures and its replies, for
 * both runtimes.
 *
 * What it is: the bottom of the core's command handling. skymem_sat_logf formats a line for the
 * runtime's io->log; sign_with signs a reply to the ground in place (keys on) with the station's
 * DOWN key (what goes to another satellite is signed by the link it leaves over); a reply is routed back to its request's source through the request's
 * via (skymem_sat_reply_route), built in s->buf (skymem_sat_reply / _reply_body, or a caller's
 * builder), signed and handed to io->send (skymem_sat_send_reply).
 *
 * Why it is a file of its own, below the others: both skymem_sat.c (commands) and
 * skymem_sat_migrate.c (MIGRATE) answer, log and sign, and skymem_sat.c starts migrations. With
 * these here, skymem_sat.c uses skymem_sat_migrate.c and both use this file, which uses neither:
 * no circle, and this file can be read and tested alone.
 *
 * Invariants: with keys on, every reply to the ground is signed with the DOWN key of the station
 * that asked (s->reply_key_id) and carries route flag AUTH; one to a satellite leaves here unsigned
 * for its link to sign (skymem_link.h); a packet
 * that cannot be built or signed is logged and not sent. Each reply takes the next s->seq.
 * Cost: one build and one tag per reply; no allocation.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "skymem_sat_internal.h"

void skymem_sat_logf(const skymem_sat_t *s, int level, int about, const char *fmt, ...)
{
    char text[160];
    va_list ap;
    if (s->io->log == NULL) return;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    s->io->log(s->ctx, level, about, text);
}

/* ---- signing ------------------------------------------------------------------- */

static size_t sign_with(skymem_sat_t *s, uint32_t key_id, uint8_t *pkt, size_t len, size_t cap)
{
    int rc;
    if (s->auth == NULL) return len;
    rc = skymem_auth_sign(s->auth, key_id, skymem_auth_next_seq(s->auth, s->io->clock_us(s->ctx)), pkt, len, cap);
    if (rc < 0) {
        skymem_sat_logf(s, SKYMEM_SAT_ERROR, SKYMEM_SAT_EV_AUTH, "cannot sign a %u-byte packet with key %u: %s",
                        (unsigned)len, (unsigned)key_id, skymem_auth_strerror(rc));
        return 0;
    }
    return (size_t)rc;
}

/* ---- replies -------------------------------------------------------------------- */

/* The route of an answer to a request with route req: back to its source, through its via. */
skymem_route_t skymem_sat_reply_route(const skymem_sat_t *s, const skymem_route_t *req)
{
    skymem_route_t r;
    memset(&r, 0, sizeof r);
    r.dst_plane = req->src_plane;
    r.dst_sat = req->src_sat;
    r.src_plane = s->plane;
    r.src_sat = s->sat;
    r.via_plane = req->via_plane;
    r.via_sat = req->via_sat;
    r.request_id = req->request_id;
    r.ttl = SKYMEM_DEFAULT_TTL;
    return r;
}

/* Signs (keys on) and sends a reply built in s->buf. */
void skymem_sat_send_reply(skymem_sat_t *s, int len, const skymem_route_t *route)
{
    skymem_route_t r2 = *route, *r = &r2;
    size_t n;
    if (len <= 0) {
        skymem_sat_logf(s, SKYMEM_SAT_ERROR, SKYMEM_SAT_EV_NAK, "cannot build a reply: %s", skymem_strerror(len));
        return;
    }
    /* to a station: signed here with the DOWN key, end to end; to a satellite (a migration's answer):
     * unsigned, the link it leaves over signs it (skymem_link.h) */
    if (r->dst_plane != SKYMEM_GROUND_PLANE) n = (size_t)len;
    else n = sign_with(s, s->reply_key_id, s->buf, (size_t)len, sizeof s->buf);
    if (s->auth != NULL && r->dst_plane == SKYMEM_GROUND_PLANE)
        r->flags |= SKYMEM_RF_AUTH; /* a relay rewrites the route header from *r */
    if (n > 0) s->io->send(s->ctx, s->buf, n, r, 1);
}

void skymem_sat_reply_body(skymem_sat_t *s, const skymem_route_t *req, uint8_t kind, uint8_t cc, uint8_t status,
                           uint32_t chunk_id, uint32_t value, const uint8_t *body, size_t body_len)
{
    skymem_route_t r = skymem_sat_reply_route(s, req);
    uint32_t sec;
    uint16_t sub;
    if (kind == SKYMEM_REPLY_NAK) {
        s->c.err_count++;
        skymem_sat_logf(s, SKYMEM_SAT_DEBUG, SKYMEM_SAT_EV_NAK, "request %u (cc %u) NAK %u", (unsigned)req->request_id,
                        cc, status);
    }
    s->io->tlm_time(s->ctx, &sec, &sub);
    skymem_sat_send_reply(s, skymem_build_reply(s->buf, sizeof s->buf, s->seq++, sec, sub, &r, kind, cc, status,
                                                chunk_id, value, body, body_len), &r);
}

void skymem_sat_reply(skymem_sat_t *s, const skymem_route_t *req, uint8_t kind, uint8_t cc, uint8_t status,
                      uint32_t chunk_id, uint32_t value, const uint8_t *hash)
{
    skymem_sat_reply_body(s, req, kind, cc, status, chunk_id, value, hash, hash ? SKYMEM_BLOCK_HASH_LEN : 0);
}
