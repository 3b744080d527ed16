/* node_handlers.c -- what a satellite does with each packet: handle it, forward
 * it one hop along the torus, or hand a reply to the ground link it belongs to. */
#include <string.h>

#include "node.h"
#include "skymem_crc32c.h"

static int is_self(const node_t *n, uint16_t plane, uint16_t sat) { return plane == n->plane && sat == n->sat; }

static skymem_route_t own_route(const node_t *n, uint16_t dst_plane, uint16_t dst_sat, uint32_t request_id)
{
    skymem_route_t r;
    memset(&r, 0, sizeof r);
    r.dst_plane = dst_plane;
    r.dst_sat = dst_sat;
    r.src_plane = (uint16_t)n->plane;
    r.src_sat = (uint16_t)n->sat;
    r.via_plane = SKYMEM_NO_SAT;
    r.via_sat = SKYMEM_NO_SAT;
    r.request_id = request_id;
    r.ttl = SKYMEM_DEFAULT_TTL;
    return r;
}

static void tlm_time(const node_t *n, uint32_t *sec, uint16_t *sub) { skymem_ms_to_tlm_time(node_mission_ms(n), sec, sub); }

/* ---- ground stations we have heard from ------------------------------------- */
static void learn_ground(node_t *n, uint16_t id, const struct sockaddr_in *addr)
{
    int i, slot = -1;
    uint64_t now = node_mono_ns();
    for (i = 0; i < NODE_GROUND_SLOTS; i++) {
        if (n->grounds[i].used && n->grounds[i].id == id) {
            slot = i;
            break;
        }
    }
    if (slot < 0) { /* free slot, else the one heard from longest ago */
        slot = 0;
        for (i = 0; i < NODE_GROUND_SLOTS; i++) {
            if (!n->grounds[i].used) {
                slot = i;
                break;
            }
            if (n->grounds[i].last_ns < n->grounds[slot].last_ns) slot = i;
        }
        node_log(n, NODE_LOG_DEBUG, "ground station %u at port %u", id, ntohs(addr->sin_port));
    }
    n->grounds[slot].used = 1;
    n->grounds[slot].id = id;
    n->grounds[slot].addr = *addr;
    n->grounds[slot].last_ns = now;
}

static const struct sockaddr_in *ground_addr(const node_t *n, uint16_t id)
{
    int i;
    for (i = 0; i < NODE_GROUND_SLOTS; i++)
        if (n->grounds[i].used && n->grounds[i].id == id) return &n->grounds[i].addr;
    return NULL;
}

/* ---- routing ------------------------------------------------------------------- */
static void route_packet(node_t *n, uint8_t *pkt, size_t len, const skymem_route_t *r, int is_reply, int relay)
{
    uint32_t tp, ts;
    skymem_route_t r2;
    skymem_dir_t dir;
    if (is_reply && r->dst_plane == SKYMEM_GROUND_PLANE) {
        if (is_self(n, r->via_plane, r->via_sat)) { /* we hold this ground link */
            const struct sockaddr_in *ga = ground_addr(n, r->dst_sat);
            if (ga == NULL) {
                n->c.dropped++;
                node_log(n, NODE_LOG_WARN, "reply for unknown ground station %u dropped", r->dst_sat);
                return;
            }
            node_send_ground(n, ga, pkt, len);
            return;
        }
        tp = r->via_plane;
        ts = r->via_sat;
    } else {
        tp = r->dst_plane;
        ts = r->dst_sat;
    }
    if (tp >= n->planes || ts >= n->sats) {
        n->c.dropped++;
        if (!is_reply && relay) node_reply(n, r, SKYMEM_REPLY_NAK, pkt[6] & 0x7Fu, SKYMEM_NAK_NO_ROUTE, 0, 0, NULL, 0);
        return;
    }
    if (is_self(n, (uint16_t)tp, (uint16_t)ts)) { /* nothing to route: would loop */
        n->c.dropped++;
        return;
    }
    if (r->ttl == 0) {
        n->c.dropped++;
        node_log(n, NODE_LOG_DEBUG, "ttl expired, request %u dropped", r->request_id);
        if (!is_reply && relay && !(r->flags & SKYMEM_RF_GOSSIP))
            node_reply(n, r, SKYMEM_REPLY_NAK, pkt[6] & 0x7Fu, SKYMEM_NAK_TTL_EXPIRED, 0, 0, NULL, 0);
        return;
    }
    r2 = *r;
    r2.ttl--;
    if (r2.hops < 255) r2.hops++;
    skymem_rewrite_route(pkt, len, &r2);
    dir = skymem_next_dir(n->planes, n->sats, n->plane, n->sat, tp, ts);
    if (relay) n->c.forwarded++;
    node_send_isl(n, dir, pkt, len);
}

