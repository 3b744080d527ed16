/* replay.c -- feed many random and mutated packets to the packet parser, or to a
 * running skymem_node over UDP, and count how each was rejected.
 *
 *   skymem_replay [--count N] [--seed S]                 parser in-process
 *   skymem_replay --udp 127.0.0.1:PORT [--dst P,S] [--count N] [--auth-keys FILE]
 *                                                        at node (P,S)'s ground port; with the
 *                                                        node's key file, its STATS asks are signed
 *   skymem_replay --write-corpus DIR                      seed corpus for libFuzzer
 *
 * Exit 1 on a parser invariant violation, a node that stops answering, or a
 * node whose invalid-packet counter disagrees with the parser's verdicts. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "packet_gen.h"
#include "skymem_auth.h"

static uint8_t work[SKYMEM_MAX_PACKET + 128];

/* Checks that a packet the parser accepted points only inside its buffer. */
static int invariants_ok(const uint8_t *buf, size_t len, const skymem_msg_t *m)
{
    const uint8_t *end = buf + len;
    if (m->pri.total_len != len) return 0;
    if (m->payload < buf || m->payload + m->payload_len > end) return 0;
    if (m->auth && (m->auth < buf || m->auth + SKYMEM_AUTH_TRAILER_LEN > end)) return 0;
    if (m->data && (m->data < buf || m->data + m->desc.data_len > end)) return 0;
    if (m->is_cmd && !skymem_cmd_checksum_ok(buf, len)) return 0;
    return 1;
}

static int parse_arg_u64(const char *flag, const char *v, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (v == NULL || *v == '-' || *v == '\0') goto bad;
    *out = strtoull(v, &end, 10);
    if (errno || *end) goto bad;
    return 0;
bad:
    fprintf(stderr, "skymem_replay: %s needs a non-negative integer\n", flag);
    return -1;
}

static int run_parser(unsigned long long count, unsigned long long seed)
{
    pg_rng_t r;
    unsigned long long i, accepted = 0, rejected = 0, violations = 0;
    unsigned long long by_code[-SKYMEM_E_MIN + 1];
    int k;
    memset(by_code, 0, sizeof by_code);
    r.s = seed * 2654435761ull + 88172645463325252ull;
    /* sanity: every unmutated packet of every kind parses */
    for (k = 0; k < PG_KINDS * 50; k++) {
        skymem_msg_t m;
        int n = pg_valid(&r, k % PG_KINDS, work, sizeof work);
        if (n <= 0 || skymem_parse(work, (size_t)n, &m) != SKYMEM_OK) {
            fprintf(stderr, "generator kind %d built a packet the parser rejects\n", k % PG_KINDS);
            return 1;
        }
    }
    for (i = 0; i < count; i++) {
        size_t len;
        uint8_t *exact;
        skymem_msg_t m;
        int rc;
        pg_random_packet(&r, work, &len, sizeof work - 64);
        /* an exactly-sized heap copy, so a sanitizer build catches any read past the end */
        exact = (uint8_t *)malloc(len ? len : 1);
        if (exact == NULL) return 1;
        memcpy(exact, work, len);
        rc = skymem_parse(exact, len, &m);
        if (rc == SKYMEM_OK) {
            accepted++;
            if (!invariants_ok(exact, len, &m)) violations++;
        } else if (rc < 0 && rc >= SKYMEM_E_MIN) {
            rejected++;
            by_code[-rc]++;
        } else {
            violations++; /* an undefined return code */
        }
        free(exact);
    }
    printf("parser replay: %llu packets, %llu rejected, %llu accepted (mutations that stayed well-formed), "
           "%llu invariant violations\n",
           count, rejected, accepted, violations);
    for (k = 1; k <= -SKYMEM_E_MIN; k++)
        if (by_code[k]) printf("  %-45s %llu\n", skymem_strerror(-k), by_code[k]);
    return violations ? 1 : 0;
}

/* STATS to the node, matched by request id (a stray HK or reply to a replayed
 * packet cannot be mistaken for the answer). */
static uint32_t next_request = 0x52000000u;
static uint16_t dst_plane, dst_sat;
static skymem_auth_t keys; /* with --auth-keys: its lowest ground key signs the STATS requests */
static long ground_key = -1;

