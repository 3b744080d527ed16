/*
 * skymem_bulk.c -- batched block transfer for the ground (see skymem_bulk.h).
 *
 * One loop per call: send what the window allows (sendmmsg), wait for the
 * socket (poll, bounded by the next retransmission time), drain it
 * (recvmmsg, RX_BATCH datagrams per call), check every reply and copy its
 * data into place (sealed: open it there), then re-ask for what is overdue.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "skymem_bulk.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "skymem_auth.h"
#include "skymem_sat.h"
#include "skymem_codec.h"
#include "skymem_stripe.h"
#include "skymem_crc32c.h"
#include "skymem_wire.h"

#define RX_BATCH 64
#define TX_BATCH 64
#define RX_SLOT 65536
#define GET_PKT_CAP 128 /* a GET_CHUNKS with its authentication trailer: 8 + 20 + 44 + 44 bytes */

uint32_t skymem_bulk_crc32c(const uint8_t *data, size_t len)
{
    return skymem_crc32c(data, len); /* the core's: the CRC32 instruction where the CPU has it */
}

/* ================================================================ reply window */

struct skymem_reply_window {
    char busy;          /* spin lock: the core's windows are not thread-safe */
    uint32_t key_id;    /* the ground key the replies must name */
    skymem_auth_t ring; /* no keys (each check is given its key): only the windows, per satellite */
};

uint64_t skymem_reply_window_floor(uint64_t start_us)
{
    uint64_t start = skymem_auth_seq_at(start_us), skew = SKYMEM_SAT_SEQ_AHEAD_US / SKYMEM_AUTH_SEQ_US;
    return start_us == 0 || start <= skew ? 0 : start - skew;
}

skymem_reply_window_t *skymem_reply_window_new(uint32_t key_id, uint64_t start_us)
{
    skymem_reply_window_t *w = calloc(1, sizeof *w); /* zero pages: the bitmaps cost only what is used */
    if (!w)
        return NULL;
    skymem_auth_init(&w->ring, skymem_reply_window_floor(start_us)); /* the core refuses seq <= floor */
    w->key_id = key_id;
    return w;
}

void skymem_reply_window_free(skymem_reply_window_t *w) { free(w); }

int skymem_reply_window_check(skymem_reply_window_t *w, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len,
                              size_t crc_off, size_t crc_len, uint32_t *crc)
{
    if (w == NULL || pkt == NULL || len < 2 || skymem_get_u16(pkt) != SKYMEM_REPLY_TLM_MID)
        return SKYMEM_AUTH_E_NO_TRAILER; /* a signed command sent to the ground answers nothing */
    while (__atomic_test_and_set(&w->busy, __ATOMIC_ACQUIRE))
        ;
    int rc = skymem_auth_verify_with(&w->ring, k, w->key_id, pkt, len, crc_off, crc_len, crc);
    __atomic_clear(&w->busy, __ATOMIC_RELEASE);
    return rc;
}

uint64_t skymem_reply_window_top(skymem_reply_window_t *w, uint16_t plane, uint16_t sat)
{
    uint64_t top = 0;
    if (w == NULL)
        return 0;
    while (__atomic_test_and_set(&w->busy, __ATOMIC_ACQUIRE))
        ;
    for (uint32_t i = 0; i < SKYMEM_AUTH_SOURCES; i++) {
        const skymem_replay_t *r = &w->ring.windows[i];
        if (r->used && r->key_id == w->key_id && r->src_plane == plane && r->src_sat == sat) {
            top = r->top;
            break;
        }
    }
    if (w->ring.floor > top) /* none yet, or recycled: what the ring refuses anyway */
        top = w->ring.floor;
    __atomic_clear(&w->busy, __ATOMIC_RELEASE);
    return top;
}

/* A reply from the satellite asked, signed at or below its reply_floor, was signed before the call's requests
 * left (skymem_reply_window_top): captured, whatever its request id. Read before the tag (a forged one with a
 * low sequence is dropped either way); counted as replayed. Returns 1 for a reply that may go on. */
static int signed_after_floor(skymem_bulk_opts_t *o, const skymem_msg_t *m, const skymem_bulk_server_t *s,
                              const uint8_t *pkt, size_t len)
{
    if (!o->keyed || s->reply_floor == 0 || m->route.src_plane != s->plane || m->route.src_sat != s->sat ||
        !(m->route.flags & SKYMEM_RF_AUTH) || len < SKYMEM_AUTH_TRAILER_LEN)
        return 1; /* unsigned or short: the trailer's check refuses it */
    if (skymem_get_u64(pkt + len - SKYMEM_AUTH_TRAILER_LEN + SKYMEM_AT_SEQ) > s->reply_floor)
        return 1;
    o->replayed++;
    return 0;
}

/* A reply answers a request only when it comes from the satellite asked. A NAK about the route itself
 * comes from the satellite where the request stopped (a relay: NO_ROUTE, TTL_EXPIRED; the entry
 * satellite: AUTH_FAILED), which can only end the request, never answer it with data. */
static int from_server(const skymem_msg_t *m, const skymem_bulk_server_t *s, skymem_bulk_opts_t *o)
{
    if (m->route.src_plane == s->plane && m->route.src_sat == s->sat)
        return 1;
    if (m->reply_kind == SKYMEM_REPLY_NAK && (m->reply_status == SKYMEM_NAK_NO_ROUTE ||
                                              m->reply_status == SKYMEM_NAK_TTL_EXPIRED ||
                                              m->reply_status == SKYMEM_NAK_AUTH_FAILED))
        return 1;
    o->wrong_source++;
    return 0;
}

/* The DOWN key a reply from m's source is checked with: the asked server's, or, for a route NAK from
 * another satellite, that one's when it is among the servers (NULL otherwise: refused, counted). */
