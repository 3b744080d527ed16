/* node_tx.h -- datagrams waiting to leave one socket, sent with one sendmmsg.
 *
 * A batch holds up to NODE_TX_VEC datagrams. Each is either copied into the
 * batch's own slot (a packet the node built, or one from the delay queue) or
 * lent: a pointer to a receive slot that the caller promises not to reuse
 * before node_tx_flush. Lending is how a relay forwards without copying: the
 * datagram goes out from the buffer recvmmsg wrote it into. */
#ifndef NODE_TX_H
#define NODE_TX_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#define NODE_TX_VEC 64

typedef struct {
    int fd;
    int count;
    struct sockaddr_in addr[NODE_TX_VEC];
    const uint8_t *data[NODE_TX_VEC]; /* lent receive slot, or copies + i * copy_stride */
    uint32_t len[NODE_TX_VEC];
    uint8_t *copies;     /* NODE_TX_VEC slots of copy_stride bytes (caller's storage) */
    size_t copy_stride;
} node_tx_t;

/* Called for a datagram the kernel would not take (err = errno of the failed send). */
typedef void (*node_tx_fail_fn)(void *ctx, int fd, const struct sockaddr_in *addr, const uint8_t *pkt, size_t len,
                                int err);

void node_tx_init(node_tx_t *b, int fd, uint8_t *copies, size_t copy_stride);
/* 1 when no room is left: flush before adding. */
int node_tx_full(const node_tx_t *b);
/* Adds a datagram; lent != 0 keeps the pointer instead of copying (len <= copy_stride when copied). */
void node_tx_add(node_tx_t *b, const struct sockaddr_in *addr, const uint8_t *pkt, size_t len, int lent);
/* Sends everything queued (sendmmsg, non-blocking); a datagram the kernel refuses goes to fail
 * and the rest still go. Returns the number the kernel took; the batch is empty afterwards. */
int node_tx_flush(node_tx_t *b, node_tx_fail_fn fail, void *ctx);

#endif
