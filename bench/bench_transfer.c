/*
 * bench_transfer -- the C-only ceiling of block retrieval: the same
 * skymem_bulk_get / skymem_bulk_set the Python block store calls, driven
 * from C with no Python at all.
 *
 *   bench_transfer --server P,S,HOST,PORT [--server ...] --bytes N [--blocks B]
 *                  [--chunk-bytes C] [--repeats R] [--window-bytes W] [--get-window-bytes G]
 *
 * Stores B blocks of N bytes each (random data, chunk i on server i % n,
 * each satellite reached over its own ground port), reads them back R times,
 * checks every byte, and prints one JSON line with the timings and packet
 * counts. `skymemory bench transfer` runs it with the windows its Python path used
 * (W for sets and, unless G is given, for gets).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <arpa/inet.h>

#include "skymem_bulk.h"

#define MAX_SERVERS 64

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int usage(const char *msg)
{
    fprintf(stderr, "bench_transfer: %s\nusage: bench_transfer --server P,S,HOST,PORT [...] --bytes N "
                    "[--blocks B] [--chunk-bytes C] [--repeats R] [--window-bytes W] [--get-window-bytes G]\n", msg);
    return 2;
}

static int parse_u64(const char *s, unsigned long long lo, unsigned long long hi, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int open_socket(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0)
        return -1;
    int sz = 32 * 1024 * 1024;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
        return -1;
    return fd;
}

int main(int argc, char **argv)
{
    skymem_bulk_server_t servers[MAX_SERVERS];
    unsigned n_servers = 0;
    unsigned long long bytes = 0, n_blocks = 1, chunk = 6144, repeats = 5, window = 8u << 20, get_window = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            return usage("every option takes a value");
        const char *v = argv[++i];
        if (!strcmp(a, "--server")) {
            unsigned p, s, port;
            char host[64];
            struct in_addr ip;
            if (n_servers == MAX_SERVERS)
                return usage("too many --server");
            if (sscanf(v, "%u,%u,%63[^,],%u", &p, &s, host, &port) != 4 || p > 0xFFFE || s > 0xFFFE ||
                port == 0 || port > 65535 || inet_pton(AF_INET, host, &ip) != 1)
                return usage("--server wants P,S,IPV4,PORT");
            servers[n_servers++] = (skymem_bulk_server_t){(uint16_t)p, (uint16_t)s, (uint16_t)p, (uint16_t)s,
                                                          ntohl(ip.s_addr), (uint16_t)port};
        } else if (!strcmp(a, "--bytes")) {
            if (parse_u64(v, 1, 1ull << 32, &bytes))
                return usage("--bytes wants 1..4294967296");
        } else if (!strcmp(a, "--blocks")) {
            if (parse_u64(v, 1, 1024, &n_blocks))
                return usage("--blocks wants 1..1024");
        } else if (!strcmp(a, "--chunk-bytes")) {
            if (parse_u64(v, 1, 60000, &chunk))
                return usage("--chunk-bytes wants 1..60000");
        } else if (!strcmp(a, "--repeats")) {
            if (parse_u64(v, 1, 1000, &repeats))
                return usage("--repeats wants 1..1000");
        } else if (!strcmp(a, "--window-bytes")) {
            if (parse_u64(v, 1, 1u << 31, &window))
                return usage("--window-bytes wants 1..2^31");
        } else if (!strcmp(a, "--get-window-bytes")) {
            if (parse_u64(v, 1, 1u << 31, &get_window))
                return usage("--get-window-bytes wants 1..2^31");
        } else {
            return usage("unknown option");
        }
    }
    if (!n_servers || !bytes)
        return usage("--server and --bytes are required");

    uint32_t count = (uint32_t)((bytes + chunk - 1) / chunk);
    skymem_bulk_block_t *blocks = calloc(n_blocks, sizeof *blocks);
    uint8_t *src = malloc(bytes * n_blocks), *dst = malloc(bytes * n_blocks);
    uint8_t *status = malloc((size_t)count * n_blocks), *hashes = malloc(32 * n_blocks);
    uint32_t *prefix = calloc(n_blocks, sizeof *prefix);
    if (!blocks || !src || !dst || !status || !hashes || !prefix)
        return fprintf(stderr, "bench_transfer: out of memory\n"), 1;
    srand((unsigned)time(NULL));
    for (unsigned long long i = 0; i < bytes * n_blocks; i++)
        src[i] = (uint8_t)rand();
    for (unsigned long long i = 0; i < 32 * n_blocks; i++)
        hashes[i] = (uint8_t)rand();
    int fd = open_socket();
    if (fd < 0)
        return perror("bench_transfer: socket"), 1;

    skymem_bulk_opts_t o;
    memset(&o, 0, sizeof o);
    o.fd = fd;
    o.window_bytes = (uint32_t)window;
    o.rto_s = 0.2;
    o.deadline_s = 120;
    o.max_retries = 8;
    o.request_id = (uint32_t)rand() | 1u;

    for (unsigned b = 0; b < n_blocks; b++)
        blocks[b] = (skymem_bulk_block_t){hashes + 32 * b, src + bytes * b, bytes, (uint32_t)chunk, count, 0,
                                          n_servers, 1, status + (size_t)count * b, NULL, NULL};
    memset(status, 0, (size_t)count * n_blocks);
    double t0 = now_s();
    int rc = skymem_bulk_set(servers, n_servers, blocks, (uint32_t)n_blocks, &o);
    double set_s = now_s() - t0;
    if (rc != SKYMEM_BULK_DONE)
        return fprintf(stderr, "bench_transfer: set failed (%d)\n", rc), 1;

    printf("{\"bytes_per_block\": %llu, \"blocks\": %llu, \"chunk_bytes\": %llu, \"servers\": %u, "
           "\"set_s\": %.6f, \"set_packets\": %llu, \"get_s\": [",
           bytes, n_blocks, chunk, n_servers, set_s, (unsigned long long)(o.packets_rx + o.packets_tx));
    unsigned long long get_packets = 0;
    o.window_bytes = (uint32_t)(get_window ? get_window : window);
    for (unsigned long long r = 0; r < repeats; r++) {
        for (unsigned b = 0; b < n_blocks; b++)
            blocks[b].buf = dst + bytes * b;
        memset(status, 0, (size_t)count * n_blocks);
        memset(dst, 0, bytes * n_blocks);
        memset(&o.packets_rx, 0, sizeof o - offsetof(skymem_bulk_opts_t, packets_rx));
        o.request_id += 1u << 20;
        t0 = now_s();
        rc = skymem_bulk_get(servers, n_servers, blocks, (uint32_t)n_blocks, &o);
        double get_s = now_s() - t0;
        if (rc != SKYMEM_BULK_DONE || memcmp(src, dst, bytes * n_blocks) != 0)
            return fprintf(stderr, "\nbench_transfer: get failed (%d)\n", rc), 1;
        get_packets = o.packets_rx + o.packets_tx;
        printf("%s%.6f", r ? ", " : "", get_s);
    }
    printf("], \"get_packets\": %llu, \"retransmits\": %llu}\n", get_packets, (unsigned long long)o.retransmits);
    return 0;
}
