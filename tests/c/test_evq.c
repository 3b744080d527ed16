/* test_evq.c -- the node's delay queue: earliest first, FIFO among equals, bounded. */
#include <string.h>

#include "check.h"
#include "../../cfs_apps/skymem_node/src/node_evq.h"

int main(void)
{
    node_evq_t q;
    struct sockaddr_in a;
    uint8_t data[100];
    uint32_t x = 7, i;
    uint64_t last_due = 0, last_seq = 0;
    int bad = 0;
    memset(&a, 0, sizeof a);
    memset(data, 1, sizeof data);
    evq_init(&q, 1000, 50000);
    for (i = 0; i < 500; i++) CHECK_EQ_INT(evq_push(&q, i, EV_TX_ISL, &a, data, 100), 0);
    CHECK_EQ_INT(q.bytes, 50000);
    CHECK_EQ_INT(evq_push(&q, 1, EV_TX_ISL, &a, data, 1), -1); /* byte bound */
    {
        node_ev_t *e = evq_pop(&q);
        CHECK(e != NULL && e->due_ns == 0 && e->len == 100 && e->data[1] == 1);
        free(e);
    }
    CHECK_EQ_INT(evq_push(&q, 1, EV_TX_ISL, &a, data, 100), 0);
    evq_free(&q);

    evq_init(&q, 1000, 1000000);
    for (i = 0; i < 1000; i++) {
        x = x * 1103515245u + 12345u;
        CHECK_EQ_INT(evq_push(&q, (x >> 16) % 50, EV_TX_GROUND, &a, data, 10), 0);
    }
    CHECK_EQ_INT(evq_push(&q, 0, EV_TX_GROUND, &a, data, 10), -1); /* entry bound */
    for (i = 0; i < 1000; i++) {
        node_ev_t *e = evq_pop(&q);
        if (e == NULL) {
            bad++;
            break;
        }
        if (e->due_ns < last_due || (e->due_ns == last_due && i && e->seq < last_seq)) bad++;
        last_due = e->due_ns;
        last_seq = e->seq;
        free(e);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(evq_pop(&q) == NULL && evq_peek(&q) == NULL && q.bytes == 0);
    evq_free(&q);
    return check_report("evq");
}
