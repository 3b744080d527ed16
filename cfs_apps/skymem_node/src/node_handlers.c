/* node_handlers.c -- the native node's packet path: parse, route one hop or hand to the ground link,
 * the ground-station table, control commands and housekeeping. What a command does is skymem_core's
 * (skymem_sat.c); this file gives it the node's io (node_sat_setup) and its packets. */
#include <string.h>

#include "node.h"

static int is_self(const node_t *n, uint16_t plane, uint16_t sat) { return plane == n->plane && sat == n->sat; }

static void tlm_time(const node_t *n, uint32_t *sec, uint16_t *sub) { skymem_ms_to_tlm_time(node_mission_ms(n), sec, sub); }

/* ---- ground stations we have heard from ------------------------------------- */
static void learn_ground(node_t *n, uint16_t id, const struct sockaddr_in *addr)
{
    int is_new = 0, i = skymem_station_learn(n->grounds, NODE_GROUND_SLOTS, id, node_mono_ns() / 1000000u, &is_new);
    if (i < 0) return;
    if (is_new) node_log(n, NODE_LOG_DEBUG, "ground station %u at port %u", id, ntohs(addr->sin_port));
    n->ground_addrs[i] = *addr;
}

static const struct sockaddr_in *ground_addr(const node_t *n, uint16_t id)
{
    int i = skymem_station_find(n->grounds, NODE_GROUND_SLOTS, id);
    return i >= 0 ? &n->ground_addrs[i] : NULL;
}

/* Where the answers to one relayed request go: the address it came from, for that request id only. A
 * relayed command teaches nothing about the station (skymem_sat_from_ground), yet its answers come back
 * through us. This satellite cannot verify the command (its destination's UP key made the tag): which
 * request keeps a slot, and for how long, is skymem_returns.h's (first come keeps it). */
static void remember_return(node_t *n, const skymem_route_t *r, const struct sockaddr_in *addr)
{
    int i = skymem_return_claim(n->returns, NODE_RETURN_SLOTS, r->src_sat, r->request_id, node_mono_ns() / 1000000u,
                                NODE_RETURN_TTL_MS);
    if (i >= 0) n->return_addr[i] = *addr;
}

/* The address for a reply to a ground station. One this satellite's core built answers a command verified here
 * (with this satellite as its destination, up this ground link): it goes to the station's learned address, the
 * address that command came from -- never to a return slot, which any packet relayed through here may claim
 * with that request id (N1 of issue 53: a forged relay packet took the answers of a GET_CHUNKS and a MIGRATE
 * verified here). One relayed (from another satellite) answers a command this satellite relayed: its request's
 * slot, else the station's learned address. */
static const struct sockaddr_in *reply_addr(node_t *n, uint16_t station, uint32_t request_id, int relayed)
{
    int i = relayed ? skymem_return_find(n->returns, NODE_RETURN_SLOTS, station, request_id, node_mono_ns() / 1000000u)
                    : -1;
    return i >= 0 ? &n->return_addr[i] : ground_addr(n, station);
}

/* ---- routing ------------------------------------------------------------------- */
/* One hop (skymem_hop.h decides, skymem_link.h signs): relay = it came in over a link or a ground link,
 * not from this satellite's core. */