void node_route_out(node_t *n, uint8_t *pkt, size_t len, const skymem_route_t *r, int is_reply)
{
    route_packet(n, pkt, len, r, is_reply, 0);
}

void node_send_reply(node_t *n, uint8_t *pkt, size_t len, size_t cap, const skymem_route_t *r)
{
    skymem_route_t signed_route = *r;
    len = node_auth_sign_reply(n, &signed_route, pkt, len, cap);
    if (len > 0) node_route_out(n, pkt, len, &signed_route, 1);
}

/* Replies go back along the request's route: to its source, via its ground link. */
void node_reply(node_t *n, const skymem_route_t *req, uint8_t kind, uint8_t cc, uint8_t status, uint32_t chunk_id,
                uint32_t value, const uint8_t *body, size_t body_len)
{
    node_reply_to(n, NULL, req, kind, cc, status, chunk_id, value, body, body_len);
}

void node_reply_to(node_t *n, const struct sockaddr_in *addr, const skymem_route_t *req, uint8_t kind, uint8_t cc,
                   uint8_t status, uint32_t chunk_id, uint32_t value, const uint8_t *body, size_t body_len)
{
    uint8_t buf[SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_REPLY_HDR_LEN + SKYMEM_STATS_LEN +
                SKYMEM_AUTH_TRAILER_LEN];
    skymem_route_t r = own_route(n, req->src_plane, req->src_sat, req->request_id);
    uint32_t sec;
    uint16_t sub;
    int len;
    r.via_plane = addr ? (uint16_t)n->plane : req->via_plane;
    r.via_sat = addr ? (uint16_t)n->sat : req->via_sat;
    tlm_time(n, &sec, &sub);
    len = skymem_build_reply(buf, sizeof buf, n->seq++, sec, sub, &r, kind, cc, status, chunk_id, value, body,
                             body_len);
    if (len < 0) return;
    if (kind == SKYMEM_REPLY_NAK) n->c.err_count++;
    if (addr == NULL) {
        node_send_reply(n, buf, (size_t)len, sizeof buf, &r);
        return;
    }
    len = (int)node_auth_sign_reply(n, &r, buf, (size_t)len, sizeof buf);
    if (len > 0) node_send_ground(n, addr, buf, (size_t)len);
}

void node_fill_stats(const node_t *n, skymem_stats_t *st)
{
    skymem_store_info_t info;
    skymem_store_info(n->store, &info);
    memset(st, 0, sizeof(*st));
    st->plane = (uint16_t)n->plane;
    st->sat = (uint16_t)n->sat;
    st->cmd_count = n->c.cmd_count;
    st->err_count = n->c.err_count;
    st->chunks = info.chunks;
    st->bytes_used = info.bytes_used;
    st->bytes_budget = info.budget_bytes;
    st->lru_evictions = info.lru_evictions;
    st->blocks_purged = info.blocks_purged;
    st->rx_packets = n->c.rx_packets;
    st->tx_packets = n->c.tx_packets;
    st->forwarded = n->c.forwarded;
    st->dropped = n->c.dropped;
    st->invalid = n->c.invalid;
    st->auth_failures = n->c.auth_failures;
    st->migrated_out = n->c.migrated_out;
    st->migrated_in = n->c.migrated_in;
    st->mission_time_ms = node_mission_ms(n);
    st->uptime_s = (uint32_t)((node_mono_ns() - n->start_mono_ns) / 1000000000ull);
}

