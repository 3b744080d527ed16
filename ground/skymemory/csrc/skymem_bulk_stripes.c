/*
 * skymem_bulk_stripes.c -- coded stripes in a fast-path call, and their chunks' roles (skymem_bulk_stripes.h).
 *
 * A get's stripe is in one of three states: waiting for its data (parity HELD), its parity asked, or resolved
 * (complete -- rebuilt where need be -- or lost). A healthy constellation is asked no parity: a stripe waits for
 * STALL_MIN_S or four round trips after its latest chunk before it asks, since its chunks come from different
 * satellites and one a little behind the others must not cost a parity request.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct mmsghdr, in skymem_bulk_batches.h */
#endif
#include "skymem_bulk_stripes.h"

#include <stdlib.h>
#include <string.h>

#define STALL_MIN_S 0.02
#define STRIPE_PARITY_ASKED 1u
#define STRIPE_RESOLVED     2u /* complete (data all in, or rebuilt) or lost: nothing more waited for */

/* The last data chunk, padded with zeros to a whole chunk in c->tail (the codec takes whole chunks). */
static void fill_tail(const skymem_bulk_block_t *b, bulk_coded_t *c, int sealed)
{
    uint32_t per = bulk_plain_bytes(b, sealed), last = c->l.data - 1, len = bulk_content_len(b, last, sealed);
    memcpy(c->tail, b->buf + (uint64_t)last * per, len);
    memset(c->tail + len, 0, per - len);
}

void bulk_coded_free(bulk_coded_t *c, uint32_t n_blocks, uint8_t *zeros)
{
    for (uint32_t i = 0; c && i < n_blocks; i++) {
        free(c[i].parity); free(c[i].tail); free(c[i].state); free(c[i].arrived); free(c[i].req_of);
        free(c[i].encoder); free(c[i].data_of);
    }
    free(c);
    free(zeros);
}

/* Coded block b's state; 0, or -1 when out of memory. */
static int coded_make(const skymem_bulk_block_t *b, bulk_coded_t *c, int sealed, int for_get)
{
    uint32_t per = bulk_plain_bytes(b, sealed);
    skymem_stripe_layout(b->stripe_k, b->stripe_m, bulk_data_chunks(b, sealed), &c->l); /* checked by check_args */
    c->parity = for_get ? NULL : malloc((uint64_t)c->l.m * per);
    c->tail = malloc(per);
    c->state = for_get ? calloc(c->l.stripes, 1) : NULL;
    c->arrived = for_get ? calloc(c->l.stripes, sizeof *c->arrived) : NULL;
    c->req_of = for_get ? calloc(b->chunk_count, sizeof *c->req_of) : NULL;
    c->encoder = for_get ? NULL : malloc(sizeof *c->encoder);
    c->data_of = malloc((uint64_t)skymem_stripe_wire_chunks(&c->l) * sizeof *c->data_of);
    if (!(c->tail && c->data_of && (for_get ? c->state && c->arrived && c->req_of : c->parity && c->encoder)))
        return -1;
    skymem_stripe_data_indexes(&c->l, c->data_of);
    if (!for_get) {
        skymem_stripe_encoder((int)c->l.k, (int)c->l.m, c->encoder);
        c->encoded = SKYMEM_STRIPE_NO_DATA;
        fill_tail(b, c, sealed);
    }
    return 0;
}

bulk_coded_t *bulk_coded_new(const skymem_bulk_block_t *blocks, uint32_t n_blocks, int sealed, int for_get,
                             uint8_t **zeros)
{
    bulk_coded_t *c = calloc(n_blocks ? n_blocks : 1, sizeof *c);
    uint32_t widest = 1;
    int ok = c != NULL;
    for (uint32_t i = 0; ok && i < n_blocks; i++) {
        if (!bulk_coded(&blocks[i]))
            continue;
        uint32_t per = bulk_plain_bytes(&blocks[i], sealed);
        widest = per > widest ? per : widest;
        ok = coded_make(&blocks[i], &c[i], sealed, for_get) == 0;
    }
    *zeros = ok ? calloc(widest, 1) : NULL;
    if (ok && *zeros)
        return c;
    bulk_coded_free(c, n_blocks, *zeros);
    *zeros = NULL;
    return NULL;
}

