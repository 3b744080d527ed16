/*
 * skymem_sat_migrate.c -- MIGRATE: move a range of chunks to another satellite over the ISL
 * (docs/PROTOCOL.md "Migration"), for both runtimes.
 *
 * What it is: up to SKYMEM_SAT_MAX_MIGRATIONS jobs (skymem_sat_migration_t), each a list of
 * the chunks of the range held here when the request came. Each chunk goes to the target as a
 * SET_CHUNK with route flag MIGRATION (and the chunk's origin record, so an LRU eviction at the
 * target still reaches the station that set it), signed hop by hop with the links' keys (skymem_link.h).
 *
 * A chunk's states: waiting -> in flight -> done (ACK: our copy deleted) or failed (NAK, evicted
 * here meanwhile, or no ACK after SKYMEM_SAT_MIGRATE_RETRIES resends); a timeout puts an
 * in-flight chunk back in flight (resent) until then.
 *
 * Invariants: at most SKYMEM_SAT_MIGRATE_WINDOW chunks of a job in flight; our copy is deleted
 * only on the target's authenticated ACK (skymem_sat_on_reply checks it); when moved + failed
 * reaches n the requester gets ACK (value = chunks moved) or NAK MIGRATE_FAILED (value = moved),
 * signed with its own ground key, and the job slot is free again. Request ids of the SET_CHUNKs
 * carry the job id in the top 20 bits and the chunk's index in the low 12, so an answer finds
 * its chunk in O(jobs). A timeout is 1 s plus four times the path's worst one-way light time.
 */
#include <string.h>

#include "skymem_geometry.h"
#include "skymem_router.h"
#include "skymem_sat_internal.h"

enum { MC_WAITING = 0, MC_IN_FLIGHT = 1, MC_DONE = 2, MC_FAILED = 3 };

#define IDX_BITS 12u

static uint64_t timeout_ms(const skymem_sat_t *s, const skymem_sat_migration_t *j)
{
    uint32_t hops = skymem_torus_hops(s->planes, s->sats, s->plane, s->sat, j->target_plane, j->target_sat);
    double along = skymem_intra_plane_distance_m(s->altitude_m, s->sats);
    double across = skymem_inter_plane_distance_max_m(s->altitude_m, s->planes);
    double worst_s = skymem_light_time_s(along > across ? along : across) * s->delay_scale;
    return (uint64_t)SKYMEM_SAT_MIGRATE_TIMEOUT_MS + (uint64_t)(4.0 * hops * worst_s * 1000.0);
}

static void send_chunk(skymem_sat_t *s, skymem_sat_migration_t *j, uint32_t i)
{
    skymem_sat_mchunk_t *c = &j->chunks[i];
    skymem_chunk_meta_t meta;
    skymem_chunk_desc_t d;
    skymem_origin_t origin;
    skymem_route_t r;
    const uint8_t *data;
    size_t dlen;
    int len;
    if (skymem_store_peek(s->store, j->hash, c->chunk_id, &meta, &data, &dlen) != SKYMEM_STORE_OK) {
        c->state = MC_FAILED; /* evicted or purged meanwhile */
        j->failed++;
        return;
    }
    skymem_chunk_desc_from_meta(&d, j->hash, c->chunk_id, &meta, dlen);
    memset(&r, 0, sizeof r);
    r.dst_plane = j->target_plane;
    r.dst_sat = j->target_sat;
    r.src_plane = s->plane;
    r.src_sat = s->sat;
    r.via_plane = SKYMEM_NO_SAT;
    r.via_sat = SKYMEM_NO_SAT;
    r.request_id = (j->job_id << IDX_BITS) | i;
    r.ttl = SKYMEM_DEFAULT_TTL;
    r.flags = SKYMEM_RF_MIGRATION;
    len = skymem_build_set_chunk_origin(s->buf, sizeof s->buf, s->seq++, &r, &d,
                                        skymem_chunk_origin(&meta, &origin) ? &origin : NULL, data);
    if (len > 0) s->io->send(s->ctx, s->buf, (size_t)len, &r, 0);
    c->state = MC_IN_FLIGHT;
    c->tries++;
    c->deadline_ms = s->io->mono_ms(s->ctx) + timeout_ms(s, j);
    j->in_flight++;
}

static void finish_if_done(skymem_sat_t *s, skymem_sat_migration_t *j)
{
    uint32_t current_key = s->reply_key_id;
    if (j->moved + j->failed < j->n) return;
    skymem_sat_logf(s, SKYMEM_SAT_INFO, SKYMEM_SAT_EV_MIGRATE, "migration %u to (%u,%u): %u moved, %u failed",
                    (unsigned)j->job_id, j->target_plane, j->target_sat, (unsigned)j->moved, (unsigned)j->failed);
    s->reply_key_id = j->reply_key_id; /* the answer goes to the requester, signed with its key */
    if (j->failed == 0)
        skymem_sat_reply(s, &j->reply_route, SKYMEM_REPLY_ACK, SKYMEM_MIGRATE_CC, 0, 0, j->moved, j->hash);
    else
        skymem_sat_reply(s, &j->reply_route, SKYMEM_REPLY_NAK, SKYMEM_MIGRATE_CC, SKYMEM_NAK_MIGRATE_FAILED, 0,
                         j->moved, j->hash);
    s->reply_key_id = current_key;
    j->active = 0;
}

static void pump(skymem_sat_t *s, skymem_sat_migration_t *j)
{
    uint32_t i;
    for (i = 0; i < j->n && j->in_flight < SKYMEM_SAT_MIGRATE_WINDOW; i++)
        if (j->chunks[i].state == MC_WAITING) send_chunk(s, j, i);
    finish_if_done(s, j);
}

