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

#include "skymem_auth.h"
#include "skymem_sat.h"
#include "skymem_codec.h"
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

/* Bytes of chunk cid on the wire (a sealed chunk: its content and SKYMEM_SEAL_OVERHEAD). */
static uint32_t chunk_len(const skymem_bulk_block_t *b, uint32_t cid, int sealed)
{
    return content_len(b, cid, sealed) + (sealed ? SKYMEM_SEAL_OVERHEAD : 0u);
}

static void advance_prefix(skymem_bulk_block_t *b)
{
    uint32_t p = b->prefix ? *b->prefix : 0;
    while (p < b->chunk_count && b->status[p] == SKYMEM_BULK_OK) /* NOT_FOUND, SEAL_FAILED stop it: no data */
        p++;
    if (b->prefix)
        __atomic_store_n(b->prefix, p, __ATOMIC_RELEASE);
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
        if (o->seal) { /* the one layout seal.py cuts a block into */
            if (b->chunk_bytes <= SKYMEM_SEAL_OVERHEAD ||
                b->chunk_count != skymem_seal_chunk_count(b->n_bytes, b->chunk_bytes))
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
static double reply_wait_s(const skymem_bulk_opts_t *o, int batch_full, double pace_wait)
{
    if (batch_full)
        return 0;
    double due = o->rto_s < 0.05 ? o->rto_s : 0.05;
    return pace_wait > 0 && pace_wait < due ? pace_wait : due;
}

/* ======================================================================= get */

typedef struct {
    uint32_t block, server; /* server: index into the server table */
    uint32_t first, count, stride;
    uint32_t missing;       /* chunks of this request not answered yet */
    uint32_t retries;
    double last;            /* last send or arrival */
    uint8_t sent, abandoned;
} get_req_t;

/* The requests of a get, in the order they leave: wave by wave (chunk ids [lo, lo + w) of every block), then
 * block by block, then server by server. With doubling each wave is twice as wide as the one before: a
 * stream's first layers still come first, and its whole prefix takes a few waves of requests rather than one
 * per layer (a request per block per server per wave: one layer a wave asked 22 times as many as a fetch,
 * and streamed 1.3-1.4x slower; BENCHMARKS.md, "Streaming at fetch speed"). */
static uint32_t build_get_reqs(const skymem_bulk_block_t *blocks, uint32_t n_blocks, uint32_t wave, int doubling,
                               get_req_t *out)
{
    uint32_t max_chunks = 0, n = 0;
    for (uint32_t b = 0; b < n_blocks; b++)
        if (blocks[b].chunk_count > max_chunks)
            max_chunks = blocks[b].chunk_count;
    uint32_t w = wave ? wave : (max_chunks ? max_chunks : 1);
    for (uint32_t lo = 0; lo < max_chunks; lo += w, w = doubling && w < max_chunks ? 2 * w : w) { /* waves ... */
        for (uint32_t b = 0; b < n_blocks; b++) {                 /* ... then blocks ... */
            const skymem_bulk_block_t *bl = &blocks[b];
            uint32_t hi = lo + w < bl->chunk_count ? lo + w : bl->chunk_count;
            for (uint32_t k = 0; k < bl->n_servers && lo < hi; k++) { /* ... then servers */
                uint32_t first = lo + (k + bl->n_servers - lo % bl->n_servers) % bl->n_servers;
                while (first < hi) {
                    uint32_t count = (hi - first + bl->n_servers - 1) / bl->n_servers;
                    if (count > SKYMEM_MAX_GET_CHUNKS)
                        count = SKYMEM_MAX_GET_CHUNKS;
                    if (out) {
                        get_req_t *r = &out[n];
                        memset(r, 0, sizeof *r);
                        r->block = b;
                        r->server = bl->server0 + k;
                        r->first = first;
                        r->count = count;
                        r->stride = bl->n_servers;
                        r->missing = count;
                    }
                    n++;
                    first += count * bl->n_servers;
                }
            }
        }
    }
    return n;
}

uint32_t skymem_bulk_get_requests(const skymem_bulk_block_t *blocks, uint32_t n_blocks, uint32_t wave_chunks,
                                   int wave_doubling)
{
    return blocks ? build_get_reqs(blocks, n_blocks, wave_chunks, wave_doubling, NULL) : 0;
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

int skymem_bulk_get(const skymem_bulk_server_t *servers, uint32_t n_servers_total, skymem_bulk_block_t *blocks,
                    uint32_t n_blocks, skymem_bulk_opts_t *o)
{
    int rc = check_args(servers, n_servers_total, blocks, n_blocks, o);
    if (rc)
        return rc;
    o->first_reply_s = 0;
    o->auth_seq_used = 0;
    o->auth_failures = o->replayed = o->wrong_source = 0;
    o->seal_failures = 0;
    const int sealed = o->seal != NULL;
    uint32_t n_req = build_get_reqs(blocks, n_blocks, o->wave_chunks, o->wave_doubling, NULL);
    get_req_t *reqs = calloc(n_req ? n_req : 1, sizeof *reqs);
    struct sockaddr_in *addrs = make_addrs(servers, n_servers_total);
    uint8_t *txbuf = malloc((size_t)TX_BATCH * GET_PKT_CAP);
    skymem_seal_ctx_t *seal = sealed ? skymem_seal_ctx_new(o->seal) : NULL; /* one cipher context per call */
    rx_t rx;
    rx.data = NULL;
    if (!reqs || !addrs || !txbuf || rx_init(&rx) || (sealed && !seal)) {
        free(reqs); free(addrs); free(txbuf); free(rx.data); skymem_seal_ctx_free(seal);
        return SKYMEM_BULK_E_NOMEM;
    }
    build_get_reqs(blocks, n_blocks, o->wave_chunks, o->wave_doubling, reqs);
    uint64_t first_wave_bytes = 0; /* asked at once; with pacing the rest follows at pace_Bps */
    for (uint32_t b = 0; b < n_blocks; b++) {
        advance_prefix(&blocks[b]);
        uint32_t w = o->wave_chunks && o->wave_chunks < blocks[b].chunk_count ? o->wave_chunks : blocks[b].chunk_count;
        first_wave_bytes += (uint64_t)w * blocks[b].chunk_bytes;
    }
    uint64_t asked = 0; /* chunk bytes of the requests sent so far (first sends only) */

    struct mmsghdr tx[TX_BATCH];
    struct iovec txiov[TX_BATCH];
    uint32_t next = 0, open_reqs = 0;       /* next request never sent; requests sent and unfinished */
    uint64_t outstanding = 0;               /* bytes asked for and not answered */
    uint32_t done_reqs = 0;
    double start = now_s();
    int refused = 0;
    skymem_msg_t m;

    while (done_reqs < n_req && !refused) {
        double t = now_s();
        if (t - start > o->deadline_s)
            break;
        /* 1. new requests, as the window and the pace allow (always at least one in flight) */
        int nt = 0;
        double pace_wait = 0; /* > 0: the next request is held back this long by the pace */
        while (next < n_req && nt < TX_BATCH) {
            get_req_t *r = &reqs[next];
            uint64_t bytes = (uint64_t)r->count * blocks[r->block].chunk_bytes;
            if (open_reqs > 0 && outstanding + bytes > o->window_bytes)
                break;
            if (o->pace_Bps > 0 && asked + bytes > first_wave_bytes) {
                double at = (double)(asked + bytes - first_wave_bytes) / o->pace_Bps; /* since start */
                if (at > t - start) {
                    pace_wait = at - (t - start);
                    break;
                }
            }
            asked += bytes;
            int len = make_get_pkt(txbuf + (size_t)nt * GET_PKT_CAP, r, o->request_id + next, blocks, servers,
                                   o->station_id, o);
            r->sent = 1;
            r->last = t;
            if (len == 0) { /* nothing pending (cannot happen for fresh requests, but be safe) */
                r->missing = 0;
                done_reqs++;
                next++;
                continue;
            }
            txiov[nt].iov_base = txbuf + (size_t)nt * GET_PKT_CAP;
            txiov[nt].iov_len = (size_t)len;
            memset(&tx[nt], 0, sizeof tx[nt]);
            tx[nt].msg_hdr.msg_iov = &txiov[nt];
            tx[nt].msg_hdr.msg_iovlen = 1;
            tx[nt].msg_hdr.msg_name = &addrs[r->server];
            tx[nt].msg_hdr.msg_namelen = sizeof addrs[r->server];
            outstanding += bytes;
            open_reqs++;
            nt++;
            next++;
        }
        if (nt)
            send_batch(o->fd, tx, nt, o);

        /* 2. wait for replies */
        if (wait_readable(o->fd, reply_wait_s(o, nt == TX_BATCH, pace_wait)) < 0 && errno != EINTR) {
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
                if (ri >= next) {
                    o->ignored++;
                    continue;
                }
                get_req_t *r = &reqs[ri];
                skymem_bulk_block_t *b = &blocks[r->block];
                if (!from_server(&m, &servers[r->server], o))
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
                    o->ignored++; /* duplicate */
                    continue;
                }
                if (m.reply_kind == SKYMEM_REPLY_DATA) {
                    uint32_t want = chunk_len(b, cid, sealed);
                    if (m.desc.chunk_id != cid || m.desc.data_len != want || m.desc.chunk_count != b->chunk_count) {
                        o->ignored++;
                        continue;
                    }
                    uint8_t *dst = b->buf + (uint64_t)cid * plain_bytes(b, sealed);
                    if (!seal) {
                        if (!data_reply_ok(o, down, pkt, len, &m, want))
                            continue; /* as if lost: asked again after rto */
                        memcpy(dst, m.data, want);
                        b->status[cid] = SKYMEM_BULK_OK;
                    } else {
                        /* The seal first: a chunk that opens is the ground's own, in its place, and its CRC
                         * and trailer would prove nothing more (docs/RELIABILITY.md, "Sealed content").
                         * Only one that does not open is judged by them, to know whom to blame. */
                        int sr = skymem_open_chunk(seal, b->hash, cid, b->chunk_count, b->n_bytes, m.data, want, dst);
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
                if (b->prefix && *b->prefix == cid)
                    advance_prefix(b);
                if (o->first_reply_s == 0)
                    o->first_reply_s = tr - start;
                r->last = tr;
                if (r->abandoned)
                    continue; /* late answer to a request given up on: already accounted */
                outstanding -= b->chunk_bytes;
                if (--r->missing == 0) {
                    done_reqs++;
                    open_reqs--;
                }
            }
            if (k < RX_BATCH)
                break;
        }
        /* 4. re-ask for overdue requests (only their missing span) */
        t = now_s();
        nt = 0;
        for (uint32_t i = 0; i < next && nt < TX_BATCH; i++) {
            get_req_t *r = &reqs[i];
            if (!r->missing || r->abandoned || t - r->last < o->rto_s)
                continue;
            if (r->retries >= o->max_retries) {
                r->abandoned = 1;
                done_reqs++;
                open_reqs--;
                outstanding -= (uint64_t)r->missing * blocks[r->block].chunk_bytes;
                continue;
            }
            int len = make_get_pkt(txbuf + (size_t)nt * GET_PKT_CAP, r, o->request_id + i, blocks, servers,
                                   o->station_id, o);
            if (!len)
                continue;
            r->retries++;
            r->last = t;
            o->retransmits++;
            txiov[nt].iov_base = txbuf + (size_t)nt * GET_PKT_CAP;
            txiov[nt].iov_len = (size_t)len;
            memset(&tx[nt], 0, sizeof tx[nt]);
            tx[nt].msg_hdr.msg_iov = &txiov[nt];
            tx[nt].msg_hdr.msg_iovlen = 1;
            tx[nt].msg_hdr.msg_name = &addrs[r->server];
            tx[nt].msg_hdr.msg_namelen = sizeof addrs[r->server];
            nt++;
        }
        if (nt)
            send_batch(o->fd, tx, nt, o);
    }
    if (rc == 0)
        rc = refused ? SKYMEM_BULK_REFUSED : (done_reqs == n_req ? SKYMEM_BULK_DONE : SKYMEM_BULK_INCOMPLETE);
    if (rc == SKYMEM_BULK_DONE) /* abandoned requests count as done above: check the chunks */
        for (uint32_t b = 0; b < n_blocks && rc == SKYMEM_BULK_DONE; b++)
            for (uint32_t c = 0; c < blocks[b].chunk_count; c++)
                if (blocks[b].status[c] == SKYMEM_BULK_PENDING) {
                    rc = SKYMEM_BULK_INCOMPLETE;
                    break;
                }
out:
    free(reqs);
    free(addrs);
    free(txbuf);
    free(rx.data);
    skymem_seal_ctx_free(seal);
    return rc;
}

/* ======================================================================= set */

typedef struct {
    uint32_t block, chunk;
} chunk_ref_t;

/* Seals chunk cid of b into out (chunk_bytes of room): what one send of it carries. */
static int seal_for_send(skymem_seal_ctx_t *seal, const skymem_bulk_block_t *b, uint32_t cid, uint8_t *out)
{
    int sr = skymem_seal_chunk(seal, b->hash, cid, b->chunk_count, b->n_bytes,
                               b->buf + (uint64_t)cid * plain_bytes(b, 1), content_len(b, cid, 1), out);
    return sr == SKYMEM_SEAL_OK ? 0 : SKYMEM_BULK_E_CRYPTO;
}

int skymem_bulk_set(const skymem_bulk_server_t *servers, uint32_t n_servers_total, skymem_bulk_block_t *blocks,
                    uint32_t n_blocks, skymem_bulk_opts_t *o)
{
    int rc = check_args(servers, n_servers_total, blocks, n_blocks, o);
    if (rc)
        return rc;
    uint64_t total = 0;
    for (uint32_t b = 0; b < n_blocks; b++)
        total += blocks[b].chunk_count;
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
    rx_t rx;
    rx.data = NULL;
    if (!refs || !last || !tries || !addrs || !txbuf || rx_init(&rx) || (sealed && (!seal || !scratch))) {
        free(refs); free(last); free(tries); free(addrs); free(txbuf); free(rx.data);
        skymem_seal_ctx_free(seal); free(scratch);
        return SKYMEM_BULK_E_NOMEM;
    }
    uint64_t g = 0;
    for (uint32_t b = 0; b < n_blocks; b++)
        for (uint32_t c = 0; c < blocks[b].chunk_count; c++, g++) {
            refs[g].block = b;
            refs[g].chunk = c;
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
        uint32_t c_ = refs[gi].chunk, len_ = chunk_len(b_, c_, sealed);                                        \
        const uint8_t *d_ = b_->buf + (uint64_t)c_ * b_->chunk_bytes;                                          \
        if (seal) {                                                                                            \
            if ((rc = seal_for_send(seal, b_, c_, scratch)) != 0)                                              \
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
        if (wait_readable(o->fd, reply_wait_s(o, nt == TX_BATCH, pace_wait)) < 0 && errno != EINTR) {
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
                if (!from_server(&m, asked, o))
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
    return rc;
}