/* ---- eviction gossip ------------------------------------------------------------ */
/* Returns 1 if (hash, evict_id) was seen recently; records it otherwise. */
static int seen_before(node_t *n, const uint8_t *hash, uint32_t evict_id)
{
    int i;
    for (i = 0; i < NODE_EVICT_SEEN; i++)
        if (n->seen[i].used && n->seen[i].evict_id == evict_id && !memcmp(n->seen[i].hash, hash, SKYMEM_BLOCK_HASH_LEN))
            return 1;
    n->seen[n->seen_next].used = 1;
    n->seen[n->seen_next].evict_id = evict_id;
    memcpy(n->seen[n->seen_next].hash, hash, SKYMEM_BLOCK_HASH_LEN);
    n->seen_next = (n->seen_next + 1u) % NODE_EVICT_SEEN;
    return 0;
}

void node_gossip_evict(node_t *n, const uint8_t *hash, uint32_t evict_id, uint8_t radius)
{
    uint32_t sent[4][2];
    int nsent = 0, d, k;
    if (radius == 0) return;
    for (d = SKYMEM_DIR_NORTH; d <= SKYMEM_DIR_EAST; d++) {
        uint32_t np, ns;
        uint8_t buf[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_EVICT_LEN + SKYMEM_AUTH_TRAILER_LEN];
        skymem_route_t r;
        int len, dup = 0;
        skymem_neighbour(n->planes, n->sats, n->plane, n->sat, (skymem_dir_t)d, &np, &ns);
        if (np == n->plane && ns == n->sat) continue; /* 1-wide ring */
        for (k = 0; k < nsent; k++)
            if (sent[k][0] == np && sent[k][1] == ns) dup = 1; /* 2-wide ring: north == south */
        if (dup) continue;
        sent[nsent][0] = np;
        sent[nsent][1] = ns;
        nsent++;
        r = own_route(n, (uint16_t)np, (uint16_t)ns, evict_id);
        r.flags = SKYMEM_RF_GOSSIP;
        len = skymem_build_evict(buf, sizeof buf, n->seq++, &r, hash, evict_id, (uint8_t)(radius - 1u));
        if (len > 0) len = (int)node_auth_sign(n, &r, buf, (size_t)len, sizeof buf);
        if (len > 0) node_route_out(n, buf, (size_t)len, &r, 0);
    }
}

/* Store callback: an LRU eviction purged a whole block. The EVICTED notice reaches the ground
 * station that set the chunk, also when the chunk came here by migration (its origin record). */
void node_on_store_evict(void *ctx, const uint8_t *hash, const skymem_chunk_meta_t *victim, uint32_t purged)
{
    node_t *n = (node_t *)ctx;
    uint32_t evict_id = ((n->plane * n->sats + n->sat) << 16) | (n->next_evict_id++ & 0xFFFFu);
    node_log(n, NODE_LOG_DEBUG, "LRU evicted a block (%u chunks), gossip radius %u", purged, victim->gossip_radius);
    (void)seen_before(n, hash, evict_id);
    node_gossip_evict(n, hash, evict_id, victim->gossip_radius);
    if (victim->origin_ground != SKYMEM_NO_SAT && victim->ingress_plane != SKYMEM_NO_SAT) {
        skymem_route_t req;
        memset(&req, 0, sizeof req);
        req.src_plane = SKYMEM_GROUND_PLANE;
        req.src_sat = victim->origin_ground;
        req.via_plane = victim->ingress_plane;
        req.via_sat = victim->ingress_sat;
        req.request_id = 0;
        node_reply(n, &req, SKYMEM_REPLY_EVICTED, 0, 0, 0, purged, hash, SKYMEM_BLOCK_HASH_LEN);
    }
}

