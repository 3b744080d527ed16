/* bench_node.c -- skymem_node figures over loopback:
 *   1. packets/s one node forwards: a sender blasts routed packets at node A's
 *      ground port, all addressed to its neighbour B (delay emulation off); A
 *      relays them over ISL; the figure is A's forwarded count / send time,
 *      cross-checked with the commands B received (from STATS).
 *   1b. 6 KB SET_CHUNKs relayed by A to B (one sendto per packet: the sender is the limit).
 *   1c. 6 KB DATA replies relayed by A from its ISL port to the ground station (the GET path
 *      through the overhead satellite): blasted with sendmmsg at A's ISL port as if from B;
 *      A sends each down its ground link to us. Figures: A's forwarded count / blast time, the
 *      datagrams we received, and A's forwarded count per CPU-second of A.
 *   2. idle RSS of a node (VmRSS from /proc/PID/status) with the default 64 MiB budget.
 *   3. idle CPU of a node (utime + stime from /proc/PID/stat over a few seconds).
 * Usage: bench_node PATH/TO/skymem_node [SECONDS_OF_BLAST]
 *        bench_node --relay-only HOST ISL_PORT GROUND_PORT PLANE SAT [SECONDS [PID]]
 *   (1c alone, at a satellite already running there: a real cFS instance's ISL_ROUTER, or a node;
 *    it must accept an unsigned STATS: launched --insecure; PID: count that process's CPU time) */
#include <sys/socket.h>

#include "../tests/c/nodeproc.h"
#include "skymem_crc32c.h"

static uint8_t buf[SKYMEM_MAX_PACKET + 1];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* STATS of satellite (p, s) through its ground port a (5 tries of 1 s). */
static int stats_at(int fd, const struct sockaddr_in *a, uint32_t p, uint32_t s, skymem_stats_t *st)
{
    static uint32_t req = 1;
    skymem_route_t r;
    uint8_t pkt[64];
    int n, tries;
    memset(&r, 0, sizeof r);
    r.dst_plane = (uint16_t)p;
    r.dst_sat = (uint16_t)s;
    r.src_plane = SKYMEM_GROUND_PLANE;
    r.src_sat = 1;
    r.via_plane = r.via_sat = SKYMEM_NO_SAT;
    r.ttl = SKYMEM_DEFAULT_TTL;
    for (tries = 0; tries < 5; tries++) {
        uint64_t deadline;
        r.request_id = req++;
        n = skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_STATS_CC, 0, &r, NULL, 0);
        sendto(fd, pkt, (size_t)n, 0, (const struct sockaddr *)a, sizeof *a);
        deadline = np_now_ms() + 1000;
        while (np_now_ms() < deadline) {
            skymem_msg_t m;
            int k = np_recv(fd, buf, sizeof buf, 100);
            if (k > 0 && skymem_parse(buf, (size_t)k, &m) == SKYMEM_OK && m.reply_kind == SKYMEM_REPLY_STATS &&
                m.route.request_id == r.request_id) {
                *st = m.stats;
                return 0;
            }
        }
    }
    return -1;
}

static int stats(int fd, np_grid_t *g, uint32_t p, uint32_t s, skymem_stats_t *st)
{
    struct sockaddr_in a = np_ground_addr(g, p, s);
    return stats_at(fd, &a, p, s, st);
}

static long vmrss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

static double cpu_ticks(pid_t pid)
{
    char path[64], line[1024], *p;
    unsigned long ut = 0, st = 0;
    FILE *f;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (!f || !fgets(line, sizeof line, f)) {
        if (f) fclose(f);
        return -1;
    }
    fclose(f);
    p = strrchr(line, ')'); /* fields after the command name: state is field 3, utime 14, stime 15 */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
    return (double)(ut + st);
}

