/*
 * bench_transfer -- the C-only ceiling of block retrieval: the same
 * skymem_bulk_get / skymem_bulk_set the Python block store calls, driven
 * from C with no Python at all.
 *
 *   bench_transfer --server P,S,HOST,PORT [--server ...] --bytes N [--blocks B]
 *                  [--chunk-bytes C] [--repeats R] [--window-bytes W] [--get-window-bytes G]
 *                  [--auth-keys DIR]
 *
 * Stores B blocks of N bytes each (random data, chunk i on server i % n,
 * each satellite reached over its own ground port), reads them back R times,
 * checks every byte, and prints one JSON line with the timings and packet
 * counts. `skymemory bench transfer` runs it with the windows its Python path used
 * (W for sets and, unless G is given, for gets). With --auth-keys (the folder of a
 * keyed constellation's per-satellite key files, DIR/P-S.keys, as the launcher writes
 * them) every request is signed with its satellite's UP key and every reply checked
 * with its DOWN key, as the Python block store does with the keys it derives.
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

#include "skymem_auth.h"
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
                    "[--blocks B] [--chunk-bytes C] [--repeats R] [--window-bytes W] [--get-window-bytes G] "
                    "[--auth-keys DIR]\n", msg);
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

/* Satellite (plane, sat)'s keys from DIR/P-S.keys: its UP and DOWN keys of its lowest ground key id into
 * *up and *down; that id, or -1 with a message. */
static long load_sat_keys(const char *dir, unsigned plane, unsigned sat, skymem_mac_key_t *up, skymem_mac_key_t *down)
{
    static char text[8192];
    static skymem_auth_t ring;
    char err[128], path[4096];
    long id = -1;
    snprintf(path, sizeof path, "%s/%u-%u.keys", dir, plane, sat);
    FILE *f = fopen(path, "r");
    if (!f)
        return fprintf(stderr, "bench_transfer: cannot open %s\n", path), -1;
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    skymem_auth_init(&ring, 0);
    if (skymem_auth_load_text(&ring, text, len, err, sizeof err) < 0)
        return fprintf(stderr, "bench_transfer: %s: %s\n", path, err), -1;
    for (uint32_t i = 0; i < ring.n_keys; i++)
        if (!skymem_auth_link_of(ring.keys[i].id, NULL, NULL) && (id < 0 || ring.keys[i].id < (uint32_t)id))
            id = ring.keys[i].id;
    const skymem_auth_key_t *u = id < 0 ? NULL : skymem_auth_find_key_for(&ring, (uint32_t)id, SKYMEM_KEY_UP);
    const skymem_auth_key_t *d = id < 0 ? NULL : skymem_auth_find_key_for(&ring, (uint32_t)id, SKYMEM_KEY_DOWN);
    if (!u || !d)
        return fprintf(stderr, "bench_transfer: %s holds no up and down ground key\n", path), -1;
    *up = u->mac;
    *down = d->mac;
    return id;
}

/* Sequences for one call: Unix time in SKYMEM_AUTH_SEQ_US units, strictly after the last call's. */
static uint64_t reserve_seqs(uint64_t *last, uint64_t count)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t now = skymem_auth_seq_at((uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u);
    uint64_t first = now > *last ? now : *last + 1;
    *last = first + count - 1;
    return first;
}

/* After a call: only the sequences it signed with stay taken. Keeping the whole reservation (one per
 * possible resend) would run this signer ahead of the clock -- a 64 MB set reserves 1.5 s of
 * sequences -- and the satellites would then refuse as too old what another client sharing the key
 * and station signs at the clock (their replay window spans 524 ms). */
static void release_seqs(uint64_t *last, const skymem_bulk_opts_t *o)
{
    *last = o->auth_seq_first + o->auth_seq_used - 1u; /* first - 1 when none was used */
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
    const char *key_dir = NULL;
    static skymem_mac_key_t up_keys[MAX_SERVERS], down_keys[MAX_SERVERS];
    uint64_t last_seq = 0;
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
            servers[n_servers] = (skymem_bulk_server_t){(uint16_t)p, (uint16_t)s, (uint16_t)p, (uint16_t)s,
                                                        ntohl(ip.s_addr), (uint16_t)port, &up_keys[n_servers],
                                                        &down_keys[n_servers]};
            n_servers++;
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
        } else if (!strcmp(a, "--auth-keys")) {
            key_dir = v;
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
    for (unsigned i = 0; key_dir && i < n_servers; i++) {
        long id = load_sat_keys(key_dir, servers[i].plane, servers[i].sat, &up_keys[i], &down_keys[i]);
        if (id < 0)
            return 2;
        o.keyed = 1;
        o.auth_key_id = (uint32_t)id;
    }

    for (unsigned b = 0; b < n_blocks; b++)
        blocks[b] = (skymem_bulk_block_t){hashes + 32 * b, src + bytes * b, bytes, (uint32_t)chunk, count, 0,
                                          n_servers, 1, status + (size_t)count * b, NULL, NULL, 0, 0};
    memset(status, 0, (size_t)count * n_blocks);
    o.auth_seq_count = (uint64_t)count * n_blocks * (o.max_retries + 1u);
    o.auth_seq_first = reserve_seqs(&last_seq, o.auth_seq_count);
    double t0 = now_s();
    int rc = skymem_bulk_set(servers, n_servers, blocks, (uint32_t)n_blocks, &o);
    double set_s = now_s() - t0;
    release_seqs(&last_seq, &o);
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
        memset(&o.packets_rx, 0, offsetof(skymem_bulk_opts_t, keyed) - offsetof(skymem_bulk_opts_t, packets_rx));
        o.request_id += 1u << 20;
        o.auth_seq_count = (uint64_t)skymem_bulk_get_requests(blocks, (uint32_t)n_blocks, 0, 0) * (o.max_retries + 1u);
        o.auth_seq_first = reserve_seqs(&last_seq, o.auth_seq_count);
        t0 = now_s();
        rc = skymem_bulk_get(servers, n_servers, blocks, (uint32_t)n_blocks, &o);
        double get_s = now_s() - t0;
        release_seqs(&last_seq, &o);
        if (rc != SKYMEM_BULK_DONE || memcmp(src, dst, bytes * n_blocks) != 0)
            return fprintf(stderr, "\nbench_transfer: get failed (%d)\n", rc), 1;
        get_packets = o.packets_rx + o.packets_tx;
        printf("%s%.6f", r ? ", " : "", get_s);
    }
    printf("], \"get_packets\": %llu, \"retransmits\": %llu}\n", get_packets, (unsigned long long)o.retransmits);
    return 0;
}
