/*
 * skymem_auth.h -- authenticated commands and replies: the trailer of skymem_wire.h
 * (u32 key_id + u64 sequence + 32-byte tag), a key ring and per-source replay
 * windows. Portable C99, no allocation: shared by the native node, the cFS app and
 * the ground's C fast path.
 *
 * The tag (skymem_auth_mac) is a universal hash under a block cipher, as in AES-GCM-SIV:
 *   S   = POLYVAL(H, M padded with zeros to 16 bytes || LE64(8 * len(M)) || LE64(0))
 *   tag = AES-128_K1(S) || AES-128_K2(S)
 * with M the packet before the tag, H the first 16 bytes of
 * HMAC-SHA256(key, "skymem auth v2 polyval") and K1 || K2 = HMAC-SHA256(key,
 * "skymem auth v2 tag"). The length block is AES-GCM-SIV's (M as additional data,
 * no plaintext). POLYVAL is almost universal: two different packets of at most L
 * blocks give the same S for at most L + 1 of the 2^128 values of H; S never leaves
 * the sender, and a pseudo-random permutation of it reveals nothing of H. So a
 * forgery needs either a guess of AES's output or such a collision -- roughly
 * q^2 (L + 2) / 2^129 for q packets seen (the UHF-then-PRF bound, with AES's PRP/PRF
 * switch) -- and there is no nonce to misuse: the sequence is simply part of M.
 * Why not HMAC-SHA256 over the whole packet, as before: POLYVAL runs on the carry-less
 * multiply and AES on the AES instructions, where even an HMAC of S alone would cost two
 * dependent SHA-256 compressions a packet; `skymemory bench auth` measures the tag of a
 * 6 KiB packet at a tenth of an HMAC-SHA256 of it (BENCHMARKS.md, "Authentication cost").
 *
 * What the MAC covers: every byte of the packet before the tag, with the bytes a
 * relay or the first satellite rewrite taken as zero -- the cFS checksum (byte 7,
 * commands only), the route header's via (4 bytes), ttl and hops. So a packet
 * signed at one end verifies at the other however many hops it took; a relay
 * cannot change what it asks for or answers, whom it comes from or goes to, the
 * request id, flags, key id or sequence. (Changing `via` only redirects a reply,
 * which an attacker on the path could drop anyway.) Data-plane commands
 * (SKYMEM_DATA_CMD_MID) and routed replies (SKYMEM_REPLY_TLM_MID) are signed alike.
 *
 * Keys, one per association and direction (as CCSDS SDLS, 355.0-B, and NASA CryptoLib keep a
 * security association per link and direction), derived by the ground from masters no satellite sees
 * (skymemory.protocol.auth):
 *  - ground keys (ids 1 .. 0x7FFFFFFF, a station's): UP, ground -> this satellite, verifies the commands
 *    addressed to it, and DOWN, this satellite -> ground, signs its replies. End to end: a relay passes
 *    them on unchanged, only the destination (or the ground) can check them. So a command verifies only
 *    at the satellite it was signed for, a reply only as coming from the satellite whose key signed it.
 *  - link keys, one per ISL link and direction: LINK_OUT (this satellite -> a neighbour) signs, and
 *    LINK_IN (a neighbour -> this satellite) verifies, what satellites send each other (migration sets
 *    and their answers, gossip evictions). Hop by hop: each satellite that forwards such a packet checks
 *    the last hop's tag and signs again for the next (skymem_link.h). Its trailer's key id is the link id
 *    of the satellite that signed it (skymem_auth_link_id: the top bit set, then plane and sat), so the
 *    receiver knows which neighbour vouches for it, and keeps one replay window per neighbour.
 * A packet's direction picks the key (skymem_auth_key_use). A satellite holds its own UP and DOWN keys
 * and the keys of its own four links, nothing more: with its key file one can act as that satellite, to
 * its neighbours and to the ground, and as no other (docs/RELIABILITY.md, "Threat model").
 *
 * A satellite's key file (skymem_auth_load_text; docs/PROTOCOL.md, "Key files"):
 *     skymem-keys 4 satellite PLANE SAT
 *     link-in PLANE SAT HEX     (one per neighbour: what it signs for us)
 *     link-out PLANE SAT HEX    (one per neighbour: what we sign for it)
 *     up KEY_ID HEX
 *     down KEY_ID HEX
 * The ground's file ("skymem-keys 4 ground", with the masters) is refused here, and so is an older
 * file (version 3's shared ISL key, or no header at all), each with a line saying what to do.
 *
 * Replay: sequence numbers are Unix time in units of SKYMEM_AUTH_SEQ_US
 * microseconds, made strictly increasing per sender (skymem_auth_next_seq), so
 * senders need no shared state. A receiver keeps, per (key id, source), the
 * highest sequence seen and a bitmap of the SKYMEM_AUTH_WINDOW below it;
 * anything older or already seen is a replay. The window therefore tolerates a
 * sender's packets arriving out of order by 32768 x 16 us = 524 ms -- a station's
 * commands reach a satellite both straight and relayed over ISL hops of tens of
 * milliseconds each -- or by 32768 packets when it sends faster than one per 16 us.
 * The bitmap is a ring indexed by sequence modulo the window, so recording a
 * sequence costs O(1) amortised. Sequences at or below the floor (the receiver's start time, raised
 * when a source's window is recycled) are refused too, so a restart does not
 * reopen old traffic.
 */