/* `count` sendmmsg entries that all send the same packet to `to` (the senders below blast one packet). */
static void same_packet_batch(struct mmsghdr *msgs, struct iovec *iov, int count, uint8_t *pkt, size_t len,
                              struct sockaddr_in *to)
{
    int i;
    for (i = 0; i < count; i++) {
        iov[i].iov_base = pkt;
        iov[i].iov_len = len;
        memset(&msgs[i], 0, sizeof msgs[i]);
        msgs[i].msg_hdr.msg_name = to;
        msgs[i].msg_hdr.msg_namelen = sizeof *to;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
}

/* 1c: 6 KB DATA replies blasted at a satellite's ISL port as if from its neighbour, addressed to
 * ground station 1 through that satellite: it sends each down its ground link to fd. A STATS
 * first teaches it where station 1 is (fd). pid > 0: also the satellite's CPU time. */
static int relay_replies(int fd, const char *name, struct sockaddr_in ground_a, struct sockaddr_in isl_a,
                         uint16_t plane, uint16_t sat, double seconds, pid_t pid)
{
    static uint8_t big[SKYMEM_MAX_PACKET], data[6144];
    static uint8_t rx[64][SKYMEM_MAX_PACKET];
    struct mmsghdr msgs[64], rmsgs[64];
    struct iovec iov[64], riov[64];
    skymem_stats_t a0, a1;
    skymem_route_t r;
    skymem_chunk_desc_t d;
    unsigned long sent = 0, received = 0;
    double t0, t1, c0 = 0, c1 = 0, cpu_s;
    int n, i, sfd = np_client_socket(), big_buf = 8 << 20, have_stats;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big_buf, sizeof big_buf);
    if (stats_at(fd, &ground_a, plane, sat, &a0)) { /* also teaches the satellite where ground station 1 is */
        fprintf(stderr, "satellite %s did not answer STATS\n", name);
        return 1;
    }
    memset(data, 0x5A, sizeof data);
    memset(&d, 0, sizeof d);
    memset(d.block_hash, 0xEF, sizeof d.block_hash);
    d.chunk_count = 1u << 20;
    d.data_len = sizeof data;
    d.crc32c = skymem_crc32c(data, sizeof data);
    memset(&r, 0, sizeof r);
    r.dst_plane = SKYMEM_GROUND_PLANE;
    r.dst_sat = 1;
    r.src_plane = plane;
    r.src_sat = (uint16_t)(sat + 1); /* "from" a neighbour; never read by the relay */
    r.via_plane = plane;
    r.via_sat = sat;
    r.ttl = SKYMEM_DEFAULT_TTL;
    n = skymem_build_reply_data(big, sizeof big, 0, 0, 0, &r, SKYMEM_GET_CHUNK_CC, &d, data);
    same_packet_batch(msgs, iov, 64, big, (size_t)n, &isl_a);
    for (i = 0; i < 64; i++) {
        riov[i].iov_base = rx[i];
        riov[i].iov_len = sizeof rx[i];
        memset(&rmsgs[i], 0, sizeof rmsgs[i]);
        rmsgs[i].msg_hdr.msg_iov = &riov[i];
        rmsgs[i].msg_hdr.msg_iovlen = 1;
    }
    if (pid > 0) c0 = cpu_ticks(pid);
    t0 = now_s();
    do {
        int k = sendmmsg(sfd, msgs, 16, MSG_DONTWAIT); /* 16 at a time, then drain what came back */
        if (k > 0) sent += (unsigned long)k;
        while ((k = recvmmsg(fd, rmsgs, 64, MSG_DONTWAIT, NULL)) > 0) received += (unsigned long)k;
        t1 = now_s();
    } while (t1 - t0 < seconds);
    { /* what is still on its way: up to 0.3 s */
        double end = now_s() + 0.3;
        while (now_s() < end) {
            int k = recvmmsg(fd, rmsgs, 64, MSG_DONTWAIT, NULL);
            if (k > 0) received += (unsigned long)k;
            else usleep(1000);
        }
    }
    if (pid > 0) c1 = cpu_ticks(pid);
    have_stats = stats_at(fd, &ground_a, plane, sat, &a1) == 0;
    cpu_s = (c1 - c0) / (double)sysconf(_SC_CLK_TCK);
    printf("reply relay: offered %lu DATA replies of %d bytes in %.2f s (%.0f/s) at %s's ISL port; the ground "
           "received %lu = %.0f packets/s = %.1f MB/s of chunk data",
           sent, n, t1 - t0, (double)sent / (t1 - t0), name, received, (double)received / (t1 - t0),
           (double)received * 6144.0 / (t1 - t0) / 1e6);
    /* a reply for the ground leaves through the satellite's own ground link: counted as sent (tx) */
    if (have_stats && a1.tx_packets > a0.tx_packets)
        printf("; %s counted %u sent", name, a1.tx_packets - a0.tx_packets - 1); /* less the first STATS reply */
    if (cpu_s > 0)
        printf("; %s used %.2f CPU-seconds = %.0f packets relayed per CPU-second", name, cpu_s,
               (double)received / cpu_s);
    printf("\n");
    close(sfd);
    return 0;
}

