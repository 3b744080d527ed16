/* node_evq.h -- bounded timer heap of pending packets (link delay emulation).
 *
 * A binary min-heap of events ordered by (due time, sequence), so equal due times leave in
 * FIFO order. Events are not allocated one by one: they are carved, in push order, out of
 * blocks of NODE_EVQ_BLOCK bytes (one allocation holds dozens of 6 KB packets). A block every
 * event of which has been released is reused: the one being filled starts again, one more is
 * kept as a spare (its pages stay mapped), others are freed; when the queue is empty the spare
 * and the open block are freed too (an idle node gives its memory back). Bounded in events,
 * in packet bytes, and in block memory (a block lives as long as its last event). */
#ifndef NODE_EVQ_H
#define NODE_EVQ_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

enum { EV_TX_ISL = 1, EV_TX_GROUND = 2, EV_RX_GROUND = 3 };

#define NODE_EVQ_BLOCK (256u * 1024u)

typedef struct node_evblock node_evblock_t;

typedef struct {
    uint64_t due_ns;  /* CLOCK_MONOTONIC */
    uint64_t seq;     /* FIFO among equal due times */
    node_evblock_t *block; /* the block it was carved from */
    uint8_t kind;     /* EV_* */
    struct sockaddr_in addr; /* destination (TX) or source (RX) */
    uint32_t len;
    uint8_t data[];   /* len bytes */
} node_ev_t;

typedef struct {
    node_ev_t **v;
    size_t n, cap;
    size_t max_entries;
    size_t bytes, max_bytes;   /* packet bytes queued, and their bound */
    size_t block_bytes;        /* memory held in blocks (bounded by 2 x max_bytes + two blocks) */
    node_evblock_t *open;      /* the block being filled */
    node_evblock_t *spare;     /* an empty block kept for the next one while packets are queued */
    uint64_t seq;
} node_evq_t;

void evq_init(node_evq_t *q, size_t max_entries, size_t max_bytes);
/* Frees every queued event and block (events popped and not yet released must be released first). */
void evq_free(node_evq_t *q);
/* Copies the packet into a new event. Returns 0, or -1 if the queue is full (packet dropped). */
int evq_push(node_evq_t *q, uint64_t due_ns, uint8_t kind, const struct sockaddr_in *addr, const uint8_t *data,
             size_t len);
/* Earliest event or NULL. */
node_ev_t *evq_peek(const node_evq_t *q);
/* Removes the earliest event; it stays valid until evq_release. */
node_ev_t *evq_pop(node_evq_t *q);
/* Gives back a popped event's memory. */
void evq_release(node_evq_t *q, node_ev_t *e);

#endif