/* ---- commands ------------------------------------------------------------------- */
static int apply_param(node_t *n, uint16_t id, uint32_t v)
{
    skymem_store_info_t info;
    skymem_store_info(n->store, &info);
    switch (id) {
    case SKYMEM_PARAM_MEMORY_BUDGET_KB:
        if (v < 4) return -1;
        if (skymem_store_resize(&n->store, (uint64_t)v * 1024u, info.chunk_size) != SKYMEM_STORE_OK) return -1;
        break;
    case SKYMEM_PARAM_CHUNK_SIZE:
        if (v < 1 || v > SKYMEM_MAX_CHUNK_DATA) return -1;
        if (skymem_store_resize(&n->store, info.budget_bytes, v) != SKYMEM_STORE_OK) return -1;
        break;
    case SKYMEM_PARAM_DELAY_SCALE_PPM: n->delay_scale = (double)v / 1e6; break;
    case SKYMEM_PARAM_LOSS_PPM:
        if (v > 1000000u) return -1;
        n->loss = (double)v / 1e6;
        break;
    default: return -1;
    }
    node_log(n, NODE_LOG_INFO, "parameter %u set to %u", id, v);
    return 0;
}

static void reset_counters(node_t *n) { memset(&n->c, 0, sizeof n->c); }

static void send_data(node_t *n, const skymem_route_t *req, uint8_t cc, const uint8_t *hash, uint32_t id)
{
    skymem_chunk_meta_t meta;
    const uint8_t *data;
    size_t dlen;
    if (skymem_store_get(n->store, hash, id, &meta, &data, &dlen) == SKYMEM_STORE_OK) {
        skymem_chunk_desc_t d;
        skymem_route_t r = own_route(n, req->src_plane, req->src_sat, req->request_id);
        uint32_t sec;
        uint16_t sub;
        int len;
        r.via_plane = req->via_plane;
        r.via_sat = req->via_sat;
        skymem_chunk_desc_from_meta(&d, hash, id, &meta, dlen);
        tlm_time(n, &sec, &sub);
        len = skymem_build_reply_data(n->txbuf, sizeof n->txbuf, n->seq++, sec, sub, &r, cc, &d, data);
        if (len > 0) node_send_reply(n, n->txbuf, (size_t)len, sizeof n->txbuf, &r);
    } else {
        node_reply(n, req, SKYMEM_REPLY_NAK, cc, SKYMEM_NAK_NOT_FOUND, id, 0, hash, SKYMEM_BLOCK_HASH_LEN);
    }
}

static void handle_set_chunk(node_t *n, const skymem_msg_t *m, const skymem_route_t *r)
{
    skymem_store_info_t info;
    skymem_chunk_meta_t meta;
    uint32_t crc;
    int rc;
    skymem_store_info(n->store, &info);
    if (m->desc.data_len > info.chunk_size) {
        node_reply(n, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_TOO_LARGE, m->desc.chunk_id, 0, m->block_hash, 32);
        return;
    }
    /* the CRC from the tag's pass over this very packet (node_auth_refuse), else computed here */
    crc = n->set_crc_of == m->data ? n->set_crc : skymem_crc32c(m->data, m->desc.data_len);
    n->set_crc_of = NULL;
    if (crc != m->desc.crc32c) {
        node_reply(n, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_BAD_CRC, m->desc.chunk_id, 0, m->block_hash, 32);
        return;
    }
    skymem_chunk_meta_from_set(&meta, &m->desc, r, m->has_origin ? &m->origin : NULL);
    rc = skymem_store_set(n->store, m->block_hash, m->desc.chunk_id, &meta, m->data, m->desc.data_len);
    if (rc != SKYMEM_STORE_OK) {
        node_reply(n, r, SKYMEM_REPLY_NAK, m->cc, rc == SKYMEM_STORE_E_TOO_LARGE ? SKYMEM_NAK_TOO_LARGE : SKYMEM_NAK_NO_SPACE,
                   m->desc.chunk_id, 0, m->block_hash, 32);
        return;
    }
    if (r->flags & SKYMEM_RF_MIGRATION) n->c.migrated_in++;
    node_reply(n, r, SKYMEM_REPLY_ACK, m->cc, 0, m->desc.chunk_id, 1, m->block_hash, 32);
}

