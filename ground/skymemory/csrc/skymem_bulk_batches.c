/*
 * skymem_bulk_batches.c -- what a fast-path call puts on the wire, in batches (skymem_bulk_batches.h).
 *
 * The packets are built with the flight codec (skymem_codec.h), so both ends agree byte for byte. A get's plan is
 * wave by wave, then block by block, then server by server: with layer-major blocks the first layers of every
 * block are asked first.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "skymem_bulk_batches.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "skymem_auth.h"
#include "skymem_bulk_pace.h"
#include "skymem_bulk_stripes.h"
#include "skymem_crc32c.h"
#include "skymem_wire.h"

static skymem_route_t route_to(const skymem_bulk_server_t *s, uint16_t station, uint32_t rid)
{
    skymem_route_t r;
    memset(&r, 0, sizeof r);
    r.dst_plane = s->plane;
    r.dst_sat = s->sat;
    r.src_plane = SKYMEM_GROUND_PLANE;
    r.src_sat = station;
    r.via_plane = s->via_plane;
    r.via_sat = s->via_sat;
    r.request_id = rid;
    r.ttl = SKYMEM_DEFAULT_TTL;
    return r;
}

struct sockaddr_in *bulk_addrs(const skymem_bulk_server_t *servers, uint32_t n)
{
    struct sockaddr_in *a = calloc(n ? n : 1, sizeof *a);
    if (!a)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        a[i].sin_family = AF_INET;
        a[i].sin_addr.s_addr = htonl(servers[i].ipv4);
        a[i].sin_port = htons(servers[i].port);
    }
    return a;
}

/* ================================================================ batches */

void bulk_tx_queue(bulk_tx_t *tx, size_t len, struct sockaddr_in *to)
{
    int i = tx->n++;
    tx->iov[i].iov_base = tx->data + (size_t)i * tx->slot;
    tx->iov[i].iov_len = len;
    memset(&tx->msgs[i], 0, sizeof tx->msgs[i]);
    tx->msgs[i].msg_hdr.msg_iov = &tx->iov[i];
    tx->msgs[i].msg_hdr.msg_iovlen = 1;
    tx->msgs[i].msg_hdr.msg_name = to;
    tx->msgs[i].msg_hdr.msg_namelen = sizeof *to;
}

void bulk_tx_send(int fd, bulk_tx_t *tx, skymem_bulk_opts_t *o)
{
    int done = 0, n = tx->n;
    tx->n = 0;
    while (done < n) {
        int k = sendmmsg(fd, tx->msgs + done, (unsigned)(n - done), 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            break; /* EAGAIN / ENOBUFS: the retransmission timer covers it */
        }
        done += k;
    }
    o->packets_tx += (uint64_t)done;
}

int bulk_rx_init(bulk_rx_t *rx)
{
    rx->data = malloc((size_t)RX_BATCH * RX_SLOT);
    return rx->data ? 0 : -1;
}

