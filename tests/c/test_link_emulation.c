/* test_link_emulation.c -- the node's link emulation, checked through behaviour
 * that the emulation guarantees (no performance thresholds): a round trip can
 * never be shorter than the light time and ground delay it must include; a
 * duplicating link delivers two copies; a lossy link delivers nothing; a
 * bandwidth cap cannot be beaten; a corrupting link's packets are rejected. */
#include <math.h>

#include "check.h"
#include "nodeproc.h"
#include "skymem_crc32c.h"
#include "skymem_geometry.h"

static np_grid_t G;
static int fd;
static uint32_t next_req = 1;
static uint8_t rbuf[SKYMEM_MAX_PACKET + 1], pkt[SKYMEM_MAX_PACKET];
static const char *exe;

static skymem_route_t route_to(uint32_t p, uint32_t s)
{
    skymem_route_t r;
    memset(&r, 0, sizeof r);
    r.dst_plane = (uint16_t)p;
    r.dst_sat = (uint16_t)s;
    r.src_plane = SKYMEM_GROUND_PLANE;
    r.src_sat = 3;
    r.via_plane = r.via_sat = SKYMEM_NO_SAT;
    r.request_id = next_req++;
    r.ttl = SKYMEM_DEFAULT_TTL;
    return r;
}

static void send_to(uint32_t p, uint32_t s, const uint8_t *buf, int len)
{
    struct sockaddr_in a = np_ground_addr(&G, p, s);
    sendto(fd, buf, (size_t)len, 0, (struct sockaddr *)&a, sizeof a);
}

/* Counts replies with this request id arriving within timeout_ms; returns the count. */
static int count_replies(uint32_t req, int timeout_ms, skymem_msg_t *last)
{
    uint64_t deadline = np_now_ms() + (uint64_t)timeout_ms;
    int n = 0;
    while (np_now_ms() < deadline) {
        skymem_msg_t m;
        int k = np_recv(fd, rbuf, sizeof rbuf, (int)(deadline - np_now_ms()) + 1);
        if (k < 0) break;
        if (skymem_parse(rbuf, (size_t)k, &m) == SKYMEM_OK && m.mid == SKYMEM_REPLY_TLM_MID &&
            m.route.request_id == req) {
            n++;
            if (last) *last = m;
        }
    }
    return n;
}

static int wait_reply(uint32_t req, int timeout_ms, skymem_msg_t *m)
{
    uint64_t deadline = np_now_ms() + (uint64_t)timeout_ms;
    while (np_now_ms() < deadline) {
        int k = np_recv(fd, rbuf, sizeof rbuf, (int)(deadline - np_now_ms()) + 1);
        if (k < 0) break;
        if (skymem_parse(rbuf, (size_t)k, m) == SKYMEM_OK && m->mid == SKYMEM_REPLY_TLM_MID &&
            m->route.request_id == req)
            return 0;
    }
    return -1;
}

static int noop(uint32_t vp, uint32_t vs, uint32_t dp, uint32_t ds, int timeout_ms, skymem_msg_t *m)
{
    skymem_route_t r = route_to(dp, ds);
    send_to(vp, vs, pkt, skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0));
    return wait_reply(r.request_id, timeout_ms, m);
}

static int stats(uint32_t p, uint32_t s, skymem_stats_t *st)
{
    skymem_route_t r = route_to(p, s);
    skymem_msg_t m;
    send_to(p, s, pkt, skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_STATS_CC, 0, &r, NULL, 0));
    if (wait_reply(r.request_id, 2000, &m) != 0 || m.reply_kind != SKYMEM_REPLY_STATS) return -1;
    *st = m.stats;
    return 0;
}

static void start(uint32_t planes, uint32_t sats, const char **args)
{
    uint32_t p, s;
    skymem_msg_t m;
    G.planes = planes;
    G.sats = sats;
    for (p = 0; p < planes; p++)
        for (s = 0; s < sats; s++) np_spawn(&G, exe, p, s, args);
    for (p = 0; p < planes; p++)
        for (s = 0; s < sats; s++) {
            int tries, ok = 0;
            for (tries = 0; tries < 20 && !ok; tries++) ok = noop(p, s, p, s, 500, &m) == 0;
            if (!ok) {
                fprintf(stderr, "node (%u,%u) did not come up\n", p, s);
                np_kill_all();
                exit(1);
            }
        }
}

