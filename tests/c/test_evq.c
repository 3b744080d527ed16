/* test_evq.c -- the node's delay queue: earliest first, FIFO among equals, bounded; events share
 * blocks, which are reused, and given back when the queue is idle. */
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
        evq_release(&q, e);
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
        evq_release(&q, e);
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(evq_pop(&q) == NULL && evq_peek(&q) == NULL && q.bytes == 0);
    CHECK(q.open == NULL && q.block_bytes == 0); /* idle: every block given back */
    evq_free(&q);

    { /* 6 KB packets: dozens per block; a steady flow reuses its block; data intact */
        static uint8_t big[6144];
        node_ev_t *held;
        size_t blocks_after_burst;
        evq_init(&q, 65536, 64u << 20);
        for (i = 0; i < 200; i++) {
            memset(big, (int)(i & 0xFF), sizeof big);
            CHECK_EQ_INT(evq_push(&q, i, EV_TX_ISL, &a, big, sizeof big), 0);
        }
        blocks_after_burst = q.block_bytes / NODE_EVQ_BLOCK;
        CHECK(blocks_after_burst >= 4 && blocks_after_burst <= 6); /* 200 x 6 KB in 256 KiB blocks */
        for (i = 0; i < 200; i++) {
            node_ev_t *e = evq_pop(&q);
            CHECK(e != NULL && e->due_ns == i && e->len == sizeof big && e->data[0] == (uint8_t)(i & 0xFF) &&
                  e->data[sizeof big - 1] == (uint8_t)(i & 0xFF));
            if (e) evq_release(&q, e);
        }
        CHECK(q.open == NULL && q.block_bytes == 0);
        /* one packet always waiting (the queue never idle), 1,000 through it: one block, reused */
        CHECK_EQ_INT(evq_push(&q, 0, EV_TX_ISL, &a, big, sizeof big), 0);
        for (i = 1; i <= 1000; i++) {
            CHECK_EQ_INT(evq_push(&q, i, EV_TX_ISL, &a, big, sizeof big), 0);
            held = evq_pop(&q);
            if (held) evq_release(&q, held);
        }
        CHECK(q.block_bytes <= 2u * NODE_EVQ_BLOCK); /* the open block and at most one spare */
        evq_free(&q);
    }
    { /* a late event pins its block: block memory is bounded too (here 2 x 64 KiB + two blocks) */
        static uint8_t big[6144];
        int refused = 0;
        evq_init(&q, 65536, 64u * 1024u);
        for (i = 0; i < 2000 && !refused; i++) {
            node_ev_t *e;
            if (evq_push(&q, 1000000 + i, EV_TX_ISL, &a, big, 100) != 0) refused = 1; /* late: stays queued */
            if (evq_push(&q, i, EV_TX_ISL, &a, big, sizeof big) != 0) refused = 1;
            e = evq_pop(&q); /* the early one leaves at once */
            if (e) evq_release(&q, e);
        }
        CHECK(refused);
        CHECK(q.block_bytes <= 2u * 64u * 1024u + 2u * NODE_EVQ_BLOCK);
        evq_free(&q);
    }
    return check_report("evq");
}
