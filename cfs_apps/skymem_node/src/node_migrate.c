/* node_migrate.c -- MIGRATE: move chunks to another satellite over ISL.
 *
 * Each chunk goes to the target as SET_CHUNK (route flag MIGRATION); our copy
 * is deleted only when the target ACKs it. At most NODE_MIGRATE_WINDOW chunks
 * of a job are in flight; an unanswered chunk is resent after a timeout, up to
 * NODE_MIGRATE_RETRIES times. When every chunk is settled the requester gets
 * ACK (value = chunks moved) or NAK MIGRATE_FAILED (value = chunks moved). */
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "skymem_geometry.h"

enum { MC_WAITING = 0, MC_IN_FLIGHT = 1, MC_DONE = 2, MC_FAILED = 3 };

/* Request ids of migration SET_CHUNKs: job id in the top 20 bits, chunk index in the low 12. */
#define IDX_BITS 12u

static uint64_t timeout_ns(const node_t *n, const node_job_t *j)
{
    uint32_t hops = skymem_torus_hops(n->planes, n->sats, n->plane, n->sat, j->target_plane, j->target_sat);
    double h = n->cfg.altitude_km * 1000.0;
    double link = skymem_intra_plane_distance_m(h, n->sats);
    double cross = skymem_inter_plane_distance_max_m(h, n->planes);
    double worst_s = skymem_light_time_s(link > cross ? link : cross) * n->delay_scale;
    /* base timeout plus four times the worst one-way light time of the path */
    return (uint64_t)NODE_MIGRATE_TIMEOUT_MS * 1000000ull + (uint64_t)(4.0 * hops * worst_s * 1e9);
}

static void send_chunk(node_t *n, node_job_t *j, uint32_t i)
{
    skymem_chunk_meta_t meta;
    const uint8_t *data;
    size_t dlen;
    node_mchunk_t *c = &j->chunks[i];
    if (skymem_store_peek(n->store, j->hash, c->chunk_id, &meta, &data, &dlen) != SKYMEM_STORE_OK) {
        c->state = MC_FAILED; /* evicted or purged meanwhile */
        j->failed++;
        return;
    }
    {
        skymem_chunk_desc_t d;
        skymem_route_t r;
        skymem_origin_t origin;
        int len;
        skymem_chunk_desc_from_meta(&d, j->hash, c->chunk_id, &meta, dlen);
        memset(&r, 0, sizeof r);
        r.dst_plane = j->target_plane;
        r.dst_sat = j->target_sat;
        r.src_plane = (uint16_t)n->plane;
        r.src_sat = (uint16_t)n->sat;
        r.via_plane = SKYMEM_NO_SAT;
        r.via_sat = SKYMEM_NO_SAT;
        r.request_id = (j->job_id << IDX_BITS) | i;
        r.ttl = SKYMEM_DEFAULT_TTL;
        r.flags = SKYMEM_RF_MIGRATION;
        /* the origin record keeps the chunk's ground station, so an LRU eviction there still reaches it */
        len = skymem_build_set_chunk_origin(n->txbuf, sizeof n->txbuf, n->seq++, &r, &d,
                                            skymem_chunk_origin(&meta, &origin) ? &origin : NULL, data);
        if (len > 0) len = (int)node_auth_sign(n, &r, n->txbuf, (size_t)len, sizeof n->txbuf);
        if (len > 0) node_route_out(n, n->txbuf, (size_t)len, &r, 0);
    }
    c->state = MC_IN_FLIGHT;
    c->tries++;
    c->deadline_ns = node_mono_ns() + timeout_ns(n, j);
    j->in_flight++;
}

static void finish_if_done(node_t *n, node_job_t *j)
{
    uint32_t current_key = n->reply_key_id;
    if (j->moved + j->failed < j->n) return;
    n->reply_key_id = j->reply_key_id; /* the answer goes to the requester, signed with its key */
    if (j->failed == 0)
        node_reply(n, &j->reply_route, SKYMEM_REPLY_ACK, SKYMEM_MIGRATE_CC, 0, 0, j->moved, j->hash, SKYMEM_BLOCK_HASH_LEN);
    else
        node_reply(n, &j->reply_route, SKYMEM_REPLY_NAK, SKYMEM_MIGRATE_CC, SKYMEM_NAK_MIGRATE_FAILED, 0, j->moved,
                   j->hash, SKYMEM_BLOCK_HASH_LEN);
    n->reply_key_id = current_key;
    node_log(n, NODE_LOG_INFO, "migration %u to (%u,%u): %u moved, %u failed", j->job_id, j->target_plane,
             j->target_sat, j->moved, j->failed);
    free(j->chunks);
    memset(j, 0, sizeof(*j));
}

static void pump(node_t *n, node_job_t *j)
{
    uint32_t i;
    for (i = 0; i < j->n && j->in_flight < NODE_MIGRATE_WINDOW; i++)
        if (j->chunks[i].state == MC_WAITING) send_chunk(n, j, i);
    finish_if_done(n, j);
}