static void handle_data_cmd(node_t *n, const skymem_msg_t *m, const skymem_route_t *r)
{
    uint32_t i;
    n->c.cmd_count++;
    switch (m->cc) {
    case SKYMEM_NOOP_CC:
        node_reply(n, r, SKYMEM_REPLY_ACK, m->cc, 0, 0, 0, NULL, 0);
        break;
    case SKYMEM_RESET_COUNTERS_CC:
        reset_counters(n);
        node_reply(n, r, SKYMEM_REPLY_ACK, m->cc, 0, 0, 0, NULL, 0);
        break;
    case SKYMEM_SET_PARAM_CC:
        if (apply_param(n, m->param_id, m->param_value) == 0)
            node_reply(n, r, SKYMEM_REPLY_ACK, m->cc, 0, 0, m->param_value, NULL, 0);
        else
            node_reply(n, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_BAD_PARAM, 0, m->param_value, NULL, 0);
        break;
    case SKYMEM_SET_CHUNK_CC: handle_set_chunk(n, m, r); break;
    case SKYMEM_GET_CHUNK_CC: send_data(n, r, m->cc, m->block_hash, m->chunk_id); break;
    case SKYMEM_GET_CHUNKS_CC:
        for (i = 0; i < m->count; i++) send_data(n, r, m->cc, m->block_hash, m->first + i * m->stride);
        break;
    case SKYMEM_PROBE_CC: {
        skymem_chunk_meta_t meta;
        if (skymem_store_peek(n->store, m->block_hash, m->chunk_id, &meta, NULL, NULL) == SKYMEM_STORE_OK)
            node_reply(n, r, SKYMEM_REPLY_ACK, m->cc, 0, m->chunk_id, meta.chunk_count, m->block_hash, 32);
        else
            node_reply(n, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_NOT_FOUND, m->chunk_id, 0, m->block_hash, 32);
        break;
    }
    case SKYMEM_EVICT_BLOCK_CC: {
        uint32_t purged = skymem_store_purge_block(n->store, m->block_hash);
        if (!seen_before(n, m->block_hash, m->evict_id)) node_gossip_evict(n, m->block_hash, m->evict_id, m->radius);
        node_log(n, NODE_LOG_DEBUG, "evict id %u radius %u: purged %u chunks", m->evict_id, m->radius, purged);
        if (!(r->flags & SKYMEM_RF_GOSSIP))
            node_reply(n, r, SKYMEM_REPLY_ACK, m->cc, 0, 0, purged, m->block_hash, 32);
        break;
    }
    case SKYMEM_MIGRATE_CC: node_migrate_start(n, m); break;
    case SKYMEM_STATS_CC: {
        skymem_stats_t st;
        uint8_t body[SKYMEM_STATS_LEN];
        node_fill_stats(n, &st);
        skymem_stats_encode(body, &st);
        node_reply(n, r, SKYMEM_REPLY_STATS, m->cc, 0, 0, 0, body, sizeof body);
        break;
    }
    default: /* the parser only lets valid codes through */
        node_reply(n, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_BAD_COMMAND, 0, 0, NULL, 0);
        break;
    }
}

/* Control commands (SKYMEM_CMD_MID, no route header): handled here, no reply
 * (like a cFS app; ask for SKYMEM_SEND_HK_MID to see the counters). */
static void handle_control(node_t *n, const skymem_msg_t *m)
{
    switch (m->cc) {
    case SKYMEM_NOOP_CC:
        n->c.cmd_count++;
        node_log(n, NODE_LOG_INFO, "NOOP command");
        break;
    case SKYMEM_RESET_COUNTERS_CC: reset_counters(n); break;
    case SKYMEM_SET_PARAM_CC:
        if (apply_param(n, m->param_id, m->param_value) == 0) n->c.cmd_count++;
        else n->c.err_count++;
        break;
    default: n->c.err_count++; break;
    }
}

/* Housekeeping goes where a cFS mission's TO_LAB would send it (--tlm-dest), else back to
 * whoever asked: the same packets a ground system receives from the cFS apps. */
static void send_tlm(node_t *n, int from_ground, const struct sockaddr_in *src, const uint8_t *pkt, size_t len)
{
    if (n->tlm_dest.sin_port != 0) node_sendto_now(n, n->ground_fd, &n->tlm_dest, pkt, len);
    else if (from_ground) node_send_ground(n, src, pkt, len);
    else node_sendto_now(n, n->isl_fd, src, pkt, len);
}

