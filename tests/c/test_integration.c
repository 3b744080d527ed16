/* test_integration.c -- a 4x4 constellation of real skymem_node processes on
 * loopback, exercised through their ground ports like a ground station would:
 * every command, multi-hop forwarding across both wraps, TTL expiry,
 * migration, eviction gossip, LRU eviction notices, malformed input, and a
 * clean SIGTERM shutdown. Nodes are killed on any exit path. */
#include "check.h"
#include "nodeproc.h"
#include "skymem_crc32c.h"
#include "skymem_router.h"

#define P 4
#define S 4
#define GS 7         /* our ground station id */
#define WAIT_MS 3000 /* bound on every reply wait */
#define SMALL_SAT_P 1 /* (1,2) runs with a tiny budget to force LRU evictions */
#define SMALL_SAT_S 2

static np_grid_t G;
static int fd;
static uint32_t next_req = 100;
static uint8_t rbuf[SKYMEM_MAX_PACKET + 1];
static uint8_t pkt[SKYMEM_MAX_PACKET];
static uint8_t evicted_hashes[16][32];
static int n_evicted;

static skymem_route_t route_to(uint32_t p, uint32_t s)
{
    skymem_route_t r;
    memset(&r, 0, sizeof r);
    r.dst_plane = (uint16_t)p;
    r.dst_sat = (uint16_t)s;
    r.src_plane = SKYMEM_GROUND_PLANE;
    r.src_sat = GS;
    r.via_plane = SKYMEM_NO_SAT;
    r.via_sat = SKYMEM_NO_SAT;
    r.request_id = next_req++;
    r.ttl = SKYMEM_DEFAULT_TTL;
    return r;
}

static void mkhash(uint8_t *h, uint32_t label)
{
    uint32_t i;
    for (i = 0; i < 32; i++) h[i] = (uint8_t)(label * 31u + i * 7u + (label >> 8));
}

static void send_to(uint32_t p, uint32_t s, const uint8_t *buf, int len)
{
    struct sockaddr_in a = np_ground_addr(&G, p, s);
    if (len <= 0 || sendto(fd, buf, (size_t)len, 0, (struct sockaddr *)&a, sizeof a) != len) {
        fprintf(stderr, "send failed (len %d)\n", len);
        check_failures++;
    }
}

/* Next reply with this request id (unsolicited EVICTED notices are recorded on the way). */
static int wait_reply(uint32_t req_id, skymem_msg_t *m, int timeout_ms)
{
    uint64_t deadline = np_now_ms() + (uint64_t)timeout_ms;
    while (np_now_ms() < deadline) {
        int n = np_recv(fd, rbuf, sizeof rbuf, (int)(deadline - np_now_ms()) + 1);
        if (n < 0) break;
        if (skymem_parse(rbuf, (size_t)n, m) != SKYMEM_OK || m->mid != SKYMEM_REPLY_TLM_MID) continue;
        if (m->reply_kind == SKYMEM_REPLY_EVICTED) {
            if (n_evicted < 16) memcpy(evicted_hashes[n_evicted++], m->block_hash, 32);
            continue;
        }
        if (m->route.request_id == req_id) return 0;
    }
    return -1;
}

/* Sends via the ground port of (vp, vs) and waits for the reply. */
static int request(uint32_t vp, uint32_t vs, int len, uint32_t req_id, skymem_msg_t *m)
{
    send_to(vp, vs, pkt, len);
    return wait_reply(req_id, m, WAIT_MS);
}

static int set_chunk(uint32_t vp, uint32_t vs, uint32_t dp, uint32_t ds, const uint8_t *hash, uint32_t id,
                     uint32_t count, uint8_t radius, const uint8_t *data, uint16_t dlen, skymem_msg_t *m)
{
    skymem_route_t r = route_to(dp, ds);
    skymem_chunk_desc_t d;
    memset(&d, 0, sizeof d);
    memcpy(d.block_hash, hash, 32);
    d.chunk_id = id;
    d.chunk_count = count;
    d.created_ms = 1234;
    d.crc32c = skymem_crc32c(data, dlen);
    d.data_len = dlen;
    d.gossip_radius = radius;
    return request(vp, vs, skymem_build_set_chunk(pkt, sizeof pkt, 0, &r, &d, data), r.request_id, m);
}

