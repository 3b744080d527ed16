/*
 * skymem_sat.c -- a satellite's command handling, shared by the cFS app and the native node.
 *
 * What it is: the path of a data-plane command once the runtime has parsed it -- the
 * authentication step, the station-address policy, the handler of each function code and
 * its reply -- and the eviction gossip and GET_CHUNKS queue. MIGRATE is in skymem_sat_migrate.c;
 * building, signing and sending replies, and log lines, in skymem_sat_reply.c (below both:
 * skymem_sat_internal.h).
 *
 * State (skymem_sat_t): the core's counters; the key ring (NULL = keys off) with the
 * persisted replay mark; the ground key replies to the ground are signed with (that of the
 * latest verified ground command); a ring of the last SKYMEM_SAT_GOSSIP_MEMORY evictions
 * seen; up to SKYMEM_SAT_MAX_JOBS GET_CHUNKS requests being answered; the migrations.
 *
 * Invariants:
 *  - every command for this satellite is checked by sat_authenticate, the one place that decides
 *    whether a packet is authentic and fresh, with the key of its direction (skymem_auth.h): a
 *    ground command with this satellite's UP key, so it binds this satellite as its destination;
 *    one for another satellite entering here is only relayed (its destination checks it); one from
 *    a satellite with the key of the link it came over, and only for what satellites ask each other
 *    (isl_may_carry);
 *  - with keys on, everything this satellite sends is signed: replies to the ground with its DOWN
 *    key of the station that asked, everything else by the link it leaves over (skymem_link.h);
 *  - a refused command changes nothing but auth_failures, and is not answered.
 * Cost: O(1) per command besides the tag and the store operation; the gossip ring is
 * searched linearly (256 entries, only for EVICT_BLOCK).
 */
#include <string.h>

#include "skymem_crc32c.h"
#include "skymem_router.h"
#include "skymem_sat_internal.h"

void skymem_sat_init(skymem_sat_t *s, const skymem_sat_io_t *io, void *ctx)
{
    s->io = io;
    s->ctx = ctx;
    memset(&s->c, 0, sizeof s->c);
    s->auth = NULL;
    s->reply_key_id = 0;
    s->floor_mark = 0;
    s->floor_write_failed = 0;
    s->seq = 0;
    s->next_evict_id = 0;
    s->next_job_id = 0;
    s->crc_of = NULL;
    memset(s->seen, 0, sizeof s->seen);
    s->seen_next = 0;
    s->n_jobs = 0;
    { /* the migrations' chunk arrays are written as used: only their headers are cleared */
        uint32_t k;
        for (k = 0; k < SKYMEM_SAT_MAX_MIGRATIONS; k++) s->migrations[k].active = 0;
    }
    if (s->delay_scale <= 0) s->delay_scale = 1.0;
}

/* ---- authentication ------------------------------------------------------------- */

int skymem_sat_auth_on(skymem_sat_t *s, skymem_auth_t *a, const skymem_floor_t *persisted)
{
    uint32_t i;
    uint64_t now = skymem_auth_seq_at(s->io->clock_us(s->ctx));
    /* sequences signed before we started, or accepted by a previous run, cannot be fresh */
    if (persisted != NULL && persisted->mark > now) now = persisted->mark;
    if (now > a->floor) a->floor = now;
    s->auth = a;
    s->floor_mark = a->floor;
    /* nor what a previous run refused as too far ahead, once its time comes (kept until the clock passes it) */
    s->n_ahead = 0;
    for (i = 0; persisted != NULL && i < persisted->n_ahead && i < SKYMEM_FLOOR_AHEAD_MAX; i++) {
        const skymem_floor_ahead_t *e = &persisted->ahead[i];
        if (e->seq <= a->floor) continue;
        skymem_auth_refuse_through(a, e->key_id, e->src_plane, e->src_sat, e->seq);
        s->ahead[s->n_ahead++] = *e;
    }
    s->reply_key_id = 0; /* until a ground station speaks, replies to the ground go with the lowest ground key */
    for (i = 0; i < a->n_keys; i++) {
        uint32_t id = a->keys[i].id;
        if (!skymem_auth_link_of(id, NULL, NULL) && (s->reply_key_id == 0 || id < s->reply_key_id)) s->reply_key_id = id;
    }
    return 0;
}