#ifndef SKYMEM_AUTH_H
#define SKYMEM_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_aes.h"
#include "skymem_polyval.h"
#include "skymem_sha256.h"
#include "skymem_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKYMEM_AUTH_LINK_BIT 0x80000000u /* key ids with this bit are link ids; ground key ids are below */
#define SKYMEM_AUTH_AHEAD_US 1000000u    /* how far ahead of the receiver's clock a sequence may be */
#define SKYMEM_AUTH_MAX_KEYS 32u
#define SKYMEM_AUTH_KEY_MIN 16u  /* bytes; shorter keys are refused */
#define SKYMEM_AUTH_KEY_MAX 64u  /* bytes (one SHA-256 block) */
#define SKYMEM_AUTH_WINDOW 32768u /* sequence numbers remembered below the highest (a multiple of 64) */
#define SKYMEM_AUTH_SEQ_US 16u   /* one sequence number = this many microseconds of Unix time */
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
#define SKYMEM_AUTH_E_KEY_SCOPE -3  /* link key with a ground end, or a ground key between satellites */
#define SKYMEM_AUTH_E_BAD_MAC -4
#define SKYMEM_AUTH_E_REPLAY -5     /* authentic but already seen, too old, or before the floor */
#define SKYMEM_AUTH_E_ARG -6        /* bad argument (builders, key ring) */
#define SKYMEM_AUTH_E_AHEAD -7      /* sequence too far ahead of the receiver's clock (skymem_sat.h) */

/* A key made ready to sign and check with: derived once, when the key is loaded. */
typedef struct {
    skymem_polyval_key_t hash; /* H and its powers */
    skymem_aes128_t tag[2];    /* K1 and K2: each gives 16 bytes of the tag */
} skymem_mac_key_t;

/* What a key is for (a mask: a ring built with skymem_auth_add_key, by tools and tests that play
 * both ends, has one key for every use). */
#define SKYMEM_KEY_UP 1u       /* ground -> this satellite: commands for it */
#define SKYMEM_KEY_DOWN 2u     /* this satellite -> ground: its replies */
#define SKYMEM_KEY_LINK_IN 4u  /* a neighbour -> this satellite (id: the neighbour's link id) */
#define SKYMEM_KEY_LINK_OUT 8u /* this satellite -> a neighbour (id: the neighbour's link id) */
#define SKYMEM_KEY_ANY 15u

typedef struct {
    uint32_t id;
    uint8_t uses; /* SKYMEM_KEY_* */
    skymem_mac_key_t mac;
} skymem_auth_key_t;

typedef struct {
    uint8_t used;
    uint32_t key_id;
    uint16_t src_plane, src_sat;
    uint64_t top;      /* highest sequence accepted */
    uint64_t last_use;
} skymem_replay_t;

typedef struct {
    uint32_t n_keys;
    skymem_replay_t windows[SKYMEM_AUTH_SOURCES];
    uint64_t floor; /* sequences <= floor are refused */
    uint64_t tick;  /* LRU clock for windows */
    uint64_t last_seq; /* last sequence this side signed with */
    uint64_t high;  /* highest sequence ever accepted: what a restart must not reopen (persist it) */
    uint64_t ahead_limit; /* sequences above it are refused, and stay refused (skymem_auth_set_clock); 0: none */
    /* whose keys skymem_auth_load_text loaded (its header): the runtime checks they are its own */
    uint16_t owner_plane, owner_sat;
    /* keys[0 .. n_keys): written when added, so init leaves the other 49 KiB untouched too */
    skymem_auth_key_t keys[SKYMEM_AUTH_MAX_KEYS];
    /* windows[i]'s bitmap, bit (s mod WINDOW): sequence s seen, for top - s < WINDOW. Last, and cleared
     * only when a window is taken: init leaves these 1 MiB alone, so a node that hears from a few
     * sources touches a few pages of it (16,384 nodes on one host), not all of them. */
    uint64_t bits[SKYMEM_AUTH_SOURCES][SKYMEM_AUTH_WINDOW / 64u];
} skymem_auth_t;

