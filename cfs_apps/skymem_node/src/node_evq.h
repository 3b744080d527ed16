/* node_evq.h -- bounded timer heap of pending packets (link delay emulation). */
#ifndef NODE_EVQ_H
#define NODE_EVQ_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

enum { EV_TX_ISL = 1, EV_TX_GROUND = 2, EV_RX_GROUND = 3 };

typedef struct {
    uint64_t due_ns;  /* CLOCK_MONOTONIC */
    uint64_t seq;     /* FIFO among equal due times */
    uint8_t kind;     /* EV_* */
    struct sockaddr_in addr; /* destination (TX) or source (RX) */
    uint32_t len;
    uint8_t data[];   /* len bytes */
} node_ev_t;

typedef struct {
    node_ev_t **v;
    size_t n, cap;
    size_t max_entries;
    size_t bytes, max_bytes;
    uint64_t seq;
} node_evq_t;

void evq_init(node_evq_t *q, size_t max_entries, size_t max_bytes);
void evq_free(node_evq_t *q);
/* Copies the packet into a new event. Returns 0, or -1 if the queue is full (packet dropped). */
int evq_push(node_evq_t *q, uint64_t due_ns, uint8_t kind, const struct sockaddr_in *addr, const uint8_t *data,
             size_t len);
/* Earliest event or NULL. */
node_ev_t *evq_peek(const node_evq_t *q);
/* Removes the earliest event; the caller frees it with free(). */
node_ev_t *evq_pop(node_evq_t *q);

#endif
