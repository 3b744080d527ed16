/*
 * skymem_bulk_get.c -- the get side of the fast path's loop (skymem_bulk_call.h): GET_CHUNKS requests planned
 * once and sent in the window and at the pace, each reply landed in its block (sealed: opened there), a streamed
 * reader told how far each block's prefix has come.
 *
 * A request is open from its first send until nothing of it is pending; it is asked again (only its pending
 * span) after rto_s without progress, at most max_retries times, then given up on. A coded block's parity
 * requests are HELD (no chunk to ask) until their stripe needs them (skymem_bulk_stripes.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct mmsghdr, in skymem_bulk_batches.h */
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "skymem_bulk_call.h"
#include "skymem_bulk_replies.h"
#include "skymem_bulk_sealing.h"
#include "skymem_bulk_stripes.h"
#include "skymem_wire.h"

typedef struct {
    bulk_call_t *call;
    get_run_t g;
    double *heard;    /* per server, its last reply (its silence counts from the first request it was sent) */
    double last_scan; /* of the stripes (bulk_stripes_scan), seconds since the loop began */
    uint32_t rung;    /* the reader's want last rung for (ring_reader) */
} get_t;

void bulk_req_settled(get_run_t *g, get_req_t *r, uint32_t chunk_bytes)
{
    r->missing--;
    if (!r->sent || r->abandoned)
        return; /* not sent yet (counted when it leaves), or accounted for when given up on */
    g->outstanding -= chunk_bytes;
    if (r->missing == 0) {
        g->done_reqs++;
        g->open_reqs--;
    }
}

void bulk_req_wanted(get_run_t *g, get_req_t *r, uint32_t chunk_bytes)
{
    r->missing++;
    if ((uint32_t)(r - g->reqs) < g->low)
        g->low = (uint32_t)(r - g->reqs);
    if (!r->sent)
        return; /* it leaves in its turn */
    if (r->abandoned || r->missing == 1) { /* given up on, or done: open again */
        g->done_reqs--;
        g->open_reqs++;
    }
    if (r->abandoned) {
        r->abandoned = 0;
        r->retries = 0;
        g->outstanding += (uint64_t)r->missing * chunk_bytes;
    } else {
        g->outstanding += chunk_bytes;
    }
    r->now = 1;
}

/* ================================================================ the streamed reader */

/* Moves b's prefix past the chunks in (coded: data chunks, in or rebuilt). NOT_FOUND, SEAL_FAILED stop it. */
static void advance_prefix(skymem_bulk_block_t *b, const bulk_coded_t *c)
{
    if (!b->prefix)
        return; /* not streamed: no one reads it */
    uint32_t p = *b->prefix;
    if (bulk_coded(b)) {
        for (uint8_t st; p < c->l.data; p++)
            if ((st = b->status[skymem_stripe_wire_id(&c->l, p)]) != SKYMEM_BULK_OK && !(st & SKYMEM_BULK_REBUILT))
                break;
    } else {
        while (p < b->chunk_count && b->status[p] == SKYMEM_BULK_OK)
            p++;
    }
    __atomic_store_n(b->prefix, p, __ATOMIC_RELEASE);
}

void skymem_bulk_want(uint32_t *want, uint32_t chunks)
{
    __atomic_store_n(want, chunks, __ATOMIC_SEQ_CST);
}

/* Rings the reader's eventfd once every block's prefix has reached what it wants (opts.progress_want), once per want.
 * The fence pairs with skymem_bulk_want's store: the prefixes written before it are seen by a reader that arms after
 * it, or this sees the reader's new want. Each batch of replies: a busy socket keeps the drain going for long. */