/* Stripe s's k + m rows for the codec, data then parity, and their wire ids (SKYMEM_STRIPE_NO_DATA for the zero
 * rows that stand for a short stripe's absent data chunks). A short last data chunk is c->tail. */
static void stripe_rows(const skymem_bulk_block_t *b, const bulk_coded_t *c, const uint8_t *zeros, uint32_t s,
                        int sealed, uint8_t **rows, uint32_t *ids)
{
    uint32_t per = bulk_plain_bytes(b, sealed), r = skymem_stripe_data_in(&c->l, s);
    for (uint32_t i = 0; i < c->l.k; i++) {
        uint32_t d = s * c->l.k + i;
        ids[i] = i < r ? skymem_stripe_member(&c->l, s, i) : SKYMEM_STRIPE_NO_DATA;
        rows[i] = i >= r ? (uint8_t *)zeros
                : bulk_content_len(b, d, sealed) < per ? c->tail : b->buf + (uint64_t)d * per;
    }
    for (uint32_t j = 0; j < c->l.m; j++) {
        ids[c->l.k + j] = skymem_stripe_member(&c->l, s, r + j);
        rows[c->l.k + j] = bulk_parity_at(c, s, j, per);
    }
}

/* A set sends a stripe's parity right after its data, so it is coded while that data is still in the cache, and 25 %
 * of the block's size is never held at once; a resend of an older stripe's parity codes that stripe again. */
void bulk_encode_stripe(const skymem_bulk_block_t *b, bulk_coded_t *c, const uint8_t *zeros, int sealed, uint32_t s)
{
    uint8_t *rows[SKYMEM_STRIPE_MAX_CHUNKS];
    uint32_t ids[SKYMEM_STRIPE_MAX_CHUNKS];
    if (c->encoded == s)
        return;
    stripe_rows(b, c, zeros, s, sealed, rows, ids);
    skymem_stripe_encode_with(c->encoder, bulk_plain_bytes(b, sealed), (const uint8_t *const *)rows, rows + c->l.k);
    c->encoded = s;
}

/* Get: rebuilds stripe s's data chunks that are not in from those that are (at least its data count are OK); they
 * are flagged REBUILT. Returns how many, or -1 (cannot happen with enough chunks in). */
static int rebuild_stripe(skymem_bulk_block_t *b, bulk_coded_t *c, const uint8_t *zeros, uint32_t s, int sealed)
{
    uint8_t *rows[SKYMEM_STRIPE_MAX_CHUNKS], present[SKYMEM_STRIPE_MAX_CHUNKS];
    uint32_t ids[SKYMEM_STRIPE_MAX_CHUNKS], per = bulk_plain_bytes(b, sealed), last = c->l.data - 1, rebuilt = 0;
    stripe_rows(b, c, zeros, s, sealed, rows, ids);
    for (uint32_t i = 0; i < c->l.n; i++)
        present[i] = ids[i] == SKYMEM_STRIPE_NO_DATA || b->status[ids[i]] == SKYMEM_BULK_OK;
    for (uint32_t i = 0; i < c->l.k; i++)
        rebuilt += !present[i];
    if (rebuilt == 0)
        return 0;
    int tail_row = -1;
    for (uint32_t i = 0; i < c->l.k; i++)
        if (rows[i] == c->tail)
            tail_row = (int)i;
    if (tail_row >= 0 && present[tail_row])
        fill_tail(b, c, sealed);
    if (skymem_stripe_decode((int)c->l.k, (int)c->l.m, per, rows, present) != 0)
        return -1;
    for (uint32_t i = 0; i < c->l.k; i++)
        if (!present[i])
            b->status[ids[i]] |= SKYMEM_BULK_REBUILT;
    if (tail_row >= 0 && !present[tail_row])
        memcpy(b->buf + (uint64_t)last * per, c->tail, bulk_content_len(b, last, sealed));
    return (int)rebuilt;
}