/* Writes what a restart must keep (skymem_floor.h) through io->persist_floor; a failure is said once. */
static void keep_floor(skymem_sat_t *s)
{
    skymem_floor_t f;
    int failed;
    if (s->io->persist_floor == NULL) return;
    f.mark = s->floor_mark;
    f.n_ahead = s->n_ahead;
    memcpy(f.ahead, s->ahead, s->n_ahead * sizeof s->ahead[0]);
    failed = s->io->persist_floor(s->ctx, &f) != 0;
    if (failed && !s->floor_write_failed) /* said once; the next write tries again */
        skymem_sat_logf(s, SKYMEM_SAT_ERROR, SKYMEM_SAT_EV_AUTH,
                        "cannot keep the replay floor: a restart would reopen the last %u ms",
                        (unsigned)(SKYMEM_SAT_FLOOR_LEASE_US / 1000u));
    s->floor_write_failed = failed;
}

/* An authentic sequence refused for being too far ahead of this clock (now): its window refuses it again
 * when its time comes (skymem_auth.c), and after a restart too, from what is kept here (skymem_sat.h).
 * Nothing is written while the window's kept refusal already covers seq (the lease). */
static void keep_refused_ahead(skymem_sat_t *s, const uint8_t *pkt, size_t len, uint64_t seq, uint64_t now)
{
    skymem_floor_ahead_t e;
    uint32_t i, k = 0;
    if (skymem_auth_window_of(pkt, len, &e.key_id, &e.src_plane, &e.src_sat) != 0) return;
    e.seq = seq + SKYMEM_SAT_FLOOR_LEASE_US / SKYMEM_AUTH_SEQ_US;
    if (e.seq < seq) e.seq = UINT64_MAX;
    for (i = 0; i < s->n_ahead; i++) /* what the clock has passed: the floor of any later start is past it */
        if (s->ahead[i].seq > now) s->ahead[k++] = s->ahead[i];
    s->n_ahead = k;
    for (i = 0; i < s->n_ahead; i++) {
        skymem_floor_ahead_t *w = &s->ahead[i];
        if (w->key_id != e.key_id || w->src_plane != e.src_plane || w->src_sat != e.src_sat) continue;
        if (seq <= w->seq) return; /* kept already */
        w->seq = e.seq;
        keep_floor(s);
        return;
    }
    if (s->n_ahead == SKYMEM_FLOOR_AHEAD_MAX) { /* full: the one the clock reaches first joins the mark */
        uint32_t first = 0;
        for (i = 1; i < s->n_ahead; i++)
            if (s->ahead[i].seq < s->ahead[first].seq) first = i;
        if (s->ahead[first].seq > s->floor_mark) s->floor_mark = s->ahead[first].seq;
        s->ahead[first] = s->ahead[--s->n_ahead];
    }
    s->ahead[s->n_ahead++] = e;
    keep_floor(s);
}

/* Keys on: the checks of a signed packet whose trailer is at trailer (a SET_CHUNK's data range given, its
 * CRC comes out of the tag's pass into s->crc). The sequence may be at most SKYMEM_SAT_SEQ_AHEAD_US ahead
 * of this clock; the tag and the replay window are skymem_auth.c's. A restart's floor is the later of its
 * clock and the persisted mark (skymem_sat_auth_on), so only a sequence accepted ahead of this clock needs
 * keeping: it moves the mark (io->persist_floor) before the command is acted on. One at or behind the
 * clock writes nothing -- the clock at any later start is past it -- so honest traffic writes no file and
 * a restart refuses none of it; the lease batches the writes of a signer running ahead. */