static void stop(void) { CHECK_EQ_INT(np_stop_all(&G, 5000), 0); }

static void test_delay(void)
{
    /* 2x2 grid, real light time, 20 ms ground delay each way. (0,0) -> (1,1) is one
     * hop across planes and one along a plane, out and back. */
    const char *args[] = {"--ground-delay-ms", "20", "--log-level", "warn", "--inclination-deg", "53", NULL};
    skymem_msg_t m;
    uint64_t t0, t1;
    double dm = skymem_intra_plane_distance_m(550e3, 2), dn_min = skymem_inter_plane_distance_max_m(550e3, 2) *
                                                                      cos(53.0 * M_PI / 180.0);
    double floor_ms = 2.0 * 20.0 + 2.0 * 1000.0 * (skymem_light_time_s(dm) + skymem_light_time_s(dn_min));
    int rc;
    start(2, 2, args);
    t0 = np_now_ms();
    rc = noop(0, 0, 1, 1, 3000, &m);
    t1 = np_now_ms();
    CHECK(rc == 0 && m.reply_kind == SKYMEM_REPLY_ACK && m.route.hops == 2);
    printf("delay: round trip %llu ms, physical floor %.1f ms\n", (unsigned long long)(t1 - t0), floor_ms);
    CHECK((double)(t1 - t0) >= floor_ms - 1.0);
    stop();
}

static void test_dup_and_loss(void)
{
    const char *dup[] = {"--dup", "1", "--delay-scale", "0", "--log-level", "warn", NULL};
    const char *plain[] = {"--delay-scale", "0", "--log-level", "warn", NULL};
    skymem_route_t r;
    skymem_stats_t st;
    skymem_msg_t m;
    struct sockaddr_in a;
    int n;
    start(1, 1, dup);
    r = route_to(0, 0);
    send_to(0, 0, pkt, skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0));
    CHECK_EQ_INT(count_replies(r.request_id, 500, NULL), 2);
    stop();

    start(1, 1, plain);
    a = np_ground_addr(&G, 0, 0);
    n = skymem_build_set_param(pkt, sizeof pkt, 0, NULL, SKYMEM_PARAM_LOSS_PPM, 1000000); /* control form */
    sendto(fd, pkt, (size_t)n, 0, (struct sockaddr *)&a, sizeof a);
    r = route_to(0, 0);
    send_to(0, 0, pkt, skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0));
    CHECK_EQ_INT(count_replies(r.request_id, 300, NULL), 0); /* every packet it sends is lost */
    n = skymem_build_set_param(pkt, sizeof pkt, 0, NULL, SKYMEM_PARAM_LOSS_PPM, 0);
    sendto(fd, pkt, (size_t)n, 0, (struct sockaddr *)&a, sizeof a);
    CHECK(noop(0, 0, 0, 0, 2000, &m) == 0 && m.reply_kind == SKYMEM_REPLY_ACK);
    CHECK(stats(0, 0, &st) == 0 && st.dropped >= 1);
    stop();
}

static void test_bandwidth(void)
{
    /* 1 Mbit/s = 125000 bytes/s with a 64 KiB burst: 24 DATA replies of 6248 bytes
     * cannot all arrive sooner than (bytes - burst) / rate. */
    const char *args[] = {"--bandwidth-mbps", "1", "--delay-scale", "0", "--log-level", "warn", NULL};
    static uint8_t data[6144];
    uint8_t h[32];
    skymem_route_t r;
    skymem_msg_t m;
    skymem_chunk_desc_t d;
    uint64_t t0, t1;
    uint32_t i;
    int got = 0;
    size_t bytes = 0;
    double floor_ms;
    start(1, 1, args);
    memset(h, 0x77, sizeof h);
    memset(data, 5, sizeof data);
    for (i = 0; i < 24; i++) {
        memset(&d, 0, sizeof d);
        memcpy(d.block_hash, h, 32);
        d.chunk_id = i;
        d.chunk_count = 24;
        d.data_len = sizeof data;
        d.crc32c = skymem_crc32c(data, sizeof data);
        r = route_to(0, 0);
        send_to(0, 0, pkt, skymem_build_set_chunk(pkt, sizeof pkt, 0, &r, &d, data));
        CHECK(wait_reply(r.request_id, 3000, &m) == 0 && m.reply_kind == SKYMEM_REPLY_ACK);
    }
    usleep(600000); /* let the bucket refill to its burst */
    r = route_to(0, 0);
    t0 = np_now_ms();
    send_to(0, 0, pkt, skymem_build_get_chunks(pkt, sizeof pkt, 0, &r, h, 0, 24, 1));
    while (got < 24 && wait_reply(r.request_id, 5000, &m) == 0) {
        if (m.reply_kind == SKYMEM_REPLY_DATA) {
            got++;
            bytes += m.pri.total_len;
        }
    }
    t1 = np_now_ms();
    floor_ms = ((double)bytes - 65536.0) / 125000.0 * 1000.0;
    printf("bandwidth: %d replies, %zu bytes in %llu ms, cap floor %.0f ms\n", got, bytes,
           (unsigned long long)(t1 - t0), floor_ms);
    CHECK_EQ_INT(got, 24);
    CHECK((double)(t1 - t0) >= floor_ms - 2.0);
    stop();
}

