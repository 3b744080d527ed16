/*
 * skymem_sat.h -- what a satellite does with a SkyMemory command, once, for both runtimes.
 *
 * The cFS app (cfs_apps/skymem) and the native node (cfs_apps/skymem_node) receive packets,
 * send them, keep time and write files in their own ways; everything else about a command
 * lives here: the authentication step (tag, replay, how far ahead a sequence may be), what a
 * station's address may be learned from, the answer to each data-plane command (built and
 * signed), the NAK policy, eviction gossip, GET_CHUNKS pacing and the MIGRATE state machine
 * (skymem_sat_migrate.c). A runtime fills a skymem_sat_io_t with what differs and calls:
 *
 *   skymem_sat_init            once, with identity and store set
 *   skymem_sat_auth_on         when it loaded a key file (auth off otherwise)
 *   skymem_sat_from_ground     a parsed data-plane command that came up its own ground link
 *   skymem_sat_accept          a parsed data-plane command for this satellite, from anywhere
 *   skymem_sat_serve           ... and, accepted, serve it
 *   skymem_sat_malformed       an intact command for this satellite the parser refused (and _nak_malformed)
 *   skymem_sat_on_reply        a reply addressed to this satellite (a migration's ACK/NAK)
 *   skymem_sat_run_jobs, skymem_sat_tick   from its loop (GET_CHUNKS answers, migration timeouts)
 *
 * Portable C99, no allocation, no OS: tests/c/test_sat.c drives it through a test io.
 */
#ifndef SKYMEM_SAT_H
#define SKYMEM_SAT_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_auth.h"
#include "skymem_codec.h"
#include "skymem_floor.h"
#include "skymem_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How far ahead of this satellite's clock a signed sequence may be. Signers take their sequence
 * from the same Unix clock (skymem_auth_next_seq), so an honest one is ahead only by clock error
 * (NTP keeps it to milliseconds) or by signing faster than one packet per SKYMEM_AUTH_SEQ_US
 * (62,500 packets/s: docs/RELIABILITY.md §6 says how fast signers stay within). One second covers
 * both with a wide margin, and bounds what a captured packet signed ahead is worth: after a restart
 * the floor (skymem_sat_auth_on) is past anything accepted before it. */
#define SKYMEM_SAT_SEQ_AHEAD_US SKYMEM_AUTH_AHEAD_US
/* Only a sequence accepted ahead of this satellite's clock is persisted (one at or behind it is below
 * the clock of any later start, which a restart's floor also is), and then this far past it, so a signer
 * running ahead costs at most about four file writes a second, each before the command it covers takes
 * effect. Honest traffic on the clock writes nothing and is not refused after a restart; after a restart
 * within this time of traffic signed ahead, commands are refused until the clock passes the mark (the
 * ground retries). This relies on the clock not stepping back across a restart, as the ahead bound
 * relies on it being synchronised. */
#define SKYMEM_SAT_FLOOR_LEASE_US 250000u
/* A command refused for being signed too far ahead is refused again when its time comes (skymem_auth.h), and
 * across a restart: its replay window's refusal is kept with the mark (skymem_floor.h), up to this lease past
 * the sequence, so a signer running ahead costs at most about four writes a second here too. After a restart
 * that window refuses everything up to what was kept until the clock passes it: what the window refused before
 * the restart, and also what it had not seen in the 0.5 s (SKYMEM_AUTH_WINDOW) just below it. SKYMEM_FLOOR_AHEAD_MAX windows
 * are kept; one more folds the one the clock reaches first into the mark (everything refused up to it). */

/* Eviction gossip from a link (a neighbour's EVICT_BLOCK, issue 53 D1): its reach is bounded by what the
 * ground said of the block. It purges here only the chunks of the block the ground set with a gossip radius
 * (skymem_chunk_meta_t.gossip_radius >= 1: records, object metadata and everything set without one stay), and
 * is passed on with at most that radius less one -- the ground's radius is how far, from any of the block's
 * satellites, an eviction must go to reach all the others -- or, here holding none of it, at most this: one
 * satellite past the block's holders, where a layout leaves a gap between them. So one packet from a captured
 * satellite reaches no further than the block's own radius, plus this, from it; a ground EVICT_BLOCK (UP key)
 * purges the whole block at its destination and gossips as far as the ground asks. */
#define SKYMEM_SAT_GOSSIP_PAST_HOLDERS 1u

#define SKYMEM_SAT_GOSSIP_MEMORY 256     /* (block, evict_id) pairs remembered: a gossip passes on once */
#define SKYMEM_SAT_MAX_JOBS 8            /* GET_CHUNKS requests being answered at once (more: NAK BUSY) */
#define SKYMEM_SAT_MAX_MIGRATIONS 8      /* MIGRATE jobs at once (more: NAK BUSY) */
#define SKYMEM_SAT_MIGRATE_WINDOW 32     /* chunks of a job in flight */
#define SKYMEM_SAT_MIGRATE_TIMEOUT_MS 1000u /* plus four times the path's light time */
#define SKYMEM_SAT_MIGRATE_RETRIES 3     /* resends per chunk */

