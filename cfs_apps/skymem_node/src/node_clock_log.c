/* node_clock_log.c -- the native node's clocks and its log: what every other file of the node uses.
 *
 * It depends on nothing else of the node (only node_t's settings and identity, from node.h), so
 * the node's files form no circle through it: main (skymem_node.c) calls the others, they call
 * down to these, and tests/test_module_cycles.py keeps it so.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "node.h"

uint64_t node_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t node_unix_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000ull;
}

void node_clock_start(node_t *n) { n->start_unix_ms = node_unix_us() / 1000ull; }

/* mission_ms = epoch_ms + time_scale * (unix_now_ms - epoch_ms) (docs/CONTRACTS.md); the epoch is the
 * node's start unless given */
uint64_t node_mission_ms(const node_t *n)
{
    double epoch = (double)(n->cfg.epoch_given ? n->cfg.epoch_ms : n->start_unix_ms);
    double now = (double)(node_unix_us() / 1000ull);
    double m = epoch + n->cfg.time_scale * (now - epoch);
    return m > 0 ? (uint64_t)m : 0;
}

void node_log(const node_t *n, int level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    va_list ap;
    if (level > n->cfg.log_level) return;
    fprintf(stderr, "skymem_node[%u,%u] %s: ", n->plane, n->sat, names[level]);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