static int load_keys(const char *path)
{
    static char text[8192];
    char err[128];
    FILE *f = fopen(path, "r");
    size_t len;
    uint32_t i;
    if (f == NULL) return fprintf(stderr, "skymem_replay: cannot open %s\n", path), -1;
    len = fread(text, 1, sizeof text, f);
    fclose(f);
    skymem_auth_init(&keys, 0);
    if (skymem_auth_load_text(&keys, text, len, err, sizeof err) < 0)
        return fprintf(stderr, "skymem_replay: %s: %s\n", path, err), -1;
    for (i = 0; i < keys.n_keys; i++)
        if (!skymem_auth_link_of(keys.keys[i].id, NULL, NULL) && (ground_key < 0 || keys.keys[i].id < (uint32_t)ground_key))
            ground_key = keys.keys[i].id;
    return ground_key < 0 ? (fprintf(stderr, "skymem_replay: %s has no ground key\n", path), -1) : 0;
}

static int ask_stats(int fd, const struct sockaddr_in *node, skymem_stats_t *st)
{
    uint8_t req[128];
    int tries, n;
    for (tries = 0; tries < 3; tries++) {
        skymem_route_t r;
        struct timespec t0, t1;
        memset(&r, 0, sizeof r);
        r.dst_plane = dst_plane;
        r.dst_sat = dst_sat;
        r.src_plane = SKYMEM_GROUND_PLANE;
        r.src_sat = 99;
        r.via_plane = SKYMEM_NO_SAT;
        r.via_sat = SKYMEM_NO_SAT;
        r.request_id = next_request++;
        r.ttl = SKYMEM_DEFAULT_TTL;
        n = skymem_build_data_cmd(req, sizeof req, SKYMEM_STATS_CC, 0, &r, NULL, 0);
        if (ground_key >= 0) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            n = skymem_auth_sign(&keys, (uint32_t)ground_key,
                                 skymem_auth_next_seq(&keys, (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u),
                                 req, (size_t)n, sizeof req);
        }
        sendto(fd, req, (size_t)n, 0, (const struct sockaddr *)node, sizeof(*node));
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            struct pollfd p = {fd, POLLIN, 0};
            int left, k;
            skymem_msg_t m;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            left = 2000 - (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
            if (left <= 0 || poll(&p, 1, left) <= 0) break;
            k = (int)recv(fd, work, sizeof work, 0);
            if (k > 0 && skymem_parse(work, (size_t)k, &m) == SKYMEM_OK && m.mid == SKYMEM_REPLY_TLM_MID &&
                m.reply_kind == SKYMEM_REPLY_STATS && m.route.request_id == r.request_id) {
                *st = m.stats;
                return 0;
            }
        }
    }
    return -1;
}