/* Log levels (the native node's) and what a line is about (the cFS app's event ids). */
enum { SKYMEM_SAT_ERROR = 0, SKYMEM_SAT_WARN = 1, SKYMEM_SAT_INFO = 2, SKYMEM_SAT_DEBUG = 3 };
enum { SKYMEM_SAT_EV_AUTH, SKYMEM_SAT_EV_NAK, SKYMEM_SAT_EV_EVICT, SKYMEM_SAT_EV_MIGRATE, SKYMEM_SAT_EV_BUSY };

/* What a command that came up this satellite's own ground link may teach (skymem_sat_from_ground). */
enum {
    SKYMEM_SAT_DROP = 0,    /* refused (counted): learn nothing, answer nothing, relay nothing */
    SKYMEM_SAT_LEARN = 1,   /* verified with this satellite as its destination: the station is at its source */
    SKYMEM_SAT_RELAYED = 2  /* verified, for another satellite: relay it; its answers may go back to its
                               source, but the station's address stays what it was */
};

/* What differs between the runtimes. ctx is given back to every call. */
typedef struct {
    /* A packet this satellite built: a reply (is_reply, r->dst_plane may be the ground) or a command for
     * another satellite; route it one hop (or hand it to the ground link r->via names). */
    void (*send)(void *ctx, uint8_t *pkt, size_t len, const skymem_route_t *r, int is_reply);
    uint64_t (*clock_us)(void *ctx);  /* Unix microseconds: sequences, the replay floor, the ahead bound */
    uint64_t (*mono_ms)(void *ctx);   /* a monotonic clock: migration deadlines */
    void (*tlm_time)(void *ctx, uint32_t *seconds, uint16_t *subsecs); /* a reply's telemetry header time */
    void (*log)(void *ctx, int level, int about, const char *text);
    /* SET_PARAM: 0 when applied, else the SKYMEM_NAK_* reason. */
    uint8_t (*apply_param)(void *ctx, uint16_t param_id, uint32_t value);
    /* STATS: the runtime's part (rx/tx, forwarded, dropped, invalid, mission time, uptime). */
    void (*fill_stats)(void *ctx, skymem_stats_t *st);
    void (*reset_counters)(void *ctx); /* RESET_COUNTERS: the runtime's own counters */
    /* Keep the replay high-water mark (sequence units) and the windows refused ahead (skymem_floor.h) where a
     * restart reads them back; 0 when written.
     * NULL: nothing is kept (a runtime without storage). */
    int (*persist_floor)(void *ctx, const skymem_floor_t *kept);
} skymem_sat_io_t;

typedef struct {
    uint32_t cmd_count;     /* data-plane commands served */
    uint32_t err_count;     /* NAKs sent */
    uint32_t auth_failures; /* commands and replies refused: unsigned, forged, replayed, too far ahead */
    uint32_t migrated_in, migrated_out;
} skymem_sat_counters_t;

typedef struct {
    skymem_route_t reply_route;
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN];
    uint32_t next_id, remaining, stride;
    uint32_t reply_key_id;
} skymem_sat_job_t;

typedef struct {
    uint32_t chunk_id;
    uint8_t state; /* waiting, in flight, done, failed (skymem_sat_migrate.c) */
    uint8_t tries;
    uint64_t deadline_ms;
} skymem_sat_mchunk_t;

typedef struct {
    uint8_t active;
    uint32_t job_id;
    skymem_route_t reply_route;
    uint32_t reply_key_id; /* the requester's ground key: signs the final answer */
    uint16_t target_plane, target_sat;
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN];
    uint32_t n, in_flight, moved, failed;
    skymem_sat_mchunk_t chunks[SKYMEM_MAX_GET_CHUNKS];
} skymem_sat_migration_t;

typedef struct {
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN];
    uint32_t evict_id;
    uint8_t used;
} skymem_sat_seen_t;

typedef struct {
    /* identity and settings: the runtime sets these before skymem_sat_init */
    uint16_t plane, sat, planes, sats;
    double altitude_m;   /* migration timeouts */
    double delay_scale;  /* light-time multiplier of the emulated links (1: real) */
    skymem_store_t *store; /* created (and resized) by the runtime, with skymem_sat_store_evicted */
    const skymem_sat_io_t *io;
    void *ctx;

    skymem_sat_counters_t c;
    skymem_auth_t *auth;   /* NULL: authentication off */
    uint32_t reply_key_id; /* ground key of the latest verified ground command: signs what goes to the ground */
    uint64_t floor_mark;   /* the persisted high-water mark: every sequence accepted ahead of the clock is at or below it */
    uint32_t n_ahead;      /* the persisted refusals of sequences too far ahead, one per replay window */
    skymem_floor_ahead_t ahead[SKYMEM_FLOOR_AHEAD_MAX];
    int floor_write_failed;
    uint16_t seq;          /* CCSDS sequence count of what this satellite builds */
    uint32_t next_evict_id, next_job_id;
    /* the SET_CHUNK being served: its data's CRC from the tag's pass (crc_of = its data, else NULL) */
    const uint8_t *crc_of;
    uint32_t crc;
    skymem_sat_seen_t seen[SKYMEM_SAT_GOSSIP_MEMORY];
    uint32_t seen_next;
    skymem_sat_job_t jobs[SKYMEM_SAT_MAX_JOBS];
    uint32_t n_jobs;
    skymem_sat_migration_t migrations[SKYMEM_SAT_MAX_MIGRATIONS];
    uint8_t buf[SKYMEM_MAX_PACKET]; /* the packet being built */
} skymem_sat_t;

