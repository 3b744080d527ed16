/* node_tx.c -- one sendmmsg per batch of datagrams (see node_tx.h). */
#include "node_tx.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

void node_tx_init(node_tx_t *b, int fd, uint8_t *copies, size_t copy_stride)
{
    memset(b, 0, sizeof(*b));
    b->fd = fd;
    b->copies = copies;
    b->copy_stride = copy_stride;
}

int node_tx_full(const node_tx_t *b) { return b->count >= NODE_TX_VEC; }

void node_tx_add(node_tx_t *b, const struct sockaddr_in *addr, const uint8_t *pkt, size_t len, int lent)
{
    int i = b->count++;
    b->addr[i] = *addr;
    b->len[i] = (uint32_t)len;
    if (lent) {
        b->data[i] = pkt;
    } else {
        uint8_t *slot = b->copies + (size_t)i * b->copy_stride; /* pages touched only by large packets */
        memcpy(slot, pkt, len);
        b->data[i] = slot;
    }
}

int node_tx_flush(node_tx_t *b, node_tx_fail_fn fail, void *ctx)
{
    struct mmsghdr msgs[NODE_TX_VEC];
    struct iovec iov[NODE_TX_VEC];
    int i, sent = 0, taken = 0;
    if (b->count == 0) return 0;
    for (i = 0; i < b->count; i++) {
        iov[i].iov_base = (void *)b->data[i];
        iov[i].iov_len = b->len[i];
        memset(&msgs[i], 0, sizeof msgs[i]);
        msgs[i].msg_hdr.msg_name = &b->addr[i];
        msgs[i].msg_hdr.msg_namelen = sizeof b->addr[i];
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    while (sent < b->count) {
        int k = sendmmsg(b->fd, msgs + sent, (unsigned)(b->count - sent), MSG_DONTWAIT);
        if (k <= 0) {
            /* sendmmsg stops at the first datagram it cannot send: hand that one back, go on with the rest */
            int err = k < 0 ? errno : EIO;
            if (fail) fail(ctx, b->fd, &b->addr[sent], b->data[sent], b->len[sent], err);
            sent++;
            continue;
        }
        sent += k;
        taken += k;
    }
    b->count = 0;
    return taken;
}