static int verify_signed(skymem_sat_t *s, const uint8_t *pkt, size_t len, const uint8_t *trailer,
                         const uint8_t *crc_data, size_t crc_len)
{
    uint64_t now_us = s->io->clock_us(s->ctx), now = skymem_auth_seq_at(now_us);
    uint64_t seq = skymem_get_u64(trailer + SKYMEM_AT_SEQ);
    int rc;
    skymem_auth_set_clock(s->auth, now_us); /* too far ahead: refused now, and for good (skymem_auth.h) */
    if (crc_data != NULL) {
        rc = skymem_auth_verify_crc(s->auth, pkt, len, (size_t)(crc_data - pkt), crc_len, &s->crc);
        if (rc == SKYMEM_AUTH_OK) s->crc_of = crc_data;
    } else {
        rc = skymem_auth_verify(s->auth, pkt, len);
    }
    if (rc == SKYMEM_AUTH_E_AHEAD) keep_refused_ahead(s, pkt, len, seq, now);
    if (rc != SKYMEM_AUTH_OK || seq <= s->floor_mark || seq <= now) return rc;
    s->floor_mark = seq + SKYMEM_SAT_FLOOR_LEASE_US / SKYMEM_AUTH_SEQ_US;
    keep_floor(s);
    return SKYMEM_AUTH_OK;
}

/* What a satellite may ask of another (a link key's scope): a migration's SET_CHUNK, a gossip EVICT_BLOCK,
 * and answers. Anything else -- a reset, a parameter, a read, a plain put -- needs the ground's UP key of
 * this satellite: a neighbour's key file (or a captured neighbour) cannot give it. */
static int isl_may_carry(const skymem_msg_t *m)
{
    if (!m->is_cmd || m->route.src_plane == SKYMEM_GROUND_PLANE) return 1;
    if (m->cc == SKYMEM_SET_CHUNK_CC) return (m->route.flags & SKYMEM_RF_MIGRATION) != 0;
    if (m->cc == SKYMEM_EVICT_BLOCK_CC) return (m->route.flags & SKYMEM_RF_GOSSIP) != 0;
    return 0;
}

/* The authentication step: SKYMEM_AUTH_OK when pkt may be acted on. Keys off: only an unsigned packet
 * (a trailer nobody can check is refused rather than taken unchecked). */
static int sat_authenticate(skymem_sat_t *s, const skymem_msg_t *m, const uint8_t *pkt, size_t len)
{
    int rc, set_chunk = m->is_cmd && m->cc == SKYMEM_SET_CHUNK_CC && m->data != NULL;
    s->crc_of = NULL;
    if (s->auth == NULL) return m->auth == NULL ? SKYMEM_AUTH_OK : SKYMEM_AUTH_E_UNKNOWN_KEY;
    if (m->auth == NULL) return SKYMEM_AUTH_E_NO_TRAILER;
    /* a SET_CHUNK: the tag and the chunk's CRC in one pass */
    rc = verify_signed(s, pkt, len, m->auth, set_chunk ? m->data : NULL, set_chunk ? m->desc.data_len : 0);
    if (rc != SKYMEM_AUTH_OK) return rc;
    if (!isl_may_carry(m)) return SKYMEM_AUTH_E_KEY_SCOPE;
    if (m->is_cmd && m->route.src_plane == SKYMEM_GROUND_PLANE)
        s->reply_key_id = skymem_get_u32(m->auth + SKYMEM_AT_KEY_ID);
    return SKYMEM_AUTH_OK;
}

/* Counts a refused packet; nothing else changes. An unauthenticated sender gets no answer at all:
 * a signed NAK would be a signing oracle (any request id, echoed and signed) and an amplifier. */
static void refused(skymem_sat_t *s, const skymem_route_t *r, uint8_t cc, int rc, int is_reply)
{
    s->c.auth_failures++;
    skymem_sat_logf(s, SKYMEM_SAT_DEBUG, SKYMEM_SAT_EV_AUTH, "%s %u from (%u,%u), request %u, refused: %s",
                    is_reply ? "reply to cc" : "cc", cc, r->src_plane, r->src_sat, (unsigned)r->request_id,
                    skymem_auth_strerror(rc));
}

int skymem_sat_refuse_control(skymem_sat_t *s, uint8_t cc)
{
    if (s->auth == NULL) return 0;
    s->c.auth_failures++;
    skymem_sat_logf(s, SKYMEM_SAT_WARN, SKYMEM_SAT_EV_AUTH, "unauthenticated control command (cc %u) refused", cc);
    return 1;
}

