/*
 * skymem_bulk_set.c -- the set side of the fast path's loop (skymem_bulk_call.h): one SET_CHUNK per chunk not OK
 * on entry, sent in the window and at the pace, sealed as it leaves, resent after rto_s until acknowledged or out
 * of retries.
 *
 * Each chunk is a request id of its own (request_id + its index among the chunks sent), so an ACK names the chunk
 * it acknowledges. A coded block's parity is coded a stripe at a time, just before the stripe's first parity
 * chunk leaves (skymem_bulk_stripes.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct mmsghdr, in skymem_bulk_batches.h */
#endif
#include <stdlib.h>

#include "skymem_bulk_call.h"
#include "skymem_bulk_replies.h"
#include "skymem_bulk_sealing.h"
#include "skymem_bulk_stripes.h"
#include "skymem_wire.h"

typedef struct {
    uint32_t block, chunk;
} chunk_ref_t;

typedef struct {
    bulk_call_t *call;
    chunk_ref_t *refs;      /* the chunks to send, in the order they leave */
    double *last;           /* per chunk, its last send */
    uint32_t *tries;        /* per chunk, its resends (max_retries may exceed 255) */
    uint8_t *scratch;       /* sealed: the chunk being sent, sealed (stays in cache) */
    uint64_t total, next, acked, failed;
    uint64_t low;           /* chunks below it are answered: the resend scan starts there */
    uint64_t outstanding;   /* chunk bytes sent and not acknowledged */
} set_t;

uint64_t bulk_set_total(const skymem_bulk_block_t *blocks, uint32_t n_blocks)
{
    uint64_t total = 0;
    for (uint32_t b = 0; b < n_blocks; b++)
        for (uint32_t c = 0; c < blocks[b].chunk_count; c++)
            total += blocks[b].status[c] != SKYMEM_BULK_OK;
    return total;
}

/* Queues the SET_CHUNK of chunk gi: a parity chunk's stripe coded first, the chunk sealed as it leaves. 0, or
 * SKYMEM_BULK_E_CRYPTO, or SKYMEM_BULK_E_ARG (it does not build, or the reserved sequences ran out). */
static int queue_set(set_t *s, uint64_t gi)
{
    bulk_call_t *c = s->call;
    const skymem_bulk_block_t *b = &c->blocks[s->refs[gi].block];
    bulk_coded_t *cod = &c->cod[s->refs[gi].block];
    uint32_t cid = s->refs[gi].chunk, plain = 0;
    if (bulk_coded(b) && cod->data_of[cid] == SKYMEM_STRIPE_NO_DATA)
        bulk_encode_stripe(b, cod, c->zeros, c->sealed, cid / cod->l.n);
    const uint8_t *data = bulk_content_at(b, cod, cid, c->sealed, &plain);
    uint32_t len = plain + (c->sealed ? SKYMEM_SEAL_OVERHEAD : 0u);
    if (c->seal) {
        if (bulk_seal_send(c->seal, b, cid, data, plain, s->scratch) != 0)
            return SKYMEM_BULK_E_CRYPTO;
        data = s->scratch;
    }
    uint32_t srv = b->server0 + cid % b->n_servers;
    int n = bulk_set_pkt(bulk_tx_slot(&c->tx), c->tx.slot, b, cid, data, len, &c->servers[srv],
                         c->o->request_id + (uint32_t)gi, c->o);
    if (n <= 0)
        return SKYMEM_BULK_E_ARG;
    bulk_tx_queue(&c->tx, (size_t)n, &c->addrs[srv]);
    return 0;
}

static int set_finished(const void *side)
{
    const set_t *s = side;
    return s->acked + s->failed >= s->total;
}

static int set_next(const void *side, uint64_t *bytes)
{
    const set_t *s = side;
    if (s->next >= s->total)
        return 0;
    *bytes = s->call->blocks[s->refs[s->next].block].chunk_bytes;
    return !bulk_window_full(s->call->o, s->outstanding > 0, s->outstanding, *bytes);
}

static int set_send(void *side, double t)
{
    set_t *s = side;
    int rc = queue_set(s, s->next);
    if (rc)
        return rc;
    s->last[s->next] = t;
    s->outstanding += s->call->blocks[s->refs[s->next].block].chunk_bytes;
    s->next++;
    return 0;
}

/* One SET_CHUNK reply: an ACK from the satellite asked, for a chunk still waiting, acknowledges it; a NAK other
 * than BUSY refuses the call. */