static int probe(uint32_t vp, uint32_t vs, uint32_t dp, uint32_t ds, const uint8_t *hash, uint32_t id,
                 skymem_msg_t *m)
{
    skymem_route_t r = route_to(dp, ds);
    return request(vp, vs, skymem_build_probe(pkt, sizeof pkt, 0, &r, hash, id), r.request_id, m);
}

static int stats(uint32_t p, uint32_t s, skymem_stats_t *st)
{
    skymem_route_t r = route_to(p, s);
    skymem_msg_t m;
    if (request(p, s, skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_STATS_CC, 0, &r, NULL, 0), r.request_id, &m))
        return -1;
    if (m.reply_kind != SKYMEM_REPLY_STATS) return -1;
    *st = m.stats;
    return 0;
}

static int is_ack(int rc, const skymem_msg_t *m) { return rc == 0 && m->reply_kind == SKYMEM_REPLY_ACK; }
static int is_nak(int rc, const skymem_msg_t *m, uint8_t status)
{
    return rc == 0 && m->reply_kind == SKYMEM_REPLY_NAK && m->reply_status == status;
}

static void wait_all_up(void)
{
    uint32_t p, s;
    for (p = 0; p < P; p++)
        for (s = 0; s < S; s++) {
            skymem_msg_t m;
            int ok = 0, tries;
            for (tries = 0; tries < 50 && !ok; tries++) { /* up to ~5 s per node */
                skymem_route_t r = route_to(p, s);
                send_to(p, s, pkt, skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0));
                ok = wait_reply(r.request_id, &m, 100) == 0 && m.reply_kind == SKYMEM_REPLY_ACK &&
                     m.route.src_plane == p && m.route.src_sat == s;
            }
            if (!ok) {
                fprintf(stderr, "node (%u,%u) did not answer NOOP\n", p, s);
                np_kill_all();
                exit(1);
            }
        }
}

static void test_forwarding(void)
{
    /* (via, dst) pairs: every wrap direction, and a few long routes */
    static const uint32_t cases[][4] = {
        {0, 0, 3, 3}, /* north wrap + west wrap */
        {3, 3, 0, 0}, /* south wrap + east wrap */
        {0, 0, 0, 3}, /* west wrap only */
        {0, 3, 0, 0}, /* east wrap only */
        {0, 1, 3, 1}, /* north wrap only */
        {3, 1, 0, 1}, /* south wrap only */
        {0, 0, 2, 2}, /* half way round both rings: tie-breaks */
        {1, 1, 2, 3},
    };
    size_t i;
    skymem_stats_t before[P][S], after;
    uint32_t p, s, total_fwd = 0, expect = 0;
    for (p = 0; p < P; p++)
        for (s = 0; s < S; s++) CHECK_EQ_INT(stats(p, s, &before[p][s]), 0);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        skymem_route_t r = route_to(cases[i][2], cases[i][3]);
        skymem_msg_t m;
        uint32_t hops = skymem_torus_hops(P, S, cases[i][0], cases[i][1], cases[i][2], cases[i][3]);
        int rc = request(cases[i][0], cases[i][1],
                         skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0), r.request_id, &m);
        CHECK(is_ack(rc, &m));
        /* the reply comes from the destination and took the torus distance back to the ground link */
        CHECK(rc == 0 && m.route.src_plane == cases[i][2] && m.route.src_sat == cases[i][3]);
        CHECK(rc == 0 && m.route.via_plane == cases[i][0] && m.route.via_sat == cases[i][1]);
        CHECK_EQ_INT(rc == 0 ? m.route.hops : 999, hops);
        CHECK_EQ_INT(rc == 0 ? m.route.ttl : 0, SKYMEM_DEFAULT_TTL - hops);
        /* relayed by every satellite but the destination on the way out (the ground
         * link included), by every one but both ends on the way back */
        expect += hops ? 2 * hops - 1 : 0;
    }
    for (p = 0; p < P; p++)
        for (s = 0; s < S; s++) {
            CHECK_EQ_INT(stats(p, s, &after), 0);
            total_fwd += after.forwarded - before[p][s].forwarded;
        }
    /* stats requests to each node are local, so only the NOOPs were relayed */
    CHECK_EQ_INT(total_fwd, expect);
}

