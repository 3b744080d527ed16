/* node_evq.c -- binary min-heap on (due time, sequence). Bounded in entries and bytes. */
#include "node_evq.h"

#include <stdlib.h>
#include <string.h>

void evq_init(node_evq_t *q, size_t max_entries, size_t max_bytes)
{
    memset(q, 0, sizeof(*q));
    q->max_entries = max_entries;
    q->max_bytes = max_bytes;
}

void evq_free(node_evq_t *q)
{
    size_t i;
    for (i = 0; i < q->n; i++) free(q->v[i]);
    free(q->v);
    memset(q, 0, sizeof(*q));
}

static int before(const node_ev_t *a, const node_ev_t *b)
{
    return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

int evq_push(node_evq_t *q, uint64_t due_ns, uint8_t kind, const struct sockaddr_in *addr, const uint8_t *data,
             size_t len)
{
    node_ev_t *e;
    size_t i;
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
    e = (node_ev_t *)malloc(sizeof(*e) + len);
    if (e == NULL) return -1;
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
    /* give memory back after a burst so an idle node stays small */
    if (q->n == 0 && q->cap > 64) {
        free(q->v);
        q->v = NULL;
        q->cap = 0;
    }
    return top;
}
