/*
 * skymem_auth.h -- authenticated commands: the trailer of skymem_wire.h
 * (u32 key_id + u64 sequence + HMAC-SHA256), a key ring and per-source replay
 * windows. Portable C99, no allocation: shared by the native node and the cFS app.
 *
 * What the MAC covers: every byte of the packet before the tag, with the bytes a
 * relay or the first satellite rewrite taken as zero -- the cFS checksum (byte 7),
 * the route header's via (4 bytes), ttl and hops. So a command signed on the
 * ground verifies at its destination however many hops it took; a relay cannot
 * change what it asks for, whom it comes from, the request id, flags, key id or
 * sequence. (Changing `via` only redirects the reply, which an attacker on the
 * path could drop anyway.)
 *
 * Keys: id 0 (SKYMEM_AUTH_CONSTELLATION_KEY) is shared by the satellites and
 * signs what they send each other (gossip EVICT_BLOCK, migration SET_CHUNK); it
 * is accepted only from a satellite source. Every other id is a ground station
 * key, accepted only from a ground source.
 *
 * Replay: sequence numbers are microseconds of Unix time made strictly
 * increasing per sender (skymem_auth_next_seq), so senders need no shared
 * state. A receiver keeps, per (key id, source), the highest sequence seen and
 * a bitmap of the SKYMEM_AUTH_WINDOW below it; anything older or already seen is
 * a replay. Sequences at or below the floor (the receiver's start time, raised
 * when a source's window is recycled) are refused too, so a restart does not
 * reopen old traffic.
 */
#ifndef SKYMEM_AUTH_H
#define SKYMEM_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_sha256.h"
#include "skymem_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKYMEM_AUTH_CONSTELLATION_KEY 0u
#define SKYMEM_AUTH_MAX_KEYS 32u
#define SKYMEM_AUTH_KEY_MIN 16u  /* bytes; shorter keys are refused */
#define SKYMEM_AUTH_KEY_MAX 64u  /* bytes (one SHA-256 block) */
#define SKYMEM_AUTH_WINDOW 1024u /* sequence numbers remembered below the highest */
#define SKYMEM_AUTH_SOURCES 256u /* (key, source) replay windows kept */
#define SKYMEM_AUTH_TAG_LEN 32u

/* Offsets inside the trailer. */
#define SKYMEM_AT_KEY_ID 0u
#define SKYMEM_AT_SEQ 4u
#define SKYMEM_AT_TAG 12u

/* Results of skymem_auth_verify (0 = authentic and fresh). */
#define SKYMEM_AUTH_OK 0
#define SKYMEM_AUTH_E_NO_TRAILER -1 /* not a data command, or no AUTH flag / room */
#define SKYMEM_AUTH_E_UNKNOWN_KEY -2
#define SKYMEM_AUTH_E_KEY_SCOPE -3  /* constellation key from the ground or a ground key from a satellite */
#define SKYMEM_AUTH_E_BAD_MAC -4
#define SKYMEM_AUTH_E_REPLAY -5     /* authentic but already seen, too old, or before the floor */
#define SKYMEM_AUTH_E_ARG -6        /* bad argument (builders, key ring) */

typedef struct {
    uint32_t id;
    uint8_t len;
    uint8_t used;
    uint8_t key[SKYMEM_AUTH_KEY_MAX];
} skymem_auth_key_t;

typedef struct {
    uint8_t used;
    uint32_t key_id;
    uint16_t src_plane, src_sat;
    uint64_t top;                               /* highest sequence accepted */
    uint64_t bits[SKYMEM_AUTH_WINDOW / 64u];    /* bit d: sequence top - d seen */
    uint64_t last_use;
} skymem_replay_t;

typedef struct {
    skymem_auth_key_t keys[SKYMEM_AUTH_MAX_KEYS];
    uint32_t n_keys;
    skymem_replay_t windows[SKYMEM_AUTH_SOURCES];
    uint64_t floor; /* sequences <= floor are refused */
    uint64_t tick;  /* LRU clock for windows */
    uint64_t last_seq; /* last sequence this side signed with */
} skymem_auth_t;

const char *skymem_auth_strerror(int rc);

/* floor: typically the receiver's start time in Unix microseconds. */
void skymem_auth_init(skymem_auth_t *a, uint64_t floor);
int skymem_auth_add_key(skymem_auth_t *a, uint32_t id, const uint8_t *key, size_t len);
const skymem_auth_key_t *skymem_auth_find_key(const skymem_auth_t *a, uint32_t id);
/* Parses a key file: lines "key_id hex_key", '#' comments and blank lines
 * ignored. Returns the number of keys added or SKYMEM_AUTH_E_ARG with a
 * message ("line 3: ...") in err. */
int skymem_auth_load_text(skymem_auth_t *a, const char *text, size_t len, char *err, size_t err_len);

/* 1 if a data-plane command with this function code must be authenticated
 * when keys are configured: SET_CHUNK, EVICT_BLOCK, MIGRATE, SET_PARAM,
 * RESET_COUNTERS. Reads (GET, PROBE, STATS, NOOP) need not be. */
int skymem_auth_required(uint8_t cc);

/* The tag over pkt[0, len_before_tag) with the mutable bytes taken as zero.
 * pkt must be a data-plane command of at least 8 + 20 bytes. */
void skymem_auth_mac(const uint8_t *key, size_t key_len, const uint8_t *pkt, size_t len_before_tag,
                     uint8_t out[SKYMEM_AUTH_TAG_LEN]);

/* Next sequence to sign with: max(last + 1, now_us). */
uint64_t skymem_auth_next_seq(skymem_auth_t *a, uint64_t now_us);

/* Signs a data-plane command in place: sets the AUTH route flag, appends the
 * trailer (cap must allow len + 44), fixes the length field and checksum.
 * Returns the new length or SKYMEM_AUTH_E_*. */
int skymem_auth_sign(const skymem_auth_t *a, uint32_t key_id, uint64_t seq, uint8_t *pkt, size_t len, size_t cap);

/* Checks a data-plane command's trailer: key known and in scope, tag right
 * (constant-time compare), sequence fresh for (key, source); records the
 * sequence only when everything holds. Returns SKYMEM_AUTH_OK or an error. */
int skymem_auth_verify(skymem_auth_t *a, const uint8_t *pkt, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* SKYMEM_AUTH_H */