static void route_packet(node_t *n, uint8_t *pkt, size_t len, const skymem_route_t *r, int is_reply, int relay)
{
    skymem_hop_t hop = skymem_hop_decide((uint16_t)n->planes, (uint16_t)n->sats, (uint16_t)n->plane,
                                         (uint16_t)n->sat, r, is_reply);
    int rc;
    switch (hop.kind) {
    case SKYMEM_HOP_GROUND: {
        const struct sockaddr_in *ga = reply_addr(n, r->dst_sat, r->request_id, relay);
        if (ga == NULL) {
            n->c.dropped++;
            node_log(n, NODE_LOG_WARN, "reply for unknown ground station %u dropped", r->dst_sat);
            return;
        }
        node_send_ground(n, ga, pkt, len);
        return;
    }
    case SKYMEM_HOP_HERE: /* routed to itself: would loop (what is for this satellite never comes here) */
        n->c.dropped++;
        return;
    case SKYMEM_HOP_DROP:
        n->c.dropped++;
        node_log(n, NODE_LOG_DEBUG, "request %u dropped: %s", r->request_id, hop.why);
        if (hop.nak && relay && n->auth == NULL) /* keys on: no NAK for what a relay cannot verify (PROTOCOL.md §5) */
            skymem_sat_reply(&n->core, r, SKYMEM_REPLY_NAK, pkt[6] & 0x7Fu, hop.nak, 0, 0, NULL);
        return;
    case SKYMEM_HOP_LINK: break;
    }
    if (skymem_hop_advance(pkt, len, r) != SKYMEM_OK) {
        n->c.dropped++;
        return;
    }
    if (n->auth != NULL) { /* checked for the link it came over, signed for the one it leaves by */
        rc = skymem_link_prepare(n->auth, relay, hop.next_plane, hop.next_sat, node_unix_us(), pkt, len,
                                 SKYMEM_MAX_PACKET);
        if (rc < 0) {
            n->c.dropped++;
            n->core.c.auth_failures++;
            node_log(n, NODE_LOG_DEBUG, "request %u not put on the link to (%u,%u): %s", r->request_id,
                     hop.next_plane, hop.next_sat, skymem_auth_strerror(rc));
            return;
        }
        len = (size_t)rc;
    }
    if (relay) n->c.forwarded++;
    node_send_isl(n, hop.dir, pkt, len);
}

/* ---- the core's io --------------------------------------------------------------- */
static void io_send(void *ctx, uint8_t *pkt, size_t len, const skymem_route_t *r, int is_reply)
{
    route_packet((node_t *)ctx, pkt, len, r, is_reply, 0);
}

static uint64_t io_clock_us(void *ctx)
{
    (void)ctx;
    return node_unix_us();
}

static uint64_t io_mono_ms(void *ctx)
{
    (void)ctx;
    return node_mono_ns() / 1000000ull;
}

static void io_tlm_time(void *ctx, uint32_t *sec, uint16_t *sub) { tlm_time((node_t *)ctx, sec, sub); }

static void io_log(void *ctx, int level, int about, const char *text)
{
    (void)about;
    node_log((node_t *)ctx, level, "%s", text);
}

static uint8_t io_apply_param(void *ctx, uint16_t id, uint32_t v)
{
    node_t *n = (node_t *)ctx;
    skymem_store_info_t info;
    skymem_store_info(n->store, &info);
    switch (id) {
    case SKYMEM_PARAM_MEMORY_BUDGET_KB:
        if (v < 4) return SKYMEM_NAK_BAD_PARAM;
        if (skymem_store_resize(&n->store, (uint64_t)v * 1024u, info.chunk_size) != SKYMEM_STORE_OK)
            return SKYMEM_NAK_BAD_PARAM;
        break;
    case SKYMEM_PARAM_CHUNK_SIZE:
        if (v < 1 || v > SKYMEM_MAX_CHUNK_DATA) return SKYMEM_NAK_BAD_PARAM;
        if (skymem_store_resize(&n->store, info.budget_bytes, v) != SKYMEM_STORE_OK) return SKYMEM_NAK_BAD_PARAM;
        break;
    case SKYMEM_PARAM_DELAY_SCALE_PPM: n->delay_scale = n->core.delay_scale = (double)v / 1e6; break;
    case SKYMEM_PARAM_LOSS_PPM:
        if (v > 1000000u) return SKYMEM_NAK_BAD_PARAM;
        n->loss = (double)v / 1e6;
        break;
    default: return SKYMEM_NAK_BAD_PARAM;
    }
    n->core.store = n->store; /* a resize makes a new store */
    node_log(n, NODE_LOG_INFO, "parameter %u set to %u", id, v);
    return 0;
}