void skymem_sat_migrate_start(skymem_sat_t *s, const skymem_msg_t *m)
{
    const skymem_route_t *r = &m->route;
    skymem_sat_migration_t *j = NULL;
    uint32_t i, k;
    if (m->target_plane >= s->planes || m->target_sat >= s->sats) {
        skymem_sat_reply(s, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_NO_ROUTE, 0, 0, m->block_hash);
        return;
    }
    if (m->target_plane == s->plane && m->target_sat == s->sat) { /* already here */
        skymem_sat_reply(s, r, SKYMEM_REPLY_ACK, m->cc, 0, 0, 0, m->block_hash);
        return;
    }
    for (k = 0; k < SKYMEM_SAT_MAX_MIGRATIONS && j == NULL; k++)
        if (!s->migrations[k].active) j = &s->migrations[k];
    if (j == NULL) {
        skymem_sat_reply(s, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_BUSY, 0, 0, m->block_hash);
        return;
    }
    j->n = j->in_flight = j->moved = j->failed = 0;
    for (i = 0; i < m->count; i++) { /* only the chunks of the range held here take part */
        uint32_t id = m->first + i * m->stride;
        if (skymem_store_peek(s->store, m->block_hash, id, NULL, NULL, NULL) == SKYMEM_STORE_OK) {
            j->chunks[j->n].chunk_id = id;
            j->chunks[j->n].state = MC_WAITING;
            j->chunks[j->n].tries = 0;
            j->n++;
        }
    }
    if (j->n == 0) {
        skymem_sat_reply(s, r, SKYMEM_REPLY_ACK, m->cc, 0, 0, 0, m->block_hash);
        return;
    }
    s->next_job_id = (s->next_job_id + 1u) & 0xFFFFFu;
    if (s->next_job_id == 0) s->next_job_id = 1;
    j->active = 1;
    j->job_id = s->next_job_id;
    j->reply_route = *r;
    j->reply_key_id = s->reply_key_id;
    j->target_plane = m->target_plane;
    j->target_sat = m->target_sat;
    memcpy(j->hash, m->block_hash, SKYMEM_BLOCK_HASH_LEN);
    skymem_sat_logf(s, SKYMEM_SAT_INFO, SKYMEM_SAT_EV_MIGRATE, "migration %u: %u chunks to (%u,%u)",
                    (unsigned)j->job_id, (unsigned)j->n, j->target_plane, j->target_sat);
    pump(s, j);
}

void skymem_sat_migrate_on_reply(skymem_sat_t *s, const skymem_msg_t *m)
{
    uint32_t job_id = m->route.request_id >> IDX_BITS, idx = m->route.request_id & ((1u << IDX_BITS) - 1u);
    uint32_t k;
    if (m->reply_cc != SKYMEM_SET_CHUNK_CC || (m->reply_kind != SKYMEM_REPLY_ACK && m->reply_kind != SKYMEM_REPLY_NAK))
        return;
    for (k = 0; k < SKYMEM_SAT_MAX_MIGRATIONS; k++) {
        skymem_sat_migration_t *j = &s->migrations[k];
        skymem_sat_mchunk_t *c;
        if (!j->active || j->job_id != job_id || idx >= j->n) continue;
        c = &j->chunks[idx];
        if (c->state != MC_IN_FLIGHT) return; /* a duplicate or late answer */
        j->in_flight--;
        if (m->reply_kind == SKYMEM_REPLY_ACK) { /* the target holds it now: only then does our copy go */
            skymem_store_delete(s->store, j->hash, c->chunk_id);
            c->state = MC_DONE;
            j->moved++;
            s->c.migrated_out++;
        } else {
            c->state = MC_FAILED;
            j->failed++;
        }
        pump(s, j);
        return;
    }
}

void skymem_sat_tick(skymem_sat_t *s)
{
    uint64_t now = s->io->mono_ms(s->ctx);
    uint32_t k, i;
    for (k = 0; k < SKYMEM_SAT_MAX_MIGRATIONS; k++) {
        skymem_sat_migration_t *j = &s->migrations[k];
        if (!j->active) continue;
        for (i = 0; i < j->n; i++) {
            skymem_sat_mchunk_t *c = &j->chunks[i];
            if (c->state != MC_IN_FLIGHT || c->deadline_ms > now) continue;
            j->in_flight--;
            if (c->tries > SKYMEM_SAT_MIGRATE_RETRIES) {
                c->state = MC_FAILED;
                j->failed++;
            } else {
                skymem_sat_logf(s, SKYMEM_SAT_DEBUG, SKYMEM_SAT_EV_MIGRATE, "migration %u: chunk %u timed out, resending",
                                (unsigned)j->job_id, (unsigned)c->chunk_id);
                send_chunk(s, j, i);
            }
        }
        pump(s, j);
    }
}

uint64_t skymem_sat_next_deadline(const skymem_sat_t *s)
{
    uint64_t best = 0;
    uint32_t k, i;
    for (k = 0; k < SKYMEM_SAT_MAX_MIGRATIONS; k++) {
        const skymem_sat_migration_t *j = &s->migrations[k];
        if (!j->active) continue;
        for (i = 0; i < j->n; i++)
            if (j->chunks[i].state == MC_IN_FLIGHT && (best == 0 || j->chunks[i].deadline_ms < best))
                best = j->chunks[i].deadline_ms;
    }
    return best;
}

uint32_t skymem_sat_migrations_active(const skymem_sat_t *s)
{
    uint32_t k, n = 0;
    for (k = 0; k < SKYMEM_SAT_MAX_MIGRATIONS; k++) n += s->migrations[k].active ? 1u : 0u;
    return n;
}
