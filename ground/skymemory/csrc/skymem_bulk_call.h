/*
 * skymem_bulk_call.h -- one fast-path call, and the side (get or set) that drives it (internal to skymem_bulk*.c).
 *
 * skymem_bulk_get and skymem_bulk_set run the same loop (bulk_run, skymem_bulk.c): send what the window and the
 * pace allow, wait for the socket, drain it, let the side look at what is late, re-ask what is overdue. What a
 * side does differently -- what it sends, how a reply lands, what counts as done -- is the bulk_side_t it gives.
 */
#ifndef SKYMEM_BULK_CALL_H
#define SKYMEM_BULK_CALL_H

#include <stdint.h>

#include "skymem_bulk.h"
#include "skymem_bulk_batches.h"
#include "skymem_bulk_pace.h"
#include "skymem_codec.h"
#include "skymem_seal.h"

/* What every call holds, whichever side drives it. */
typedef struct {
    const skymem_bulk_server_t *servers;
    uint32_t n_servers;
    skymem_bulk_block_t *blocks;
    uint32_t n_blocks;
    skymem_bulk_opts_t *o;
    int sealed;                 /* o->seal set: seal is its cipher context, one per call */
    skymem_seal_ctx_t *seal;
    struct bulk_coded *cod;     /* per block (skymem_bulk_stripes.h); zeroed for an uncoded one */
    uint8_t *zeros;             /* the widest chunk's worth: a short stripe's absent data */
    struct sockaddr_in *addrs;  /* per server */
    bulk_tx_t tx;
    bulk_rx_t rx;
    skymem_msg_t m;             /* the reply being read */
    bulk_pace_t pace;
    int hedging;                /* a get with coded blocks: with hedge_s > 0 the loop wakes for its scans */
    int refused;                /* a satellite refused a request as a whole: the call ends, REFUSED */
} bulk_call_t;

/* A side's hooks; `side` is its own state. A hook returning int gives 0, or a SKYMEM_BULK_E_* that ends the call. */
typedef struct {
    uint8_t reply_cc;                             /* the command whose replies it takes */
    int (*finished)(const void *side);            /* every request answered, or given up on */
    int (*next)(const void *side, uint64_t *bytes); /* a first send waits, and the window has room for its bytes */
    int (*send)(void *side, double t);            /* queues that send (or settles it when nothing is left to ask) */
    int (*reply)(void *side, const uint8_t *pkt, size_t len, const skymem_msg_t *m, double t);
    void (*drained)(void *side);                  /* after each batch of replies; may be NULL */
    int (*tend)(void *side, double t);            /* after the socket is drained; may be NULL */
    int (*resend)(void *side, double t);          /* queues what is overdue */
    int (*result)(const void *side);              /* SKYMEM_BULK_DONE or SKYMEM_BULK_INCOMPLETE */
} bulk_side_t;

/* The loop (skymem_bulk.c): SKYMEM_BULK_DONE, INCOMPLETE, REFUSED, or an error. */
int bulk_run(bulk_call_t *c, const bulk_side_t *side, void *state);

/* Each side on an open call: its own state made, bulk_run, its state freed (skymem_bulk_get.c, skymem_bulk_set.c). */
int bulk_get(bulk_call_t *c);
int bulk_set(bulk_call_t *c);
/* The chunks a set sends: those not OK on entry (a repair sends only what was lost). */
uint64_t bulk_set_total(const skymem_bulk_block_t *blocks, uint32_t n_blocks);

/* A get's requests and what is in flight (skymem_bulk_get.c; the stripes reopen and settle requests too). */
typedef struct {
    get_req_t *reqs;
    uint32_t n_req, next;   /* requests; the next never sent */
    uint32_t low;           /* requests below it are done (or given up on): the scans start there */
    uint32_t open_reqs;     /* sent, with chunks pending, not given up on */
    uint32_t done_reqs;     /* nothing pending, or given up on */
    uint64_t outstanding;   /* chunk bytes asked and not answered */
} get_run_t;

/* One chunk of r is no longer pending (answered, or no longer needed). */
void bulk_req_settled(get_run_t *g, get_req_t *r, uint32_t chunk_bytes);
/* One chunk of r, held until now, is wanted: r is (re)opened and asked at once, not counting a retry. */
void bulk_req_wanted(get_run_t *g, get_req_t *r, uint32_t chunk_bytes);

#endif /* SKYMEM_BULK_CALL_H */
