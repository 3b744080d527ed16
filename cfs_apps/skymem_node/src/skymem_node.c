/* skymem_node.c -- the native satellite: one process = one satellite.
 *
 * Two non-blocking UDP sockets (ISL and ground), a timerfd for the link-delay
 * queue and migration timeouts, and a signalfd for SIGTERM/SIGINT, all in one
 * epoll set. The loop blocks in epoll_wait until a packet or the next timer,
 * so an idle satellite uses no CPU. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "node.h"

/* Receive slots: pages are touched only as large datagrams arrive. A relayed datagram is sent
 * from its slot (node_t.lent), so the slots are reused only after node_flush_tx. */
#define RX_VEC 64
static uint8_t rxbuf[RX_VEC][SKYMEM_MAX_PACKET + 1];
/* Socket buffers: a relay must hold a whole get window arriving at once from ten servers (the
 * ground's window is up to 24 MiB, link/fastpath.py; the kernel doubles the size asked, the other
 * half covering each datagram's overhead). Pages are used only while datagrams wait. */
#define NODE_SOCKET_BUFFER (32 << 20)

static int open_udp(node_t *n, const struct sockaddr_in *a, const char *what)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int sz = NODE_SOCKET_BUFFER;
    char host[INET_ADDRSTRLEN];
    if (fd < 0) {
        node_log(n, NODE_LOG_ERROR, "socket: %s", strerror(errno));
        return -1;
    }
    /* large kernel buffers absorb bursts (GET_CHUNKS, forwarding); they cost no process RSS */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    if (bind(fd, (const struct sockaddr *)a, sizeof(*a)) != 0) {
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        node_log(n, NODE_LOG_ERROR, "cannot bind %s port %s:%u: %s", what, host, ntohs(a->sin_port), strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int epoll_add(int ep, int fd)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

/* Arms the timerfd for the earliest of: next queued packet, next migration timeout. */
static void arm_timer(node_t *n)
{
    node_ev_t *e = evq_peek(&n->evq);
    uint64_t due = e ? e->due_ns : 0, mig = skymem_sat_next_deadline(&n->core) * 1000000ull;
    struct itimerspec its;
    if (mig && (due == 0 || mig < due)) due = mig;
    if (due == n->timer_armed_ns) return;
    memset(&its, 0, sizeof its);
    if (due) {
        its.it_value.tv_sec = (time_t)(due / 1000000000ull);
        its.it_value.tv_nsec = (long)(due % 1000000000ull);
    }
    timerfd_settime(n->timer_fd, TFD_TIMER_ABSTIME, &its, NULL); /* all-zero disarms */
    n->timer_armed_ns = due;
}

/* Reads up to NODE_RX_BATCH datagrams, RX_VEC at a time (one recvmmsg call each); what they
 * cause to be sent leaves in one sendmmsg per socket before the slots are read into again. */
static void drain_socket(node_t *n, int fd)
{
    static struct mmsghdr msgs[RX_VEC];
    static struct iovec iov[RX_VEC];
    static struct sockaddr_in src[RX_VEC];
    int total = 0, i, k;
    while (total < NODE_RX_BATCH) {
        for (i = 0; i < RX_VEC; i++) {
            iov[i].iov_base = rxbuf[i];
            iov[i].iov_len = sizeof rxbuf[i];
            memset(&msgs[i], 0, sizeof msgs[i]);
            msgs[i].msg_hdr.msg_name = &src[i];
            msgs[i].msg_hdr.msg_namelen = sizeof src[i];
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        k = recvmmsg(fd, msgs, RX_VEC, MSG_DONTWAIT, NULL);
        if (k <= 0) break; /* EAGAIN: drained */
        for (i = 0; i < k; i++) {
            if (msgs[i].msg_hdr.msg_namelen != sizeof src[i] || src[i].sin_family != AF_INET ||
                (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) || msgs[i].msg_len > SKYMEM_MAX_PACKET) {
                n->c.invalid++;
                continue;
            }
            n->lent = rxbuf[i];
            node_on_packet(n, fd == n->ground_fd, &src[i], rxbuf[i], msgs[i].msg_len);
            n->lent = NULL;
        }
        node_flush_tx(n); /* before recvmmsg overwrites a slot a queued datagram points into */
        total += k;
        if (k < RX_VEC) break;
    }
}

static int setup(node_t *n)
{
    sigset_t mask;
    int rc;
    n->plane = n->cfg.plane;
    n->sat = n->cfg.sat;
    n->planes = n->cfg.planes;
    n->sats = n->cfg.sats;
    n->delay_scale = n->cfg.delay_scale;
    n->loss = n->cfg.loss;
    n->rng = n->cfg.seed * 0x9E3779B97F4A7C15ull + (uint64_t)(n->plane * n->sats + n->sat) + 1u;
    n->isl_fd = n->ground_fd = n->timer_fd = n->signal_fd = n->epoll_fd = -1;
    evq_init(&n->evq, 65536, 64u << 20);
    node_sat_setup(n);
    if (node_auth_setup(n) != 0) return 2;

    if (n->cfg.peers[0]) {
        if (node_load_peers(n, n->cfg.peers) != 0) return 2;
    } else {
        uint32_t idx = n->plane * n->sats + n->sat;
        if (node_rule_addr(n, idx, n->cfg.isl_port_base, &n->self_isl) != 0 ||
            node_rule_addr(n, idx, n->cfg.ground_port_base, &n->self_ground) != 0) {
            fprintf(stderr, "skymem_node: --bind: '%s' is not an IPv4 address\n", n->cfg.bind);
            return 2;
        }
    }
    if (n->cfg.peers[0] && n->cfg.bind_given) { /* --bind overrides the peers file's address for ourselves */
        if (inet_pton(AF_INET, n->cfg.bind, &n->self_isl.sin_addr) != 1) {
            fprintf(stderr, "skymem_node: --bind: '%s' is not an IPv4 address\n", n->cfg.bind);
            return 2;
        }
        n->self_ground.sin_addr = n->self_isl.sin_addr;
    }

    node_cache_neighbours(n);
    if (n->cfg.tlm_port != 0) { /* validated by node_config */
        n->tlm_dest.sin_family = AF_INET;
        n->tlm_dest.sin_port = htons((uint16_t)n->cfg.tlm_port);
        inet_pton(AF_INET, n->cfg.tlm_host, &n->tlm_dest.sin_addr);
    }

    rc = skymem_store_create(&n->store, n->cfg.memory_budget, n->cfg.chunk_size, skymem_sat_store_evicted, &n->core);
    n->core.store = n->store;
    if (rc == SKYMEM_STORE_E_NO_SPACE) {
        fprintf(stderr, "skymem_node: --memory-budget %llu is too small for one %u-byte chunk\n",
                (unsigned long long)n->cfg.memory_budget, n->cfg.chunk_size);
        return 2;
    }
    if (rc != SKYMEM_STORE_OK) {
        fprintf(stderr, "skymem_node: cannot allocate the chunk store (%d)\n", rc);
        return 1;
    }

    n->isl_fd = open_udp(n, &n->self_isl, "ISL");
    if (n->isl_fd < 0) return 1;
    n->ground_fd = open_udp(n, &n->self_ground, "ground");
    if (n->ground_fd < 0) return 1;
    n->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    n->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    n->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (n->timer_fd < 0 || n->signal_fd < 0 || n->epoll_fd < 0 || epoll_add(n->epoll_fd, n->isl_fd) ||
        epoll_add(n->epoll_fd, n->ground_fd) || epoll_add(n->epoll_fd, n->timer_fd) ||
        epoll_add(n->epoll_fd, n->signal_fd)) {
        node_log(n, NODE_LOG_ERROR, "event setup failed: %s", strerror(errno));
        return 1;
    }
    node_tx_setup(n);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static void teardown(node_t *n)
{
    if (n->epoll_fd >= 0) close(n->epoll_fd);
    if (n->signal_fd >= 0) close(n->signal_fd);
    if (n->timer_fd >= 0) close(n->timer_fd);
    if (n->isl_fd >= 0) close(n->isl_fd);
    if (n->ground_fd >= 0) close(n->ground_fd);
    evq_free(&n->evq);
    skymem_store_destroy(n->store);
    free(n->peer_isl);
    node_auth_teardown(n);
}

int main(int argc, char **argv)
{
    static node_t node; /* large (tx buffer): static, pages touched only when used */
    node_t *n = &node;
    int rc, running = 1;
    node_clock_start(n);
    n->on_packet = node_on_packet; /* the link layer's delayed ground datagrams */
    rc = node_config_parse(&n->cfg, argc, argv);
    if (rc < 0) return 2;
    if (rc > 0) return 0;
    n->start_mono_ns = node_mono_ns();
    rc = setup(n);
    if (rc != 0) {
        teardown(n);
        return rc;
    }
    node_log(n, NODE_LOG_INFO, "up: grid %ux%u, ISL port %u, ground port %u, budget %llu bytes, chunk %u bytes",
             n->planes, n->sats, ntohs(n->self_isl.sin_port), ntohs(n->self_ground.sin_port),
             (unsigned long long)n->cfg.memory_budget, n->cfg.chunk_size);

    while (running) {
        struct epoll_event evs[8];
        int i, k;
        arm_timer(n);
        k = epoll_wait(n->epoll_fd, evs, 8, -1);
        if (k < 0) {
            if (errno == EINTR) continue;
            node_log(n, NODE_LOG_ERROR, "epoll_wait: %s", strerror(errno));
            break;
        }
        for (i = 0; i < k; i++) {
            int fd = evs[i].data.fd;
            if (fd == n->isl_fd || fd == n->ground_fd) {
                drain_socket(n, fd);
            } else if (fd == n->timer_fd) {
                uint64_t exp, now;
                if (read(n->timer_fd, &exp, sizeof exp) < 0) { /* spurious wakeup: nothing to read */
                }
                n->timer_armed_ns = 0;
                now = node_mono_ns();
                node_run_due(n, now);
                skymem_sat_tick(&n->core);
            } else if (fd == n->signal_fd) {
                struct signalfd_siginfo si;
                if (read(n->signal_fd, &si, sizeof si) == (ssize_t)sizeof si)
                    node_log(n, NODE_LOG_INFO, "signal %u: shutting down", si.ssi_signo);
                running = 0;
            }
        }
        /* packets queued with zero delay (socket retries) may already be due */
        if (evq_peek(&n->evq) && evq_peek(&n->evq)->due_ns <= node_mono_ns()) node_run_due(n, node_mono_ns());
        node_flush_tx(n);
    }
    node_flush_tx(n);
    teardown(n);
    return 0;
}