const char *skymem_auth_strerror(int rc);

/* floor: typically the receiver's start time in Unix microseconds, or the high-water mark a
 * previous run persisted (skymem_auth_high), whichever is larger. */
void skymem_auth_init(skymem_auth_t *a, uint64_t floor);
/* The highest sequence accepted so far (or the floor, if higher): persist it, and give it back
 * as the floor after a restart, so nothing accepted before can be replayed. */
uint64_t skymem_auth_high(const skymem_auth_t *a);
/* The receiver's clock (Unix microseconds): from now on a sequence more than SKYMEM_AUTH_AHEAD_US ahead of it
 * is refused (SKYMEM_AUTH_E_AHEAD) -- once authentic, it is also marked seen, so it is refused again when
 * the clock has caught up with it (a command captured then cannot be played later). */
void skymem_auth_set_clock(skymem_auth_t *a, uint64_t now_us);
/* The replay window a signed packet counts in: its trailer's key id and the source that window is kept for
 * (the route's source; for a link key, the satellite the key belongs to, whoever the packet claims to be
 * from). 0, or -1 when pkt carries no trailer. */
int skymem_auth_window_of(const uint8_t *pkt, size_t len, uint32_t *key_id, uint16_t *plane, uint16_t *sat);
/* From now on every sequence of window (key_id, plane, sat) at or below seq is refused as seen: what a
 * restart gives back of the sequences it refused ahead of its clock before (skymem_sat_auth_on). */
void skymem_auth_refuse_through(skymem_auth_t *a, uint32_t key_id, uint16_t plane, uint16_t sat, uint64_t seq);
/* The link id of satellite (plane, sat): what its link trailers carry as key id. plane < 0x8000. */
/* Where a packet's route header starts: after a data command's 8-byte header or a routed reply's 16-byte one;
 * 0 for anything else (neither signable nor a link's traffic). */
size_t skymem_auth_route_at(const uint8_t *pkt, size_t len);
uint32_t skymem_auth_link_id(uint16_t plane, uint16_t sat);
/* 1 for a link id (then *plane, *sat are its satellite's, when not NULL), 0 for a ground key id. */
int skymem_auth_link_of(uint32_t key_id, uint16_t *plane, uint16_t *sat);
/* One key for every use of id (tools and tests that play both ends); _for: for these uses only. An id
 * may have several keys whose uses do not overlap. */
int skymem_auth_add_key(skymem_auth_t *a, uint32_t id, const uint8_t *key, size_t len);
int skymem_auth_add_key_for(skymem_auth_t *a, uint32_t id, uint8_t uses, const uint8_t *key, size_t len);
/* The key with this id for this use (SKYMEM_KEY_ANY: for any), or NULL. */
const skymem_auth_key_t *skymem_auth_find_key(const skymem_auth_t *a, uint32_t id);
const skymem_auth_key_t *skymem_auth_find_key_for(const skymem_auth_t *a, uint32_t id, uint8_t use);
/* The use of the key that checks this packet: UP for a command from a ground station, DOWN for a reply
 * to one, LINK_IN between satellites (its sender signed it with the LINK_OUT key of the same link); 0
 * for a packet that cannot be signed. */
uint8_t skymem_auth_key_use(const uint8_t *pkt, size_t len);
/* Parses a satellite's key file (above): '#' comments and blank lines ignored; owner_plane/owner_sat
 * set from its header. Returns the number of keys added or SKYMEM_AUTH_E_ARG with a one-line message
 * ("line 3: ...") in err. */
int skymem_auth_load_text(skymem_auth_t *a, const char *text, size_t len, char *err, size_t err_len);

/* 1 if a data-plane command with this function code must be authenticated
 * when keys are configured: every one. Reads too: they move the LRU order and
 * the counters, and answer with data. */
int skymem_auth_required(uint8_t cc);

/* Derives H, K1 and K2 from a key (any length; the ring takes 16..64 bytes). */
void skymem_mac_key_init(skymem_mac_key_t *k, const uint8_t *key, size_t key_len);