/* ---- replies -------------------------------------------------------------------- */

static int is_self(const skymem_sat_t *s, uint16_t plane, uint16_t sat) { return plane == s->plane && sat == s->sat; }

/* A DATA reply with one stored chunk, or NAK NOT_FOUND (GET_CHUNK and GET_CHUNKS). */
static void answer_chunk(skymem_sat_t *s, const skymem_route_t *req, uint8_t cc, const uint8_t *hash, uint32_t id)
{
    skymem_chunk_meta_t meta;
    skymem_chunk_desc_t d;
    skymem_route_t r;
    const uint8_t *data;
    size_t dlen;
    uint32_t sec;
    uint16_t sub;
    if (skymem_store_get(s->store, hash, id, &meta, &data, &dlen) != SKYMEM_STORE_OK) {
        skymem_sat_reply(s, req, SKYMEM_REPLY_NAK, cc, SKYMEM_NAK_NOT_FOUND, id, 0, hash);
        return;
    }
    r = skymem_sat_reply_route(s, req);
    skymem_chunk_desc_from_meta(&d, hash, id, &meta, dlen);
    s->io->tlm_time(s->ctx, &sec, &sub);
    skymem_sat_send_reply(s, skymem_build_reply_data(s->buf, sizeof s->buf, s->seq++, sec, sub, &r, cc, &d, data), &r);
}

/* ---- the ground link ----------------------------------------------------------- */

int skymem_sat_from_ground(skymem_sat_t *s, const skymem_msg_t *m, uint8_t *pkt, size_t len, skymem_route_t *r)
{
    int rc;
    if (r->src_plane != SKYMEM_GROUND_PLANE) return SKYMEM_SAT_RELAYED; /* a satellite's own traffic: nothing to learn */
    if (s->auth != NULL) {
        /* A command for this satellite is checked here with its UP key. One for another satellite cannot be:
         * its tag is made with that satellite's UP key, which only it and the ground hold -- so it is relayed
         * when it carries a trailer under a ground key id this satellite knows (the cheap part of the check;
         * anything unsigned is dropped here), and its destination verifies it. */
        if (is_self(s, r->dst_plane, r->dst_sat)) rc = sat_authenticate(s, m, pkt, len);
        else if (m->auth == NULL) rc = SKYMEM_AUTH_E_NO_TRAILER;
        else rc = skymem_auth_find_key_for(s->auth, skymem_get_u32(m->auth + SKYMEM_AT_KEY_ID), SKYMEM_KEY_UP)
                      ? SKYMEM_AUTH_OK : SKYMEM_AUTH_E_UNKNOWN_KEY;
        if (rc != SKYMEM_AUTH_OK) {
            refused(s, r, m->cc, rc, 0);
            return SKYMEM_SAT_DROP;
        }
    }
    if (r->via_plane == SKYMEM_NO_SAT) { /* the sender left via unset: its replies come back through us */
        r->via_plane = s->plane;
        r->via_sat = s->sat;
        skymem_rewrite_route(pkt, len, r);
    }
    /* Keys on, a station's address is learned only from a command verified here with this satellite as
     * its destination. One relayed to another satellite teaches nothing: it was not verified here (it
     * cannot be), so a captured command replayed into this ground port would otherwise point the
     * station's replies at whoever replayed it. Keys off (an unkeyed constellation) nothing can be
     * verified, and every command teaches, as it always has. */
    if (s->auth != NULL && !is_self(s, r->dst_plane, r->dst_sat)) return SKYMEM_SAT_RELAYED;
    return SKYMEM_SAT_LEARN;
}

int skymem_sat_accept(skymem_sat_t *s, const skymem_msg_t *m, const uint8_t *pkt, size_t len, int checked)
{
    int rc;
    if (checked) return 1;
    rc = sat_authenticate(s, m, pkt, len);
    if (rc == SKYMEM_AUTH_OK) return 1;
    refused(s, &m->route, m->cc, rc, 0);
    return 0;
}