static void test_chunks(void)
{
    static uint8_t data[6144], big[6145];
    uint8_t h[32];
    skymem_msg_t m;
    skymem_route_t r;
    uint32_t i;
    int rc, got_data = 0, got_nak = 0;
    for (i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 13u + 5u);
    mkhash(h, 1);
    /* SET at (3,3) via (0,0), 4 chunks of which we store 0, 1, 3 */
    for (i = 0; i < 4; i++) {
        if (i == 2) continue;
        rc = set_chunk(0, 0, 3, 3, h, i, 4, 1, data, (uint16_t)(6144 - i), &m);
        CHECK(is_ack(rc, &m) && m.reply_cc == SKYMEM_SET_CHUNK_CC && m.reply_chunk_id == i);
    }
    /* GET one back through another ground link */
    r = route_to(3, 3);
    rc = request(1, 2, skymem_build_get_chunk(pkt, sizeof pkt, 0, &r, h, 1), r.request_id, &m);
    CHECK(rc == 0 && m.reply_kind == SKYMEM_REPLY_DATA && m.desc.chunk_id == 1 && m.desc.data_len == 6143 &&
          memcmp(m.data, data, 6143) == 0 && m.desc.crc32c == skymem_crc32c(data, 6143) && m.desc.chunk_count == 4 &&
          m.desc.created_ms == 1234 && m.desc.gossip_radius == 1);
    r = route_to(3, 3);
    rc = request(0, 0, skymem_build_get_chunk(pkt, sizeof pkt, 0, &r, h, 2), r.request_id, &m);
    CHECK(is_nak(rc, &m, SKYMEM_NAK_NOT_FOUND) && m.reply_chunk_id == 2 && m.has_block_hash);
    /* GET_CHUNKS 0..3: three DATA, one NAK, each its own reply */
    r = route_to(3, 3);
    send_to(0, 0, pkt, skymem_build_get_chunks(pkt, sizeof pkt, 0, &r, h, 0, 4, 1));
    for (i = 0; i < 4; i++) {
        if (wait_reply(r.request_id, &m, WAIT_MS) != 0) break;
        if (m.reply_kind == SKYMEM_REPLY_DATA && m.reply_cc == SKYMEM_GET_CHUNKS_CC &&
            memcmp(m.data, data, m.desc.data_len) == 0)
            got_data++;
        if (m.reply_kind == SKYMEM_REPLY_NAK && m.reply_status == SKYMEM_NAK_NOT_FOUND && m.reply_chunk_id == 2)
            got_nak++;
    }
    CHECK_EQ_INT(got_data, 3);
    CHECK_EQ_INT(got_nak, 1);
    /* PROBE */
    rc = probe(0, 0, 3, 3, h, 0, &m);
    CHECK(is_ack(rc, &m) && m.reply_value == 4);
    rc = probe(0, 0, 3, 3, h, 2, &m);
    CHECK(is_nak(rc, &m, SKYMEM_NAK_NOT_FOUND));
    /* overwrite */
    rc = set_chunk(0, 0, 3, 3, h, 0, 4, 1, data + 100, 10, &m);
    CHECK(is_ack(rc, &m));
    r = route_to(3, 3);
    rc = request(0, 0, skymem_build_get_chunk(pkt, sizeof pkt, 0, &r, h, 0), r.request_id, &m);
    CHECK(rc == 0 && m.reply_kind == SKYMEM_REPLY_DATA && m.desc.data_len == 10 && !memcmp(m.data, data + 100, 10));
    /* bad CRC */
    {
        skymem_chunk_desc_t d;
        memset(&d, 0, sizeof d);
        memcpy(d.block_hash, h, 32);
        d.chunk_id = 9;
        d.chunk_count = 10;
        d.data_len = 100;
        d.crc32c = skymem_crc32c(data, 100) ^ 1u;
        r = route_to(2, 1);
        rc = request(0, 0, skymem_build_set_chunk(pkt, sizeof pkt, 0, &r, &d, data), r.request_id, &m);
        CHECK(is_nak(rc, &m, SKYMEM_NAK_BAD_CRC));
    }
    /* larger than the configured chunk size */
    memset(big, 1, sizeof big);
    rc = set_chunk(0, 0, 2, 1, h, 9, 10, 0, big, sizeof big, &m);
    CHECK(is_nak(rc, &m, SKYMEM_NAK_TOO_LARGE));
}