/* The tag over pkt[0, len_before_tag) with the mutable bytes taken as zero.
 * pkt must be a data-plane command (at least 8 + 20 bytes) or a reply (16 + 20). */
void skymem_auth_mac(const skymem_mac_key_t *k, const uint8_t *pkt, size_t len_before_tag,
                     uint8_t out[SKYMEM_AUTH_TAG_LEN]);

/* The sequence number of a Unix time in microseconds (a receiver's floor at its start). */
uint64_t skymem_auth_seq_at(uint64_t unix_us);
/* Next sequence to sign with: max(last + 1, skymem_auth_seq_at(now_us)). */
uint64_t skymem_auth_next_seq(skymem_auth_t *a, uint64_t now_us);

/* Signs a data-plane command or a reply in place: sets the AUTH route flag, appends
 * the trailer (cap must allow len + 44), fixes the length field and updates a
 * command's checksum for those changes (a command must come with its checksum right,
 * as every skymem_build_* leaves it). The key is key_id's for the packet's direction
 * (skymem_auth_key_use). Returns the new length or SKYMEM_AUTH_E_*. */
int skymem_auth_sign(const skymem_auth_t *a, uint32_t key_id, uint64_t seq, uint8_t *pkt, size_t len, size_t cap);
/* The inverse of signing: a signed packet's trailer removed (its AUTH flag, length field and a command's checksum
 * brought back to what they were before signing). Returns the length without it, or SKYMEM_AUTH_E_NO_TRAILER. What
 * a relay does before it signs a packet again for its next link (skymem_link.h). */
int skymem_auth_strip(uint8_t *pkt, size_t len);
/* The same with one key given directly (the ground: the UP key of the command's destination). */
int skymem_auth_sign_with(const skymem_mac_key_t *k, uint32_t key_id, uint64_t seq, uint8_t *pkt, size_t len,
                          size_t cap);

/* Checks a data-plane command's or a reply's trailer: key known (the one for the packet's direction) and in scope,
 * tag right (constant-time compare), sequence fresh for (key, source); records
 * the sequence only when everything holds. Returns SKYMEM_AUTH_OK or an error. */
int skymem_auth_verify(skymem_auth_t *a, const uint8_t *pkt, size_t len);
/* The same, and CRC32C of pkt[crc_off, crc_off + crc_len) (a SET_CHUNK's data) in the tag's pass over
 * the packet, into *crc whenever the tag was computed (OK, E_BAD_MAC, E_REPLAY): the satellite then
 * checks the chunk's CRC without reading it again. Range as skymem_auth_check_reply_crc. */
int skymem_auth_verify_crc(skymem_auth_t *a, const uint8_t *pkt, size_t len, size_t crc_off, size_t crc_len,
                           uint32_t *crc);
/* The same with the key given rather than looked up in a's ring (the ground: the DOWN key of the
 * satellite a reply names as its source); the trailer must name key_id. crc may be NULL. */
int skymem_auth_verify_with(skymem_auth_t *a, const skymem_mac_key_t *k, uint32_t key_id, const uint8_t *pkt,
                            size_t len, size_t crc_off, size_t crc_len, uint32_t *crc);

/* The ground's check of a reply: signed with key `key_id` (its own), tag right. The rest is the
 * caller's: that the reply echoes the request id of a request still waiting, sent to the satellite
 * the reply names as its source, and that its sequence is fresh in that satellite's replay window
 * (skymem_reply_window_check; ground/skymemory/csrc/skymem_bulk.c, skymemory.protocol.auth).
 * Returns SKYMEM_AUTH_OK, E_NO_TRAILER (unsigned), E_UNKNOWN_KEY (another key id) or E_BAD_MAC. */
int skymem_auth_check_reply(const skymem_mac_key_t *k, uint32_t key_id, const uint8_t *pkt, size_t len);
/* The same, and in the same pass over the packet CRC32C of pkt[crc_off, crc_off + crc_len) into *crc --
 * a DATA reply's chunk data, whose CRC the ground checks too (skymem_polyval_blocks_crc32c). The range
 * must lie inside the packet, past its first 48 bytes: SKYMEM_AUTH_E_ARG otherwise. */
int skymem_auth_check_reply_crc(const skymem_mac_key_t *k, uint32_t key_id, const uint8_t *pkt, size_t len,
                                size_t crc_off, size_t crc_len, uint32_t *crc);

#ifdef __cplusplus
}
#endif

#endif /* SKYMEM_AUTH_H */
