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
#include "skymem_router.h"
#include "skymem_store.h"

#define NODE_LINK_GROUND 0 /* links[0] = ground; links[1..4] = SKYMEM_DIR_NORTH..EAST */
#define NODE_GROUND_SLOTS 32
#define NODE_EVICT_SEEN 256
#define NODE_MAX_JOBS 16
#define NODE_MIGRATE_WINDOW 32
#define NODE_MIGRATE_TIMEOUT_MS 1000u
#define NODE_MIGRATE_RETRIES 3
#define NODE_RX_BATCH 1024 /* datagrams read per wakeup per socket, so neither socket starves the other */

typedef struct {
    double tokens;       /* bytes; negative = bytes queued behind the cap */
    uint64_t last_ns;
} node_bucket_t;

typedef struct {
    uint16_t id;
    uint8_t used;
    uint64_t last_ns;
    struct sockaddr_in addr;
} node_ground_t;

typedef struct {
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN];
    uint32_t evict_id;
    uint8_t used;
} node_seen_t;

/* One chunk of a migration. */
typedef struct {
    uint32_t chunk_id;
    uint8_t state; /* 0 waiting, 1 in flight, 2 done, 3 failed */
    uint8_t tries;
    uint64_t deadline_ns;
} node_mchunk_t;

typedef struct {
    uint8_t active;
    uint32_t job_id;
    skymem_route_t reply_route; /* to the requester */
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN];
    uint16_t target_plane, target_sat;
    node_mchunk_t *chunks;
    uint32_t n, moved, failed, in_flight;
    uint32_t reply_key_id; /* the requester's ground key: signs the final ACK */
} node_job_t;

typedef struct {
    uint32_t cmd_count, err_count, rx_packets, tx_packets, forwarded, dropped, invalid, auth_failures;
    uint32_t migrated_out, migrated_in;
} node_counters_t;

/* What the cFS build's ISL_ROUTER app counts (its housekeeping, ISL_ROUTER_HK_TLM_MID). The node
 * routes in-process; forwarded, dropped and invalid are shared with node_counters_t. */
typedef struct {
    uint32_t cmd_count, err_count, rx_isl, rx_ground, tx_isl, tx_ground, delivered;
} node_router_counters_t;

typedef struct {
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
    node_ground_t grounds[NODE_GROUND_SLOTS];
    node_seen_t seen[NODE_EVICT_SEEN];
    uint32_t seen_next;
    node_evq_t evq;
    node_bucket_t links[5];
    uint64_t rng;
    double delay_scale, loss;
    uint64_t start_mono_ns;
    uint16_t seq;
    uint32_t next_evict_id;
    uint32_t next_job_id;
    node_job_t jobs[NODE_MAX_JOBS];
    uint64_t timer_armed_ns;
    skymem_auth_t *auth; /* NULL: command authentication off */
    uint32_t reply_key_id; /* ground key of the latest verified ground command: signs what goes to the ground */
    /* A SET_CHUNK's data CRC, computed in its tag's pass (node_auth_refuse) and used by handle_set_chunk
     * for the same packet instead of a second pass; set_crc_of is that packet's data, NULL when none. */
    const uint8_t *set_crc_of;
    uint32_t set_crc;
    node_tx_t tx_isl, tx_ground; /* datagrams waiting for one sendmmsg each (node_flush_tx) */
    const uint8_t *lent;          /* the received datagram in hand, in a slot kept until node_flush_tx */
    uint8_t txbuf[SKYMEM_MAX_PACKET];
} node_t;

/* time */
uint64_t node_mono_ns(void);
uint64_t node_mission_ms(const node_t *n);

/* logging */
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
/* Routes a packet we built or relay (commands or replies) one hop, or delivers it. */
void node_route_out(node_t *n, uint8_t *pkt, size_t len, const skymem_route_t *r, int is_reply);
/* Builds and routes a reply to the request route r. */
void node_reply(node_t *n, const skymem_route_t *req, uint8_t kind, uint8_t cc, uint8_t status, uint32_t chunk_id,
                uint32_t value, const uint8_t *body, size_t body_len);
/* As node_reply, but sent straight to addr over this satellite's ground link when addr is not NULL. */
void node_reply_to(node_t *n, const struct sockaddr_in *addr, const skymem_route_t *req, uint8_t kind, uint8_t cc,
                   uint8_t status, uint32_t chunk_id, uint32_t value, const uint8_t *body, size_t body_len);
void node_fill_stats(const node_t *n, skymem_stats_t *st);
void node_on_store_evict(void *ctx, const uint8_t *hash, const skymem_chunk_meta_t *victim, uint32_t purged);
void node_gossip_evict(node_t *n, const uint8_t *hash, uint32_t evict_id, uint8_t radius);

/* node_migrate.c */
void node_migrate_start(node_t *n, const skymem_msg_t *m);
void node_migrate_on_reply(node_t *n, const skymem_msg_t *m);
void node_migrate_tick(node_t *n, uint64_t now_ns);
uint64_t node_migrate_next_deadline(const node_t *n);

/* node_auth.c: command authentication (off when auth is NULL) */
int node_auth_setup(node_t *n);
void node_auth_teardown(node_t *n);
/* 1 if the command must be refused (counted; forged and unsigned ones NAKed AUTH_FAILED, along the
 * route, or straight back to answer_to when not NULL: a sender whose address must not be learned). */
int node_auth_refuse(node_t *n, const skymem_msg_t *m, const uint8_t *pkt, size_t len, const skymem_route_t *r,
                     const struct sockaddr_in *answer_to);
int node_auth_refuse_control(node_t *n, const skymem_msg_t *m);
/* Signs a command this satellite originates with the constellation key and sets
 * the AUTH flag in *r too (routing rewrites the route header from it); returns
 * the new length (len unchanged when auth is off, 0 on failure). */
size_t node_auth_sign(node_t *n, skymem_route_t *r, uint8_t *pkt, size_t len, size_t cap);
/* Signs a reply this satellite sends: to a satellite with the constellation key, to the ground
 * with n->reply_key_id; same return convention as node_auth_sign. */
size_t node_auth_sign_reply(node_t *n, skymem_route_t *r, uint8_t *pkt, size_t len, size_t cap);
/* 1 if a reply addressed to this satellite (a migration's ACK or NAK) must be ignored: keys on and
 * not signed by a satellite with a valid, fresh trailer (counted in auth_failures). */
int node_auth_refuse_reply(node_t *n, const skymem_msg_t *m, const uint8_t *pkt, size_t len);
/* Signs (node_auth_sign_reply) and routes a reply this satellite built in pkt (cap bytes of room). */
void node_send_reply(node_t *n, uint8_t *pkt, size_t len, size_t cap, const skymem_route_t *r);

#endif
