/*
 * skymem_bulk_batches.h -- what a fast-path call puts on the wire, in batches (internal to skymem_bulk*.c).
 *
 * Datagrams leave TX_BATCH at a time (sendmmsg) and are read RX_BATCH at a time (recvmmsg). A get's GET_CHUNKS
 * requests are planned once, in the order they leave (get_req_t, bulk_get_plan); each send carries only the
 * still-pending span of its request. A set's SET_CHUNK carries one chunk. Keyed, every packet, resends included,
 * is signed with a sequence never used before. (A file including this defines _GNU_SOURCE first: recvmmsg and
 * sendmmsg are Linux's.)
 */
#ifndef SKYMEM_BULK_BATCHES_H
#define SKYMEM_BULK_BATCHES_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "skymem_bulk.h"
#include "skymem_codec.h"

#define RX_BATCH 64
#define TX_BATCH 64
#define RX_SLOT 65536   /* a datagram at most; a set's send slot too */
#define GET_PKT_CAP 128 /* a GET_CHUNKS with its authentication trailer: 8 + 20 + 44 + 44 bytes */

/* Datagrams queued to leave together: slot i at data + i * slot. */
typedef struct {
    uint8_t *data;
    size_t slot;
    int n;
    struct mmsghdr msgs[TX_BATCH];
    struct iovec iov[TX_BATCH];
} bulk_tx_t;

/* Receive buffers: datagram i at data + i * RX_SLOT, msgs[i].msg_len long. */
typedef struct {
    uint8_t *data;
    struct mmsghdr msgs[RX_BATCH];
    struct iovec iov[RX_BATCH];
} bulk_rx_t;

/* One GET_CHUNKS request: chunk ids first, first + stride, ... (count of them) of a block, from one server. */
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

struct bulk_coded; /* skymem_bulk_stripes.h */

/* Socket addresses of the servers' ground ports (NULL when out of memory). */
struct sockaddr_in *bulk_addrs(const skymem_bulk_server_t *servers, uint32_t n);

static inline uint8_t *bulk_tx_slot(bulk_tx_t *tx) { return tx->data + (size_t)tx->n * tx->slot; }
/* Queues the packet of len bytes written at bulk_tx_slot, to `to`. */
void bulk_tx_queue(bulk_tx_t *tx, size_t len, struct sockaddr_in *to);
/* Sends what is queued (what the kernel does not take is resent later by the timers) and empties the batch. */
void bulk_tx_send(int fd, bulk_tx_t *tx, skymem_bulk_opts_t *o);

int bulk_rx_init(bulk_rx_t *rx); /* 0, or -1 when out of memory */
/* Datagrams read without waiting (0: none), or -1 on a socket error. */
int bulk_rx_batch(int fd, bulk_rx_t *rx);

/* A get's requests in the order they leave, into out (NULL: only count them). cod: the blocks' coded state, or NULL
 * (each chunk's role then worked out one by one). Returns how many. */
uint32_t bulk_get_plan(const skymem_bulk_block_t *blocks, const struct bulk_coded *cod, uint32_t n_blocks,
                       uint32_t wave, int doubling, get_req_t *out);

/* The GET_CHUNKS for r's still-pending span, request id rid, into pkt (GET_PKT_CAP): its length, or 0 when nothing is
 * pending or the reserved sequences ran out. */
int bulk_get_pkt(uint8_t *pkt, const get_req_t *r, uint32_t rid, const skymem_bulk_block_t *blocks,
                 const skymem_bulk_server_t *servers, skymem_bulk_opts_t *o);

/* The SET_CHUNK of chunk cid of b carrying data (len bytes, as they travel) to `to`, request id rid, into pkt (cap):
 * its length, or 0 when it does not build or the reserved sequences ran out. */
int bulk_set_pkt(uint8_t *pkt, size_t cap, const skymem_bulk_block_t *b, uint32_t cid, const uint8_t *data,
                 uint32_t len, const skymem_bulk_server_t *to, uint32_t rid, skymem_bulk_opts_t *o);

#endif /* SKYMEM_BULK_BATCHES_H */