int bulk_rx_batch(int fd, bulk_rx_t *rx)
{
    memset(rx->msgs, 0, sizeof rx->msgs);
    for (int i = 0; i < RX_BATCH; i++) {
        rx->iov[i].iov_base = rx->data + (size_t)i * RX_SLOT;
        rx->iov[i].iov_len = RX_SLOT;
        rx->msgs[i].msg_hdr.msg_iov = &rx->iov[i];
        rx->msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int k = recvmmsg(fd, rx->msgs, RX_BATCH, MSG_DONTWAIT, NULL);
    return k < 0 ? (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1) : k;
}

/* Signs pkt (len bytes, room for the trailer) with the next reserved sequence when the call is keyed. Returns the
 * new length, len when unkeyed, or 0 when the reserved sequences ran out. */
static int sign_if_keyed(skymem_bulk_opts_t *o, const skymem_bulk_server_t *to, uint8_t *pkt, int len, size_t cap)
{
    if (!o->keyed || len <= 0)
        return len;
    if (o->auth_seq_used >= o->auth_seq_count)
        return 0;
    bulk_wait_for_seq(o->auth_seq_first + o->auth_seq_used);
    len = skymem_auth_sign_with(to->up_key, o->auth_key_id, o->auth_seq_first + o->auth_seq_used++,
                                pkt, (size_t)len, cap);
    return len > 0 ? len : 0;
}

/* ================================================================ a get's requests */

static void add_req(get_req_t *out, uint32_t *n, uint32_t block, uint32_t server, uint32_t first, uint32_t count,
                    uint32_t stride)
{
    if (out) {
        get_req_t *r = &out[*n];
        memset(r, 0, sizeof *r);
        r->block = block;
        r->server = server;
        r->first = first;
        r->count = count;
        r->stride = stride;
        r->missing = count;
    }
    (*n)++;
}

/* Block bl's chunk ids [lo, hi) on its servers: per server, spans of up to SKYMEM_MAX_GET_CHUNKS chunk ids a stride
 * apart; a coded block's parity chunks each a request of their own (asked only when needed). */
static void plan_wave(const skymem_bulk_block_t *bl, const struct bulk_coded *c, uint32_t b, uint32_t lo, uint32_t hi,
                      get_req_t *out, uint32_t *n)
{
    skymem_stripe_layout_t l;
    int parity_apart = bulk_coded(bl) && skymem_stripe_layout_wire(bl->stripe_k, bl->stripe_m, bl->chunk_count,
                                                                   &l) == 0;
    const uint32_t *data_of = parity_apart && c ? c->data_of : NULL; /* NULL: the per-chunk form */
#define IS_PARITY(id) \
    (parity_apart && (data_of ? data_of[id] : skymem_stripe_data_index(&l, id)) == SKYMEM_STRIPE_NO_DATA)
    uint32_t stride = bl->n_servers;
    for (uint32_t k = 0; k < stride && lo < hi; k++) {
        uint32_t id = lo + (k + stride - lo % stride) % stride;
        while (id < hi) {
            if (IS_PARITY(id)) {
                add_req(out, n, b, bl->server0 + k, id, 1, stride);
                id += stride;
                continue;
            }
            uint32_t first = id, count = 0;
            while (id < hi && count < SKYMEM_MAX_GET_CHUNKS && !IS_PARITY(id)) {
                count++;
                id += stride;
            }
            add_req(out, n, b, bl->server0 + k, first, count, stride);
        }
    }
#undef IS_PARITY
}

/* With doubling each wave is twice as wide as the one before: a stream's first layers still come first, and its
 * whole prefix takes a few waves of requests rather than one per layer (a request per block per server per wave:
 * one layer a wave asked 22 times as many as a fetch, and streamed 1.3-1.4x slower; BENCHMARKS.md, "Streaming at
 * fetch speed"). */
uint32_t bulk_get_plan(const skymem_bulk_block_t *blocks, const struct bulk_coded *cod, uint32_t n_blocks,
                       uint32_t wave, int doubling, get_req_t *out)
{
    uint32_t max_chunks = 0, n = 0;
    for (uint32_t b = 0; b < n_blocks; b++)
        if (blocks[b].chunk_count > max_chunks)
            max_chunks = blocks[b].chunk_count;
    uint32_t w = wave ? wave : (max_chunks ? max_chunks : 1);
    for (uint32_t lo = 0; lo < max_chunks; lo += w, w = doubling && w < max_chunks ? 2 * w : w) /* waves ... */
        for (uint32_t b = 0; b < n_blocks; b++) {                                           /* ... then blocks */
            uint32_t hi = lo + w < blocks[b].chunk_count ? lo + w : blocks[b].chunk_count;
            plan_wave(&blocks[b], cod ? &cod[b] : NULL, b, lo, hi, out, &n);
        }
    return n;
}

uint32_t skymem_bulk_get_requests(const skymem_bulk_block_t *blocks, uint32_t n_blocks, uint32_t wave_chunks,
                                   int wave_doubling)
{
    if (!blocks)
        return 0;
    bulk_coded_t *cod = calloc(n_blocks ? n_blocks : 1, sizeof *cod); /* only each coded block's chunk table */
    for (uint32_t i = 0; cod && i < n_blocks; i++)
        if (bulk_coded(&blocks[i]) && skymem_stripe_layout_wire(blocks[i].stripe_k, blocks[i].stripe_m,
                                                                blocks[i].chunk_count, &cod[i].l) == 0 &&
            (cod[i].data_of = malloc((uint64_t)blocks[i].chunk_count * sizeof *cod[i].data_of)) != NULL)
            skymem_stripe_data_indexes(&cod[i].l, cod[i].data_of);
    uint32_t n = bulk_get_plan(blocks, cod, n_blocks, wave_chunks, wave_doubling, NULL); /* a NULL table: slow */
    bulk_coded_free(cod, n_blocks, NULL);
    return n;
}

/* ================================================================ packets */

int bulk_get_pkt(uint8_t *pkt, const get_req_t *r, uint32_t rid, const skymem_bulk_block_t *blocks,
                 const skymem_bulk_server_t *servers, skymem_bulk_opts_t *o)
{
    const skymem_bulk_block_t *b = &blocks[r->block];
    uint32_t lo = r->count, hi = 0;
    for (uint32_t k = 0; k < r->count; k++)
        if (b->status[r->first + k * r->stride] == SKYMEM_BULK_PENDING) {
            if (lo == r->count)
                lo = k;
            hi = k;
        }
    if (lo == r->count)
        return 0;
    skymem_route_t route = route_to(&servers[r->server], o->station_id, rid);
    int len = skymem_build_get_chunks(pkt, GET_PKT_CAP, 0, &route, b->hash, r->first + lo * r->stride,
                                      hi - lo + 1, r->stride);
    return len > 0 ? sign_if_keyed(o, &servers[r->server], pkt, len, GET_PKT_CAP) : 0;
}

int bulk_set_pkt(uint8_t *pkt, size_t cap, const skymem_bulk_block_t *b, uint32_t cid, const uint8_t *data,
                 uint32_t len, const skymem_bulk_server_t *to, uint32_t rid, skymem_bulk_opts_t *o)
{
    skymem_chunk_desc_t desc;
    memset(&desc, 0, sizeof desc);
    memcpy(desc.block_hash, b->hash, SKYMEM_BLOCK_HASH_LEN);
    desc.chunk_id = cid;
    desc.chunk_count = b->chunk_count;
    desc.created_ms = b->created_ms;
    desc.crc32c = skymem_crc32c(data, len);
    desc.data_len = (uint16_t)len;
    skymem_route_t route = route_to(to, o->station_id, rid);
    int n = skymem_build_set_chunk(pkt, cap, 0, &route, &desc, data);
    return n > 0 ? sign_if_keyed(o, to, pkt, n, cap) : 0; /* resends too: a sequence never used before */
}