static void test_params_and_counters(void)
{
    skymem_msg_t m;
    skymem_route_t r;
    skymem_stats_t st;
    int rc, n;
    uint8_t hk[256];
    struct sockaddr_in a = np_ground_addr(&G, 2, 0);
    r = route_to(2, 0);
    rc = request(2, 0, skymem_build_set_param(pkt, sizeof pkt, 0, &r, SKYMEM_PARAM_LOSS_PPM, 0), r.request_id, &m);
    CHECK(is_ack(rc, &m) && m.reply_cc == SKYMEM_SET_PARAM_CC);
    r = route_to(2, 0);
    rc = request(2, 0, skymem_build_set_param(pkt, sizeof pkt, 0, &r, 99, 1), r.request_id, &m);
    CHECK(is_nak(rc, &m, SKYMEM_NAK_BAD_PARAM));
    r = route_to(2, 0);
    rc = request(2, 0, skymem_build_set_param(pkt, sizeof pkt, 0, &r, SKYMEM_PARAM_CHUNK_SIZE, 60001), r.request_id, &m);
    CHECK(is_nak(rc, &m, SKYMEM_NAK_BAD_PARAM));
    r = route_to(2, 0);
    rc = request(2, 0, skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_RESET_COUNTERS_CC, 0, &r, NULL, 0), r.request_id, &m);
    CHECK(is_ack(rc, &m));
    CHECK_EQ_INT(stats(2, 0, &st), 0);
    CHECK(st.plane == 2 && st.sat == 0 && st.cmd_count == 1 && st.err_count == 0 && st.bytes_budget == (64u << 20));
    /* control NOOP exactly as cmdUtil sends it, then SEND_HK */
    n = skymem_build_cmd(pkt, sizeof pkt, SKYMEM_CMD_MID, SKYMEM_NOOP_CC, 0, NULL, 0);
    CHECK_EQ_INT(n, 8);
    sendto(fd, pkt, (size_t)n, 0, (struct sockaddr *)&a, sizeof a);
    n = skymem_build_set_param(pkt, sizeof pkt, 0, NULL, SKYMEM_PARAM_DELAY_SCALE_PPM, 0);
    sendto(fd, pkt, (size_t)n, 0, (struct sockaddr *)&a, sizeof a);
    /* SEND_HK as cmdUtil sends it, 8 bytes: shorter than its answer, so not answered (no amplifier for a
     * forged sender) but counted in dropped, which the STATS after it shows (one socket, handled in order) */
    n = skymem_build_cmd(pkt, sizeof pkt, SKYMEM_SEND_HK_MID, 0, 0, NULL, 0);
    sendto(fd, pkt, (size_t)n, 0, (struct sockaddr *)&a, sizeof a);
    CHECK_EQ_INT(stats(2, 0, &st), 0);
    CHECK(st.dropped == 1);
    { /* padded to the answer's length: answered */
        static const uint8_t pad[SKYMEM_TLM_HDR_LEN + SKYMEM_STATS_LEN];
        n = skymem_build_cmd(pkt, sizeof pkt, SKYMEM_SEND_HK_MID, 0, 0, pad, sizeof pad - SKYMEM_CMD_HDR_LEN);
        sendto(fd, pkt, (size_t)n, 0, (struct sockaddr *)&a, sizeof a);
    }
    {
        uint64_t deadline = np_now_ms() + WAIT_MS;
        int got = 0;
        while (!got && np_now_ms() < deadline) {
            int k = np_recv(fd, hk, sizeof hk, WAIT_MS);
            if (k > 0 && skymem_parse(hk, (size_t)k, &m) == SKYMEM_OK && m.mid == SKYMEM_HK_TLM_MID) got = 1;
        }
        CHECK(got);
        /* after the reset: STATS, NOOP, SET_PARAM, STATS (SEND_HK is not a counted command, as in cFS) */
        CHECK(got && m.stats.plane == 2 && m.stats.cmd_count == 4);
    }
}

