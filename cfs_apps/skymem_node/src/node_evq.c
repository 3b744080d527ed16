/* node_evq.c -- binary min-heap on (due time, sequence), events carved from shared blocks
 * (see node_evq.h). Bounded in entries, packet bytes and block memory. */
#include "node_evq.h"

#include <stdlib.h>
#include <string.h>

struct node_evblock {
    size_t used, cap; /* bytes of mem carved / allocated */
    size_t live;      /* events carved from it and not yet released (size_t: keeps mem 8-byte aligned) */
    uint8_t mem[];
};

/* Events start on 8-byte boundaries (their 64-bit fields). */
static size_t event_size(size_t len) { return (sizeof(node_ev_t) + len + 7u) & ~(size_t)7u; }

void evq_init(node_evq_t *q, size_t max_entries, size_t max_bytes)
{
    memset(q, 0, sizeof(*q));
    q->max_entries = max_entries;
    q->max_bytes = max_bytes;
}

static void block_free(node_evq_t *q, node_evblock_t *b)
{
    q->block_bytes -= b->cap;
    if (b == q->open) q->open = NULL;
    if (b == q->spare) q->spare = NULL;
    free(b);
}

/* A block no event uses any more: kept as the spare while packets are queued (its pages stay
 * mapped for the next one), given back when the queue is idle. */
static void block_done(node_evq_t *q, node_evblock_t *b)
{
    if (q->n > 0 && b == q->open) {
        b->used = 0; /* still filling: start it again from the top */
    } else if (q->n > 0 && q->spare == NULL && b->cap == NODE_EVQ_BLOCK) {
        b->used = 0;
        q->spare = b;
    } else {
        block_free(q, b);
    }
    if (q->n == 0) { /* idle: an idle node stays small */
        if (q->spare) block_free(q, q->spare);
        if (q->open && q->open->live == 0) block_free(q, q->open);
    }
}

void evq_release(node_evq_t *q, node_ev_t *e)
{
    if (--e->block->live == 0) block_done(q, e->block);
}

void evq_free(node_evq_t *q)
{
    size_t i;
    for (i = 0; i < q->n; i++) evq_release(q, q->v[i]);
    q->n = 0;
    if (q->open) block_free(q, q->open);
    if (q->spare) block_free(q, q->spare);
    free(q->v);
    memset(q, 0, sizeof(*q));
}

/* Room for need bytes in the open block, opening a new block when it is full. */
static node_evblock_t *room(node_evq_t *q, size_t need)
{
    node_evblock_t *b = q->open;
    size_t cap = need > NODE_EVQ_BLOCK ? need : NODE_EVQ_BLOCK;
    if (b && b->used + need <= b->cap) return b;
    if (b && b->live == 0) block_free(q, b); /* nothing in it any more */
    q->open = NULL;                          /* a full block is freed by its last release */
    if (q->spare && cap == NODE_EVQ_BLOCK) {
        q->open = q->spare;
        q->spare = NULL;
        return q->open;
    }
    if (q->block_bytes + cap > 2 * q->max_bytes + 2 * NODE_EVQ_BLOCK) return NULL; /* blocks pinned by late events */
    b = (node_evblock_t *)malloc(sizeof(*b) + cap);
    if (b == NULL) return NULL;
    b->used = 0;
    b->cap = cap;
    b->live = 0;
    q->block_bytes += cap;
    q->open = b;
    return b;
}

static int before(const node_ev_t *a, const node_ev_t *b)
{
    return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

int evq_push(node_evq_t *q, uint64_t due_ns, uint8_t kind, const struct sockaddr_in *addr, const uint8_t *data,
             size_t len)
{
    node_evblock_t *b;
    node_ev_t *e;
    size_t i, need = event_size(len);
    if (q->n >= q->max_entries || q->bytes + len > q->max_bytes) return -1;
    if (q->n == q->cap) {
        size_t nc = q->cap ? q->cap * 2 : 64;
        node_ev_t **nv;
        if (nc > q->max_entries) nc = q->max_entries;
        nv = (node_ev_t **)realloc(q->v, nc * sizeof(*nv));
        if (nv == NULL) return -1;
        q->v = nv;
        q->cap = nc;
    }
    b = room(q, need);
    if (b == NULL) return -1;
    e = (node_ev_t *)(b->mem + b->used);
    b->used += need;
    b->live++;
    e->block = b;
    e->due_ns = due_ns;
    e->seq = q->seq++;
    e->kind = kind;
    e->addr = *addr;
    e->len = (uint32_t)len;
    memcpy(e->data, data, len);
    i = q->n++;
    while (i > 0 && before(e, q->v[(i - 1) / 2])) { /* sift up */
        q->v[i] = q->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->v[i] = e;
    q->bytes += len;
    return 0;
}

node_ev_t *evq_peek(const node_evq_t *q) { return q->n ? q->v[0] : NULL; }

node_ev_t *evq_pop(node_evq_t *q)
{
    node_ev_t *top, *last;
    size_t i = 0;
    if (q->n == 0) return NULL;
    top = q->v[0];
    last = q->v[--q->n];
    while (2 * i + 1 < q->n) { /* sift down */
        size_t c = 2 * i + 1;
        if (c + 1 < q->n && before(q->v[c + 1], q->v[c])) c++;
        if (!before(q->v[c], last)) break;
        q->v[i] = q->v[c];
        i = c;
    }
    if (q->n) q->v[i] = last;
    q->bytes -= top->len;
    /* give the heap array back after a burst so an idle node stays small */
    if (q->n == 0 && q->cap > 64) {
        free(q->v);
        q->v = NULL;
        q->cap = 0;
    }
    return top;
}
