/* node_link.c -- satellite addresses and the emulated links: light-time delay,
 * bandwidth cap (token bucket), loss / duplication / reordering / corruption. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "node.h"
#include "skymem_geometry.h"

#define RETRY_NS 200000ull   /* socket buffer full: try again after 0.2 ms */
#define BURST_BYTES 65536.0  /* token bucket depth */

/* Without --peers, addresses follow a rule. Shared (the default): every satellite on --bind,
 * satellite idx on port base + idx. Per-satellite: satellite idx on address --bind + idx, on the
 * base port itself; a 16,384-satellite grid then needs two ports, which stay below the kernel's
 * ephemeral range, and 127.0.0.0/8 has an address for every satellite. */
int node_rule_addr(const node_t *n, uint32_t idx, uint32_t port_base, struct sockaddr_in *out)
{
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    if (inet_pton(AF_INET, n->cfg.bind, &out->sin_addr) != 1) return -1;
    if (n->cfg.per_satellite_addresses) {
        out->sin_addr.s_addr = htonl(ntohl(out->sin_addr.s_addr) + idx); /* range checked by node_config */
        out->sin_port = htons((uint16_t)port_base);
    } else {
        out->sin_port = htons((uint16_t)(port_base + idx));
    }
    return 0;
}

int node_isl_addr(const node_t *n, uint32_t plane, uint32_t sat, struct sockaddr_in *out)
{
    uint32_t idx;
    if (plane >= n->planes || sat >= n->sats) return -1;
    idx = plane * n->sats + sat;
    if (n->peer_isl) {
        *out = n->peer_isl[idx];
        return out->sin_port ? 0 : -1;
    }
    return node_rule_addr(n, idx, n->cfg.isl_port_base, out);
}

void node_cache_neighbours(node_t *n)
{
    int d;
    for (d = SKYMEM_DIR_NORTH; d <= SKYMEM_DIR_EAST; d++) {
        uint32_t np, ns;
        skymem_neighbour(n->planes, n->sats, n->plane, n->sat, (skymem_dir_t)d, &np, &ns);
        n->nb_ok[d] = node_isl_addr(n, np, ns, &n->nb_isl[d]) == 0;
    }
}

/* --peers FILE: "plane sat host isl_port ground_port" per line; '#' comments.
 * Our own line also gives our bind address and ports. */
int node_load_peers(node_t *n, const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int lineno = 0, self_found = 0;
    size_t count = (size_t)n->planes * n->sats;
    if (f == NULL) {
        fprintf(stderr, "skymem_node: cannot open peers file %s: %s\n", path, strerror(errno));
        return -1;
    }
    n->peer_isl = (struct sockaddr_in *)calloc(count, sizeof(*n->peer_isl));
    if (n->peer_isl == NULL) {
        fclose(f);
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        unsigned p, s, ip, gp;
        char host[64], extra[2];
        struct sockaddr_in a;
        int k;
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0' || line[strspn(line, " \t")] == '#') continue;
        k = sscanf(line, "%u %u %63s %u %u %1s", &p, &s, host, &ip, &gp, extra);
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        if (k != 5 || p >= n->planes || s >= n->sats || ip < 1 || ip > 65535 || gp < 1 || gp > 65535 ||
            inet_pton(AF_INET, host, &a.sin_addr) != 1) {
            fprintf(stderr, "skymem_node: %s:%d: expected 'plane sat ipv4 isl_port ground_port' in range\n", path,
                    lineno);
            fclose(f);
            return -1;
        }
        a.sin_port = htons((uint16_t)ip);
        n->peer_isl[p * n->sats + s] = a;
        if (p == n->plane && s == n->sat) {
            self_found = 1;
            n->self_isl = a;
            n->self_ground = a;
            n->self_ground.sin_port = htons((uint16_t)gp);
        }
    }
    fclose(f);
    if (!self_found) {
        fprintf(stderr, "skymem_node: %s has no line for satellite (%u,%u)\n", path, n->plane, n->sat);
        return -1;
    }
    return 0;
}