/* Clears the state (identity, store, io and ctx kept as set). Authentication is off. */
void skymem_sat_init(skymem_sat_t *s, const skymem_sat_io_t *io, void *ctx);
/* Turns authentication on with a loaded key ring (a satellite's: skymem_auth_load_text). persisted: what a previous
 * run kept (NULL: nothing). The floor becomes the later of its mark and the clock, and each window it refused
 * ahead refuses again up to what was kept; replies to the ground are signed with the lowest ground key until a
 * station speaks. Returns 0. */
int skymem_sat_auth_on(skymem_sat_t *s, skymem_auth_t *a, const skymem_floor_t *persisted);

/* A parsed data-plane command that came up this satellite's ground link (route as received; this
 * function fills an unset via with this satellite, in *r and in pkt). Keys on: checked here, for
 * this satellite or before it is relayed. Returns SKYMEM_SAT_DROP, _LEARN or _RELAYED. Keys off:
 * _LEARN for every command from a ground station, as an unkeyed constellation has always done
 * (nothing can be verified there, so an address is taken on trust). */
int skymem_sat_from_ground(skymem_sat_t *s, const skymem_msg_t *m, uint8_t *pkt, size_t len, skymem_route_t *r);
/* A parsed data-plane command addressed to this satellite: 1 to serve it, 0 refused (counted, no
 * answer: an unauthenticated sender gets nothing signed back). checked: it already passed
 * skymem_sat_from_ground here (not checked twice). */
int skymem_sat_accept(skymem_sat_t *s, const skymem_msg_t *m, const uint8_t *pkt, size_t len, int checked);
/* Serves an accepted command (route with via filled in). */
void skymem_sat_serve(skymem_sat_t *s, const skymem_msg_t *m);
/* An intact data-plane command the parser refused: 1 when it is for this satellite and may be answered
 * (and, from the ground, its station learned) -- with keys on only when its tag verifies (else counted in
 * auth_failures: 0). Then skymem_sat_nak_malformed answers it as PROTOCOL.md §4 says. */
int skymem_sat_malformed(skymem_sat_t *s, const uint8_t *pkt, size_t len, const skymem_route_t *r);
void skymem_sat_nak_malformed(skymem_sat_t *s, int err, const uint8_t *pkt, const skymem_route_t *r);
/* A reply addressed to this satellite (a migration's ACK or NAK): checked, then applied. */
void skymem_sat_on_reply(skymem_sat_t *s, const skymem_msg_t *m, const uint8_t *pkt, size_t len);
/* 1 if a control-MID command (no route, so no trailer) must be refused: keys on (counted). */
int skymem_sat_refuse_control(skymem_sat_t *s, uint8_t cc);

/* Sends up to budget pending GET_CHUNKS answers; returns how many requests are still pending. */
uint32_t skymem_sat_run_jobs(skymem_sat_t *s, uint32_t budget);
/* Resends migrated chunks whose ACK is overdue, settles the given-up ones. */
void skymem_sat_tick(skymem_sat_t *s);
/* The earliest migration deadline (mono_ms), 0 when none. */
uint64_t skymem_sat_next_deadline(const skymem_sat_t *s);
uint32_t skymem_sat_migrations_active(const skymem_sat_t *s);

/* STATS / housekeeping: the runtime's part (io->fill_stats), then the core's counters and store. */
void skymem_sat_fill_stats(skymem_sat_t *s, skymem_stats_t *st);
void skymem_sat_reset_counters(skymem_sat_t *s);

/* Store callback (skymem_store_create's, ctx = the skymem_sat_t): an LRU eviction purged a block --
 * gossip it, and tell the ground station that set it. */
void skymem_sat_store_evicted(void *ctx, const uint8_t *hash, const skymem_chunk_meta_t *victim, uint32_t purged);

/* A signed reply (ACK/NAK/EVICTED, the block hash as its body when hash is not NULL) to the request
 * with route req, sent through io->send. The core's answer; a runtime uses it for its own NAKs. */
void skymem_sat_reply(skymem_sat_t *s, const skymem_route_t *req, uint8_t kind, uint8_t cc, uint8_t status,
                      uint32_t chunk_id, uint32_t value, const uint8_t *hash);

#ifdef __cplusplus
}
#endif
#endif /* SKYMEM_SAT_H */