static void test_errors(void)
{
    skymem_msg_t m;
    skymem_route_t r;
    skymem_stats_t st0, st1;
    int n;
    uint8_t junk[64];
    CHECK_EQ_INT(stats(1, 1, &st0), 0);
    /* garbage, a bad checksum, a truncated packet: counted, no reply, no crash */
    memset(junk, 0xEE, sizeof junk);
    send_to(1, 1, junk, sizeof junk);
    r = route_to(1, 1);
    n = skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    pkt[7] ^= 0x55;
    send_to(1, 1, pkt, n);
    r = route_to(1, 1);
    n = skymem_build_get_chunk(pkt, sizeof pkt, 0, &r, junk, 0);
    send_to(1, 1, pkt, n - 3);
    /* wrong body length but a valid header: NAK BAD_LENGTH */
    r = route_to(1, 1);
    n = skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_GET_CHUNK_CC, 0, &r, junk, 35);
    CHECK(is_nak(request(1, 1, n, r.request_id, &m), &m, SKYMEM_NAK_BAD_LENGTH));
    CHECK_EQ_INT(stats(1, 1, &st1), 0);
    CHECK_EQ_INT(st1.invalid - st0.invalid, 4);
    /* TTL too small for the distance: NAK TTL_EXPIRED from the satellite where it ran out */
    r = route_to(2, 2);
    r.ttl = 1;
    n = skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    CHECK(is_nak(request(0, 0, n, r.request_id, &m), &m, SKYMEM_NAK_TTL_EXPIRED));
    /* destination outside the grid */
    r = route_to(9, 0);
    n = skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    CHECK(is_nak(request(0, 0, n, r.request_id, &m), &m, SKYMEM_NAK_NO_ROUTE));
}

static void test_evict_gossip(void)
{
    uint8_t h[32], data[64];
    skymem_msg_t m;
    skymem_route_t r;
    uint32_t p, s;
    int rc;
    memset(data, 3, sizeof data);
    mkhash(h, 2);
    /* the block on every satellite */
    for (p = 0; p < P; p++)
        for (s = 0; s < S; s++) CHECK(is_ack(set_chunk(p, s, p, s, h, p * S + s, 16, 1, data, 64, &m), &m));
    /* EVICT at (1,1) radius 1: (1,1) and its 4 neighbours purge, nobody else */
    r = route_to(1, 1);
    rc = request(0, 0, skymem_build_evict(pkt, sizeof pkt, 0, &r, h, 4242, 1), r.request_id, &m);
    CHECK(is_ack(rc, &m) && m.reply_value == 1);
    for (p = 0; p < P; p++)
        for (s = 0; s < S; s++) {
            int within = skymem_torus_hops(P, S, 1, 1, p, s) <= 1;
            int gone = 0, tries;
            /* gossip is asynchronous: poll (bounded) for the purge to land */
            for (tries = 0; tries < 20; tries++) {
                rc = probe(p, s, p, s, h, p * S + s, &m);
                gone = is_nak(rc, &m, SKYMEM_NAK_NOT_FOUND);
                if (gone || !within) break;
                usleep(20000);
            }
            if (within) CHECK(gone);
            else CHECK(is_ack(rc, &m));
        }
    /* radius 2 reaches distance 2 */
    r = route_to(1, 1);
    rc = request(1, 1, skymem_build_evict(pkt, sizeof pkt, 0, &r, h, 4243, 2), r.request_id, &m);
    CHECK(is_ack(rc, &m) && m.reply_value == 0);
    {
        int gone = 0, tries;
        for (tries = 0; tries < 20 && !gone; tries++) {
            rc = probe(3, 1, 3, 1, h, 3 * S + 1, &m);
            gone = is_nak(rc, &m, SKYMEM_NAK_NOT_FOUND);
            if (!gone) usleep(20000);
        }
        CHECK(gone);
        rc = probe(3, 3, 3, 3, h, 3 * S + 3, &m); /* distance 4: untouched */
        CHECK(is_ack(rc, &m));
    }
}