static void io_fill_stats(void *ctx, skymem_stats_t *st)
{
    const node_t *n = (const node_t *)ctx;
    st->rx_packets = n->c.rx_packets;
    st->tx_packets = n->c.tx_packets;
    st->forwarded = n->c.forwarded;
    st->dropped = n->c.dropped;
    st->invalid = n->c.invalid;
    st->mission_time_ms = node_mission_ms(n);
    st->uptime_s = (uint32_t)((node_mono_ns() - n->start_mono_ns) / 1000000000ull);
}

static void io_reset_counters(void *ctx) { memset(&((node_t *)ctx)->c, 0, sizeof(((node_t *)ctx)->c)); }

static const skymem_sat_io_t node_io = {io_send, io_clock_us, io_mono_ms, io_tlm_time, io_log, io_apply_param,
                                        io_fill_stats, io_reset_counters, node_auth_persist_floor};

void node_sat_setup(node_t *n)
{
    n->core.plane = (uint16_t)n->plane;
    n->core.sat = (uint16_t)n->sat;
    n->core.planes = (uint16_t)n->planes;
    n->core.sats = (uint16_t)n->sats;
    n->core.altitude_m = n->cfg.altitude_km * 1000.0;
    n->core.delay_scale = n->delay_scale;
    skymem_sat_init(&n->core, &node_io, n);
}

/* Control commands (SKYMEM_CMD_MID, no route header): handled here, no reply
 * (like a cFS app; ask for SKYMEM_SEND_HK_MID to see the counters). */
static void handle_control(node_t *n, const skymem_msg_t *m)
{
    switch (m->cc) {
    case SKYMEM_NOOP_CC:
        n->core.c.cmd_count++;
        node_log(n, NODE_LOG_INFO, "NOOP command");
        break;
    case SKYMEM_RESET_COUNTERS_CC: skymem_sat_reset_counters(&n->core); break;
    case SKYMEM_SET_PARAM_CC:
        if (io_apply_param(n, m->param_id, m->param_value) == 0) n->core.c.cmd_count++;
        else n->core.c.err_count++;
        break;
    default: n->core.c.err_count++; break;
    }
}

/* Housekeeping goes where a cFS mission's TO_LAB would send it (--tlm-dest), whoever asked: the same
 * packets a ground system receives from the cFS apps; without --tlm-dest it goes back to the sender.
 * Either way only for a request padded to at least the answer's length (req_len): an HK request carries
 * no tag and its source can be forged, so a shorter one would make the node an amplifier aimed at the
 * telemetry host or whatever address a flood names (13x for an 8-byte SEND_HK). A short one is counted
 * in dropped. */
static void send_tlm(node_t *n, int from_ground, const struct sockaddr_in *src, size_t req_len, const uint8_t *pkt,
                     size_t len)
{
    if (req_len < len) {
        n->c.dropped++;
        node_log(n, NODE_LOG_DEBUG, "HK request of %zu bytes unanswered: shorter than its %zu-byte answer", req_len,
                 len);
    } else if (n->tlm_dest.sin_port != 0) {
        node_sendto_now(n, n->ground_fd, &n->tlm_dest, pkt, len);
    } else if (from_ground) {
        node_send_ground(n, src, pkt, len);
    } else {
        node_sendto_now(n, n->isl_fd, src, pkt, len);
    }
}

static void send_hk(node_t *n, int from_ground, const struct sockaddr_in *src, size_t req_len)
{
    skymem_stats_t st;
    uint8_t buf[SKYMEM_TLM_HDR_LEN + SKYMEM_STATS_LEN];
    uint32_t sec;
    uint16_t sub;
    int len;
    skymem_sat_fill_stats(&n->core, &st);
    tlm_time(n, &sec, &sub);
    len = skymem_build_hk(buf, sizeof buf, n->seq++, sec, sub, &st);
    if (len > 0) send_tlm(n, from_ground, src, req_len, buf, (size_t)len);
}