/* Get: room for b's parity, made when the first is asked: a healthy get asks none, and 25 % of the blocks' size in
 * fresh memory each call cost it page faults (measured: 2 ms of an 8-block get). 0, or SKYMEM_BULK_E_NOMEM. */
static int parity_room(const skymem_bulk_block_t *b, bulk_coded_t *c, int sealed)
{
    if (c->parity == NULL)
        c->parity = malloc((uint64_t)c->l.stripes * c->l.m * bulk_plain_bytes(b, sealed));
    return c->parity ? 0 : SKYMEM_BULK_E_NOMEM;
}

int bulk_coded_plan(get_run_t *g, bulk_call_t *call)
{
    for (uint32_t i = 0; i < g->n_req; i++) {
        get_req_t *r = &g->reqs[i];
        skymem_bulk_block_t *b = &call->blocks[r->block];
        bulk_coded_t *c = &call->cod[r->block];
        if (!bulk_coded(b))
            continue;
        for (uint32_t k = 0; k < r->count; k++) {
            uint32_t cid = r->first + k * r->stride;
            c->req_of[cid] = i;
            if (c->data_of[cid] != SKYMEM_STRIPE_NO_DATA || b->status[cid] != SKYMEM_BULK_PENDING)
                continue;
            if (call->o->hedge_s == 0) { /* every parity chunk asked with the data */
                if (parity_room(b, c, call->sealed) != 0)
                    return SKYMEM_BULK_E_NOMEM;
                call->o->parity_asked++;
                continue;
            }
            b->status[cid] = SKYMEM_BULK_HELD;
            r->missing--;
        }
    }
    return 0;
}

/* Stripe s of b is complete (in >= its data chunks: any data chunk not in is rebuilt) or lost: nothing more of it
 * is waited for. 0, or SKYMEM_BULK_E_ARG when a decode fails. */
static int stripe_resolve(get_run_t *g, bulk_call_t *call, skymem_bulk_block_t *b, bulk_coded_t *c, uint32_t s,
                          int complete)
{
    uint32_t first = s * c->l.n, members = skymem_stripe_data_in(&c->l, s) + c->l.m;
    for (uint32_t i = 0; i < members; i++) /* no longer waited for: rebuilt, or not needed */
        if (b->status[first + i] == SKYMEM_BULK_PENDING)
            bulk_req_settled(g, &g->reqs[c->req_of[first + i]], b->chunk_bytes);
    if (complete) {
        int rebuilt = rebuild_stripe(b, c, call->zeros, s, call->sealed);
        if (rebuilt < 0)
            return SKYMEM_BULK_E_ARG;
        call->o->rebuilt += (uint64_t)rebuilt;
    }
    for (uint32_t i = 0; i < members; i++) {
        uint8_t *st = &b->status[first + i];
        if (*st == SKYMEM_BULK_PENDING || *st == SKYMEM_BULK_HELD)
            *st = SKYMEM_BULK_UNNEEDED;
    }
    c->state[s] |= STRIPE_RESOLVED;
    return 0;
}

/* Complete once as many of its chunks are in as it has data chunks, lost once more than m failed; otherwise, with
 * ask_parity, its held parity is asked. */