static void test_migrate(void)
{
    uint8_t h[32], data[3000];
    skymem_msg_t m;
    skymem_route_t r;
    uint32_t i;
    int rc;
    skymem_stats_t st;
    for (i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i ^ 0x5A);
    mkhash(h, 3);
    for (i = 0; i < 6; i++) CHECK(is_ack(set_chunk(0, 0, 2, 2, h, i, 6, 1, data, (uint16_t)(3000 - i), &m), &m));
    /* move chunks 0, 2, 4 from (2,2) to (0,3): west/east and north/south wraps on the way */
    r = route_to(2, 2);
    rc = request(0, 0, skymem_build_migrate(pkt, sizeof pkt, 0, &r, h, 0, 3, 2, 0, 3), r.request_id, &m);
    CHECK(is_ack(rc, &m) && m.reply_cc == SKYMEM_MIGRATE_CC && m.reply_value == 3);
    for (i = 0; i < 6; i++) {
        rc = probe(0, 0, 2, 2, h, i, &m);
        if (i % 2 == 0) CHECK(is_nak(rc, &m, SKYMEM_NAK_NOT_FOUND));
        else CHECK(is_ack(rc, &m));
        if (i % 2 == 0) {
            r = route_to(0, 3);
            rc = request(0, 3, skymem_build_get_chunk(pkt, sizeof pkt, 0, &r, h, i), r.request_id, &m);
            CHECK(rc == 0 && m.reply_kind == SKYMEM_REPLY_DATA && m.desc.data_len == 3000 - i &&
                  memcmp(m.data, data, 3000 - i) == 0 && m.desc.chunk_count == 6);
        }
    }
    CHECK_EQ_INT(stats(2, 2, &st), 0);
    CHECK_EQ_INT(st.migrated_out, 3);
    CHECK_EQ_INT(stats(0, 3, &st), 0);
    CHECK_EQ_INT(st.migrated_in, 3);
    /* a target that refuses the chunk (its chunk size is now 100 bytes): NAK MIGRATE_FAILED, copy kept */
    r = route_to(3, 0);
    rc = request(3, 0, skymem_build_set_param(pkt, sizeof pkt, 0, &r, SKYMEM_PARAM_CHUNK_SIZE, 100), r.request_id, &m);
    CHECK(is_ack(rc, &m));
    r = route_to(2, 2);
    rc = request(0, 0, skymem_build_migrate(pkt, sizeof pkt, 0, &r, h, 1, 1, 1, 3, 0), r.request_id, &m);
    CHECK(is_nak(rc, &m, SKYMEM_NAK_MIGRATE_FAILED) && m.reply_value == 0);
    CHECK(is_ack(probe(0, 0, 2, 2, h, 1, &m), &m));
    r = route_to(3, 0);
    rc = request(3, 0, skymem_build_set_param(pkt, sizeof pkt, 0, &r, SKYMEM_PARAM_CHUNK_SIZE, 6144), r.request_id, &m);
    CHECK(is_ack(rc, &m));
    /* a target whose answers are all lost: the holder resends (3 retries), then gives up and keeps its copy */
    {
        skymem_stats_t t0, t1;
        struct sockaddr_in a = np_ground_addr(&G, 3, 0);
        int n;
        CHECK_EQ_INT(stats(3, 0, &t0), 0);
        n = skymem_build_set_param(pkt, sizeof pkt, 0, NULL, SKYMEM_PARAM_LOSS_PPM, 1000000); /* control form */
        sendto(fd, pkt, (size_t)n, 0, (struct sockaddr *)&a, sizeof a);
        r = route_to(2, 2);
        send_to(0, 0, pkt, skymem_build_migrate(pkt, sizeof pkt, 0, &r, h, 3, 1, 1, 3, 0));
        rc = wait_reply(r.request_id, &m, 15000);
        CHECK(is_nak(rc, &m, SKYMEM_NAK_MIGRATE_FAILED) && m.reply_value == 0);
        CHECK(is_ack(probe(0, 0, 2, 2, h, 3, &m), &m));
        n = skymem_build_set_param(pkt, sizeof pkt, 0, NULL, SKYMEM_PARAM_LOSS_PPM, 0);
        sendto(fd, pkt, (size_t)n, 0, (struct sockaddr *)&a, sizeof a);
        CHECK_EQ_INT(stats(3, 0, &t1), 0);
        CHECK_EQ_INT(t1.migrated_in - t0.migrated_in, 4); /* first try + 3 resends all arrived */
    }
    /* MIGRATE sent straight to the holder's own ground link: the ACK comes back through it */
    r = route_to(2, 2);
    rc = request(2, 2, skymem_build_migrate(pkt, sizeof pkt, 0, &r, h, 5, 1, 1, 2, 3), r.request_id, &m);
    CHECK(is_ack(rc, &m) && m.reply_value == 1);
    /* nothing left to move -> ACK 0; bad target -> NAK NO_ROUTE */
    r = route_to(2, 2);
    rc = request(0, 0, skymem_build_migrate(pkt, sizeof pkt, 0, &r, h, 0, 3, 2, 0, 3), r.request_id, &m);
    CHECK(is_ack(rc, &m) && m.reply_value == 0);
    r = route_to(2, 2);
    rc = request(0, 0, skymem_build_migrate(pkt, sizeof pkt, 0, &r, h, 1, 1, 1, 7, 7), r.request_id, &m);
    CHECK(is_nak(rc, &m, SKYMEM_NAK_NO_ROUTE));
}