static const skymem_mac_key_t *down_key_for(const skymem_msg_t *m, const skymem_bulk_server_t *asked,
                                            const skymem_bulk_server_t *servers, uint32_t n_servers)
{
    if (m->route.src_plane == asked->plane && m->route.src_sat == asked->sat)
        return asked->down_key;
    for (uint32_t i = 0; i < n_servers; i++)
        if (servers[i].plane == m->route.src_plane && servers[i].sat == m->route.src_sat)
            return servers[i].down_key;
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Content bytes a chunk carries at most (sealed: less the seal's key id, nonce and tag). */
static uint32_t plain_bytes(const skymem_bulk_block_t *b, int sealed)
{
    return sealed ? b->chunk_bytes - SKYMEM_SEAL_OVERHEAD : b->chunk_bytes;
}

/* Content bytes of chunk cid (at buf + cid * plain_bytes). */
static uint32_t content_len(const skymem_bulk_block_t *b, uint32_t cid, int sealed)
{
    uint32_t per = plain_bytes(b, sealed);
    uint64_t start = (uint64_t)cid * per;
    uint64_t left = b->n_bytes > start ? b->n_bytes - start : 0;
    return (uint32_t)(left < per ? left : per);
}

/* What every chunk's seal binds of how b is cut (skymem_seal.h): read back under another layout, none opens. */
static skymem_seal_layout_t seal_layout(const skymem_bulk_block_t *b)
{
    skymem_seal_layout_t l = {b->chunk_bytes, b->stripe_m ? b->stripe_k : 0, b->stripe_m}; /* uncoded: 0, 0 */
    return l;
}

/* ============================================================== coded stripes */

static int coded(const skymem_bulk_block_t *b) { return b->stripe_m > 0; }

/* A coded block's layout, and what a call keeps for it (zeroed for an uncoded block). */
typedef struct {
    skymem_stripe_layout_t l;
    uint8_t *parity;  /* get: stripes * m chunks, where its parity lands (made when first asked); set: one stripe's */
    uint8_t *tail;    /* the last data chunk padded to a whole chunk, when it is short */
    uint8_t *state;   /* get: per stripe, STRIPE_* */
    double *arrived;  /* get: per stripe, when its latest chunk came (0: none yet) */
    uint32_t *req_of; /* get: per chunk on the wire, the request that asks it */
    uint32_t *data_of; /* per chunk on the wire, its data index (SKYMEM_STRIPE_NO_DATA: parity), made once */
    skymem_stripe_encoder_t *encoder; /* set: ISA-L's tables, made once for the block */
    uint32_t encoded; /* set: the stripe whose parity is in parity (SKYMEM_STRIPE_NO_DATA: none yet) */
} coded_t;

/* A stripe waits at least this long after its latest chunk before it asks its parity: chunks of one stripe come
 * from different satellites, and a healthy one a little behind the others must not cost a parity request. */
#define STALL_MIN_S 0.02
#define SCAN_EVERY_S 0.002 /* how often a get looks for silent satellites and stalled stripes */
#define STRIPE_PARITY_ASKED 1u
#define STRIPE_RESOLVED     2u /* complete (data all in, or rebuilt) or lost: nothing more waited for */

/* Data chunks of b: its content in chunks of plain_bytes (at least one; 0 when that does not fit 32 bits). */
static uint32_t data_chunks(const skymem_bulk_block_t *b, int sealed)
{
    uint64_t per = plain_bytes(b, sealed), n = b->n_bytes / per + (b->n_bytes % per != 0);
    return n == 0 ? 1u : n > UINT32_MAX ? 0u : (uint32_t)n;
}

/* Where parity chunk j of stripe s is: a get keeps every stripe's, a set only the one it is sending. */
static uint8_t *parity_at(const coded_t *c, uint32_t s, uint32_t j, uint32_t per)
{
    return c->parity == NULL ? NULL : c->parity + ((c->encoder ? 0 : (uint64_t)s * c->l.m) + j) * per;
}

/* Where wire chunk cid's content is (set: read from; get: lands), and its length. */
static uint8_t *content_at(const skymem_bulk_block_t *b, const coded_t *c, uint32_t cid, int sealed, uint32_t *len)
{
    uint32_t per = plain_bytes(b, sealed), d = coded(b) ? c->data_of[cid] : cid;
    if (d != SKYMEM_STRIPE_NO_DATA) {
        *len = content_len(b, d, sealed);
        return b->buf + (uint64_t)d * per;
    }
    uint32_t s = cid / c->l.n, j = skymem_stripe_role(&c->l, cid) - skymem_stripe_data_in(&c->l, s);
    *len = per;
    return parity_at(c, s, j, per);
}

/* The last data chunk, padded with zeros to a whole chunk in c->tail (the codec takes whole chunks). */
static void fill_tail(const skymem_bulk_block_t *b, coded_t *c, int sealed)
{
    uint32_t per = plain_bytes(b, sealed), last = c->l.data - 1, len = content_len(b, last, sealed);
    memcpy(c->tail, b->buf + (uint64_t)last * per, len);
    memset(c->tail + len, 0, per - len);
}

/* Stripe s's k + m rows for the codec, data then parity, and their wire ids (SKYMEM_STRIPE_NO_DATA for the
 * zero rows that stand for a short stripe's absent data chunks). A short last data chunk is c->tail. */
static void stripe_rows(const skymem_bulk_block_t *b, const coded_t *c, const uint8_t *zeros, uint32_t s,
                        int sealed, uint8_t **rows, uint32_t *ids)
{
    uint32_t per = plain_bytes(b, sealed), r = skymem_stripe_data_in(&c->l, s);
    for (uint32_t i = 0; i < c->l.k; i++) {
        uint32_t d = s * c->l.k + i;
        ids[i] = i < r ? skymem_stripe_member(&c->l, s, i) : SKYMEM_STRIPE_NO_DATA;
        rows[i] = i >= r ? (uint8_t *)zeros
                : content_len(b, d, sealed) < per ? c->tail : b->buf + (uint64_t)d * per;
    }
    for (uint32_t j = 0; j < c->l.m; j++) {
        ids[c->l.k + j] = skymem_stripe_member(&c->l, s, r + j);
        rows[c->l.k + j] = parity_at(c, s, j, per);
    }
}

/* Set: stripe s's parity, in c->parity (one stripe's worth). A set sends a stripe's parity right after its data,
 * so it is coded while that data is still in the cache, and 25 % of the block's size is never held at once; a
 * resend of an older stripe's parity codes that stripe again. */
static void encode_stripe(const skymem_bulk_block_t *b, coded_t *c, const uint8_t *zeros, int sealed, uint32_t s)
{
    uint8_t *rows[SKYMEM_STRIPE_MAX_CHUNKS];
    uint32_t ids[SKYMEM_STRIPE_MAX_CHUNKS];
    if (c->encoded == s)
        return;
    stripe_rows(b, c, zeros, s, sealed, rows, ids);
    skymem_stripe_encode_with(c->encoder, plain_bytes(b, sealed), (const uint8_t *const *)rows, rows + c->l.k);
    c->encoded = s;
}

/* Get: rebuilds stripe s's data chunks that are not in from those that are (at least its data count are
 * OK); they are flagged REBUILT. Returns how many, or -1 (cannot happen with enough chunks in). */
static int rebuild_stripe(skymem_bulk_block_t *b, coded_t *c, const uint8_t *zeros, uint32_t s, int sealed)
{
    uint8_t *rows[SKYMEM_STRIPE_MAX_CHUNKS], present[SKYMEM_STRIPE_MAX_CHUNKS];
    uint32_t ids[SKYMEM_STRIPE_MAX_CHUNKS], per = plain_bytes(b, sealed), last = c->l.data - 1, rebuilt = 0;
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
        memcpy(b->buf + (uint64_t)last * per, c->tail, content_len(b, last, sealed));
    return (int)rebuilt;
}

static void coded_free(coded_t *c, uint32_t n_blocks, uint8_t *zeros)
{
    for (uint32_t i = 0; c && i < n_blocks; i++) {
        free(c[i].parity); free(c[i].tail); free(c[i].state); free(c[i].arrived); free(c[i].req_of);
        free(c[i].encoder); free(c[i].data_of);
    }
    free(c);
    free(zeros);
}

/* The calls' per-block state: NULL when out of memory. Coded blocks get their parity room, tail and (get) their
 * stripe states and chunk -> request map; *zeros (the largest chunk's worth) stands for a short stripe's
 * absent data. */
static coded_t *coded_new(const skymem_bulk_block_t *blocks, uint32_t n_blocks, int sealed, int for_get,
                          uint8_t **zeros)
{
    coded_t *c = calloc(n_blocks ? n_blocks : 1, sizeof *c);
    uint32_t widest = 1;
    int ok = c != NULL;
    for (uint32_t i = 0; ok && i < n_blocks; i++) {
        const skymem_bulk_block_t *b = &blocks[i];
        if (!coded(b))
            continue;
        uint32_t per = plain_bytes(b, sealed);
        skymem_stripe_layout(b->stripe_k, b->stripe_m, data_chunks(b, sealed), &c[i].l); /* checked by check_args */
        widest = per > widest ? per : widest;
        c[i].parity = for_get ? NULL : malloc((uint64_t)c[i].l.m * per);
        c[i].tail = malloc(per);
        c[i].state = for_get ? calloc(c[i].l.stripes, 1) : NULL;
        c[i].arrived = for_get ? calloc(c[i].l.stripes, sizeof *c[i].arrived) : NULL;
        c[i].req_of = for_get ? calloc(b->chunk_count, sizeof *c[i].req_of) : NULL;
        c[i].encoder = for_get ? NULL : malloc(sizeof *c[i].encoder);
        c[i].data_of = malloc((uint64_t)skymem_stripe_wire_chunks(&c[i].l) * sizeof *c[i].data_of);
        ok = c[i].tail && c[i].data_of &&
             (for_get ? c[i].state && c[i].arrived && c[i].req_of : c[i].parity && c[i].encoder);
        if (ok)
            skymem_stripe_data_indexes(&c[i].l, c[i].data_of);
        if (ok && !for_get) {
            skymem_stripe_encoder((int)c[i].l.k, (int)c[i].l.m, c[i].encoder);
            c[i].encoded = SKYMEM_STRIPE_NO_DATA;
            fill_tail(b, &c[i], sealed);
        }
    }
    *zeros = ok ? calloc(widest, 1) : NULL;
    if (ok && *zeros)
        return c;
    coded_free(c, n_blocks, *zeros);
    *zeros = NULL;
    return NULL;
}

/* Moves b's prefix past the chunks in (coded: data chunks, in or rebuilt). NOT_FOUND, SEAL_FAILED stop it. */
static void advance_prefix(skymem_bulk_block_t *b, const coded_t *c)
{
    if (!b->prefix)
        return; /* not streamed: no one reads it */
    uint32_t p = *b->prefix;
    if (coded(b)) {
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

/* Rings the reader's eventfd once every block's prefix has reached what it wants (skymem_bulk_opts_t.progress_want);
 * `rung`: the want last rung for, not rung again. The fence pairs with skymem_bulk_want's store: the prefixes
 * written before it are seen by a reader that arms after it, or this sees the reader's new want. */
static void ring_reader(const skymem_bulk_opts_t *o, const skymem_bulk_block_t *blocks, uint32_t n_blocks,
                        uint32_t *rung)
{
    if (!o->progress_want)
        return;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint32_t want = __atomic_load_n(o->progress_want, __ATOMIC_RELAXED);
    if (want == 0 || want == *rung)
        return;
    for (uint32_t b = 0; b < n_blocks; b++)
        if (!blocks[b].prefix || __atomic_load_n(blocks[b].prefix, __ATOMIC_RELAXED) < want)
            return;
    uint64_t one = 1;
    if (write(o->progress_fd, &one, sizeof one) == (ssize_t)sizeof one || errno == EAGAIN)
        *rung = want; /* EAGAIN: the counter is full, so the reader is woken anyway */
}

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

static struct sockaddr_in *make_addrs(const skymem_bulk_server_t *servers, uint32_t n)
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

static int check_args(const skymem_bulk_server_t *servers, uint32_t n_servers_total,
                      const skymem_bulk_block_t *blocks, uint32_t n_blocks, const skymem_bulk_opts_t *o)
{
    if (!servers || !blocks || !o || o->fd < 0 || o->rto_s <= 0 || o->deadline_s <= 0 ||
        (o->seal && skymem_seal_keys_check(o->seal) != SKYMEM_SEAL_OK))
        return SKYMEM_BULK_E_ARG;
    for (uint32_t i = 0; i < n_blocks; i++) {
        const skymem_bulk_block_t *b = &blocks[i];
        if (!b->hash || !b->status || (!b->buf && b->n_bytes) || b->chunk_bytes == 0 ||
            b->chunk_bytes > SKYMEM_MAX_CHUNK_DATA || b->n_servers == 0 ||
            (uint64_t)b->server0 + b->n_servers > n_servers_total)
            return SKYMEM_BULK_E_ARG;
        if (o->seal && b->chunk_bytes <= SKYMEM_SEAL_OVERHEAD)
            return SKYMEM_BULK_E_ARG;
        if (coded(b)) { /* the wire's chunks: the data's and the parity's, stripes on distinct servers */
            skymem_stripe_layout_t l;
            uint32_t d = data_chunks(b, o->seal != NULL);
            if (d == 0 || skymem_stripe_layout(b->stripe_k, b->stripe_m, d, &l) != 0 ||
                b->chunk_count != skymem_stripe_wire_chunks(&l) || b->n_servers < l.n)
                return SKYMEM_BULK_E_ARG;
        } else if (o->seal) { /* the one layout seal.py cuts a block into */
            if (b->chunk_count != skymem_seal_chunk_count(b->n_bytes, b->chunk_bytes))
                return SKYMEM_BULK_E_ARG;
        } else if ((uint64_t)b->chunk_count * b->chunk_bytes < b->n_bytes ||
                   (b->chunk_count > 0 && (uint64_t)(b->chunk_count - 1) * b->chunk_bytes >= b->n_bytes &&
                    b->n_bytes > 0)) {
            return SKYMEM_BULK_E_ARG;
        }
    }
    for (uint32_t i = 0; o->keyed && i < n_servers_total; i++)
        if (!servers[i].up_key || !servers[i].down_key)
            return SKYMEM_BULK_E_ARG; /* keyed: every server with its keys */
    return 0;
}

/* Sends `n` prepared datagrams; returns how many the kernel took (the rest are resent later). */
static int send_batch(int fd, struct mmsghdr *m, int n, skymem_bulk_opts_t *o)
{
    int done = 0;
    while (done < n) {
        int k = sendmmsg(fd, m + done, (unsigned)(n - done), 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            break; /* EAGAIN / ENOBUFS: the retransmission timer covers it */
        }
        done += k;
    }
    o->packets_tx += (uint64_t)done;
    return done;
}

/* Receive buffers shared by get and set. */
typedef struct {
    uint8_t *data;
    struct mmsghdr msgs[RX_BATCH];
    struct iovec iov[RX_BATCH];
} rx_t;

static int rx_init(rx_t *rx)
{
    rx->data = malloc((size_t)RX_BATCH * RX_SLOT);
    if (!rx->data)
        return -1;
    return 0;
}

static int rx_batch(int fd, rx_t *rx)
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

static int wait_readable(int fd, double seconds)
{
    if (seconds < 0)
        seconds = 0;
    struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return ppoll(&p, 1, &ts, NULL); /* ns resolution: pacing waits a fraction of a millisecond */
}

/* How long to wait for replies before the next pass: until a request may be overdue (at most 50 ms),
 * less when the pace lets the next request go sooner, and not at all when the last send batch was
 * full (the window may allow more at once; waiting there cost a round trip per 64 requests). */
static double reply_wait_s(const skymem_bulk_opts_t *o, int batch_full, double pace_wait, int hedging)
{
    if (batch_full)
        return 0;
    double due = o->rto_s < 0.05 ? o->rto_s : 0.05;
    if (hedging && o->hedge_s > 0 && o->hedge_s < due)
        due = o->hedge_s; /* a coded get's silent satellites are noticed when due, before a resend is */
    return pace_wait > 0 && pace_wait < due ? pace_wait : due;
}

/* ======================================================================= get */

typedef struct {
    uint32_t block, server; /* server: index into the server table */
    uint32_t first, count, stride;
    uint32_t missing;       /* chunks of this request not answered yet */
    uint32_t retries;
    double last;            /* last send or arrival */
    double hedged_at;       /* coded: its server's last reply when its stripes' parity was asked for its silence */
    uint8_t sent, abandoned;
    uint8_t now;            /* coded: reopened for a parity chunk: asked at once, not counted as a retry */
} get_req_t;

/* The requests of a get, in the order they leave: wave by wave (chunk ids [lo, lo + w) of every block), then
 * block by block, then server by server. With doubling each wave is twice as wide as the one before: a
 * stream's first layers still come first, and its whole prefix takes a few waves of requests rather than one
 * per layer (a request per block per server per wave: one layer a wave asked 22 times as many as a fetch,
 * and streamed 1.3-1.4x slower; BENCHMARKS.md, "Streaming at fetch speed"). */
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

static uint32_t build_get_reqs(const skymem_bulk_block_t *blocks, const coded_t *cod, uint32_t n_blocks,
                               uint32_t wave, int doubling, get_req_t *out)
{
    uint32_t max_chunks = 0, n = 0;
    for (uint32_t b = 0; b < n_blocks; b++)
        if (blocks[b].chunk_count > max_chunks)
            max_chunks = blocks[b].chunk_count;
    uint32_t w = wave ? wave : (max_chunks ? max_chunks : 1);
    for (uint32_t lo = 0; lo < max_chunks; lo += w, w = doubling && w < max_chunks ? 2 * w : w) { /* waves ... */
        for (uint32_t b = 0; b < n_blocks; b++) {                 /* ... then blocks ... */
            const skymem_bulk_block_t *bl = &blocks[b];
            skymem_stripe_layout_t l; /* coded: each parity chunk a request of its own, asked only when needed */
            int parity_apart = coded(bl) && skymem_stripe_layout_wire(bl->stripe_k, bl->stripe_m, bl->chunk_count,
                                                                      &l) == 0;
            const uint32_t *data_of = parity_apart && cod ? cod[b].data_of : NULL; /* NULL: the per-chunk form */
#define IS_PARITY(id) \
    (parity_apart && (data_of ? data_of[id] : skymem_stripe_data_index(&l, id)) == SKYMEM_STRIPE_NO_DATA)
            uint32_t hi = lo + w < bl->chunk_count ? lo + w : bl->chunk_count, stride = bl->n_servers;
            for (uint32_t k = 0; k < stride && lo < hi; k++) { /* ... then servers */
                uint32_t id = lo + (k + stride - lo % stride) % stride;
                while (id < hi) {
                    if (IS_PARITY(id)) {
                        add_req(out, &n, b, bl->server0 + k, id, 1, stride);
                        id += stride;
                        continue;
                    }
                    uint32_t first = id, count = 0;
                    while (id < hi && count < SKYMEM_MAX_GET_CHUNKS && !IS_PARITY(id)) {
                        count++;
                        id += stride;
                    }
                    add_req(out, &n, b, bl->server0 + k, first, count, stride);
                }
            }
        }
    }
    return n;
#undef IS_PARITY
}

uint32_t skymem_bulk_get_requests(const skymem_bulk_block_t *blocks, uint32_t n_blocks, uint32_t wave_chunks,
                                   int wave_doubling)
{
    if (!blocks)
        return 0;
    coded_t *cod = calloc(n_blocks ? n_blocks : 1, sizeof *cod); /* only each coded block's chunk table */
    for (uint32_t i = 0; cod && i < n_blocks; i++)
        if (coded(&blocks[i]) && skymem_stripe_layout_wire(blocks[i].stripe_k, blocks[i].stripe_m,
                                                           blocks[i].chunk_count, &cod[i].l) == 0 &&
            (cod[i].data_of = malloc((uint64_t)blocks[i].chunk_count * sizeof *cod[i].data_of)) != NULL)
            skymem_stripe_data_indexes(&cod[i].l, cod[i].data_of);
    uint32_t n = build_get_reqs(blocks, cod, n_blocks, wave_chunks, wave_doubling, NULL); /* a NULL table: slow */
    coded_free(cod, n_blocks, NULL);
    return n;
}

/* Signs pkt (len bytes, room for the trailer) with the next reserved sequence when the call is keyed.
 * Returns the new length, len when unkeyed, or 0 when the reserved sequences ran out. */
static int sign_if_keyed(skymem_bulk_opts_t *o, const skymem_bulk_server_t *to, uint8_t *pkt, int len, size_t cap)
{
    if (!o->keyed || len <= 0)
        return len;
    if (o->auth_seq_used >= o->auth_seq_count)
        return 0;
    { /* a satellite refuses a sequence over SKYMEM_SAT_SEQ_AHEAD_US ahead of its clock: above 62,500 packets
       * a second the sequences outrun the clock, so wait until this one is within half that (the other half
       * for clock error) rather than send what would be dropped unanswered */
        struct timespec ts;
        uint64_t seq = o->auth_seq_first + o->auth_seq_used, now, limit = SKYMEM_SAT_SEQ_AHEAD_US / 2u / SKYMEM_AUTH_SEQ_US;
        clock_gettime(CLOCK_REALTIME, &ts);
        now = skymem_auth_seq_at((uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u);
        if (seq > now + limit) {
            uint64_t wait_us = (seq - now - limit) * SKYMEM_AUTH_SEQ_US;
            struct timespec d = {(time_t)(wait_us / 1000000u), (long)(wait_us % 1000000u) * 1000L};
            nanosleep(&d, NULL);
        }
    }
    len = skymem_auth_sign_with(to->up_key, o->auth_key_id, o->auth_seq_first + o->auth_seq_used++,
                                pkt, (size_t)len, cap);
    return len > 0 ? len : 0;
}

/* A keyed call's check of a reply's trailer with k, the DOWN key of its source: its tag, and with a reply
 * window its sequence's freshness too (crc as skymem_auth_check_reply_crc, or NULL). Returns SKYMEM_AUTH_OK
 * or why it answers nothing. */
static int check_trailer(skymem_bulk_opts_t *o, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len,
                         size_t crc_off, size_t crc_len, uint32_t *crc)
{
    if (k == NULL)
        return SKYMEM_AUTH_E_UNKNOWN_KEY;
    if (o->replies)
        return skymem_reply_window_check(o->replies, k, pkt, len, crc_off, crc_len, crc);
    if (crc)
        return skymem_auth_check_reply_crc(k, o->auth_key_id, pkt, len, crc_off, crc_len, crc);
    return skymem_auth_check_reply(k, o->auth_key_id, pkt, len);
}

/* Counts a trailer that answers nothing; returns 1 for those. */
static int trailer_refused(skymem_bulk_opts_t *o, int rc)
{
    if (rc == SKYMEM_AUTH_OK)
        return 0;
    if (rc == SKYMEM_AUTH_E_REPLAY)
        o->replayed++;
    else
        o->auth_failures++;
    return 1;
}

/* A reply may answer only when it is signed with its source's DOWN key k and fresh (keyed call); counts
 * the others. */
static int reply_authentic(skymem_bulk_opts_t *o, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len)
{
    return !o->keyed || !trailer_refused(o, check_trailer(o, k, pkt, len, 0, 0, NULL));
}

/* A DATA reply's chunk: its CRC against the descriptor's, then (keyed call) its tag and sequence -- tag
 * and CRC from one pass over the packet where the CPU can (skymem_auth_check_reply_crc); a chunk failing
 * both counts as a CRC failure. Returns 1 when the chunk may land; counts why not. */
static int data_reply_ok(skymem_bulk_opts_t *o, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len,
                         const skymem_msg_t *m, uint32_t want)
{
    if (o->keyed) {
        uint32_t crc = 0;
        int rc = check_trailer(o, k, pkt, len, (size_t)(m->data - pkt), want, &crc);
        int hashed = rc == SKYMEM_AUTH_OK || rc == SKYMEM_AUTH_E_BAD_MAC || rc == SKYMEM_AUTH_E_REPLAY;
        if (hashed && crc != m->desc.crc32c) { /* (unsigned or another key: nothing was hashed) */
            o->crc_failures++;
            return 0;
        }
        return !trailer_refused(o, rc);
    }
    if (skymem_crc32c(m->data, want) != m->desc.crc32c) {
        o->crc_failures++;
        return 0;
    }
    return 1;
}

/* Prepares the GET_CHUNKS for the still-missing span of request `i`. Returns its length or 0. */
static int make_get_pkt(uint8_t *pkt, const get_req_t *r, uint32_t rid, const skymem_bulk_block_t *blocks,
                        const skymem_bulk_server_t *servers, uint16_t station, skymem_bulk_opts_t *o)
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
    skymem_route_t route = route_to(&servers[r->server], station, rid);
    int len = skymem_build_get_chunks(pkt, GET_PKT_CAP, 0, &route, b->hash, r->first + lo * r->stride,
                                      hi - lo + 1, r->stride);
    return len > 0 ? sign_if_keyed(o, &servers[r->server], pkt, len, GET_PKT_CAP) : 0;
}

/* A get's requests and what is in flight. */
typedef struct {
    get_req_t *reqs;
    uint32_t n_req, next;   /* requests; the next never sent */
    uint32_t low;           /* requests below it are done (or given up on): the scans start there */
    uint32_t open_reqs;     /* sent, with chunks pending, not given up on */
    uint32_t done_reqs;     /* nothing pending, or given up on */
    uint64_t outstanding;   /* chunk bytes asked and not answered */
} get_run_t;

/* One chunk of r is no longer pending (answered, or no longer needed). */
static void req_settled(get_run_t *g, get_req_t *r, uint32_t chunk_bytes)
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

/* One chunk of r, held until now, is wanted: r is (re)opened and asked at once, not counting a retry. */
static void req_wanted(get_run_t *g, get_req_t *r, uint32_t chunk_bytes)
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

/* Get: room for b's parity, made when the first is asked: a healthy get asks none, and 25 % of the blocks' size in
 * fresh memory each call cost it page faults (measured: 2 ms of an 8-block get). 0, or SKYMEM_BULK_E_NOMEM. */
static int parity_room(const skymem_bulk_block_t *b, coded_t *c, int sealed)
{
    if (c->parity == NULL)
        c->parity = malloc((uint64_t)c->l.stripes * c->l.m * plain_bytes(b, sealed));
    return c->parity ? 0 : SKYMEM_BULK_E_NOMEM;
}

/* Coded block b's stripe s after one of its chunks was answered (or its data's request overdue): complete once
 * as many of its chunks are in as it has data chunks (any data chunk not in is rebuilt), lost once more than m
 * failed -- either way nothing more of it is waited for; otherwise, with ask_parity, its held parity is asked.
 * Returns 0, SKYMEM_BULK_E_ARG when a decode fails (it cannot with enough chunks in), or SKYMEM_BULK_E_NOMEM. */
static int stripe_update(get_run_t *g, skymem_bulk_block_t *b, coded_t *c, const uint8_t *zeros, uint32_t s,
                         int sealed, int ask_parity, skymem_bulk_opts_t *o)
{
    if (c->state[s] & STRIPE_RESOLVED)
        return 0;
    uint32_t r = skymem_stripe_data_in(&c->l, s), first = s * c->l.n, members = r + c->l.m, in = 0, failed = 0;
    for (uint32_t i = 0; i < members; i++) {
        uint8_t st = b->status[first + i];
        in += st == SKYMEM_BULK_OK;
        failed += st == SKYMEM_BULK_NOT_FOUND || st == SKYMEM_BULK_SEAL_FAILED;
    }
    if (in >= r || failed > c->l.m) {
        for (uint32_t i = 0; i < members; i++) /* no longer waited for: rebuilt, or not needed */
            if (b->status[first + i] == SKYMEM_BULK_PENDING)
                req_settled(g, &g->reqs[c->req_of[first + i]], b->chunk_bytes);
        if (in >= r) {
            int rebuilt = rebuild_stripe(b, c, zeros, s, sealed);
            if (rebuilt < 0)
                return SKYMEM_BULK_E_ARG;
            o->rebuilt += (uint64_t)rebuilt;
        }
        for (uint32_t i = 0; i < members; i++) {
            uint8_t *st = &b->status[first + i];
            if (*st == SKYMEM_BULK_PENDING || *st == SKYMEM_BULK_HELD)
                *st = SKYMEM_BULK_UNNEEDED;
        }
        c->state[s] |= STRIPE_RESOLVED;
        return 0;
    }
    if (ask_parity && !(c->state[s] & STRIPE_PARITY_ASKED)) {
        if (parity_room(b, c, sealed) != 0)
            return SKYMEM_BULK_E_NOMEM;
        c->state[s] |= STRIPE_PARITY_ASKED;
        for (uint32_t i = 0; i < members; i++) /* only parity chunks are held */
            if (b->status[first + i] == SKYMEM_BULK_HELD) {
                b->status[first + i] = SKYMEM_BULK_PENDING;
                req_wanted(g, &g->reqs[c->req_of[first + i]], b->chunk_bytes);
                o->parity_asked++;
            }
    }
    return 0;
}

/* Request r's pending data chunks of a coded block have waited too long (hedge_s, or r was given up on):
 * their stripes' parity is asked. 0, or stripe_update's error. */
static int hedge(get_run_t *g, get_req_t *r, skymem_bulk_block_t *blocks, coded_t *cod, const uint8_t *zeros,
                 int sealed, skymem_bulk_opts_t *o)
{
    skymem_bulk_block_t *b = &blocks[r->block];
    coded_t *c = &cod[r->block];
    int rc = 0;
    for (uint32_t i = 0; i < r->count && rc == 0; i++) {
        uint32_t cid = r->first + i * r->stride;
        if (b->status[cid] == SKYMEM_BULK_PENDING && c->data_of[cid] != SKYMEM_STRIPE_NO_DATA)
            rc = stripe_update(g, b, c, zeros, cid / c->l.n, sealed, 1, o);
    }
    return rc;
}

/* Coded blocks: which request asks each chunk, and (hedge_s > 0) every parity chunk HELD until needed.
 * 0, or SKYMEM_BULK_E_NOMEM. */
static int coded_plan(get_run_t *g, skymem_bulk_block_t *blocks, coded_t *cod, int sealed, skymem_bulk_opts_t *o)
{
    for (uint32_t i = 0; i < g->n_req; i++) {
        get_req_t *r = &g->reqs[i];
        skymem_bulk_block_t *b = &blocks[r->block];
        coded_t *c = &cod[r->block];
        if (!coded(b))
            continue;
        for (uint32_t k = 0; k < r->count; k++) {
            uint32_t cid = r->first + k * r->stride;
            c->req_of[cid] = i;
            if (c->data_of[cid] != SKYMEM_STRIPE_NO_DATA || b->status[cid] != SKYMEM_BULK_PENDING)
                continue;
            if (o->hedge_s == 0) { /* every parity chunk asked with the data */
                if (parity_room(b, c, sealed) != 0)
                    return SKYMEM_BULK_E_NOMEM;
                o->parity_asked++;
                continue;
            }
            b->status[cid] = SKYMEM_BULK_HELD;
            r->missing--;
        }
    }
    return 0;
}

/* Fills tx slot nt with the GET_CHUNKS of request i (its pending span) for server addr; 0 when nothing to ask. */
static int queue_get(struct mmsghdr *tx, struct iovec *txiov, uint8_t *txbuf, int nt, get_run_t *g, uint32_t i,
                     const skymem_bulk_block_t *blocks, const skymem_bulk_server_t *servers,
                     struct sockaddr_in *addrs, skymem_bulk_opts_t *o)
{
    get_req_t *r = &g->reqs[i];
    int len = make_get_pkt(txbuf + (size_t)nt * GET_PKT_CAP, r, o->request_id + i, blocks, servers, o->station_id,
                           o);
    if (len == 0)
        return 0;
    txiov[nt].iov_base = txbuf + (size_t)nt * GET_PKT_CAP;
    txiov[nt].iov_len = (size_t)len;
    memset(&tx[nt], 0, sizeof tx[nt]);
    tx[nt].msg_hdr.msg_iov = &txiov[nt];
    tx[nt].msg_hdr.msg_iovlen = 1;
    tx[nt].msg_hdr.msg_name = &addrs[r->server];
    tx[nt].msg_hdr.msg_namelen = sizeof addrs[r->server];
    return 1;
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
    const int sealed = o->seal != NULL;
    get_run_t g;
    memset(&g, 0, sizeof g);
    uint8_t *zeros = NULL;
    coded_t *cod = coded_new(blocks, n_blocks, sealed, 1, &zeros);
    g.n_req = cod ? build_get_reqs(blocks, cod, n_blocks, o->wave_chunks, o->wave_doubling, NULL) : 0;
    g.reqs = calloc(g.n_req ? g.n_req : 1, sizeof *g.reqs);
    struct sockaddr_in *addrs = make_addrs(servers, n_servers_total);
    uint8_t *txbuf = malloc((size_t)TX_BATCH * GET_PKT_CAP);
    skymem_seal_ctx_t *seal = sealed ? skymem_seal_ctx_new(o->seal) : NULL; /* one cipher context per call */
    double *heard = calloc(n_servers_total ? n_servers_total : 1, sizeof *heard); /* last reply from each server */
    int any_coded = 0;
    rx_t rx;
    rx.data = NULL;
    if (!g.reqs || !addrs || !txbuf || !cod || !heard || rx_init(&rx) || (sealed && !seal)) {
        free(g.reqs); free(addrs); free(txbuf); free(rx.data); skymem_seal_ctx_free(seal); free(heard);
        coded_free(cod, n_blocks, zeros);
        return SKYMEM_BULK_E_NOMEM;
    }
    build_get_reqs(blocks, cod, n_blocks, o->wave_chunks, o->wave_doubling, g.reqs);
    if ((rc = coded_plan(&g, blocks, cod, sealed, o)) != 0)
        goto out;
    uint64_t first_wave_bytes = 0; /* asked at once; with pacing the rest follows at pace_Bps */
    for (uint32_t b = 0; b < n_blocks; b++) {
        any_coded |= coded(&blocks[b]);
        advance_prefix(&blocks[b], &cod[b]);
        uint32_t w = o->wave_chunks && o->wave_chunks < blocks[b].chunk_count ? o->wave_chunks : blocks[b].chunk_count;
        first_wave_bytes += (uint64_t)w * blocks[b].chunk_bytes;
    }
    uint64_t asked = 0; /* chunk bytes of the requests sent so far (first sends only) */

    struct mmsghdr tx[TX_BATCH];
    struct iovec txiov[TX_BATCH];
    double start = now_s(), last_scan = start;
    int refused = 0;
    uint32_t rung = 0; /* the reader's want last rung for (ring_reader) */
    skymem_msg_t m;

    while (g.done_reqs < g.n_req && !refused) {
        double t = now_s();
        if (t - start > o->deadline_s)
            break;
        /* 1. new requests, as the window and the pace allow (always at least one in flight) */
        int nt = 0;
        double pace_wait = 0; /* > 0: the next request is held back this long by the pace */
        while (g.next < g.n_req && nt < TX_BATCH) {
            get_req_t *r = &g.reqs[g.next];
            uint64_t bytes = (uint64_t)r->missing * blocks[r->block].chunk_bytes;
            if (g.open_reqs > 0 && g.outstanding + bytes > o->window_bytes)
                break;
            if (o->pace_Bps > 0 && asked + bytes > first_wave_bytes) {
                double at = (double)(asked + bytes - first_wave_bytes) / o->pace_Bps; /* since start */
                if (at > t - start) {
                    pace_wait = at - (t - start);
                    break;
                }
            }
            asked += bytes;
            r->sent = 1;
            r->last = t;
            if (heard[r->server] == 0)
                heard[r->server] = t; /* its silence counts from the first request it was sent */
            if (!queue_get(tx, txiov, txbuf, nt, &g, g.next, blocks, servers, addrs, o)) {
                r->missing = 0; /* nothing pending: held parity, or every chunk of it already settled */
                g.done_reqs++;
                g.next++;
                continue;
            }
            g.outstanding += bytes;
            g.open_reqs++;
            if (coded(&blocks[r->block])) /* a stripe asked in two waves: its stall counts from its last ask */
                for (uint32_t k = 0; k < r->count; k++) {
                    coded_t *c = &cod[r->block];
                    uint32_t s = (r->first + k * r->stride) / c->l.n;
                    if (c->arrived[s] > 0)
                        c->arrived[s] = t;
                }
            nt++;
            g.next++;
        }
        if (nt)
            send_batch(o->fd, tx, nt, o);
        if (g.done_reqs == g.n_req)
            break; /* the last requests had nothing to ask (held parity): no reply to wait for */

        /* 2. wait for replies */
        if (wait_readable(o->fd, reply_wait_s(o, nt == TX_BATCH, pace_wait, any_coded)) < 0 && errno != EINTR) {
            rc = SKYMEM_BULK_E_SOCKET;
            break;
        }
        /* 3. drain the socket */
        for (;;) {
            int k = rx_batch(o->fd, &rx);
            if (k < 0) {
                rc = SKYMEM_BULK_E_SOCKET;
                goto out;
            }
            if (k == 0)
                break;
            double tr = now_s();
            for (int i = 0; i < k; i++) {
                const uint8_t *pkt = rx.data + (size_t)i * RX_SLOT;
                size_t len = rx.msgs[i].msg_len;
                o->packets_rx++;
                o->bytes_rx += len;
                if (skymem_parse(pkt, len, &m) != SKYMEM_OK || m.mid != SKYMEM_REPLY_TLM_MID ||
                    m.reply_cc != SKYMEM_GET_CHUNKS_CC) {
                    o->ignored++;
                    continue;
                }
                uint32_t ri = m.route.request_id - o->request_id;
                if (ri >= g.next) {
                    o->ignored++;
                    continue;
                }
                get_req_t *r = &g.reqs[ri];
                skymem_bulk_block_t *b = &blocks[r->block];
                coded_t *c = &cod[r->block];
                if (!from_server(&m, &servers[r->server], o) ||
                    !signed_after_floor(o, &m, &servers[r->server], pkt, len))
                    continue;
                const skymem_mac_key_t *down = down_key_for(&m, &servers[r->server], servers, n_servers_total);
                if (m.reply_kind == SKYMEM_REPLY_NAK && m.reply_status != SKYMEM_NAK_NOT_FOUND) {
                    if (reply_authentic(o, down, pkt, len))
                        refused = 1;
                    continue;
                }
                uint32_t cid = m.reply_chunk_id;
                if (cid < r->first || (cid - r->first) % r->stride || (cid - r->first) / r->stride >= r->count ||
                    !m.has_block_hash || memcmp(m.block_hash, b->hash, SKYMEM_BLOCK_HASH_LEN) != 0) {
                    o->ignored++;
                    continue;
                }
                if (b->status[cid] != SKYMEM_BULK_PENDING) {
                    o->ignored++; /* duplicate, or no longer needed */
                    continue;
                }
                if (m.reply_kind == SKYMEM_REPLY_DATA) {
                    uint32_t content = 0;
                    uint8_t *dst = content_at(b, c, cid, sealed, &content);
                    uint32_t want = content + (sealed ? SKYMEM_SEAL_OVERHEAD : 0u);
                    if (m.desc.chunk_id != cid || m.desc.data_len != want || m.desc.chunk_count != b->chunk_count) {
                        o->ignored++;
                        continue;
                    }
                    if (!seal) {
                        if (!data_reply_ok(o, down, pkt, len, &m, want))
                            continue; /* as if lost: asked again after rto */
                        memcpy(dst, m.data, want);
                        b->status[cid] = SKYMEM_BULK_OK;
                    } else {
                        /* The seal first: a chunk that opens is the ground's own, in its place, and its CRC
                         * and trailer would prove nothing more (docs/RELIABILITY.md, "Sealed content").
                         * Only one that does not open is judged by them, to know whom to blame. */
                        skymem_seal_layout_t lay = seal_layout(b);
                        int sr = skymem_open_chunk(seal, b->hash, cid, b->chunk_count, b->n_bytes, &lay, m.data, want,
                                                   dst);
                        if (sr == SKYMEM_SEAL_E_CRYPTO || sr == SKYMEM_SEAL_E_ARG) {
                            rc = SKYMEM_BULK_E_CRYPTO;
                            goto out;
                        }
                        if (sr != SKYMEM_SEAL_OK && !data_reply_ok(o, down, pkt, len, &m, want))
                            continue; /* forged or damaged on the way: as if lost, asked again after rto */
                        /* CRC and trailer right, seal not: the satellite keeps these bytes, asking again
                         * would bring them back. The chunk is answered, with no content (zeros). */
                        b->status[cid] = sr == SKYMEM_SEAL_OK ? SKYMEM_BULK_OK : SKYMEM_BULK_SEAL_FAILED;
                        o->seal_failures += sr != SKYMEM_SEAL_OK;
                    }
                    if (b->chunk_crcs)
                        b->chunk_crcs[cid] = m.desc.crc32c;
                } else if (m.reply_kind == SKYMEM_REPLY_NAK) {
                    if (!reply_authentic(o, down, pkt, len))
                        continue;
                    b->status[cid] = SKYMEM_BULK_NOT_FOUND;
                } else {
                    o->ignored++;
                    continue;
                }
                if (o->first_reply_s == 0)
                    o->first_reply_s = tr - start;
                r->last = heard[r->server] = tr;
                req_settled(&g, r, b->chunk_bytes);
                if (coded(b))
                    c->arrived[cid / c->l.n] = tr;
                if (coded(b) && (rc = stripe_update(&g, b, c, zeros, cid / c->l.n, sealed,
                                                    b->status[cid] != SKYMEM_BULK_OK, o)) != 0)
                    goto out;
                if (coded(b) || (b->prefix && *b->prefix == cid))
                    advance_prefix(b, c);
            }
            ring_reader(o, blocks, n_blocks, &rung); /* each batch: a busy socket keeps this loop going for long */
            if (k < RX_BATCH)
                break;
        }
        /* 4. coded blocks: a data request to a server silent for hedge_s has its stripes' parity asked. Silent,
         * not merely slow to answer this request: a busy satellite answers its requests one after the other,
         * and the later ones wait without it being late. */
        t = now_s();
        int scan = any_coded && o->hedge_s > 0 && t - last_scan >= SCAN_EVERY_S; /* every few ms is enough */
        if (scan)
            last_scan = t;
        for (uint32_t i = g.low; scan && i < g.next; i++) {
            get_req_t *r = &g.reqs[i];
            if (!r->missing || r->abandoned || !coded(&blocks[r->block]) || t - r->last < o->hedge_s ||
                t - heard[r->server] < o->hedge_s || r->hedged_at == heard[r->server])
                continue;
            r->hedged_at = heard[r->server]; /* once per silence: again only after the server answers something */
            if ((rc = hedge(&g, r, blocks, cod, zeros, sealed, o)) != 0)
                goto out;
        }
        /* ... and a stripe some of whose chunks came, then none for a few round trips (at most hedge_s): the
         * rest are on a slow satellite (answering, so never silent) or lost on the way; its parity is asked
         * rather than waited for */
        double stall_s = 4 * o->first_reply_s < STALL_MIN_S ? STALL_MIN_S : 4 * o->first_reply_s;
        stall_s = stall_s < o->hedge_s ? stall_s : o->hedge_s;
        for (uint32_t b = 0; scan && b < n_blocks; b++) {
            coded_t *c = &cod[b];
            for (uint32_t s = 0; coded(&blocks[b]) && s < c->l.stripes; s++)
                if (c->arrived[s] > 0 && t - c->arrived[s] >= stall_s &&
                    !(c->state[s] & (STRIPE_RESOLVED | STRIPE_PARITY_ASKED)) &&
                    (rc = stripe_update(&g, &blocks[b], c, zeros, s, sealed, 1, o)) != 0)
                    goto out;
        }
        /* 5. re-ask for overdue requests (only their missing span), and at once for reopened ones */
        nt = 0;
        while (g.low < g.next && (!g.reqs[g.low].missing || g.reqs[g.low].abandoned))
            g.low++; /* requests done for now (req_wanted moves it back for one it opens again) */
        for (uint32_t i = g.low; i < g.next && nt < TX_BATCH; i++) {
            get_req_t *r = &g.reqs[i];
            if (!r->missing || r->abandoned || (!r->now && t - r->last < o->rto_s))
                continue;
            if (!r->now && r->retries >= o->max_retries) {
                r->abandoned = 1;
                g.done_reqs++;
                g.open_reqs--;
                g.outstanding -= (uint64_t)r->missing * blocks[r->block].chunk_bytes;
                if (coded(&blocks[r->block]) && (rc = hedge(&g, r, blocks, cod, zeros, sealed, o)) != 0)
                    goto out;
                continue;
            }
            if (!queue_get(tx, txiov, txbuf, nt, &g, i, blocks, servers, addrs, o))
                continue;
            if (r->now) {
                r->now = 0;
            } else {
                r->retries++;
                o->retransmits++;
            }
            r->last = t;
            nt++;
        }
        if (nt)
            send_batch(o->fd, tx, nt, o);
    }
    if (rc == 0)
        rc = refused ? SKYMEM_BULK_REFUSED : (g.done_reqs == g.n_req ? SKYMEM_BULK_DONE : SKYMEM_BULK_INCOMPLETE);
    if (rc == SKYMEM_BULK_DONE) /* abandoned requests count as done above: check the chunks */
        for (uint32_t b = 0; b < n_blocks && rc == SKYMEM_BULK_DONE; b++)
            for (uint32_t c = 0; c < blocks[b].chunk_count; c++)
                if (blocks[b].status[c] == SKYMEM_BULK_PENDING) {
                    rc = SKYMEM_BULK_INCOMPLETE;
                    break;
                }
out:
    free(g.reqs);
    free(addrs);
    free(txbuf);
    free(rx.data);
    skymem_seal_ctx_free(seal);
    coded_free(cod, n_blocks, zeros);
    free(heard);
    return rc;
}

/* ======================================================================= set */

typedef struct {
    uint32_t block, chunk;
} chunk_ref_t;

/* Seals chunk cid of b (its content: len bytes at plain) into out (chunk_bytes of room): what one send carries. */
static int seal_for_send(skymem_seal_ctx_t *seal, const skymem_bulk_block_t *b, uint32_t cid, const uint8_t *plain,
                         uint32_t len, uint8_t *out)
{
    skymem_seal_layout_t lay = seal_layout(b);
    int sr = skymem_seal_chunk(seal, b->hash, cid, b->chunk_count, b->n_bytes, &lay, plain, len, out);
    return sr == SKYMEM_SEAL_OK ? 0 : SKYMEM_BULK_E_CRYPTO;
}

int skymem_bulk_set(const skymem_bulk_server_t *servers, uint32_t n_servers_total, skymem_bulk_block_t *blocks,
                    uint32_t n_blocks, skymem_bulk_opts_t *o)
{
    int rc = check_args(servers, n_servers_total, blocks, n_blocks, o);
    if (rc)
        return rc;
    uint64_t total = 0; /* the chunks to send: those not OK on entry (a repair sends only what was lost) */
    for (uint32_t b = 0; b < n_blocks; b++)
        for (uint32_t c = 0; c < blocks[b].chunk_count; c++)
            total += blocks[b].status[c] != SKYMEM_BULK_OK;
    if (total > 0xFFFFFFF0u)
        return SKYMEM_BULK_E_ARG;
    chunk_ref_t *refs = calloc(total ? total : 1, sizeof *refs);
    double *last = calloc(total ? total : 1, sizeof *last);
    uint32_t *tries = calloc(total ? total : 1, sizeof *tries); /* max_retries may exceed 255 */
    struct sockaddr_in *addrs = make_addrs(servers, n_servers_total);
    uint8_t *txbuf = malloc((size_t)TX_BATCH * RX_SLOT);
    const int sealed = o->seal != NULL;
    skymem_seal_ctx_t *seal = sealed ? skymem_seal_ctx_new(o->seal) : NULL; /* one cipher context per call */
    uint8_t *scratch = sealed ? malloc(RX_SLOT) : NULL; /* the chunk being sent, sealed (stays in cache) */
    uint8_t *zeros = NULL;
    coded_t *cod = coded_new(blocks, n_blocks, sealed, 0, &zeros);
    rx_t rx;
    rx.data = NULL;
    if (!refs || !last || !tries || !addrs || !txbuf || !cod || rx_init(&rx) || (sealed && (!seal || !scratch))) {
        free(refs); free(last); free(tries); free(addrs); free(txbuf); free(rx.data);
        skymem_seal_ctx_free(seal); free(scratch); coded_free(cod, n_blocks, zeros);
        return SKYMEM_BULK_E_NOMEM;
    }
    uint64_t g = 0;
    for (uint32_t b = 0; b < n_blocks; b++)
        for (uint32_t c = 0; c < blocks[b].chunk_count; c++)
            if (blocks[b].status[c] != SKYMEM_BULK_OK) {
                refs[g].block = b;
                refs[g++].chunk = c;
            }

    struct mmsghdr tx[TX_BATCH];
    struct iovec txiov[TX_BATCH];
    uint64_t next = 0, acked = 0, low = 0, outstanding = 0, failed = 0;
    uint64_t sent_bytes = 0; /* chunk bytes of the first sends so far (what the pace meters) */
    double start = now_s();
    int refused = 0;
    skymem_msg_t m;
    o->auth_seq_used = 0;
    o->auth_failures = o->replayed = o->wrong_source = 0;
    o->nak_status = 0;
    o->seal_failures = 0;

/* builds SET_CHUNK for global chunk index gi into tx slot nt */
#define PREPARE_SET(gi)                                                                                        \
    do {                                                                                                       \
        const skymem_bulk_block_t *b_ = &blocks[refs[gi].block];                                               \
        uint32_t c_ = refs[gi].chunk, plain_ = 0;                                                              \
        if (coded(b_) && cod[refs[gi].block].data_of[c_] == SKYMEM_STRIPE_NO_DATA)                            \
            encode_stripe(b_, &cod[refs[gi].block], zeros, sealed, c_ / cod[refs[gi].block].l.n);            \
        const uint8_t *d_ = content_at(b_, &cod[refs[gi].block], c_, sealed, &plain_);                         \
        uint32_t len_ = plain_ + (sealed ? SKYMEM_SEAL_OVERHEAD : 0u);                                         \
        if (seal) {                                                                                            \
            if ((rc = seal_for_send(seal, b_, c_, d_, plain_, scratch)) != 0)                                  \
                goto out;                                                                                      \
            d_ = scratch;                                                                                      \
        }                                                                                                      \
        skymem_chunk_desc_t desc_;                                                                             \
        memset(&desc_, 0, sizeof desc_);                                                                       \
        memcpy(desc_.block_hash, b_->hash, SKYMEM_BLOCK_HASH_LEN);                                             \
        desc_.chunk_id = c_;                                                                                   \
        desc_.chunk_count = b_->chunk_count;                                                                   \
        desc_.created_ms = b_->created_ms;                                                                     \
        desc_.crc32c = skymem_crc32c(d_, len_);                                                                \
        desc_.data_len = (uint16_t)len_;                                                                       \
        uint32_t srv_ = b_->server0 + c_ % b_->n_servers;                                                      \
        skymem_route_t rt_ = route_to(&servers[srv_], o->station_id, o->request_id + (uint32_t)(gi));          \
        int n_ = skymem_build_set_chunk(txbuf + (size_t)nt * RX_SLOT, RX_SLOT, 0, &rt_, &desc_, d_);           \
        if (n_ <= 0) {                                                                                         \
            rc = SKYMEM_BULK_E_ARG;                                                                            \
            goto out;                                                                                          \
        }                                                                                                      \
        /* every send, resends included, signs with a sequence never used before */                          \
        n_ = sign_if_keyed(o, &servers[srv_], txbuf + (size_t)nt * RX_SLOT, n_, RX_SLOT);                                      \
        if (n_ <= 0) {                                                                                         \
            rc = SKYMEM_BULK_E_ARG;                                                                            \
            goto out;                                                                                          \
        }                                                                                                      \
        txiov[nt].iov_base = txbuf + (size_t)nt * RX_SLOT;                                                     \
        txiov[nt].iov_len = (size_t)n_;                                                                        \
        memset(&tx[nt], 0, sizeof tx[nt]);                                                                     \
        tx[nt].msg_hdr.msg_iov = &txiov[nt];                                                                   \
        tx[nt].msg_hdr.msg_iovlen = 1;                                                                         \
        tx[nt].msg_hdr.msg_name = &addrs[srv_];                                                                \
        tx[nt].msg_hdr.msg_namelen = sizeof addrs[srv_];                                                       \
        nt++;                                                                                                  \
    } while (0)

    while (acked + failed < total && !refused) {
        double t = now_s();
        if (t - start > o->deadline_s)
            break;
        int nt = 0;
        double pace_wait = 0; /* > 0: the next chunk is held back this long by the pace */
        while (next < total && nt < TX_BATCH) {
            uint32_t cb = blocks[refs[next].block].chunk_bytes;
            if (outstanding > 0 && outstanding + cb > o->window_bytes)
                break;
            if (o->pace_Bps > 0 && sent_bytes > 0) { /* chunk k leaves when the bytes before it have had time */
                double at = (double)sent_bytes / o->pace_Bps;
                if (at > t - start) {
                    pace_wait = at - (t - start);
                    break;
                }
            }
            PREPARE_SET(next);
            last[next] = t;
            outstanding += cb;
            sent_bytes += cb;
            next++;
        }
        if (nt)
            send_batch(o->fd, tx, nt, o);
        if (wait_readable(o->fd, reply_wait_s(o, nt == TX_BATCH, pace_wait, 0)) < 0 && errno != EINTR) {
            rc = SKYMEM_BULK_E_SOCKET;
            break;
        }
        for (;;) {
            int k = rx_batch(o->fd, &rx);
            if (k < 0) {
                rc = SKYMEM_BULK_E_SOCKET;
                goto out;
            }
            if (k == 0)
                break;
            for (int i = 0; i < k; i++) {
                o->packets_rx++;
                o->bytes_rx += rx.msgs[i].msg_len;
                if (skymem_parse(rx.data + (size_t)i * RX_SLOT, rx.msgs[i].msg_len, &m) != SKYMEM_OK ||
                    m.mid != SKYMEM_REPLY_TLM_MID || m.reply_cc != SKYMEM_SET_CHUNK_CC) {
                    o->ignored++;
                    continue;
                }
                uint64_t gi = (uint32_t)(m.route.request_id - o->request_id);
                if (gi >= next) {
                    o->ignored++;
                    continue;
                }
                skymem_bulk_block_t *b = &blocks[refs[gi].block];
                if (m.reply_chunk_id != refs[gi].chunk || b->status[refs[gi].chunk] != SKYMEM_BULK_PENDING) {
                    o->ignored++;
                    continue;
                }
                const skymem_bulk_server_t *asked = &servers[b->server0 + refs[gi].chunk % b->n_servers];
                if (!from_server(&m, asked, o) ||
                    !signed_after_floor(o, &m, asked, rx.data + (size_t)i * RX_SLOT, rx.msgs[i].msg_len))
                    continue;
                const skymem_mac_key_t *down = down_key_for(&m, asked, servers, n_servers_total);
                if (!reply_authentic(o, down, rx.data + (size_t)i * RX_SLOT, rx.msgs[i].msg_len))
                    continue; /* a forged ACK acknowledges nothing: resent after rto */
                if (m.reply_kind == SKYMEM_REPLY_NAK) {
                    if (m.reply_status == SKYMEM_NAK_BUSY)
                        continue; /* resent after rto */
                    o->nak_status = m.reply_status;
                    refused = 1;
                    continue;
                }
                if (m.reply_kind != SKYMEM_REPLY_ACK) {
                    o->ignored++;
                    continue;
                }
                b->status[refs[gi].chunk] = SKYMEM_BULK_OK;
                outstanding -= b->chunk_bytes;
                acked++;
            }
            if (k < RX_BATCH)
                break;
        }
        t = now_s();
        while (low < next && blocks[refs[low].block].status[refs[low].chunk] != SKYMEM_BULK_PENDING)
            low++;
        nt = 0;
        for (uint64_t gi = low; gi < next && nt < TX_BATCH; gi++) {
            skymem_bulk_block_t *b = &blocks[refs[gi].block];
            if (b->status[refs[gi].chunk] != SKYMEM_BULK_PENDING || t - last[gi] < o->rto_s)
                continue;
            if (tries[gi] >= o->max_retries) {
                b->status[refs[gi].chunk] = SKYMEM_BULK_NOT_FOUND; /* given up: never acknowledged */
                outstanding -= b->chunk_bytes;
                failed++;
                continue;
            }
            tries[gi]++;
            last[gi] = t;
            o->retransmits++;
            PREPARE_SET(gi);
        }
        if (nt)
            send_batch(o->fd, tx, nt, o);
    }
#undef PREPARE_SET
    if (rc == 0)
        rc = refused ? SKYMEM_BULK_REFUSED : (acked == total ? SKYMEM_BULK_DONE : SKYMEM_BULK_INCOMPLETE);
out:
    free(refs);
    free(last);
    free(tries);
    free(addrs);
    free(txbuf);
    free(rx.data);
    skymem_seal_ctx_free(seal);
    free(scratch);
    coded_free(cod, n_blocks, zeros);
    return rc;
}
