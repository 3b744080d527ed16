/*
 * skymem_bulk.c -- batched block transfer for the ground (see skymem_bulk.h): the entry points, and the one loop
 * that a get and a set both run.
 *
 * The loop, each pass: send what the window and the pace allow (sendmmsg), wait for the socket (poll, bounded by
 * the pace and by when something may be overdue), drain it (recvmmsg, RX_BATCH datagrams a call) and hand each
 * reply to the side, let the side look at what is late, then re-ask what is overdue. The rest lives by idea:
 *
 *   skymem_bulk_batches.c   what goes on the wire, in batches: a get's request plan, GET_CHUNKS and SET_CHUNK
 *   skymem_bulk_pace.c      the window, the pace, and the waits between passes
 *   skymem_bulk_replies.c   which replies are believed, and the ground's reply windows
 *   skymem_bulk_sealing.c   chunks sealed as they leave and opened where they land
 *   skymem_bulk_stripes.c   coded stripes: parity coded, held, asked and rebuilt from
 *   skymem_bulk_get.c, skymem_bulk_set.c   each side's requests, and how a reply lands
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "skymem_bulk.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "skymem_bulk_call.h"
#include "skymem_bulk_stripes.h"
#include "skymem_crc32c.h"
#include "skymem_wire.h"

uint32_t skymem_bulk_crc32c(const uint8_t *data, size_t len)
{
    return skymem_crc32c(data, len); /* the core's: the CRC32 instruction where the CPU has it */
}

/* A block's chunk count must be the one its layout gives: the wire's chunks for a coded block (data and parity,
 * a stripe on distinct servers), seal.py's for a sealed one, enough and no more for a plain one. */
static int block_ok(const skymem_bulk_block_t *b, uint32_t n_servers_total, int sealed)
{
    if (!b->hash || !b->status || (!b->buf && b->n_bytes) || b->chunk_bytes == 0 ||
        b->chunk_bytes > SKYMEM_MAX_CHUNK_DATA || b->n_servers == 0 ||
        (uint64_t)b->server0 + b->n_servers > n_servers_total)
        return 0;
    if (sealed && b->chunk_bytes <= SKYMEM_SEAL_OVERHEAD)
        return 0;
    if (bulk_coded(b)) {
        skymem_stripe_layout_t l;
        uint32_t d = bulk_data_chunks(b, sealed);
        return d != 0 && skymem_stripe_layout(b->stripe_k, b->stripe_m, d, &l) == 0 &&
               b->chunk_count == skymem_stripe_wire_chunks(&l) && b->n_servers >= l.n;
    }
    if (sealed)
        return b->chunk_count == skymem_seal_chunk_count(b->n_bytes, b->chunk_bytes);
    return !((uint64_t)b->chunk_count * b->chunk_bytes < b->n_bytes ||
             (b->chunk_count > 0 && (uint64_t)(b->chunk_count - 1) * b->chunk_bytes >= b->n_bytes && b->n_bytes > 0));
}

static int check_args(const skymem_bulk_server_t *servers, uint32_t n_servers_total,
                      const skymem_bulk_block_t *blocks, uint32_t n_blocks, const skymem_bulk_opts_t *o)
{
    if (!servers || !blocks || !o || o->fd < 0 || o->rto_s <= 0 || o->deadline_s <= 0 ||
        (o->seal && skymem_seal_keys_check(o->seal) != SKYMEM_SEAL_OK))
        return SKYMEM_BULK_E_ARG;
    for (uint32_t i = 0; i < n_blocks; i++)
        if (!block_ok(&blocks[i], n_servers_total, o->seal != NULL))
            return SKYMEM_BULK_E_ARG;
    for (uint32_t i = 0; o->keyed && i < n_servers_total; i++)
        if (!servers[i].up_key || !servers[i].down_key)
            return SKYMEM_BULK_E_ARG; /* keyed: every server with its keys */
    return 0;
}

/* What every call holds: 0, or SKYMEM_BULK_E_NOMEM (call_close frees what was made either way). tx_slot: room for
 * one datagram sent (a GET_CHUNKS is small, a SET_CHUNK a whole chunk). */
static int call_open(bulk_call_t *c, const skymem_bulk_server_t *servers, uint32_t n_servers,
                     skymem_bulk_block_t *blocks, uint32_t n_blocks, skymem_bulk_opts_t *o, int for_get,
                     size_t tx_slot)
{
    memset(c, 0, sizeof *c);
    c->servers = servers;
    c->n_servers = n_servers;
    c->blocks = blocks;
    c->n_blocks = n_blocks;
    c->o = o;
    c->sealed = o->seal != NULL;
    c->pace.Bps = o->pace_Bps;
    c->cod = bulk_coded_new(blocks, n_blocks, c->sealed, for_get, &c->zeros);
    c->addrs = bulk_addrs(servers, n_servers);
    c->tx.slot = tx_slot;
    c->tx.data = malloc((size_t)TX_BATCH * tx_slot);
    c->seal = c->sealed ? skymem_seal_ctx_new(o->seal) : NULL; /* one cipher context per call */
    if (!c->cod || !c->addrs || !c->tx.data || bulk_rx_init(&c->rx) || (c->sealed && !c->seal))
        return SKYMEM_BULK_E_NOMEM;
    return 0;
}