/* xorshift64*: reproducible fault emulation from --seed. */
double node_rand01(node_t *n)
{
    n->rng ^= n->rng >> 12;
    n->rng ^= n->rng << 25;
    n->rng ^= n->rng >> 27;
    return (double)((n->rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

/* Datagrams are gathered per socket and sent with one sendmmsg per batch (node_tx.c); the
 * batches are flushed before a receive slot is reused and before the loop blocks again. */
static uint8_t isl_copies[NODE_TX_VEC][SKYMEM_MAX_PACKET]; /* pages touched only by large packets */
static uint8_t ground_copies[NODE_TX_VEC][SKYMEM_MAX_PACKET];

void node_tx_setup(node_t *n)
{
    node_tx_init(&n->tx_isl, n->isl_fd, &isl_copies[0][0], SKYMEM_MAX_PACKET);
    node_tx_init(&n->tx_ground, n->ground_fd, &ground_copies[0][0], SKYMEM_MAX_PACKET);
}

static void retry_or_drop(void *ctx, int fd, const struct sockaddr_in *addr, const uint8_t *pkt, size_t len, int err)
{
    node_t *n = (node_t *)ctx;
    if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS) {
        /* socket buffer full: keep it (bounded queue) rather than drop */
        if (evq_push(&n->evq, node_mono_ns() + RETRY_NS, fd == n->isl_fd ? EV_TX_ISL : EV_TX_GROUND, addr, pkt, len) ==
            0)
            return;
    }
    n->c.dropped++;
    node_log(n, NODE_LOG_DEBUG, "send failed (%s), dropped", strerror(err));
}

static void flush_one(node_t *n, node_tx_t *b)
{
    uint32_t k = (uint32_t)node_tx_flush(b, retry_or_drop, n);
    n->c.tx_packets += k;
    if (b == &n->tx_isl) n->rc.tx_isl += k;
    else n->rc.tx_ground += k;
}

void node_flush_tx(node_t *n)
{
    flush_one(n, &n->tx_isl);
    flush_one(n, &n->tx_ground);
}

void node_sendto_now(node_t *n, int fd, const struct sockaddr_in *addr, const uint8_t *pkt, size_t len)
{
    node_tx_t *b = fd == n->isl_fd ? &n->tx_isl : &n->tx_ground;
    if (node_tx_full(b)) flush_one(n, b);
    /* the packet in hand still in its receive slot (a relay): send it from there, no copy */
    node_tx_add(b, addr, pkt, len, pkt == n->lent);
}

/* Extra queueing delay imposed by the bandwidth cap on this link. */
static uint64_t bucket_delay_ns(node_t *n, int link, size_t len, uint64_t now)
{
    node_bucket_t *b = &n->links[link];
    double rate = n->cfg.bandwidth_mbps * 1e6 / 8.0; /* bytes per second */
    if (rate <= 0) return 0;
    if (b->last_ns == 0) b->tokens = BURST_BYTES;
    else b->tokens += rate * (double)(now - b->last_ns) * 1e-9;
    if (b->tokens > BURST_BYTES) b->tokens = BURST_BYTES;
    b->last_ns = now;
    b->tokens -= (double)len;
    return b->tokens >= 0 ? 0 : (uint64_t)(-b->tokens / rate * 1e9);
}

/* Applies faults and delay, then sends or queues. */
static void emulate_send(node_t *n, int link, int fd, uint8_t kind, const struct sockaddr_in *addr,
                         const uint8_t *pkt, size_t len, uint64_t delay_ns)
{
    uint8_t copy[SKYMEM_MAX_PACKET];
    /* the clock is read only when a delay or a bandwidth cap needs it (hot forwarding path) */
    uint64_t now = (delay_ns || n->cfg.bandwidth_mbps > 0 || n->cfg.reorder > 0) ? node_mono_ns() : 0;
    int copies = 1, i;
    if (n->loss > 0 && node_rand01(n) < n->loss) {
        n->c.dropped++;
        return;
    }
    delay_ns += bucket_delay_ns(n, link, len, now);
    if (n->cfg.reorder > 0 && node_rand01(n) < n->cfg.reorder) /* held back so later packets overtake it */
        delay_ns += 1000000ull + (uint64_t)(node_rand01(n) * 2e6);
    if (n->cfg.corrupt > 0 && len > 0 && node_rand01(n) < n->cfg.corrupt) {
        size_t bit = (size_t)(node_rand01(n) * (double)(len * 8u));
        if (bit >= len * 8u) bit = len * 8u - 1u;
        memcpy(copy, pkt, len);
        copy[bit / 8u] ^= (uint8_t)(1u << (bit % 8u));
        pkt = copy;
    }
    if (n->cfg.dup > 0 && node_rand01(n) < n->cfg.dup) copies = 2;
    if (delay_ns && now == 0) now = node_mono_ns();
    for (i = 0; i < copies; i++) {
        if (delay_ns == 0) {
            node_sendto_now(n, fd, addr, pkt, len);
        } else if (evq_push(&n->evq, now + delay_ns, kind, addr, pkt, len) != 0) {
            n->c.dropped++;
        }
    }
}

void node_send_isl(node_t *n, skymem_dir_t dir, const uint8_t *pkt, size_t len)
{
    uint64_t delay_ns = 0;
    if (dir < SKYMEM_DIR_NORTH || dir > SKYMEM_DIR_EAST || !n->nb_ok[dir]) {
        n->c.dropped++;
        return;
    }
    if (n->delay_scale > 0) {
        double h = n->cfg.altitude_km * 1000.0, d;
        if (dir == SKYMEM_DIR_WEST || dir == SKYMEM_DIR_EAST) {
            d = skymem_intra_plane_distance_m(h, n->sats);
        } else {
            d = skymem_inter_plane_distance_m(h, n->planes, n->sats, n->cfg.inclination_deg * M_PI / 180.0,
                                              (double)node_mission_ms(n) / 1000.0, (int)n->cfg.walker_phase);
        }
        if (d > 0) delay_ns = (uint64_t)(skymem_light_time_s(d) * n->delay_scale * 1e9);
    }
    emulate_send(n, (int)dir, n->isl_fd, EV_TX_ISL, &n->nb_isl[dir], pkt, len, delay_ns);
}

void node_send_ground(node_t *n, const struct sockaddr_in *addr, const uint8_t *pkt, size_t len)
{
    uint64_t delay_ns = (uint64_t)(n->cfg.ground_delay_ms * 1e6);
    emulate_send(n, NODE_LINK_GROUND, n->ground_fd, EV_TX_GROUND, addr, pkt, len, delay_ns);
}

/* Due events are sent from their own memory (lent, like a relayed receive slot) and freed only
 * once the batches holding them have been flushed: a delayed packet is copied once, into its event. */
static void free_sent(node_t *n, node_ev_t **done, int *count)
{
    int i;
    node_flush_tx(n);
    for (i = 0; i < *count; i++) evq_release(&n->evq, done[i]);
    *count = 0;
}

void node_run_due(node_t *n, uint64_t now_ns)
{
    node_ev_t *done[NODE_TX_VEC];
    node_ev_t *e;
    int count = 0;
    while ((e = evq_peek(&n->evq)) != NULL && e->due_ns <= now_ns) {
        e = evq_pop(&n->evq);
        n->lent = e->data;
        switch (e->kind) {
        case EV_TX_ISL: node_sendto_now(n, n->isl_fd, &e->addr, e->data, e->len); break;
        case EV_TX_GROUND: node_sendto_now(n, n->ground_fd, &e->addr, e->data, e->len); break;
        case EV_RX_GROUND: n->on_packet(n, 2, &e->addr, e->data, e->len); break;
        default: break;
        }
        n->lent = NULL;
        done[count++] = e;
        if (count == NODE_TX_VEC) free_sent(n, done, &count);
    }
    if (count > 0) free_sent(n, done, &count);
}