void node_migrate_start(node_t *n, const skymem_msg_t *m)
{
    const skymem_route_t *r = &m->route;
    node_job_t *j = NULL;
    uint32_t i, present = 0;
    skymem_route_t req = *r;
    int k;
    if (m->target_plane >= n->planes || m->target_sat >= n->sats) {
        node_reply(n, &req, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_NO_ROUTE, 0, 0, m->block_hash, SKYMEM_BLOCK_HASH_LEN);
        return;
    }
    if (m->target_plane == n->plane && m->target_sat == n->sat) { /* already here */
        node_reply(n, &req, SKYMEM_REPLY_ACK, m->cc, 0, 0, 0, m->block_hash, SKYMEM_BLOCK_HASH_LEN);
        return;
    }
    for (k = 0; k < NODE_MAX_JOBS; k++)
        if (!n->jobs[k].active) {
            j = &n->jobs[k];
            break;
        }
    if (j == NULL) {
        node_reply(n, &req, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_BUSY, 0, 0, m->block_hash, SKYMEM_BLOCK_HASH_LEN);
        return;
    }
    for (i = 0; i < m->count; i++)
        if (skymem_store_peek(n->store, m->block_hash, m->first + i * m->stride, NULL, NULL, NULL) == SKYMEM_STORE_OK)
            present++;
    if (present == 0) {
        node_reply(n, &req, SKYMEM_REPLY_ACK, m->cc, 0, 0, 0, m->block_hash, SKYMEM_BLOCK_HASH_LEN);
        return;
    }
    j->chunks = (node_mchunk_t *)calloc(present, sizeof(*j->chunks));
    if (j->chunks == NULL) {
        node_reply(n, &req, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_BUSY, 0, 0, m->block_hash, SKYMEM_BLOCK_HASH_LEN);
        return;
    }
    present = 0;
    for (i = 0; i < m->count; i++) {
        uint32_t id = m->first + i * m->stride;
        if (skymem_store_peek(n->store, m->block_hash, id, NULL, NULL, NULL) == SKYMEM_STORE_OK)
            j->chunks[present++].chunk_id = id;
    }
    j->active = 1;
    j->job_id = (++n->next_job_id) & 0xFFFFFu;
    if (j->job_id == 0) j->job_id = n->next_job_id = 1;
    j->reply_route = req;
    j->reply_key_id = n->reply_key_id;
    memcpy(j->hash, m->block_hash, SKYMEM_BLOCK_HASH_LEN);
    j->target_plane = m->target_plane;
    j->target_sat = m->target_sat;
    j->n = present;
    node_log(n, NODE_LOG_INFO, "migration %u: %u chunks to (%u,%u)", j->job_id, present, j->target_plane, j->target_sat);
    pump(n, j);
}

void node_migrate_on_reply(node_t *n, const skymem_msg_t *m)
{
    uint32_t job_id = m->route.request_id >> IDX_BITS, idx = m->route.request_id & ((1u << IDX_BITS) - 1u);
    int k;
    if (m->reply_cc != SKYMEM_SET_CHUNK_CC || (m->reply_kind != SKYMEM_REPLY_ACK && m->reply_kind != SKYMEM_REPLY_NAK))
        return;
    for (k = 0; k < NODE_MAX_JOBS; k++) {
        node_job_t *j = &n->jobs[k];
        node_mchunk_t *c;
        if (!j->active || j->job_id != job_id || idx >= j->n) continue;
        c = &j->chunks[idx];
        if (c->state != MC_IN_FLIGHT) return; /* duplicate or late answer */
        j->in_flight--;
        if (m->reply_kind == SKYMEM_REPLY_ACK) {
            skymem_store_delete(n->store, j->hash, c->chunk_id);
            c->state = MC_DONE;
            j->moved++;
            n->c.migrated_out++;
        } else {
            c->state = MC_FAILED;
            j->failed++;
        }
        pump(n, j);
        return;
    }
}

void node_migrate_tick(node_t *n, uint64_t now_ns)
{
    int k;
    uint32_t i;
    for (k = 0; k < NODE_MAX_JOBS; k++) {
        node_job_t *j = &n->jobs[k];
        if (!j->active) continue;
        for (i = 0; i < j->n; i++) {
            node_mchunk_t *c = &j->chunks[i];
            if (c->state != MC_IN_FLIGHT || c->deadline_ns > now_ns) continue;
            j->in_flight--;
            if (c->tries > NODE_MIGRATE_RETRIES) {
                c->state = MC_FAILED;
                j->failed++;
            } else {
                node_log(n, NODE_LOG_DEBUG, "migration %u: chunk %u timed out, resending", j->job_id, c->chunk_id);
                send_chunk(n, j, i);
            }
        }
        pump(n, j);
    }
}

uint64_t node_migrate_next_deadline(const node_t *n)
{
    uint64_t best = 0;
    int k;
    uint32_t i;
    for (k = 0; k < NODE_MAX_JOBS; k++) {
        const node_job_t *j = &n->jobs[k];
        if (!j->active) continue;
        for (i = 0; i < j->n; i++)
            if (j->chunks[i].state == MC_IN_FLIGHT && (best == 0 || j->chunks[i].deadline_ns < best))
                best = j->chunks[i].deadline_ns;
    }
    return best;
}