static int run_udp(const char *target, unsigned long long count, unsigned long long seed)
{
    char host[64];
    const char *colon = strrchr(target, ':');
    unsigned long long port, i, sent = 0, skipped = 0, expect_invalid = 0;
    struct sockaddr_in node, me;
    skymem_stats_t st0, st1;
    pg_rng_t r;
    int fd, sz = 8 << 20;
    if (colon == NULL || (size_t)(colon - target) >= sizeof host || parse_arg_u64("--udp port", colon + 1, &port) ||
        port < 1 || port > 65535) {
        fprintf(stderr, "skymem_replay: --udp needs HOST:PORT\n");
        return 2;
    }
    memcpy(host, target, (size_t)(colon - target));
    host[colon - target] = '\0';
    memset(&node, 0, sizeof node);
    node.sin_family = AF_INET;
    node.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &node.sin_addr) != 1 || (ntohl(node.sin_addr.s_addr) >> 24) != 127) {
        fprintf(stderr, "skymem_replay: --udp host must be a loopback IPv4 address\n");
        return 2;
    }
    fd = socket(AF_INET, SOCK_DGRAM, 0);
    memset(&me, 0, sizeof me);
    me.sin_family = AF_INET;
    me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof me) != 0) {
        perror("socket");
        return 1;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    if (ask_stats(fd, &node, &st0) != 0) {
        fprintf(stderr, "skymem_replay: no STATS answer from %s\n", target);
        return 1;
    }
    r.s = seed * 2654435761ull + 88172645463325252ull;
    for (i = 0; i < count; i++) {
        size_t len;
        skymem_msg_t m;
        int rc;
        pg_random_packet(&r, work, &len, sizeof work - 64);
        rc = skymem_parse(work, len, &m);
        /* well-formed commands that would reset the counters or reconfigure the node are not sent */
        if (rc == SKYMEM_OK && m.is_cmd &&
            (m.cc == SKYMEM_RESET_COUNTERS_CC || m.cc == SKYMEM_SET_PARAM_CC || m.mid == ISL_ROUTER_CMD_MID)) {
            skipped++;
            continue;
        }
        if (rc != SKYMEM_OK) expect_invalid++;
        if (sendto(fd, work, len, 0, (struct sockaddr *)&node, sizeof node) < 0) {
            perror("sendto");
            return 1;
        }
        sent++;
        if (sent % 32 == 0) { /* flow control and liveness: the node must answer before we go on */
            skymem_stats_t st;
            if (ask_stats(fd, &node, &st) != 0) {
                fprintf(stderr, "skymem_replay: node stopped answering after %llu packets\n", sent);
                return 1;
            }
        }
    }
    if (ask_stats(fd, &node, &st1) != 0) {
        fprintf(stderr, "skymem_replay: node stopped answering at the end\n");
        return 1;
    }
    printf("udp replay to %s: %llu generated, %llu sent, %llu skipped (valid reset/set-param), "
           "%llu malformed by the parser; node counted %u invalid, %u rx packets\n",
           target, count, sent, skipped, expect_invalid, st1.invalid - st0.invalid, st1.rx_packets - st0.rx_packets);
    close(fd);
    if ((unsigned long long)(st1.invalid - st0.invalid) != expect_invalid) {
        fprintf(stderr, "skymem_replay: node's invalid counter disagrees with the parser\n");
        return 1;
    }
    return 0;
}

static int write_corpus(const char *dir)
{
    pg_rng_t r;
    int k, n;
    char path[1024];
    r.s = 12345;
    for (k = 0; k < PG_KINDS + 8; k++) {
        size_t len;
        FILE *f;
        if (k < PG_KINDS) {
            n = pg_valid(&r, k, work, sizeof work);
            len = (size_t)n;
        } else {
            pg_random_packet(&r, work, &len, sizeof work - 64);
        }
        snprintf(path, sizeof path, "%s/%s_%02d.bin", dir, k < PG_KINDS ? "valid" : "mutated", k);
        f = fopen(path, "wb");
        if (f == NULL || fwrite(work, 1, len, f) != len) {
            fprintf(stderr, "cannot write %s\n", path);
            if (f) fclose(f);
            return 1;
        }
        fclose(f);
    }
    printf("wrote %d corpus files to %s\n", PG_KINDS + 8, dir);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long long count = 1000000, seed = 1;
    const char *udp = NULL, *corpus = NULL;
    int i;
    for (i = 1; i < argc; i += 2) { /* every option takes one value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--count")) {
            if (parse_arg_u64(a, v, &count)) return 2;
        } else if (!strcmp(a, "--seed")) {
            if (parse_arg_u64(a, v, &seed)) return 2;
        } else if (!strcmp(a, "--udp") && v) {
            udp = v;
        } else if (!strcmp(a, "--auth-keys") && v) {
            if (load_keys(v)) return 2;
        } else if (!strcmp(a, "--dst") && v) {
            unsigned p, q;
            char extra;
            if (sscanf(v, "%u,%u%c", &p, &q, &extra) != 2 || p > 65534 || q > 65534) {
                fprintf(stderr, "skymem_replay: --dst needs PLANE,SAT\n");
                return 2;
            }
            dst_plane = (uint16_t)p;
            dst_sat = (uint16_t)q;
        } else if (!strcmp(a, "--write-corpus") && v) {
            corpus = v;
        } else {
            fprintf(stderr, "usage: %s [--count N] [--seed S] [--udp 127.0.0.1:PORT [--dst P,S] [--auth-keys FILE]] "
                            "[--write-corpus DIR]\n",
                    argv[0]);
            return 2;
        }
    }
    if (corpus) return write_corpus(corpus);
    if (udp) return run_udp(udp, count, seed);
    return run_parser(count, seed);
}