int bulk_stripe_update(get_run_t *g, bulk_call_t *call, uint32_t block, uint32_t s, int ask_parity)
{
    skymem_bulk_block_t *b = &call->blocks[block];
    bulk_coded_t *c = &call->cod[block];
    if (c->state[s] & STRIPE_RESOLVED)
        return 0;
    uint32_t r = skymem_stripe_data_in(&c->l, s), first = s * c->l.n, members = r + c->l.m, in = 0, failed = 0;
    for (uint32_t i = 0; i < members; i++) {
        uint8_t st = b->status[first + i];
        in += st == SKYMEM_BULK_OK;
        failed += st == SKYMEM_BULK_NOT_FOUND || st == SKYMEM_BULK_SEAL_FAILED;
    }
    if (in >= r || failed > c->l.m)
        return stripe_resolve(g, call, b, c, s, in >= r);
    if (ask_parity && !(c->state[s] & STRIPE_PARITY_ASKED)) {
        if (parity_room(b, c, call->sealed) != 0)
            return SKYMEM_BULK_E_NOMEM;
        c->state[s] |= STRIPE_PARITY_ASKED;
        for (uint32_t i = 0; i < members; i++) /* only parity chunks are held */
            if (b->status[first + i] == SKYMEM_BULK_HELD) {
                b->status[first + i] = SKYMEM_BULK_PENDING;
                bulk_req_wanted(g, &g->reqs[c->req_of[first + i]], b->chunk_bytes);
                call->o->parity_asked++;
            }
    }
    return 0;
}

int bulk_hedge(get_run_t *g, bulk_call_t *call, const get_req_t *r)
{
    skymem_bulk_block_t *b = &call->blocks[r->block];
    bulk_coded_t *c = &call->cod[r->block];
    int rc = 0;
    for (uint32_t i = 0; i < r->count && rc == 0; i++) {
        uint32_t cid = r->first + i * r->stride;
        if (b->status[cid] == SKYMEM_BULK_PENDING && c->data_of[cid] != SKYMEM_STRIPE_NO_DATA)
            rc = bulk_stripe_update(g, call, r->block, cid / c->l.n, 1);
    }
    return rc;
}

/* A stripe asked in two waves: its stall counts from its last ask. */
void bulk_stripes_asked(bulk_call_t *call, const get_req_t *r, double t)
{
    bulk_coded_t *c = &call->cod[r->block];
    for (uint32_t k = 0; k < r->count; k++) {
        uint32_t s = (r->first + k * r->stride) / c->l.n;
        if (c->arrived[s] > 0)
            c->arrived[s] = t;
    }
}

/* A data request to a server silent for hedge_s has its stripes' parity asked. Silent, not merely slow to answer
 * this request: a busy satellite answers its requests one after the other, and the later ones wait without it being
 * late. And a stripe some of whose chunks came, then none for a few round trips (at most hedge_s): the rest are on
 * a slow satellite (answering, so never silent) or lost on the way; its parity is asked rather than waited for. */
int bulk_stripes_scan(get_run_t *g, bulk_call_t *call, const double *heard, double t)
{
    const skymem_bulk_opts_t *o = call->o;
    int rc;
    for (uint32_t i = g->low; i < g->next; i++) {
        get_req_t *r = &g->reqs[i];
        if (!r->missing || r->abandoned || !bulk_coded(&call->blocks[r->block]) || t - r->last < o->hedge_s ||
            t - heard[r->server] < o->hedge_s || r->hedged_at == heard[r->server])
            continue;
        r->hedged_at = heard[r->server]; /* once per silence: again only after the server answers something */
        if ((rc = bulk_hedge(g, call, r)) != 0)
            return rc;
    }
    double stall_s = 4 * o->first_reply_s < STALL_MIN_S ? STALL_MIN_S : 4 * o->first_reply_s;
    stall_s = stall_s < o->hedge_s ? stall_s : o->hedge_s;
    for (uint32_t b = 0; b < call->n_blocks; b++) {
        bulk_coded_t *c = &call->cod[b];
        for (uint32_t s = 0; bulk_coded(&call->blocks[b]) && s < c->l.stripes; s++)
            if (c->arrived[s] > 0 && t - c->arrived[s] >= stall_s &&
                !(c->state[s] & (STRIPE_RESOLVED | STRIPE_PARITY_ASKED)) &&
                (rc = bulk_stripe_update(g, call, b, s, 1)) != 0)
                return rc;
    }
    return 0;
}
