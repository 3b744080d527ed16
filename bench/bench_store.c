/* bench_store.c -- chunk store throughput in-process: set + get operations per second.
 * Usage: bench_store [CHUNK_BYTES] [OPS]   (defaults 6144, 4000000) */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "skymem_store.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run(size_t chunk, unsigned long ops, unsigned long keys)
{
    skymem_store_t *s;
    skymem_store_info_t info;
    skymem_chunk_meta_t meta;
    uint8_t *data = (uint8_t *)malloc(chunk), h[32];
    unsigned long i, hits = 0;
    double t0, t1, c0, c1;
    const uint8_t *p;
    size_t len;
    uint32_t x = 1;
    memset(data, 0x42, chunk);
    memset(&meta, 0, sizeof meta);
    meta.chunk_count = 16;
    if (skymem_store_create(&s, 64ull << 20, (uint32_t)chunk, NULL, NULL) != SKYMEM_STORE_OK) {
        fprintf(stderr, "store create failed\n");
        exit(1);
    }
    memset(h, 0, sizeof h);
    t0 = now_s();
    c0 = cpu_s();
    for (i = 0; i < ops / 2; i++) {
        unsigned long k = i % keys; /* block = k / 16, chunk id = k % 16 */
        uint32_t blk = (uint32_t)(k / 16);
        memcpy(h, &blk, sizeof blk);
        skymem_store_set(s, h, (uint32_t)(k % 16), &meta, data, chunk);
        x = x * 1664525u + 1013904223u; /* get a random recent key */
        k = (i >= keys ? i - (x % keys) : x % (i + 1)) % keys;
        blk = (uint32_t)(k / 16);
        memcpy(h, &blk, sizeof blk);
        if (skymem_store_get(s, h, (uint32_t)(k % 16), NULL, &p, &len) == SKYMEM_STORE_OK) hits++;
    }
    t1 = now_s();
    c1 = cpu_s();
    skymem_store_info(s, &info);
    printf("store %5zu-byte chunks, %lu keys: %lu ops (set+get) in %.3f s = %.0f ops/s "
           "(%.0f ops per CPU-second); %u slots of %u bytes, "
           "footprint %llu <= budget %llu, %u chunks held, %u LRU evictions, get hit rate %.1f%%\n",
           chunk, keys, ops, t1 - t0, (double)ops / (t1 - t0), (double)ops / (c1 - c0), info.capacity, info.slot_bytes,
           (unsigned long long)info.footprint, (unsigned long long)info.budget_bytes, info.chunks,
           info.lru_evictions, 100.0 * (double)hits / (double)(ops / 2));
    skymem_store_destroy(s);
    free(data);
}

int main(int argc, char **argv)
{
    size_t chunk = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 6144;
    unsigned long ops = argc > 2 ? strtoul(argv[2], NULL, 10) : 4000000ul;
    if (chunk < 1 || chunk > 60000 || ops < 2) {
        fprintf(stderr, "usage: bench_store [CHUNK_BYTES 1..60000] [OPS >= 2]\n");
        return 2;
    }
    run(chunk, ops, 8000);  /* working set fits in the 64 MiB budget */
    run(chunk, ops, 20000); /* 20000 x 6 KB does not: every set evicts (whole blocks of 16) */
    if (argc <= 1) run(1024, ops, 20000);
    return 0;
}