static void ring_reader(void *side)
{
    get_t *gs = side;
    const skymem_bulk_opts_t *o = gs->call->o;
    if (!o->progress_want)
        return;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint32_t want = __atomic_load_n(o->progress_want, __ATOMIC_RELAXED);
    if (want == 0 || want == gs->rung)
        return;
    for (uint32_t b = 0; b < gs->call->n_blocks; b++)
        if (!gs->call->blocks[b].prefix || __atomic_load_n(gs->call->blocks[b].prefix, __ATOMIC_RELAXED) < want)
            return;
    uint64_t one = 1;
    if (write(o->progress_fd, &one, sizeof one) == (ssize_t)sizeof one || errno == EAGAIN)
        gs->rung = want; /* EAGAIN: the counter is full, so the reader is woken anyway */
}

/* ================================================================ sending */

/* Queues the GET_CHUNKS of request i (its pending span); 0 when it has nothing to ask. */
static int queue_get(get_t *gs, uint32_t i)
{
    bulk_call_t *c = gs->call;
    const get_req_t *r = &gs->g.reqs[i];
    int len = bulk_get_pkt(bulk_tx_slot(&c->tx), r, c->o->request_id + i, c->blocks, c->servers, c->o);
    if (len == 0)
        return 0;
    bulk_tx_queue(&c->tx, (size_t)len, &c->addrs[r->server]);
    return 1;
}

static int get_finished(const void *side)
{
    const get_t *gs = side;
    return gs->g.done_reqs >= gs->g.n_req;
}

static int get_next(const void *side, uint64_t *bytes)
{
    const get_t *gs = side;
    if (gs->g.next >= gs->g.n_req)
        return 0;
    const get_req_t *r = &gs->g.reqs[gs->g.next];
    *bytes = (uint64_t)r->missing * gs->call->blocks[r->block].chunk_bytes;
    return !bulk_window_full(gs->call->o, gs->g.open_reqs > 0, gs->g.outstanding, *bytes);
}

static int get_send(void *side, double t)
{
    get_t *gs = side;
    get_req_t *r = &gs->g.reqs[gs->g.next];
    uint64_t bytes = (uint64_t)r->missing * gs->call->blocks[r->block].chunk_bytes;
    r->sent = 1;
    r->last = t;
    if (gs->heard[r->server] == 0)
        gs->heard[r->server] = t;
    if (!queue_get(gs, gs->g.next)) {
        r->missing = 0; /* nothing pending: held parity, or every chunk of it already settled */
        gs->g.done_reqs++;
        gs->g.next++;
        return 0;
    }
    gs->g.outstanding += bytes;
    gs->g.open_reqs++;
    if (bulk_coded(&gs->call->blocks[r->block]))
        bulk_stripes_asked(gs->call, r, t);
    gs->g.next++;
    return 0;
}

/* Re-asks overdue requests (only their missing span), and at once reopened ones; gives up on those out of retries
 * (a coded block's then have their stripes' parity asked). */
static int get_resend(void *side, double t)
{
    get_t *gs = side;
    get_run_t *g = &gs->g;
    const skymem_bulk_opts_t *o = gs->call->o;
    int rc;
    while (g->low < g->next && (!g->reqs[g->low].missing || g->reqs[g->low].abandoned))
        g->low++; /* requests done for now (bulk_req_wanted moves it back for one it opens again) */
    for (uint32_t i = g->low; i < g->next && gs->call->tx.n < TX_BATCH; i++) {
        get_req_t *r = &g->reqs[i];
        if (!r->missing || r->abandoned || (!r->now && t - r->last < o->rto_s))
            continue;
        if (!r->now && r->retries >= o->max_retries) {
            r->abandoned = 1;
            g->done_reqs++;
            g->open_reqs--;
            g->outstanding -= (uint64_t)r->missing * gs->call->blocks[r->block].chunk_bytes;
            if (bulk_coded(&gs->call->blocks[r->block]) && (rc = bulk_hedge(g, gs->call, r)) != 0)
                return rc;
            continue;
        }
        if (!queue_get(gs, i))
            continue;
        if (r->now) {
            r->now = 0;
        } else {
            r->retries++;
            gs->call->o->retransmits++;
        }
        r->last = t;
    }
    return 0;
}