int skymem_sat_malformed(skymem_sat_t *s, const uint8_t *pkt, size_t len, const skymem_route_t *r)
{
    int rc;
    if (!is_self(s, r->dst_plane, r->dst_sat) || (r->flags & SKYMEM_RF_GOSSIP)) return 0;
    if (s->auth != NULL) { /* the parser refused the body, but the tag covers every byte: check it as it is */
        rc = len >= SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_AUTH_TRAILER_LEN && (r->flags & SKYMEM_RF_AUTH)
                 ? verify_signed(s, pkt, len, pkt + len - SKYMEM_AUTH_TRAILER_LEN, NULL, 0)
                 : SKYMEM_AUTH_E_NO_TRAILER;
        /* a satellite sends another nothing malformed, and nothing it may not carry anyway (isl_may_carry):
         * under a link key it is refused, not answered -- and never changes the key replies to the ground
         * are signed with */
        if (rc == SKYMEM_AUTH_OK && r->src_plane != SKYMEM_GROUND_PLANE) rc = SKYMEM_AUTH_E_KEY_SCOPE;
        if (rc != SKYMEM_AUTH_OK) {
            refused(s, r, pkt[6] & 0x7Fu, rc, 0);
            return 0;
        }
        s->reply_key_id = skymem_get_u32(pkt + len - SKYMEM_AUTH_TRAILER_LEN + SKYMEM_AT_KEY_ID);
    }
    return 1;
}

void skymem_sat_nak_malformed(skymem_sat_t *s, int err, const uint8_t *pkt, const skymem_route_t *r)
{
    skymem_sat_reply(s, r, SKYMEM_REPLY_NAK, pkt[6] & 0x7Fu, skymem_nak_for_parse_error(err), 0, 0, NULL);
}

/* ---- eviction gossip ------------------------------------------------------------ */

/* 1 the first time (hash, evict_id) is seen (remembered); 0 after. */
static int first_seen(skymem_sat_t *s, const uint8_t *hash, uint32_t evict_id)
{
    skymem_sat_seen_t *e;
    uint32_t i;
    for (i = 0; i < SKYMEM_SAT_GOSSIP_MEMORY; i++)
        if (s->seen[i].used && s->seen[i].evict_id == evict_id && !memcmp(s->seen[i].hash, hash, SKYMEM_BLOCK_HASH_LEN))
            return 0;
    e = &s->seen[s->seen_next]; /* the oldest entry goes */
    s->seen_next = (s->seen_next + 1u) % SKYMEM_SAT_GOSSIP_MEMORY;
    e->used = 1;
    e->evict_id = evict_id;
    memcpy(e->hash, hash, SKYMEM_BLOCK_HASH_LEN);
    return 1;
}

/* EVICT_BLOCK (flag GOSSIP, radius - 1) to each distinct neighbour; radius 0 stops. */
static void gossip(skymem_sat_t *s, const uint8_t *hash, uint32_t evict_id, uint8_t radius)
{
    uint32_t sent[4][2];
    int nsent = 0, d, k;
    if (radius == 0) return;
    for (d = SKYMEM_DIR_NORTH; d <= SKYMEM_DIR_EAST; d++) {
        uint32_t np, ns;
        skymem_route_t r;
        int len, dup = 0;
        skymem_neighbour(s->planes, s->sats, s->plane, s->sat, (skymem_dir_t)d, &np, &ns);
        if (is_self(s, (uint16_t)np, (uint16_t)ns)) continue; /* a ring 1 wide */
        for (k = 0; k < nsent; k++)
            if (sent[k][0] == np && sent[k][1] == ns) dup = 1; /* a ring 2 wide: north == south */
        if (dup) continue;
        sent[nsent][0] = np;
        sent[nsent][1] = ns;
        nsent++;
        memset(&r, 0, sizeof r);
        r.dst_plane = (uint16_t)np;
        r.dst_sat = (uint16_t)ns;
        r.src_plane = s->plane;
        r.src_sat = s->sat;
        r.via_plane = SKYMEM_NO_SAT;
        r.via_sat = SKYMEM_NO_SAT;
        r.request_id = evict_id;
        r.ttl = SKYMEM_DEFAULT_TTL;
        r.flags = SKYMEM_RF_GOSSIP;
        len = skymem_build_evict(s->buf, sizeof s->buf, s->seq++, &r, hash, evict_id, (uint8_t)(radius - 1u));
        if (len > 0) s->io->send(s->ctx, s->buf, (size_t)len, &r, 0);
    }
}