static void test_lru_notice(void)
{
    /* (1,2) holds only a few 6 KB chunks: filling it evicts the oldest block,
     * which sends EVICTED to us (via the ground link used to set it) and
     * gossips the purge to its neighbour (1,3). */
    static uint8_t data[6144];
    uint8_t h[32], first[32];
    skymem_msg_t m;
    uint32_t b;
    int rc, gone = 0, tries, seen = 0, k;
    memset(data, 9, sizeof data);
    mkhash(first, 1000);
    CHECK(is_ack(set_chunk(0, 0, 1, 3, first, 1, 2, 1, data, 100, &m), &m)); /* chunk 1 lives on the neighbour */
    for (b = 0; b < 12; b++) {
        mkhash(h, 1000 + b);
        rc = set_chunk(0, 0, SMALL_SAT_P, SMALL_SAT_S, h, 0, 2, 1, data, 6144, &m);
        CHECK(is_ack(rc, &m));
    }
    /* collect notices that may still be in flight */
    for (tries = 0; tries < 10; tries++) {
        for (k = 0; k < n_evicted; k++)
            if (!memcmp(evicted_hashes[k], first, 32)) seen = 1;
        if (seen) break;
        wait_reply(0xFFFFFFFFu, &m, 50);
    }
    CHECK(seen);
    for (tries = 0; tries < 20 && !gone; tries++) {
        rc = probe(0, 0, 1, 3, first, 1, &m);
        gone = is_nak(rc, &m, SKYMEM_NAK_NOT_FOUND);
        if (!gone) usleep(20000);
    }
    CHECK(gone);
    {
        skymem_stats_t st;
        CHECK_EQ_INT(stats(SMALL_SAT_P, SMALL_SAT_S, &st), 0);
        CHECK(st.lru_evictions >= 1 && st.bytes_used <= st.bytes_budget && st.bytes_budget == 40000);
    }
}

int main(int argc, char **argv)
{
    uint32_t p, s;
    const char *extra[] = {"--delay-scale", "0", "--log-level", "warn", NULL};
    const char *small[] = {"--delay-scale", "0", "--log-level", "warn", "--memory-budget", "40000", NULL};
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/TO/skymem_node\n", argv[0]);
        return 2;
    }
    G.planes = P;
    G.sats = S;
    np_pick_ports(&G);
    np_active = &G;
    atexit(np_kill_all);
    signal(SIGINT, np_on_signal);
    signal(SIGTERM, np_on_signal);
    signal(SIGALRM, np_on_signal);
    alarm(100); /* hard bound on the whole test */
    printf("ports: ISL %u.., ground %u..\n", G.isl_base, G.ground_base);
    for (p = 0; p < P; p++)
        for (s = 0; s < S; s++)
            np_spawn(&G, argv[1], p, s, (p == SMALL_SAT_P && s == SMALL_SAT_S) ? small : extra);
    fd = np_client_socket();
    wait_all_up();
    test_forwarding();
    test_chunks();
    test_params_and_counters();
    test_errors();
    test_evict_gossip();
    test_migrate();
    test_lru_notice();
    CHECK_EQ_INT(np_stop_all(&G, 5000), 0); /* every node exits 0 on SIGTERM */
    return check_report("integration");
}