static void call_close(bulk_call_t *c)
{
    free(c->addrs);
    free(c->tx.data);
    free(c->rx.data);
    skymem_seal_ctx_free(c->seal);
    bulk_coded_free(c->cod, c->n_blocks, c->zeros);
}

/* Reads the socket dry, handing every reply to the command the side sent to the side. 0, or an error. */
static int drain(bulk_call_t *c, const bulk_side_t *side, void *state)
{
    skymem_bulk_opts_t *o = c->o;
    for (;;) {
        int k = bulk_rx_batch(o->fd, &c->rx);
        if (k < 0)
            return SKYMEM_BULK_E_SOCKET;
        if (k == 0)
            return 0;
        double t = bulk_now_s();
        for (int i = 0; i < k; i++) {
            const uint8_t *pkt = c->rx.data + (size_t)i * RX_SLOT;
            size_t len = c->rx.msgs[i].msg_len;
            o->packets_rx++;
            o->bytes_rx += len;
            if (skymem_parse(pkt, len, &c->m) != SKYMEM_OK || c->m.mid != SKYMEM_REPLY_TLM_MID ||
                c->m.reply_cc != side->reply_cc) {
                o->ignored++;
                continue;
            }
            int rc = side->reply(state, pkt, len, &c->m, t);
            if (rc)
                return rc;
        }
        if (side->drained)
            side->drained(state);
        if (k < RX_BATCH)
            return 0;
    }
}

int bulk_run(bulk_call_t *c, const bulk_side_t *side, void *state)
{
    skymem_bulk_opts_t *o = c->o;
    int rc = 0;
    c->pace.start = bulk_now_s();
    while (!side->finished(state) && !c->refused) {
        double t = bulk_now_s(), pace_wait = 0; /* > 0: the next send is held back this long by the pace */
        uint64_t bytes = 0;
        if (t - c->pace.start > o->deadline_s)
            break;
        /* 1. first sends, as the window and the pace allow (always at least one in flight) */
        while (c->tx.n < TX_BATCH && side->next(state, &bytes)) {
            if ((pace_wait = bulk_pace_wait(&c->pace, bytes, t)) > 0)
                break;
            c->pace.sent += bytes;
            if ((rc = side->send(state, t)) != 0)
                return rc;
        }
        int batch_full = c->tx.n == TX_BATCH;
        bulk_tx_send(o->fd, &c->tx, o);
        if (side->finished(state))
            break; /* the last requests had nothing to ask (held parity): no reply to wait for */
        /* 2. wait for replies, 3. drain the socket */
        if (bulk_wait_readable(o->fd, bulk_reply_wait_s(o, batch_full, pace_wait, c->hedging)) < 0 && errno != EINTR)
            return SKYMEM_BULK_E_SOCKET;
        if ((rc = drain(c, side, state)) != 0)
            return rc;
        /* 4. what is late (a coded get's silent servers and stalled stripes), 5. re-ask what is overdue */
        t = bulk_now_s();
        if (side->tend && (rc = side->tend(state, t)) != 0)
            return rc;
        if ((rc = side->resend(state, t)) != 0)
            return rc;
        bulk_tx_send(o->fd, &c->tx, o);
    }
    return c->refused ? SKYMEM_BULK_REFUSED : side->result(state);
}

int skymem_bulk_get(const skymem_bulk_server_t *servers, uint32_t n_servers_total, skymem_bulk_block_t *blocks,
                    uint32_t n_blocks, skymem_bulk_opts_t *o)
{
    int rc = check_args(servers, n_servers_total, blocks, n_blocks, o);
    if (rc)
        return rc;
    if (o->hedge_s < 0)
        return SKYMEM_BULK_E_ARG;
    o->first_reply_s = 0;
    o->auth_seq_used = 0;
    o->auth_failures = o->replayed = o->wrong_source = 0;
    o->seal_failures = o->rebuilt = o->parity_asked = 0;
    bulk_call_t c;
    if ((rc = call_open(&c, servers, n_servers_total, blocks, n_blocks, o, 1, GET_PKT_CAP)) == 0)
        rc = bulk_get(&c);
    call_close(&c);
    return rc;
}

int skymem_bulk_set(const skymem_bulk_server_t *servers, uint32_t n_servers_total, skymem_bulk_block_t *blocks,
                    uint32_t n_blocks, skymem_bulk_opts_t *o)
{
    int rc = check_args(servers, n_servers_total, blocks, n_blocks, o);
    if (rc)
        return rc;
    if (bulk_set_total(blocks, n_blocks) > 0xFFFFFFF0u) /* each chunk sent is a request id of its own */
        return SKYMEM_BULK_E_ARG;
    o->auth_seq_used = 0;
    o->auth_failures = o->replayed = o->wrong_source = 0;
    o->nak_status = 0;
    o->seal_failures = 0;
    bulk_call_t c;
    if ((rc = call_open(&c, servers, n_servers_total, blocks, n_blocks, o, 0, RX_SLOT)) == 0)
        rc = bulk_set(&c);
    call_close(&c);
    return rc;
}