static int relay_only(int argc, char **argv)
{
    struct sockaddr_in ground_a, isl_a;
    long isl_port = atol(argv[3]), ground_port = atol(argv[4]), plane = atol(argv[5]), sat = atol(argv[6]);
    double seconds = argc > 7 ? atof(argv[7]) : 3.0;
    long pid = argc > 8 ? atol(argv[8]) : 0;
    if (pid < 0 || isl_port < 1 || isl_port > 65535 || ground_port < 1 || ground_port > 65535 || plane < 0 || plane > 1023 ||
        sat < 0 || sat > 1023 || seconds <= 0 || seconds > 60) {
        fprintf(stderr, "usage: bench_node --relay-only HOST ISL_PORT GROUND_PORT PLANE SAT [SECONDS 0..60 [PID]]\n");
        return 2;
    }
    memset(&ground_a, 0, sizeof ground_a);
    ground_a.sin_family = AF_INET;
    if (inet_pton(AF_INET, argv[2], &ground_a.sin_addr) != 1) {
        fprintf(stderr, "bench_node: '%s' is not an IPv4 address\n", argv[2]);
        return 2;
    }
    isl_a = ground_a;
    ground_a.sin_port = htons((uint16_t)ground_port);
    isl_a.sin_port = htons((uint16_t)isl_port);
    return relay_replies(np_client_socket(), argv[2], ground_a, isl_a, (uint16_t)plane, (uint16_t)sat, seconds,
                         (pid_t)pid);
}