static void send_hk(node_t *n, int from_ground, const struct sockaddr_in *src)
{
    skymem_stats_t st;
    uint8_t buf[SKYMEM_TLM_HDR_LEN + SKYMEM_STATS_LEN];
    uint32_t sec;
    uint16_t sub;
    int len;
    node_fill_stats(n, &st);
    tlm_time(n, &sec, &sub);
    len = skymem_build_hk(buf, sizeof buf, n->seq++, sec, sub, &st);
    if (len > 0) send_tlm(n, from_ground, src, buf, (size_t)len);
}

static uint32_t ground_stations_known(const node_t *n)
{
    uint32_t i, k = 0;
    for (i = 0; i < NODE_GROUND_SLOTS; i++) k += n->grounds[i].used;
    return k;
}

/* ISL_ROUTER's housekeeping, laid out as the cFS app sends it (ISL_ROUTER_HK_* of skymem_wire.h). */
static void send_router_hk(node_t *n, int from_ground, const struct sockaddr_in *src)
{
    uint8_t body[ISL_ROUTER_HK_LEN];
    uint8_t buf[SKYMEM_TLM_HDR_LEN + ISL_ROUTER_HK_LEN];
    uint32_t sec;
    uint16_t sub;
    int len;
    memset(body, 0, sizeof body);
    skymem_put_u16(body + ISL_ROUTER_HK_PLANE, (uint16_t)n->plane);
    skymem_put_u16(body + ISL_ROUTER_HK_SAT, (uint16_t)n->sat);
    skymem_put_u32(body + ISL_ROUTER_HK_CMD_COUNT, n->rc.cmd_count);
    skymem_put_u32(body + ISL_ROUTER_HK_ERR_COUNT, n->rc.err_count);
    skymem_put_u32(body + ISL_ROUTER_HK_RX_ISL, n->rc.rx_isl);
    skymem_put_u32(body + ISL_ROUTER_HK_RX_GROUND, n->rc.rx_ground);
    skymem_put_u32(body + ISL_ROUTER_HK_TX_ISL, n->rc.tx_isl);
    skymem_put_u32(body + ISL_ROUTER_HK_TX_GROUND, n->rc.tx_ground);
    skymem_put_u32(body + ISL_ROUTER_HK_FORWARDED, n->c.forwarded);
    skymem_put_u32(body + ISL_ROUTER_HK_DELIVERED, n->rc.delivered);
    skymem_put_u32(body + ISL_ROUTER_HK_DROPPED, n->c.dropped);
    skymem_put_u32(body + ISL_ROUTER_HK_INVALID, n->c.invalid);
    skymem_put_u32(body + ISL_ROUTER_HK_GROUND_KNOWN, ground_stations_known(n));
    tlm_time(n, &sec, &sub);
    len = skymem_build_tlm(buf, sizeof buf, ISL_ROUTER_HK_TLM_MID, n->seq++, sec, sub, body, sizeof body);
    if (len > 0) send_tlm(n, from_ground, src, buf, (size_t)len);
}

/* ISL_ROUTER's own commands (NOOP, RESET_COUNTERS, 8 bytes each), counted as the cFS app counts them. */
static void handle_router_command(node_t *n, const skymem_msg_t *m)
{
    if (m->payload_len != 0 || m->cc > ISL_ROUTER_RESET_COUNTERS_CC) {
        n->rc.err_count++; /* wrong length, or SET_LINK: the link emulation is SET_PARAM 3 and 4 here */
        return;
    }
    if (m->cc == ISL_ROUTER_RESET_COUNTERS_CC) memset(&n->rc, 0, sizeof n->rc);
    else n->rc.cmd_count++;
}

/* A command that came up our ground link: remember where that ground station is
 * and, if the sender left `via` unset, make ourselves the satellite its replies
 * come back through. */