static int set_reply(void *side, const uint8_t *pkt, size_t len, const skymem_msg_t *m, double t)
{
    set_t *s = side;
    bulk_call_t *c = s->call;
    skymem_bulk_opts_t *o = c->o;
    (void)t;
    uint64_t gi = (uint32_t)(m->route.request_id - o->request_id);
    if (gi >= s->next) {
        o->ignored++;
        return 0;
    }
    skymem_bulk_block_t *b = &c->blocks[s->refs[gi].block];
    if (m->reply_chunk_id != s->refs[gi].chunk || b->status[s->refs[gi].chunk] != SKYMEM_BULK_PENDING) {
        o->ignored++;
        return 0;
    }
    const skymem_bulk_server_t *asked = &c->servers[b->server0 + s->refs[gi].chunk % b->n_servers];
    if (!bulk_from_server(m, asked, o) || !bulk_signed_after_floor(o, m, asked, pkt, len))
        return 0;
    if (!bulk_reply_authentic(o, bulk_down_key(m, asked, c->servers, c->n_servers), pkt, len))
        return 0; /* a forged ACK acknowledges nothing: resent after rto */
    if (m->reply_kind == SKYMEM_REPLY_NAK) {
        if (m->reply_status == SKYMEM_NAK_BUSY)
            return 0; /* resent after rto */
        o->nak_status = m->reply_status;
        c->refused = 1;
        return 0;
    }
    if (m->reply_kind != SKYMEM_REPLY_ACK) {
        o->ignored++;
        return 0;
    }
    b->status[s->refs[gi].chunk] = SKYMEM_BULK_OK;
    s->outstanding -= b->chunk_bytes;
    s->acked++;
    return 0;
}

/* Resends chunks unacknowledged for rto_s; one out of retries is given up on (NOT_FOUND: never acknowledged). */
static int set_resend(void *side, double t)
{
    set_t *s = side;
    skymem_bulk_block_t *blocks = s->call->blocks;
    int rc;
    while (s->low < s->next && blocks[s->refs[s->low].block].status[s->refs[s->low].chunk] != SKYMEM_BULK_PENDING)
        s->low++;
    for (uint64_t gi = s->low; gi < s->next && s->call->tx.n < TX_BATCH; gi++) {
        skymem_bulk_block_t *b = &blocks[s->refs[gi].block];
        if (b->status[s->refs[gi].chunk] != SKYMEM_BULK_PENDING || t - s->last[gi] < s->call->o->rto_s)
            continue;
        if (s->tries[gi] >= s->call->o->max_retries) {
            b->status[s->refs[gi].chunk] = SKYMEM_BULK_NOT_FOUND;
            s->outstanding -= b->chunk_bytes;
            s->failed++;
            continue;
        }
        s->tries[gi]++;
        s->last[gi] = t;
        s->call->o->retransmits++;
        if ((rc = queue_set(s, gi)) != 0)
            return rc;
    }
    return 0;
}

static int set_result(const void *side)
{
    const set_t *s = side;
    return s->acked == s->total ? SKYMEM_BULK_DONE : SKYMEM_BULK_INCOMPLETE;
}

static const bulk_side_t set_side = {
    SKYMEM_SET_CHUNK_CC, set_finished, set_next, set_send, set_reply, NULL, NULL, set_resend, set_result,
};

int bulk_set(bulk_call_t *c)
{
    set_t s = {0};
    int rc = SKYMEM_BULK_E_NOMEM;
    s.call = c;
    s.total = bulk_set_total(c->blocks, c->n_blocks); /* at most 0xFFFFFFF0: checked by skymem_bulk_set */
    s.refs = calloc(s.total ? s.total : 1, sizeof *s.refs);
    s.last = calloc(s.total ? s.total : 1, sizeof *s.last);
    s.tries = calloc(s.total ? s.total : 1, sizeof *s.tries);
    s.scratch = c->sealed ? malloc(RX_SLOT) : NULL;
    if (s.refs && s.last && s.tries && (!c->sealed || s.scratch)) {
        uint64_t g = 0;
        for (uint32_t b = 0; b < c->n_blocks; b++)
            for (uint32_t k = 0; k < c->blocks[b].chunk_count; k++)
                if (c->blocks[b].status[k] != SKYMEM_BULK_OK) {
                    s.refs[g].block = b;
                    s.refs[g++].chunk = k;
                }
        rc = bulk_run(c, &set_side, &s); /* a chunk's send waits for the bytes before it to have had time */
    }
    free(s.refs);
    free(s.last);
    free(s.tries);
    free(s.scratch);
    return rc;
}