static uint32_t ground_stations_known(const node_t *n) { return skymem_station_count(n->grounds, NODE_GROUND_SLOTS); }

/* ISL_ROUTER's housekeeping, laid out as the cFS app sends it (ISL_ROUTER_HK_* of skymem_wire.h). */
static void send_router_hk(node_t *n, int from_ground, const struct sockaddr_in *src, size_t req_len)
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
    if (len > 0) send_tlm(n, from_ground, src, req_len, buf, (size_t)len);
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

void node_on_packet(node_t *n, int from, const struct sockaddr_in *src, uint8_t *pkt, size_t len)
{
    skymem_msg_t m;
    skymem_route_t r;
    int rc, from_ground = from != 0, checked = 0;
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
            /* keys on, nothing is learned from it unless its tag verified here (the core's rule) */
            int answer = skymem_sat_malformed(&n->core, pkt, len, &r);
            if (from_ground && r.src_plane == SKYMEM_GROUND_PLANE && (answer || n->auth == NULL)) {
                learn_ground(n, r.src_sat, src);
                if (r.via_plane == SKYMEM_NO_SAT) {
                    r.via_plane = (uint16_t)n->plane;
                    r.via_sat = (uint16_t)n->sat;
                    skymem_rewrite_route(pkt, len, &r);
                }
            }
            if (answer) skymem_sat_nak_malformed(&n->core, rc, pkt, &r);
        }
        return;
    }
    if (m.is_cmd) {
        switch (m.mid) {
        case SKYMEM_CMD_MID:
            if (!skymem_sat_refuse_control(&n->core, m.cc)) handle_control(n, &m);
            return;
        case SKYMEM_SEND_HK_MID: send_hk(n, from_ground, src, len); return; /* not counted, as in cFS */
        case ISL_ROUTER_SEND_HK_MID: send_router_hk(n, from_ground, src, len); return;
        case ISL_ROUTER_CMD_MID:
            if (!skymem_sat_refuse_control(&n->core, m.cc)) handle_router_command(n, &m);
            return;
        default: break;
        }
        r = m.route;
        if (from_ground && n->auth != NULL && r.src_plane != SKYMEM_GROUND_PLANE) {
            /* a satellite's traffic never comes up a ground link: whoever sent it, it is not let onto the links */
            n->c.dropped++;
            n->core.c.auth_failures++;
            node_log(n, NODE_LOG_DEBUG, "a packet from satellite (%u,%u) on the ground port dropped", r.src_plane,
                     r.src_sat);
            return;
        }
        if (from_ground) { /* checked where it comes up, before anything is learned from it or it is relayed */
            int what = skymem_sat_from_ground(&n->core, &m, pkt, len, &r);
            if (what == SKYMEM_SAT_DROP) return;
            if (what == SKYMEM_SAT_LEARN) learn_ground(n, r.src_sat, src);
            else if (r.src_plane == SKYMEM_GROUND_PLANE) remember_return(n, &r, src); /* its answers only */
            checked = r.src_plane == SKYMEM_GROUND_PLANE;
            m.route = r; /* the core sees the route as rewritten (via filled in) */
        }
        if (is_self(n, r.dst_plane, r.dst_sat)) {
            n->rc.delivered++;
            if (skymem_sat_accept(&n->core, &m, pkt, len, checked)) {
                skymem_sat_serve(&n->core, &m);
                skymem_sat_run_jobs(&n->core, UINT32_MAX); /* GET_CHUNKS answered at once: the socket paces it */
            }
        } else {
            route_packet(n, pkt, len, &r, 0, 1);
        }
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
        skymem_sat_on_reply(&n->core, &m, pkt, len);
        return;
    }
    route_packet(n, pkt, len, &r, 1, 1);
}