/* ================================================================ replies */

/* A chunk's DATA or NOT_FOUND reply, checked and landed: 1 when the chunk is answered, 0 when the reply counts for
 * nothing (counted why), or SKYMEM_BULK_E_CRYPTO. */
static int land(get_t *gs, skymem_bulk_block_t *b, const bulk_coded_t *c, uint32_t cid, const skymem_msg_t *m,
                const uint8_t *pkt, size_t len, const skymem_mac_key_t *down)
{
    bulk_call_t *call = gs->call;
    skymem_bulk_opts_t *o = call->o;
    if (m->reply_kind == SKYMEM_REPLY_NAK) { /* NOT_FOUND: a refusal has ended the call already */
        if (!bulk_reply_authentic(o, down, pkt, len))
            return 0;
        b->status[cid] = SKYMEM_BULK_NOT_FOUND;
        return 1;
    }
    if (m->reply_kind != SKYMEM_REPLY_DATA) {
        o->ignored++;
        return 0;
    }
    uint32_t content = 0;
    uint8_t *dst = bulk_content_at(b, c, cid, call->sealed, &content);
    uint32_t want = content + (call->sealed ? SKYMEM_SEAL_OVERHEAD : 0u);
    if (m->desc.chunk_id != cid || m->desc.data_len != want || m->desc.chunk_count != b->chunk_count) {
        o->ignored++;
        return 0;
    }
    if (call->seal) {
        int rc = bulk_open_reply(call->seal, o, b, cid, m, pkt, len, down, want, dst);
        if (rc != 1)
            return rc;
    } else {
        if (!bulk_data_reply_ok(o, down, pkt, len, m, want))
            return 0; /* as if lost: asked again after rto */
        memcpy(dst, m->data, want);
        b->status[cid] = SKYMEM_BULK_OK;
    }
    if (b->chunk_crcs)
        b->chunk_crcs[cid] = m->desc.crc32c;
    return 1;
}

/* Chunk cid of request r is answered (at t): its request, its server's silence, its stripe and its block's prefix
 * move on. 0, or an error of its stripe. */
static int answered(get_t *gs, get_req_t *r, uint32_t cid, double t)
{
    bulk_call_t *call = gs->call;
    skymem_bulk_block_t *b = &call->blocks[r->block];
    bulk_coded_t *c = &call->cod[r->block];
    int rc;
    if (call->o->first_reply_s == 0)
        call->o->first_reply_s = t - call->pace.start;
    r->last = gs->heard[r->server] = t;
    bulk_req_settled(&gs->g, r, b->chunk_bytes);
    if (bulk_coded(b)) {
        c->arrived[cid / c->l.n] = t;
        if ((rc = bulk_stripe_update(&gs->g, call, r->block, cid / c->l.n, b->status[cid] != SKYMEM_BULK_OK)) != 0)
            return rc;
    }
    if (bulk_coded(b) || (b->prefix && *b->prefix == cid))
        advance_prefix(b, c);
    return 0;
}

/* One GET_CHUNKS reply: answers a request it names only from the satellite asked, about a chunk that request asks
 * and still waits for. */