static void adopt_ground(node_t *n, const struct sockaddr_in *src, skymem_route_t *r, uint8_t *pkt, size_t len)
{
    if (r->src_plane != SKYMEM_GROUND_PLANE) return;
    learn_ground(n, r->src_sat, src);
    if (r->via_plane == SKYMEM_NO_SAT) {
        r->via_plane = (uint16_t)n->plane;
        r->via_sat = (uint16_t)n->sat;
        skymem_rewrite_route(pkt, len, r);
    }
}

/* A data-plane command for us that we could not parse: NAK it so the sender is
 * not left waiting. */
static void nak_malformed(node_t *n, int rc, const uint8_t *pkt, const skymem_route_t *r)
{
    if (!is_self(n, r->dst_plane, r->dst_sat) || (r->flags & SKYMEM_RF_GOSSIP)) return;
    node_reply(n, r, SKYMEM_REPLY_NAK, pkt[6] & 0x7Fu, skymem_nak_for_parse_error(rc), 0, 0, NULL, 0);
}

void node_on_packet(node_t *n, int from, const struct sockaddr_in *src, uint8_t *pkt, size_t len)
{
    skymem_msg_t m;
    skymem_route_t r;
    int rc, from_ground = from != 0;
    n->set_crc_of = NULL; /* a CRC from an earlier packet's tag pass is never this one's */
    if (from != 2) n->c.rx_packets++;
    if (from == 0) n->rc.rx_isl++;
    else if (from == 1) n->rc.rx_ground++;
    if (from == 1 && n->cfg.ground_delay_ms > 0) { /* the uplink takes its time too */
        if (evq_push(&n->evq, node_mono_ns() + (uint64_t)(n->cfg.ground_delay_ms * 1e6), EV_RX_GROUND, src, pkt, len))
            n->c.dropped++;
        return;
    }
    rc = skymem_parse(pkt, len, &m);
    if (rc != SKYMEM_OK) {
        n->c.invalid++;
        node_log(n, NODE_LOG_DEBUG, "invalid packet (%zu bytes): %s", len, skymem_strerror(rc));
        if (skymem_intact_data_cmd(pkt, len, &r)) {
            if (from_ground) adopt_ground(n, src, &r, pkt, len);
            nak_malformed(n, rc, pkt, &r);
        }
        return;
    }
    if (m.is_cmd) {
        switch (m.mid) {
        case SKYMEM_CMD_MID:
            if (!node_auth_refuse_control(n, &m)) handle_control(n, &m);
            return;
        case SKYMEM_SEND_HK_MID: send_hk(n, from_ground, src); return; /* not counted, as in cFS */
        case ISL_ROUTER_SEND_HK_MID: send_router_hk(n, from_ground, src); return;
        case ISL_ROUTER_CMD_MID:
            if (!node_auth_refuse_control(n, &m)) handle_router_command(n, &m);
            return;
        default: break;
        }
        r = m.route;
        /* keys on: a command from the ground is checked where it comes up, before this satellite learns
         * the station's address from it or relays it (refused: answered straight back, nothing learned) */
        if (from_ground && n->auth && node_auth_refuse(n, &m, pkt, len, &r, src)) return;
        if (from_ground) adopt_ground(n, src, &r, pkt, len);
        m.route = r; /* handlers see the route as rewritten (via filled in) */
        if (is_self(n, r.dst_plane, r.dst_sat)) {
            n->rc.delivered++;
            if (from_ground || !node_auth_refuse(n, &m, pkt, len, &r, NULL)) handle_data_cmd(n, &m, &r);
        }
        else route_packet(n, pkt, len, &r, 0, 1);
        return;
    }
    /* telemetry */
    if (m.mid != SKYMEM_REPLY_TLM_MID || from_ground) {
        n->c.dropped++; /* HK / replies are never sent to a satellite from the ground */
        return;
    }
    r = m.route;
    if (r.dst_plane != SKYMEM_GROUND_PLANE && is_self(n, r.dst_plane, r.dst_sat)) {
        n->rc.delivered++;
        if (!node_auth_refuse_reply(n, &m, pkt, len)) node_migrate_on_reply(n, &m); /* no forged ACK deletes a chunk */
        return;
    }
    route_packet(n, pkt, len, &r, 1, 1);
}