static void test_corrupt(void)
{
    /* (0,0) flips one bit in everything it sends; a single flipped bit always breaks
     * the XOR checksum, so (0,1) must reject every command (0,0) relays to it. */
    const char *bad[] = {"--corrupt", "1", "--delay-scale", "0", "--log-level", "error", NULL};
    const char *good[] = {"--delay-scale", "0", "--log-level", "warn", NULL};
    skymem_stats_t st0, st1;
    skymem_route_t r;
    int i;
    G.planes = 1;
    G.sats = 2;
    np_spawn(&G, exe, 0, 0, bad);
    np_spawn(&G, exe, 0, 1, good);
    for (i = 0; i < 20 && stats(0, 1, &st0) != 0; i++) {
    }
    CHECK(i < 20);
    for (i = 0; i < 10; i++) {
        r = route_to(0, 1);
        send_to(0, 0, pkt, skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0));
    }
    usleep(200000);
    CHECK(stats(0, 1, &st1) == 0);
    CHECK_EQ_INT(st1.invalid - st0.invalid, 10);
    CHECK_EQ_INT(st1.cmd_count - st0.cmd_count, 1); /* only our STATS */
    stop();
}

static void test_peers_file(void)
{
    /* --peers overrides the port rule: give the two satellites ISL ports in the
     * reverse order of the rule; forwarding must follow the file. */
    char path[] = "/tmp/skymem_peers_XXXXXX", arg[64];
    const char *args[] = {"--delay-scale", "0", "--log-level", "warn", "--peers", arg, NULL};
    skymem_msg_t m;
    int pfd = mkstemp(path);
    FILE *f = pfd >= 0 ? fdopen(pfd, "w") : NULL;
    CHECK(f != NULL);
    if (f == NULL) return;
    fprintf(f, "# plane sat host isl_port ground_port\n0 0 127.0.0.1 %u %u\n0 1 127.0.0.1 %u %u\n",
            G.isl_base + 5, G.ground_base, G.isl_base + 4, G.ground_base + 1);
    fclose(f);
    snprintf(arg, sizeof arg, "%s", path);
    start(1, 2, args);
    /* the nodes hold the file's ISL ports, not the rule's */
    CHECK(!np_ports_free(G.isl_base + 4, 1) && !np_ports_free(G.isl_base + 5, 1));
    CHECK(np_ports_free(G.isl_base, 2));
    CHECK(noop(0, 0, 0, 1, 2000, &m) == 0 && m.reply_kind == SKYMEM_REPLY_ACK && m.route.hops == 1);
    CHECK(noop(0, 1, 0, 0, 2000, &m) == 0 && m.reply_kind == SKYMEM_REPLY_ACK && m.route.hops == 1);
    stop();
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/TO/skymem_node\n", argv[0]);
        return 2;
    }
    exe = argv[1];
    np_pick_ports(&G);
    G.isl_base += 10; /* the other half of this run's 20-port slot range than the integration test */
    G.ground_base += 10;
    np_active = &G;
    atexit(np_kill_all);
    signal(SIGINT, np_on_signal);
    signal(SIGTERM, np_on_signal);
    signal(SIGALRM, np_on_signal);
    alarm(60);
    fd = np_client_socket();
    test_delay();
    test_dup_and_loss();
    test_bandwidth();
    test_corrupt();
    test_peers_file();
    return check_report("link_emulation");
}
