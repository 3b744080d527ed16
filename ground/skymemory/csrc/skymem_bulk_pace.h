/*
 * skymem_bulk_pace.h -- the window and the pace of a fast-path call (internal to skymem_bulk*.c).
 *
 * A call keeps at most window_bytes of chunk bytes asked (get) or sent (set) and not answered yet, and with
 * pace_Bps > 0 lets its first sends leave no faster than that (resends are not metered). Between its sends it
 * sleeps on the socket: until a reply, the pace's next turn, or the time something may be overdue. Keyed, its
 * sequences are paced too: none leaves so far ahead of the clock that a satellite would drop it.
 */
#ifndef SKYMEM_BULK_PACE_H
#define SKYMEM_BULK_PACE_H

#include <stdint.h>

#include "skymem_bulk.h"

/* The pace's account of a call's first sends. A get's first wave leaves at once, and each later request when the
 * bytes it asks have had time at pace_Bps (the replies are what the pace spreads); a set's chunk leaves when the
 * bytes sent before it have had time. */
typedef struct {
    double Bps;      /* 0: no pace */
    uint64_t free;   /* bytes that leave unmetered (get: its first wave) */
    int own;         /* 1: a send counts its own bytes (get); 0: only those before it (set) */
    uint64_t sent;   /* bytes of first sends so far */
    double start;    /* when the call's loop began (the clock below) */
} bulk_pace_t;

/* Monotonic seconds. */
double bulk_now_s(void);

/* 0 when a first send of `bytes` may leave at t, else how long the pace holds it back. */
double bulk_pace_wait(const bulk_pace_t *p, uint64_t bytes, double t);

/* The window is full for `bytes` more when something is in flight and they would take it past window_bytes (with
 * nothing in flight one send always goes, however large). */
static inline int bulk_window_full(const skymem_bulk_opts_t *o, int in_flight, uint64_t outstanding, uint64_t bytes)
{
    return in_flight && outstanding + bytes > o->window_bytes;
}

/* How long to wait for replies before the next pass (see the .c). */
double bulk_reply_wait_s(const skymem_bulk_opts_t *o, int batch_full, double pace_wait, int hedging);

/* poll(2) for readability, for at most `seconds` (ns resolution). */
int bulk_wait_readable(int fd, double seconds);

/* Sleeps until authentication sequence `seq` is within half the satellites' allowance of their clock. */
void bulk_wait_for_seq(uint64_t seq);

#endif /* SKYMEM_BULK_PACE_H */