static int get_reply(void *side, const uint8_t *pkt, size_t len, const skymem_msg_t *m, double t)
{
    get_t *gs = side;
    bulk_call_t *call = gs->call;
    skymem_bulk_opts_t *o = call->o;
    uint32_t ri = m->route.request_id - o->request_id;
    if (ri >= gs->g.next) {
        o->ignored++;
        return 0;
    }
    get_req_t *r = &gs->g.reqs[ri];
    skymem_bulk_block_t *b = &call->blocks[r->block];
    const skymem_bulk_server_t *asked = &call->servers[r->server];
    if (!bulk_from_server(m, asked, o) || !bulk_signed_after_floor(o, m, asked, pkt, len))
        return 0;
    const skymem_mac_key_t *down = bulk_down_key(m, asked, call->servers, call->n_servers);
    if (m->reply_kind == SKYMEM_REPLY_NAK && m->reply_status != SKYMEM_NAK_NOT_FOUND) {
        if (bulk_reply_authentic(o, down, pkt, len))
            call->refused = 1;
        return 0;
    }
    uint32_t cid = m->reply_chunk_id;
    if (cid < r->first || (cid - r->first) % r->stride || (cid - r->first) / r->stride >= r->count ||
        !m->has_block_hash || memcmp(m->block_hash, b->hash, SKYMEM_BLOCK_HASH_LEN) != 0 ||
        b->status[cid] != SKYMEM_BULK_PENDING) { /* not its chunk; or a duplicate, or no longer needed */
        o->ignored++;
        return 0;
    }
    int rc = land(gs, b, &call->cod[r->block], cid, m, pkt, len, down);
    return rc == 1 ? answered(gs, r, cid, t) : rc;
}

static int get_tend(void *side, double t)
{
    get_t *gs = side;
    double since = t - gs->call->pace.start;
    if (!gs->call->hedging || gs->call->o->hedge_s <= 0 || since - gs->last_scan < SCAN_EVERY_S)
        return 0; /* every few ms is enough */
    gs->last_scan = since;
    return bulk_stripes_scan(&gs->g, gs->call, gs->heard, t);
}

/* Given-up requests count as done: a chunk still pending makes the call incomplete. */
static int get_result(const void *side)
{
    const get_t *gs = side;
    if (gs->g.done_reqs != gs->g.n_req)
        return SKYMEM_BULK_INCOMPLETE;
    for (uint32_t b = 0; b < gs->call->n_blocks; b++)
        for (uint32_t c = 0; c < gs->call->blocks[b].chunk_count; c++)
            if (gs->call->blocks[b].status[c] == SKYMEM_BULK_PENDING)
                return SKYMEM_BULK_INCOMPLETE;
    return SKYMEM_BULK_DONE;
}

static const bulk_side_t get_side = {
    SKYMEM_GET_CHUNKS_CC, get_finished, get_next, get_send, get_reply, ring_reader, get_tend, get_resend, get_result,
};

/* The requests planned, a coded block's parity held, the prefixes and the pace's free first wave set. */
static int get_open(get_t *gs, bulk_call_t *c)
{
    memset(gs, 0, sizeof *gs);
    gs->call = c;
    gs->g.n_req = bulk_get_plan(c->blocks, c->cod, c->n_blocks, c->o->wave_chunks, c->o->wave_doubling, NULL);
    gs->g.reqs = calloc(gs->g.n_req ? gs->g.n_req : 1, sizeof *gs->g.reqs);
    gs->heard = calloc(c->n_servers ? c->n_servers : 1, sizeof *gs->heard);
    if (!gs->g.reqs || !gs->heard)
        return SKYMEM_BULK_E_NOMEM;
    bulk_get_plan(c->blocks, c->cod, c->n_blocks, c->o->wave_chunks, c->o->wave_doubling, gs->g.reqs);
    int rc = bulk_coded_plan(&gs->g, c);
    if (rc)
        return rc;
    c->pace.own = 1; /* the first wave is asked at once; with pacing the rest follows at pace_Bps */
    for (uint32_t b = 0; b < c->n_blocks; b++) {
        const skymem_bulk_block_t *bl = &c->blocks[b];
        c->hedging |= bulk_coded(bl);
        advance_prefix(&c->blocks[b], &c->cod[b]);
        uint32_t w = c->o->wave_chunks && c->o->wave_chunks < bl->chunk_count ? c->o->wave_chunks : bl->chunk_count;
        c->pace.free += (uint64_t)w * bl->chunk_bytes;
    }
    return 0;
}

int bulk_get(bulk_call_t *c)
{
    get_t gs;
    int rc = get_open(&gs, c);
    if (rc == 0)
        rc = bulk_run(c, &get_side, &gs);
    free(gs.g.reqs);
    free(gs.heard);
    return rc;
}