void skymem_sat_store_evicted(void *ctx, const uint8_t *hash, const skymem_chunk_meta_t *victim, uint32_t purged)
{
    skymem_sat_t *s = (skymem_sat_t *)ctx;
    /* gossiped under an id of our own: satellite index << 16 | counter */
    uint32_t evict_id = ((uint32_t)(s->plane * s->sats + s->sat) << 16) | (s->next_evict_id++ & 0xFFFFu);
    skymem_sat_logf(s, SKYMEM_SAT_DEBUG, SKYMEM_SAT_EV_EVICT, "LRU purged a block (%u chunks), gossip radius %u",
                    (unsigned)purged, victim->gossip_radius);
    (void)first_seen(s, hash, evict_id);
    gossip(s, hash, evict_id, victim->gossip_radius);
    if (victim->origin_ground != SKYMEM_NO_SAT && victim->ingress_plane != SKYMEM_NO_SAT) {
        /* an unsolicited EVICTED notice (request id 0) to the station that set the block, through the
         * satellite that held its link then (also when the chunk came here by migration: its origin record) */
        skymem_route_t req;
        memset(&req, 0, sizeof req);
        req.src_plane = SKYMEM_GROUND_PLANE;
        req.src_sat = victim->origin_ground;
        req.via_plane = victim->ingress_plane;
        req.via_sat = victim->ingress_sat;
        skymem_sat_reply_body(s, &req, SKYMEM_REPLY_EVICTED, 0, 0, 0, purged, hash, SKYMEM_BLOCK_HASH_LEN);
    }
}

/* ---- commands ------------------------------------------------------------------- */

/* 1 when this satellite holds m's chunk with other bytes than m carries (the LRU order untouched). */
static int holds_other(const skymem_sat_t *s, const skymem_msg_t *m)
{
    const uint8_t *data;
    size_t len;
    if (skymem_store_peek(s->store, m->block_hash, m->desc.chunk_id, NULL, &data, &len) != SKYMEM_STORE_OK) return 0;
    return len != m->desc.data_len || memcmp(data, m->data, len) != 0;
}

static void set_chunk(skymem_sat_t *s, const skymem_msg_t *m)
{
    const skymem_route_t *r = &m->route;
    skymem_store_info_t info;
    skymem_chunk_meta_t meta;
    uint32_t crc;
    int rc;
    skymem_store_info(s->store, &info);
    if (m->desc.data_len > info.chunk_size) {
        skymem_sat_reply(s, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_TOO_LARGE, m->desc.chunk_id, 0, m->block_hash);
        return;
    }
    /* the CRC from the tag's pass over this very packet, else computed here */
    crc = s->crc_of == m->data ? s->crc : skymem_crc32c(m->data, m->desc.data_len);
    s->crc_of = NULL;
    if (crc != m->desc.crc32c) {
        skymem_sat_reply(s, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_BAD_CRC, m->desc.chunk_id, 0, m->block_hash);
        return;
    }
    /* A satellite may only move a chunk here (isl_may_carry: a migration), never replace one held here with
     * other bytes: a captured satellite could otherwise replant an older version's chunks anywhere, relayed hop
     * by hop (R1 of issue 53). The same bytes again (a resend) are taken as before; a set from the ground may
     * overwrite -- the ground owns versions. */
    if (r->src_plane != SKYMEM_GROUND_PLANE && holds_other(s, m)) {
        skymem_sat_reply(s, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_CONFLICT, m->desc.chunk_id, 0, m->block_hash);
        return;
    }
    /* also whom to tell if LRU later purges it (a migration's origin record, else the route) */
    skymem_chunk_meta_from_set(&meta, &m->desc, r, m->has_origin ? &m->origin : NULL);
    rc = skymem_store_set(s->store, m->block_hash, m->desc.chunk_id, &meta, m->data, m->desc.data_len);
    if (rc != SKYMEM_STORE_OK) {
        skymem_sat_reply(s, r, SKYMEM_REPLY_NAK, m->cc,
                         rc == SKYMEM_STORE_E_TOO_LARGE ? SKYMEM_NAK_TOO_LARGE : SKYMEM_NAK_NO_SPACE, m->desc.chunk_id,
                         0, m->block_hash);
        return;
    }
    if (r->flags & SKYMEM_RF_MIGRATION) s->c.migrated_in++;
    skymem_sat_reply(s, r, SKYMEM_REPLY_ACK, m->cc, 0, m->desc.chunk_id, 1, m->block_hash);
}

