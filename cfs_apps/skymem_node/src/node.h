/* node.h -- one satellite of the native runtime: state shared by the node's files. */
#ifndef NODE_H
#define NODE_H

#include <netinet/in.h>
#include <stdint.h>

#include "node_config.h"
#include "node_evq.h"
#include "node_tx.h"
#include "skymem_auth.h"
#include "skymem_codec.h"
#include "skymem_hop.h"
#include "skymem_link.h"
#include "skymem_returns.h"
#include "skymem_stations.h"
#include "skymem_router.h"
#include "skymem_sat.h"
#include "skymem_store.h"

#define NODE_LINK_GROUND 0 /* links[0] = ground; links[1..4] = SKYMEM_DIR_NORTH..EAST */
#define NODE_GROUND_SLOTS 32
#define NODE_RETURN_SLOTS 1024 /* relayed requests whose answers go back to where they came from */
#define NODE_RETURN_TTL_MS 30000u /* how long a relayed request's return address is kept */
#define NODE_RX_BATCH 1024 /* datagrams read per wakeup per socket, so neither socket starves the other */

typedef struct {
    double tokens;       /* bytes; negative = bytes queued behind the cap */
    uint64_t last_ns;
} node_bucket_t;



/* What the node counts itself; the command counters are the core's (skymem_sat_counters_t). */
typedef struct {
    uint32_t rx_packets, tx_packets, forwarded, dropped, invalid;
} node_counters_t;

/* What the cFS build's ISL_ROUTER app counts (its housekeeping, ISL_ROUTER_HK_TLM_MID). The node
 * routes in-process; forwarded, dropped and invalid are shared with node_counters_t. */
typedef struct {
    uint32_t cmd_count, err_count, rx_isl, rx_ground, tx_isl, tx_ground, delivered;
} node_router_counters_t;

typedef struct node {
    node_config_t cfg;
    uint32_t plane, sat, planes, sats;
    int isl_fd, ground_fd, timer_fd, signal_fd, epoll_fd;
    struct sockaddr_in *peer_isl;    /* per satellite index, when --peers is given */
    struct sockaddr_in self_isl, self_ground;
    struct sockaddr_in nb_isl[5]; /* ISL address of the neighbour in each direction (index = skymem_dir_t) */
    uint8_t nb_ok[5];
    skymem_store_t *store;
    node_counters_t c;
    node_router_counters_t rc;
    struct sockaddr_in tlm_dest; /* --tlm-dest; sin_port 0: housekeeping answers whoever asked */
    skymem_station_t grounds[NODE_GROUND_SLOTS]; /* stations heard from: skymem_stations.h */
    struct sockaddr_in ground_addrs[NODE_GROUND_SLOTS];
    skymem_return_t returns[NODE_RETURN_SLOTS]; /* skymem_returns.h chooses the slot */
    struct sockaddr_in return_addr[NODE_RETURN_SLOTS];
    node_evq_t evq;
    node_bucket_t links[5];
    uint64_t rng;
    double delay_scale, loss;
    uint64_t start_mono_ns;
    uint64_t start_unix_ms; /* the mission epoch unless --epoch-ms (node_clock_start) */
    uint16_t seq; /* CCSDS sequence count of the housekeeping the node builds (the core counts its own) */
    uint64_t timer_armed_ns;
    skymem_auth_t *auth; /* the key ring, NULL: command authentication off */
    node_tx_t tx_isl, tx_ground; /* datagrams waiting for one sendmmsg each (node_flush_tx) */
    const uint8_t *lent;          /* the received datagram in hand, in a slot kept until node_flush_tx */
    /* where a datagram held back by the emulated ground delay goes when due (node_on_packet, set by main:
     * the link layer below calls the packet path above only through it) */
    void (*on_packet)(struct node *n, int from_ground, const struct sockaddr_in *src, uint8_t *pkt, size_t len);
    skymem_sat_t core; /* the command handling: skymem_core's skymem_sat.c (last: large) */
} node_t;

/* node_clock_log.c: clocks and the log (it calls nothing else of the node) */
void node_clock_start(node_t *n);
uint64_t node_mono_ns(void);
uint64_t node_mission_ms(const node_t *n);
uint64_t node_unix_us(void); /* Unix time: the sequences of signed packets */

void node_log(const node_t *n, int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* node_link.c: addresses, link emulation, sending */
int node_isl_addr(const node_t *n, uint32_t plane, uint32_t sat, struct sockaddr_in *out);
/* Satellite idx's address on the port range starting at port_base, by the --addresses rule (no --peers). */
int node_rule_addr(const node_t *n, uint32_t idx, uint32_t port_base, struct sockaddr_in *out);
int node_load_peers(node_t *n, const char *path);
/* Resolves the four neighbours' ISL addresses once, at start-up. */
void node_cache_neighbours(node_t *n);
double node_rand01(node_t *n);
/* Sends over ISL to the neighbour in direction dir (emulated). */
void node_send_isl(node_t *n, skymem_dir_t dir, const uint8_t *pkt, size_t len);
/* Sends on the ground socket to addr (emulated ground link). */
void node_send_ground(node_t *n, const struct sockaddr_in *addr, const uint8_t *pkt, size_t len);
/* Sends a datagram now (no emulation): batched until node_flush_tx; retried
 * later through the queue when the socket buffer is full. */
void node_sendto_now(node_t *n, int fd, const struct sockaddr_in *addr, const uint8_t *pkt, size_t len);
void node_flush_tx(node_t *n);
/* Binds the tx batches to the sockets (after they are open). */
void node_tx_setup(node_t *n);
/* Runs due queue events, sending each from its event, and flushes them; returns when the earliest
 * pending event is in the future. Called from the main loop only (no receive slot lent). */
void node_run_due(node_t *n, uint64_t now_ns);

/* node_handlers.c: packet processing */
void node_on_packet(node_t *n, int from_ground, const struct sockaddr_in *src, uint8_t *pkt, size_t len);
/* Sets up n->sat (identity, store, the node's io); before node_auth_setup. */
void node_sat_setup(node_t *n);

/* node_auth.c: the key file and the replay floor file (the checks are the core's) */
int node_auth_setup(node_t *n);
void node_auth_teardown(node_t *n);
/* The core's io->persist_floor: the high-water mark and the windows refused ahead into the floor file. */
int node_auth_persist_floor(void *ctx, const skymem_floor_t *kept);

#endif
