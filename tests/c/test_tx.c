/* test_tx.c -- the node's send batches: copied and lent datagrams, one sendmmsg, a refused
 * datagram handed back while the rest still go, the batch empty afterwards. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "../../cfs_apps/skymem_node/src/node_tx.h"

static uint8_t copies[NODE_TX_VEC][2048];
static int failed, failed_err;

static void on_fail(void *ctx, int fd, const struct sockaddr_in *addr, const uint8_t *pkt, size_t len, int err)
{
    (void)ctx, (void)fd, (void)addr, (void)pkt, (void)len;
    failed++;
    failed_err = err;
}

static int udp_bound(struct sockaddr_in *a)
{
    socklen_t sl = sizeof(*a);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)a, sizeof(*a)) != 0 || getsockname(fd, (struct sockaddr *)a, &sl) != 0)
        return -1;
    return fd;
}

/* Next datagram within 1 s, or -1. */
static int recv_one(int fd, uint8_t *buf, size_t cap)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return -1;
    return (int)recv(fd, buf, cap, 0);
}

int main(void)
{
    node_tx_t b;
    struct sockaddr_in dst, src, nowhere;
    uint8_t copied[100], lent[100], got[200];
    int out = udp_bound(&src), in = udp_bound(&dst), i;
    CHECK(out >= 0 && in >= 0);
    node_tx_init(&b, out, &copies[0][0], sizeof copies[0]);
    CHECK_EQ_INT(node_tx_flush(&b, on_fail, NULL), 0); /* empty: nothing sent */

    /* a copied datagram leaves as it was when added; a lent one as it is at the flush */
    memset(copied, 'c', sizeof copied);
    memset(lent, 'l', sizeof lent);
    node_tx_add(&b, &dst, copied, sizeof copied, 0);
    node_tx_add(&b, &dst, lent, 60, 1);
    memset(copied, 'X', sizeof copied);
    lent[0] = 'L';
    CHECK_EQ_INT(node_tx_flush(&b, on_fail, NULL), 2);
    CHECK_EQ_INT(b.count, 0);
    CHECK_EQ_INT(recv_one(in, got, sizeof got), 100);
    CHECK(got[0] == 'c' && got[99] == 'c');
    CHECK_EQ_INT(recv_one(in, got, sizeof got), 60);
    CHECK(got[0] == 'L' && got[59] == 'l');

    /* full at NODE_TX_VEC; one refused datagram (port 0) goes to the callback, the others still go */
    memset(&nowhere, 0, sizeof nowhere);
    nowhere.sin_family = AF_INET;
    nowhere.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (i = 0; i < NODE_TX_VEC; i++) {
        uint8_t v = (uint8_t)i;
        CHECK(!node_tx_full(&b));
        node_tx_add(&b, i == 5 ? &nowhere : &dst, &v, 1, 0);
    }
    CHECK(node_tx_full(&b));
    CHECK_EQ_INT(node_tx_flush(&b, on_fail, NULL), NODE_TX_VEC - 1);
    CHECK_EQ_INT(failed, 1);
    CHECK(failed_err != 0);
    for (i = 0; i < NODE_TX_VEC; i++) {
        if (i == 5) continue;
        CHECK_EQ_INT(recv_one(in, got, sizeof got), 1);
        CHECK_EQ_INT(got[0], i); /* in order */
    }
    close(out);
    close(in);
    return check_report("tx");
}