/* EVICT_BLOCK: from the ground, the whole block here, gossiped as far as the ground asks; from a neighbour (a
 * gossip: isl_may_carry lets nothing else of it through), bounded by the block's own radius (skymem_sat.h). */
static void evict_block(skymem_sat_t *s, const skymem_msg_t *m)
{
    const skymem_route_t *r = &m->route;
    uint32_t purged;
    uint8_t radius = m->radius, held = 0;
    if (r->src_plane == SKYMEM_GROUND_PLANE) {
        purged = skymem_store_purge_block(s->store, m->block_hash);
    } else {
        uint8_t cap;
        purged = skymem_store_purge_gossiped(s->store, m->block_hash, &held);
        cap = held > 0 ? (uint8_t)(held - 1u) : (uint8_t)SKYMEM_SAT_GOSSIP_PAST_HOLDERS;
        if (radius > cap) radius = cap;
    }
    if (first_seen(s, m->block_hash, m->evict_id)) gossip(s, m->block_hash, m->evict_id, radius);
    skymem_sat_logf(s, SKYMEM_SAT_DEBUG, SKYMEM_SAT_EV_EVICT, "evict id %u radius %u (passed on %u): purged %u chunks",
                    (unsigned)m->evict_id, m->radius, radius, (unsigned)purged);
    if (!(r->flags & SKYMEM_RF_GOSSIP)) /* a neighbour's gossip expects no answer */
        skymem_sat_reply(s, r, SKYMEM_REPLY_ACK, m->cc, 0, 0, purged, m->block_hash);
}

static void queue_get_chunks(skymem_sat_t *s, const skymem_msg_t *m)
{
    skymem_sat_job_t *j;
    if (s->n_jobs >= SKYMEM_SAT_MAX_JOBS) {
        skymem_sat_logf(s, SKYMEM_SAT_WARN, SKYMEM_SAT_EV_BUSY, "GET_CHUNKS queue full");
        skymem_sat_reply(s, &m->route, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_BUSY, m->first, 0, m->block_hash);
        return;
    }
    j = &s->jobs[s->n_jobs++];
    j->reply_route = m->route;
    j->reply_key_id = s->reply_key_id;
    j->next_id = m->first;
    j->remaining = m->count;
    j->stride = m->stride;
    memcpy(j->hash, m->block_hash, SKYMEM_BLOCK_HASH_LEN);
}

uint32_t skymem_sat_run_jobs(skymem_sat_t *s, uint32_t budget)
{
    uint32_t current_key = s->reply_key_id;
    /* oldest request first; a finished one is removed by moving the others down */
    while (budget > 0 && s->n_jobs > 0) {
        skymem_sat_job_t *j = &s->jobs[0];
        s->reply_key_id = j->reply_key_id; /* answered with the key of the station that asked */
        answer_chunk(s, &j->reply_route, SKYMEM_GET_CHUNKS_CC, j->hash, j->next_id);
        j->next_id += j->stride;
        j->remaining--;
        budget--;
        if (j->remaining == 0) {
            s->n_jobs--;
            memmove(&s->jobs[0], &s->jobs[1], s->n_jobs * sizeof s->jobs[0]);
        }
    }
    s->reply_key_id = current_key;
    return s->n_jobs;
}

void skymem_sat_reset_counters(skymem_sat_t *s)
{
    memset(&s->c, 0, sizeof s->c);
    if (s->io->reset_counters) s->io->reset_counters(s->ctx);
}