int main(int argc, char **argv)
{
    np_grid_t g;
    struct sockaddr_in isl_a0;
    const char *fast[] = {"--delay-scale", "0", "--log-level", "error", NULL};
    int fd;
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    if (argc >= 7 && !strcmp(argv[1], "--relay-only")) return relay_only(argc, argv);
    if (argc < 2 || seconds <= 0 || seconds > 60) {
        fprintf(stderr, "usage: bench_node PATH/TO/skymem_node [SECONDS 0..60]\n");
        return 2;
    }
    memset(&g, 0, sizeof g);
    g.planes = 1;
    g.sats = 2;
    np_pick_ports(&g);
    np_active = &g;
    atexit(np_kill_all);
    signal(SIGINT, np_on_signal);
    signal(SIGTERM, np_on_signal);
    np_spawn(&g, argv[1], 0, 0, fast);
    np_spawn(&g, argv[1], 0, 1, fast);
    fd = np_client_socket();
    np_addr(g.isl_base, &isl_a0); /* A = satellite (0,0) */
    usleep(300000);

    { /* 1. forwarding */
        skymem_stats_t a0, a1, b0, b1;
        skymem_route_t r;
        uint8_t pkt[128], hash[32];
        struct sockaddr_in a = np_ground_addr(&g, 0, 0);
        struct mmsghdr msgs[64];
        struct iovec iov[64];
        unsigned long sent = 0;
        double t0, t1, c0, c1, cpu_s;
        int n;
        if (stats(fd, &g, 0, 0, &a0) || stats(fd, &g, 0, 1, &b0)) {
            fprintf(stderr, "nodes did not answer\n");
            return 1;
        }
        /* EVICT_BLOCK flagged as gossip with radius 0: B handles it and sends nothing back,
         * so the only traffic is the relay through A */
        memset(hash, 0xAB, sizeof hash);
        memset(&r, 0, sizeof r);
        r.dst_plane = 0;
        r.dst_sat = 1;
        r.src_plane = SKYMEM_GROUND_PLANE;
        r.src_sat = 1;
        r.via_plane = r.via_sat = SKYMEM_NO_SAT;
        r.ttl = SKYMEM_DEFAULT_TTL;
        r.flags = SKYMEM_RF_GOSSIP;
        n = skymem_build_evict(pkt, sizeof pkt, 0, &r, hash, 1, 0);
        same_packet_batch(msgs, iov, 64, pkt, (size_t)n, &a);
        c0 = cpu_ticks(g.pid[0]);
        t0 = now_s();
        do {
            int k = sendmmsg(fd, msgs, 64, 0);
            if (k > 0) sent += (unsigned long)k;
            t1 = now_s();
        } while (t1 - t0 < seconds);
        usleep(300000); /* let the queues drain */
        c1 = cpu_ticks(g.pid[0]);
        if (stats(fd, &g, 0, 0, &a1) || stats(fd, &g, 0, 1, &b1)) {
            fprintf(stderr, "nodes did not answer after the blast\n");
            return 1;
        }
        printf("forwarding: sent %lu packets (%d bytes) in %.2f s (%.0f/s offered); node A forwarded %u = %.0f "
               "packets/s; node B received %u commands\n",
               sent, n, t1 - t0, (double)sent / (t1 - t0), a1.forwarded - a0.forwarded,
               (double)(a1.forwarded - a0.forwarded) / (t1 - t0), b1.cmd_count - b0.cmd_count);
        cpu_s = (c1 - c0) / (double)sysconf(_SC_CLK_TCK);
        if (cpu_s > 0)
            printf("forwarding: node A used %.2f CPU-seconds = %.0f packets forwarded per CPU-second "
                   "(the host's cores are shared by sender, A and B)\n",
                   cpu_s, (double)(a1.forwarded - a0.forwarded) / cpu_s);
    }
    { /* 1b. 6 KB SET_CHUNKs relayed by A to B (B's ACKs come back to us through A's ground link) */
        static uint8_t big[SKYMEM_MAX_PACKET], data[6144];
        skymem_stats_t a0, a1, b0, b1;
        skymem_route_t r;
        skymem_chunk_desc_t d;
        struct sockaddr_in a = np_ground_addr(&g, 0, 0);
        unsigned long sent = 0;
        double t0, t1;
        int n;
        if (stats(fd, &g, 0, 0, &a0) || stats(fd, &g, 0, 1, &b0)) return 1;
        memset(data, 0x3C, sizeof data);
        memset(&d, 0, sizeof d);
        memset(d.block_hash, 0xCD, sizeof d.block_hash);
        d.chunk_count = 1u << 20;
        d.data_len = sizeof data;
        d.crc32c = skymem_crc32c(data, sizeof data);
        memset(&r, 0, sizeof r);
        r.dst_plane = 0;
        r.dst_sat = 1;
        r.src_plane = SKYMEM_GROUND_PLANE;
        r.src_sat = 1;
        r.via_plane = r.via_sat = SKYMEM_NO_SAT;
        r.ttl = SKYMEM_DEFAULT_TTL;
        t0 = now_s();
        do {
            d.chunk_id = (uint32_t)sent;
            n = skymem_build_set_chunk(big, sizeof big, 0, &r, &d, data);
            if (sendto(fd, big, (size_t)n, 0, (struct sockaddr *)&a, sizeof a) == n) sent++;
            if ((sent & 255u) == 0) { /* drain our ACKs so our own buffer never stalls the test */
                while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
                }
            }
            t1 = now_s();
        } while (t1 - t0 < seconds);
        usleep(300000);
        while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
        }
        if (stats(fd, &g, 0, 0, &a1) || stats(fd, &g, 0, 1, &b1)) return 1;
        printf("chunk relay: sent %lu SET_CHUNKs of %d bytes in %.2f s; B stored %u = %.0f chunks/s = %.1f MB/s of "
               "chunk data through A (A relayed %u toward B; the rest were lost in full socket buffers)\n",
               sent, n, t1 - t0, b1.cmd_count - b0.cmd_count - 1, (double)(b1.cmd_count - b0.cmd_count - 1) / (t1 - t0),
               (double)(b1.cmd_count - b0.cmd_count - 1) * 6144.0 / (t1 - t0) / 1e6, a1.forwarded - a0.forwarded);
    }
    if (relay_replies(fd, "A", np_ground_addr(&g, 0, 0), isl_a0, 0, 0, seconds, g.pid[0]) != 0) return 1;
    if (np_stop_all(&g, 3000) != 0) fprintf(stderr, "warning: a node did not exit 0\n");

    { /* 2 + 3: idle figures of a fresh node with the default budget */
        const char *idle[] = {"--log-level", "error", NULL};
        pid_t pid;
        double c0, c1, t0, t1;
        long hz = sysconf(_SC_CLK_TCK);
        g.planes = 1;
        g.sats = 1;
        pid = np_spawn(&g, argv[1], 0, 0, idle);
        usleep(500000);
        t0 = now_s();
        c0 = cpu_ticks(pid);
        sleep(3);
        c1 = cpu_ticks(pid);
        t1 = now_s();
        printf("idle node: VmRSS %ld kB (64 MiB budget reserved, untouched), CPU %.3f %% of a core over %.1f s\n",
               vmrss_kb(pid), 100.0 * (c1 - c0) / (double)hz / (t1 - t0), t1 - t0);
        np_stop_all(&g, 3000);
    }
    return 0;
}
