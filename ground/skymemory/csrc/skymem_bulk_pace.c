/*
 * skymem_bulk_pace.c -- the window and the pace of a fast-path call (see skymem_bulk_pace.h).
 *
 * Why pace at all: a window asked in one burst is answered by every satellite at the same moment, and the first
 * wave's replies queue behind later waves at the one receiver; a set's burst fills a link's token bucket, whose
 * tail then waits past the resend timer. Paced, replies come in the order they were asked and nothing is resent
 * for waiting in a queue.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "skymem_bulk_pace.h"

#include <poll.h>
#include <time.h>

#include "skymem_auth.h"
#include "skymem_sat.h"

double bulk_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bulk_pace_wait(const bulk_pace_t *p, uint64_t bytes, double t)
{
    uint64_t ahead = p->sent + (p->own ? bytes : 0);
    if (p->Bps <= 0 || ahead <= p->free)
        return 0;
    double at = (double)(ahead - p->free) / p->Bps; /* since start */
    return at > t - p->start ? at - (t - p->start) : 0;
}

/* Until a request may be overdue (at most 50 ms), less when the pace lets the next request go sooner, and not at all
 * when the last send batch was full (the window may allow more at once; waiting there cost a round trip per 64
 * requests). */
double bulk_reply_wait_s(const skymem_bulk_opts_t *o, int batch_full, double pace_wait, int hedging)
{
    if (batch_full)
        return 0;
    double due = o->rto_s < 0.05 ? o->rto_s : 0.05;
    if (hedging && o->hedge_s > 0 && o->hedge_s < due)
        due = o->hedge_s; /* a coded get's silent satellites are noticed when due, before a resend is */
    return pace_wait > 0 && pace_wait < due ? pace_wait : due;
}

int bulk_wait_readable(int fd, double seconds)
{
    if (seconds < 0)
        seconds = 0;
    struct timespec ts = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return ppoll(&p, 1, &ts, NULL); /* ns resolution: pacing waits a fraction of a millisecond */
}

/* A satellite refuses a sequence over SKYMEM_SAT_SEQ_AHEAD_US ahead of its clock: above 62,500 packets a second the
 * sequences outrun the clock, so wait until this one is within half that (the other half for clock error) rather
 * than send what would be dropped unanswered. */
void bulk_wait_for_seq(uint64_t seq)
{
    struct timespec ts;
    uint64_t now, limit = SKYMEM_SAT_SEQ_AHEAD_US / 2u / SKYMEM_AUTH_SEQ_US;
    clock_gettime(CLOCK_REALTIME, &ts);
    now = skymem_auth_seq_at((uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u);
    if (seq > now + limit) {
        uint64_t wait_us = (seq - now - limit) * SKYMEM_AUTH_SEQ_US;
        struct timespec d = {(time_t)(wait_us / 1000000u), (long)(wait_us % 1000000u) * 1000L};
        nanosleep(&d, NULL);
    }
}