void skymem_sat_fill_stats(skymem_sat_t *s, skymem_stats_t *st)
{
    skymem_store_info_t info;
    memset(st, 0, sizeof *st);
    if (s->io->fill_stats) s->io->fill_stats(s->ctx, st);
    skymem_store_info(s->store, &info);
    st->plane = s->plane;
    st->sat = s->sat;
    st->cmd_count = s->c.cmd_count;
    st->err_count = s->c.err_count;
    st->auth_failures = s->c.auth_failures;
    st->migrated_in = s->c.migrated_in;
    st->migrated_out = s->c.migrated_out;
    st->chunks = info.chunks;
    st->bytes_used = info.bytes_used;
    st->bytes_budget = info.budget_bytes;
    st->lru_evictions = info.lru_evictions;
    st->blocks_purged = info.blocks_purged;
}

void skymem_sat_serve(skymem_sat_t *s, const skymem_msg_t *m)
{
    const skymem_route_t *r = &m->route;
    s->c.cmd_count++;
    switch (m->cc) {
    case SKYMEM_NOOP_CC: skymem_sat_reply(s, r, SKYMEM_REPLY_ACK, m->cc, 0, 0, 0, NULL); break;
    case SKYMEM_RESET_COUNTERS_CC:
        skymem_sat_reset_counters(s);
        skymem_sat_reply(s, r, SKYMEM_REPLY_ACK, m->cc, 0, 0, 0, NULL);
        break;
    case SKYMEM_SET_PARAM_CC: {
        uint8_t nak = s->io->apply_param(s->ctx, m->param_id, m->param_value);
        skymem_sat_reply(s, r, nak ? SKYMEM_REPLY_NAK : SKYMEM_REPLY_ACK, m->cc, nak, 0, m->param_value, NULL);
        break;
    }
    case SKYMEM_SET_CHUNK_CC: set_chunk(s, m); break;
    case SKYMEM_GET_CHUNK_CC: answer_chunk(s, r, m->cc, m->block_hash, m->chunk_id); break;
    case SKYMEM_GET_CHUNKS_CC: queue_get_chunks(s, m); break;
    case SKYMEM_PROBE_CC: {
        skymem_chunk_meta_t meta; /* a probe must not refresh the chunk's place in the LRU order */
        if (skymem_store_peek(s->store, m->block_hash, m->chunk_id, &meta, NULL, NULL) == SKYMEM_STORE_OK)
            skymem_sat_reply(s, r, SKYMEM_REPLY_ACK, m->cc, 0, m->chunk_id, meta.chunk_count, m->block_hash);
        else
            skymem_sat_reply(s, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_NOT_FOUND, m->chunk_id, 0, m->block_hash);
        break;
    }
    case SKYMEM_EVICT_BLOCK_CC: evict_block(s, m); break;
    case SKYMEM_MIGRATE_CC: skymem_sat_migrate_start(s, m); break;
    case SKYMEM_STATS_CC: {
        skymem_stats_t st;
        skymem_route_t rr = skymem_sat_reply_route(s, r);
        uint32_t sec;
        uint16_t sub;
        skymem_sat_fill_stats(s, &st);
        s->io->tlm_time(s->ctx, &sec, &sub);
        skymem_sat_send_reply(s, skymem_build_reply_stats(s->buf, sizeof s->buf, s->seq++, sec, sub, &rr, &st), &rr);
        break;
    }
    default: /* the parser lets only valid codes through */
        skymem_sat_reply(s, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_BAD_COMMAND, 0, 0, NULL);
        break;
    }
}

void skymem_sat_on_reply(skymem_sat_t *s, const skymem_msg_t *m, const uint8_t *pkt, size_t len)
{
    int rc = s->auth == NULL ? SKYMEM_AUTH_OK : sat_authenticate(s, m, pkt, len);
    if (rc != SKYMEM_AUTH_OK) { /* no forged or replayed ACK deletes a chunk */
        refused(s, &m->route, m->reply_cc, rc, 1);
        return;
    }
    skymem_sat_migrate_on_reply(s, m);
}
