/* bench_aes.c -- cost of the AES-128 in skymem_aes.c: one block through the portable code and through the
 * CPU's instructions, a key schedule, and the tag (skymem_auth_mac) of a 77-byte command and of a
 * 6228-byte SET_CHUNK (the packet `skymemory bench auth` times) with the portable POLYVAL and AES.
 * Usage: bench_aes [ROUNDS]   (default 9; each figure is the median over the rounds, in process CPU time)
 * Uses only the API every version of skymem_aes.h has, so bench/aes_before_after.sh can build it against
 * an older one too. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "skymem_aes.h"
#include "skymem_auth.h"
#include "skymem_codec.h"
#include "skymem_polyval.h"

#define MAX_ROUNDS 99

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[n / 2];
}

static skymem_aes128_t aes_key;
static skymem_mac_key_t mac_key;
static uint8_t block[16], pkt[6228], tag[32];

/* ns per call of each kind, one round */
static double ns_blocks(long n)
{
    long i;
    double t0 = cpu_s();
    for (i = 0; i < n; i++) skymem_aes128_encrypt(&aes_key, block, block); /* chained: each waits for the last */
    return (cpu_s() - t0) * 1e9 / (double)n;
}

static double ns_key_schedules(long n)
{
    long i;
    double t0 = cpu_s();
    for (i = 0; i < n; i++) skymem_aes128_init(&aes_key, block), block[0]++;
    return (cpu_s() - t0) * 1e9 / (double)n;
}

static double ns_tags(size_t len, long n)
{
    long i;
    double t0 = cpu_s();
    for (i = 0; i < n; i++) skymem_auth_mac(&mac_key, pkt, len, tag), pkt[40] ^= tag[0];
    return (cpu_s() - t0) * 1e9 / (double)n;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 9, r, have_aes;
    double portable[MAX_ROUNDS], accel[MAX_ROUNDS], sched[MAX_ROUNDS], cmd[MAX_ROUNDS], chunk[MAX_ROUNDS];
    uint8_t key[32];
    size_t i;
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_aes: ROUNDS must be 1..%d\n", MAX_ROUNDS);
        return 2;
    }
    for (i = 0; i < sizeof key; i++) key[i] = (uint8_t)(i * 29u + 1u);
    for (i = 0; i < sizeof pkt; i++) pkt[i] = (uint8_t)(i * 7u + 3u);
    skymem_put_u16(pkt, SKYMEM_DATA_CMD_MID);
    skymem_aes128_init(&aes_key, key);
    skymem_mac_key_init(&mac_key, key, sizeof key);
    have_aes = skymem_aes_use_accel(1);
    for (r = 0; r < rounds; r++) {
        accel[r] = have_aes ? ns_blocks(2000000) : 0;
        skymem_aes_use_accel(0);
        skymem_polyval_use_accel(0);
        portable[r] = ns_blocks(200000);
        sched[r] = ns_key_schedules(20000);
        cmd[r] = ns_tags(77, 100000);
        chunk[r] = ns_tags(sizeof pkt, 3000);
        skymem_aes_use_accel(1);
        skymem_polyval_use_accel(2);
    }
    skymem_aes_use_accel(0);
    printf("AES-128 (%s): %.1f ns per block, key schedule %.0f ns\n", skymem_aes_impl(), median(portable, rounds),
           median(sched, rounds));
    printf("C tag, POLYVAL (portable C) + AES-128 (%s): %.2f us per 77-byte command, %.2f us per %zu-byte "
           "packet\n", skymem_aes_impl(), median(cmd, rounds) / 1e3, median(chunk, rounds) / 1e3, sizeof pkt);
    skymem_aes_use_accel(1);
    if (have_aes) printf("AES-128 (%s): %.1f ns per block\n", skymem_aes_impl(), median(accel, rounds));
    printf("(medians of %d rounds, process CPU time)\n", rounds);
    return 0;
}
