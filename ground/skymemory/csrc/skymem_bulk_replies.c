/*
 * skymem_bulk_replies.c -- which replies a fast-path call believes, and the ground's reply windows
 * (skymem_bulk_replies.h, skymem_bulk.h).
 *
 * The checks run from the cheapest to the dearest: the source named in the route, the sequence read in the clear
 * against the call's floor, then the tag (and, for a chunk, its CRC in the same pass over the packet).
 */
#include "skymem_bulk_replies.h"

#include <stdlib.h>

#include "skymem_auth.h"
#include "skymem_crc32c.h"
#include "skymem_sat.h"
#include "skymem_wire.h"

/* ================================================================ reply windows */

struct skymem_reply_window {
    char busy;          /* spin lock: the core's windows are not thread-safe */
    uint32_t key_id;    /* the ground key the replies must name */
    skymem_auth_t ring; /* no keys (each check is given its key): only the windows, per satellite */
};

uint64_t skymem_reply_window_floor(uint64_t start_us)
{
    uint64_t start = skymem_auth_seq_at(start_us), skew = SKYMEM_SAT_SEQ_AHEAD_US / SKYMEM_AUTH_SEQ_US;
    return start_us == 0 || start <= skew ? 0 : start - skew;
}

skymem_reply_window_t *skymem_reply_window_new(uint32_t key_id, uint64_t start_us)
{
    skymem_reply_window_t *w = calloc(1, sizeof *w); /* zero pages: the bitmaps cost only what is used */
    if (!w)
        return NULL;
    skymem_auth_init(&w->ring, skymem_reply_window_floor(start_us)); /* the core refuses seq <= floor */
    w->key_id = key_id;
    return w;
}

void skymem_reply_window_free(skymem_reply_window_t *w) { free(w); }

int skymem_reply_window_check(skymem_reply_window_t *w, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len,
                              size_t crc_off, size_t crc_len, uint32_t *crc)
{
    if (w == NULL || pkt == NULL || len < 2 || skymem_get_u16(pkt) != SKYMEM_REPLY_TLM_MID)
        return SKYMEM_AUTH_E_NO_TRAILER; /* a signed command sent to the ground answers nothing */
    while (__atomic_test_and_set(&w->busy, __ATOMIC_ACQUIRE))
        ;
    int rc = skymem_auth_verify_with(&w->ring, k, w->key_id, pkt, len, crc_off, crc_len, crc);
    __atomic_clear(&w->busy, __ATOMIC_RELEASE);
    return rc;
}

uint64_t skymem_reply_window_top(skymem_reply_window_t *w, uint16_t plane, uint16_t sat)
{
    uint64_t top = 0;
    if (w == NULL)
        return 0;
    while (__atomic_test_and_set(&w->busy, __ATOMIC_ACQUIRE))
        ;
    for (uint32_t i = 0; i < SKYMEM_AUTH_SOURCES; i++) {
        const skymem_replay_t *r = &w->ring.windows[i];
        if (r->used && r->key_id == w->key_id && r->src_plane == plane && r->src_sat == sat) {
            top = r->top;
            break;
        }
    }
    if (w->ring.floor > top) /* none yet, or recycled: what the ring refuses anyway */
        top = w->ring.floor;
    __atomic_clear(&w->busy, __ATOMIC_RELEASE);
    return top;
}

/* ================================================================ one call's replies */

/* A reply from the satellite asked, signed at or below its reply_floor, was signed before the call's requests
 * left (skymem_reply_window_top): captured, whatever its request id. Read before the tag (a forged one with a
 * low sequence is dropped either way). */
int bulk_signed_after_floor(skymem_bulk_opts_t *o, const skymem_msg_t *m, const skymem_bulk_server_t *s,
                            const uint8_t *pkt, size_t len)
{
    if (!o->keyed || s->reply_floor == 0 || m->route.src_plane != s->plane || m->route.src_sat != s->sat ||
        !(m->route.flags & SKYMEM_RF_AUTH) || len < SKYMEM_AUTH_TRAILER_LEN)
        return 1; /* unsigned or short: the trailer's check refuses it */
    if (skymem_get_u64(pkt + len - SKYMEM_AUTH_TRAILER_LEN + SKYMEM_AT_SEQ) > s->reply_floor)
        return 1;
    o->replayed++;
    return 0;
}

