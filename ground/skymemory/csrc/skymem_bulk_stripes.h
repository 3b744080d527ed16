/*
 * skymem_bulk_stripes.h -- coded stripes in a fast-path call, and their chunks' roles (internal to skymem_bulk*.c;
 * the code and the layout are skymem_stripe.h's).
 *
 * A coded block's chunks on the wire are, stripe by stripe, its data chunks then its parity chunks. A set codes a
 * stripe's parity just before it sends it. A get holds the parity back, asks it only for a stripe that needs it (a
 * data chunk refused or failing its seal, a satellite silent for hedge_s, a stripe stalled), and ends a stripe as
 * soon as it has as many chunks in as it has data chunks, rebuilding what is missing.
 */
#ifndef SKYMEM_BULK_STRIPES_H
#define SKYMEM_BULK_STRIPES_H

#include <stdint.h>

#include "skymem_bulk.h"
#include "skymem_bulk_call.h"
#include "skymem_bulk_sealing.h"
#include "skymem_stripe.h"

/* A coded block's layout, and what a call keeps for it (zeroed for an uncoded block). */
typedef struct bulk_coded {
    skymem_stripe_layout_t l;
    uint8_t *parity;  /* get: stripes * m chunks, where its parity lands (made when first asked); set: one stripe's */
    uint8_t *tail;    /* the last data chunk padded to a whole chunk, when it is short */
    uint8_t *state;   /* get: per stripe, STRIPE_* */
    double *arrived;  /* get: per stripe, when its latest chunk came (0: none yet) */
    uint32_t *req_of; /* get: per chunk on the wire, the request that asks it */
    uint32_t *data_of; /* per chunk on the wire, its data index (SKYMEM_STRIPE_NO_DATA: parity), made once */
    skymem_stripe_encoder_t *encoder; /* set: ISA-L's tables, made once for the block */
    uint32_t encoded; /* set: the stripe whose parity is in parity (SKYMEM_STRIPE_NO_DATA: none yet) */
} bulk_coded_t;

static inline int bulk_coded(const skymem_bulk_block_t *b) { return b->stripe_m > 0; }

/* Data chunks of b: its content in chunks of plain bytes (at least one; 0 when that does not fit 32 bits). */
static inline uint32_t bulk_data_chunks(const skymem_bulk_block_t *b, int sealed)
{
    uint64_t per = bulk_plain_bytes(b, sealed), n = b->n_bytes / per + (b->n_bytes % per != 0);
    return n == 0 ? 1u : n > UINT32_MAX ? 0u : (uint32_t)n;
}

/* Where parity chunk j of stripe s is: a get keeps every stripe's, a set only the one it is sending. */
static inline uint8_t *bulk_parity_at(const bulk_coded_t *c, uint32_t s, uint32_t j, uint32_t per)
{
    return c->parity == NULL ? NULL : c->parity + ((c->encoder ? 0 : (uint64_t)s * c->l.m) + j) * per;
}

/* Where wire chunk cid's content is (set: read from; get: lands), and its length. */
static inline uint8_t *bulk_content_at(const skymem_bulk_block_t *b, const bulk_coded_t *c, uint32_t cid, int sealed,
                                       uint32_t *len)
{
    uint32_t per = bulk_plain_bytes(b, sealed), d = bulk_coded(b) ? c->data_of[cid] : cid;
    if (d != SKYMEM_STRIPE_NO_DATA) {
        *len = bulk_content_len(b, d, sealed);
        return b->buf + (uint64_t)d * per;
    }
    uint32_t s = cid / c->l.n, j = skymem_stripe_role(&c->l, cid) - skymem_stripe_data_in(&c->l, s);
    *len = per;
    return bulk_parity_at(c, s, j, per);
}

/* The calls' per-block state: NULL when out of memory. Coded blocks get their parity room (set), tail and (get)
 * their stripe states and chunk -> request map; *zeros (the widest chunk's worth) stands for absent data. */
bulk_coded_t *bulk_coded_new(const skymem_bulk_block_t *blocks, uint32_t n_blocks, int sealed, int for_get,
                             uint8_t **zeros);
void bulk_coded_free(bulk_coded_t *c, uint32_t n_blocks, uint8_t *zeros);

/* Set: stripe s's parity, coded into c->parity unless it is there already. */
void bulk_encode_stripe(const skymem_bulk_block_t *b, bulk_coded_t *c, const uint8_t *zeros, int sealed, uint32_t s);

/* Get: which request asks each chunk, and (hedge_s > 0) every parity chunk HELD until needed. 0, or E_NOMEM. */
int bulk_coded_plan(get_run_t *g, bulk_call_t *call);
/* Get: block's stripe s after one of its chunks was answered (ask_parity: not with its data). 0, or an error. */
int bulk_stripe_update(get_run_t *g, bulk_call_t *call, uint32_t block, uint32_t s, int ask_parity);
/* Get: request r's pending data chunks waited too long: their stripes' parity is asked. 0, or an error. */
int bulk_hedge(get_run_t *g, bulk_call_t *call, const get_req_t *r);
/* Get: request r (of a coded block) just left: the stall of a stripe already answered counts from now. */
void bulk_stripes_asked(bulk_call_t *call, const get_req_t *r, double t);
/* Get, every SCAN_EVERY_S: requests to silent servers, and stalled stripes, have their parity asked. */
int bulk_stripes_scan(get_run_t *g, bulk_call_t *call, const double *heard, double t);

#define SCAN_EVERY_S 0.002 /* how often a get looks for silent satellites and stalled stripes */

#endif /* SKYMEM_BULK_STRIPES_H */