/* A NAK about the route itself comes from the satellite where the request stopped (a relay: NO_ROUTE,
 * TTL_EXPIRED; the entry satellite: AUTH_FAILED), which can only end the request, never answer it with data. */
int bulk_from_server(const skymem_msg_t *m, const skymem_bulk_server_t *s, skymem_bulk_opts_t *o)
{
    if (m->route.src_plane == s->plane && m->route.src_sat == s->sat)
        return 1;
    if (m->reply_kind == SKYMEM_REPLY_NAK && (m->reply_status == SKYMEM_NAK_NO_ROUTE ||
                                              m->reply_status == SKYMEM_NAK_TTL_EXPIRED ||
                                              m->reply_status == SKYMEM_NAK_AUTH_FAILED))
        return 1;
    o->wrong_source++;
    return 0;
}

/* The asked server's key, or, for a route NAK from another satellite, that one's when it is among the servers. */
const skymem_mac_key_t *bulk_down_key(const skymem_msg_t *m, const skymem_bulk_server_t *asked,
                                      const skymem_bulk_server_t *servers, uint32_t n_servers)
{
    if (m->route.src_plane == asked->plane && m->route.src_sat == asked->sat)
        return asked->down_key;
    for (uint32_t i = 0; i < n_servers; i++)
        if (servers[i].plane == m->route.src_plane && servers[i].sat == m->route.src_sat)
            return servers[i].down_key;
    return NULL;
}

/* A keyed call's check of a reply's trailer with k: its tag, and with a reply window its sequence's freshness
 * too (crc as skymem_auth_check_reply_crc, or NULL). Returns SKYMEM_AUTH_OK or why it answers nothing. */
static int check_trailer(skymem_bulk_opts_t *o, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len,
                         size_t crc_off, size_t crc_len, uint32_t *crc)
{
    if (k == NULL)
        return SKYMEM_AUTH_E_UNKNOWN_KEY;
    if (o->replies)
        return skymem_reply_window_check(o->replies, k, pkt, len, crc_off, crc_len, crc);
    if (crc)
        return skymem_auth_check_reply_crc(k, o->auth_key_id, pkt, len, crc_off, crc_len, crc);
    return skymem_auth_check_reply(k, o->auth_key_id, pkt, len);
}

/* Counts a trailer that answers nothing; returns 1 for those. */
static int trailer_refused(skymem_bulk_opts_t *o, int rc)
{
    if (rc == SKYMEM_AUTH_OK)
        return 0;
    if (rc == SKYMEM_AUTH_E_REPLAY)
        o->replayed++;
    else
        o->auth_failures++;
    return 1;
}

int bulk_reply_authentic(skymem_bulk_opts_t *o, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len)
{
    return !o->keyed || !trailer_refused(o, check_trailer(o, k, pkt, len, 0, 0, NULL));
}

/* Keyed, tag and CRC come from one pass over the packet where the CPU can (skymem_auth_check_reply_crc); a chunk
 * failing both counts as a CRC failure. */
int bulk_data_reply_ok(skymem_bulk_opts_t *o, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len,
                       const skymem_msg_t *m, uint32_t want)
{
    if (o->keyed) {
        uint32_t crc = 0;
        int rc = check_trailer(o, k, pkt, len, (size_t)(m->data - pkt), want, &crc);
        int hashed = rc == SKYMEM_AUTH_OK || rc == SKYMEM_AUTH_E_BAD_MAC || rc == SKYMEM_AUTH_E_REPLAY;
        if (hashed && crc != m->desc.crc32c) { /* (unsigned or another key: nothing was hashed) */
            o->crc_failures++;
            return 0;
        }
        return !trailer_refused(o, rc);
    }
    if (skymem_crc32c(m->data, want) != m->desc.crc32c) {
        o->crc_failures++;
        return 0;
    }
    return 1;
}
