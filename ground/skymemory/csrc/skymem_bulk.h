/*
 * skymem_bulk.h -- the ground's fast path: move whole blocks with batched
 * datagrams (recvmmsg / sendmmsg), no per-chunk Python objects.
 *
 * Ground-only (POSIX sockets, Linux recvmmsg/sendmmsg): it lives next to the
 * Python package, not in the portable flight core. It builds and parses the
 * packets with the flight codec (skymem_codec.h), so both ends agree byte
 * for byte.
 *
 * A block's chunk i lands at buf + i * chunk_bytes and is stored on server
 * servers[server0 + i % n_servers] (the block store's striping rule).
 *
 * Sealed (opts.seal, skymem_seal.h): what travels and what a satellite keeps
 * are the chunks sealed with AES-128-GCM, while buf holds the content. A
 * chunk is then chunk_bytes on the wire and carries chunk_bytes -
 * SKYMEM_SEAL_OVERHEAD bytes of content, which land at buf + i * (chunk_bytes
 * - SKYMEM_SEAL_OVERHEAD); set seals each send of a chunk into a scratch
 * buffer as it leaves, get opens each chunk straight into its place, and
 * checks a reply's CRC and trailer only when its chunk does not open (to
 * tell a change on the way, asked again, from the satellite's own bytes).
 *
 * Coded (a block's stripe_m > 0, skymem_stripe.h): the block is cut into stripes of stripe_k data chunks and
 * stripe_m parity chunks, and chunk_count counts them all (the wire's chunks: data, then parity, stripe by
 * stripe). buf holds only the data chunks' content, data chunk d at buf + d * (content bytes per chunk).
 * set computes the parity over the content (before sealing) and sends every chunk; get lands the parity in
 * a scratch buffer of its own, and a stripe is done as soon as its first r intact chunks are in (r: its
 * data chunks): any that are missing are rebuilt then (REBUILT), and the stripe's other chunks are no
 * longer waited for (UNNEEDED). A get asks a stripe's parity (HELD until then) only when one of its data
 * chunks is refused or fails its seal, when the satellite of one has answered nothing for hedge_s while
 * asked (dead), or when some of the stripe's chunks came and then none for four round trips (the first
 * reply's time; at least 20 ms, at most hedge_s: the rest are on a slow satellite); hedge_s 0: with the data,
 * from the start. Each parity chunk is a request of its own, so a stripe asks only its own. A healthy constellation is sent no parity request,
 * and a dead or slow satellite costs hedge_s and a round trip, not the retries of a timeout.
 */
#ifndef SKYMEM_BULK_H
#define SKYMEM_BULK_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_auth.h"
#include "skymem_seal.h"

/* The ground's replay windows for replies: the core's per-(key, source) windows (skymem_auth_verify_with),
 * so a reply counts only when signed with the DOWN key of the satellite it names as its source (the
 * caller gives that key: the ground derives it from its master) under the ground's key id, and its
 * sequence is fresh for that satellite (never seen, not older than SKYMEM_AUTH_WINDOW below the newest
 * from it). One per ground key, kept as long as the key is used and shared by every caller that checks
 * replies with it -- the asyncio client and each fast-path call, from any thread (a spin lock serialises
 * the checks). A floor from the caller's start: a new window would otherwise take the first reply from a
 * satellite whatever its sequence, so a reply captured before this ground process started, replayed when a
 * new request draws the same (random) request id, would answer it. Satellites sign replies with Unix-time
 * sequences (skymem_auth_next_seq on their clock): one signed before the caller started is stale, but for
 * the satellites' clock error, allowed as the satellites allow it for commands (SKYMEM_SAT_SEQ_AHEAD_US). */
typedef struct skymem_reply_window skymem_reply_window_t;

/* NULL when out of memory. ~1 MiB, mostly untouched. start_us: the caller's start, Unix microseconds;
 * every reply whose sequence is at or below skymem_reply_window_floor(start_us) is refused (E_REPLAY).
 * 0: no floor (the first reply from a satellite opens its window, whatever its sequence). */
skymem_reply_window_t *skymem_reply_window_new(uint32_t key_id, uint64_t start_us);
/* The floor a window made at start_us has: skymem_auth_seq_at(start_us) less SKYMEM_SAT_SEQ_AHEAD_US of
 * sequences (0 when start_us is 0 or that early). */
uint64_t skymem_reply_window_floor(uint64_t start_us);
void skymem_reply_window_free(skymem_reply_window_t *w);
/* SKYMEM_AUTH_OK (the sequence now recorded), SKYMEM_AUTH_E_REPLAY (tag right, sequence seen or too
 * old) or another SKYMEM_AUTH_E_* (not a signed reply, another key, bad tag). k: the DOWN key of the
 * reply's source. With crc != NULL, also CRC32C of pkt[crc_off, crc_off + crc_len) in the tag's pass,
 * as skymem_auth_verify_crc. */
int skymem_reply_window_check(skymem_reply_window_t *w, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len,
                              size_t crc_off, size_t crc_len, uint32_t *crc);
/* The newest sequence w has taken from satellite (plane, sat), or its floor when none (finding L1 of issue 53).
 * A satellite's sequences only grow (skymem_auth_next_seq), so its genuine reply to a request sent after that
 * one was checked carries a higher sequence: one at or below it was signed before the request left, and is
 * a captured reply whatever its request id (skymem_bulk_server_t.reply_floor, protocol.auth.Signer.reply_top). */
uint64_t skymem_reply_window_top(skymem_reply_window_t *w, uint16_t plane, uint16_t sat);

/* One satellite holding chunks, and the ground link that reaches it. */
typedef struct {
    uint16_t plane, sat;         /* destination of the requests */
    uint16_t via_plane, via_sat; /* satellite whose ground port the requests go to */
    uint32_t ipv4;               /* that ground port's IPv4 address, host byte order */
    uint16_t port;               /* that ground port, host byte order */
    /* keyed call (opts.keyed): this satellite's keys under opts.auth_key_id, derived by the ground
     * (skymem_auth.h): UP signs the requests for it, DOWN checks its replies */
    const skymem_mac_key_t *up_key, *down_key;
    /* keyed call: a reply from this satellite signed at or below this sequence answers nothing (counted in
     * replayed): the newest it had signed to this ground when the call began (skymem_reply_window_top) */
    uint64_t reply_floor;
} skymem_bulk_server_t;

/* Per-chunk status values. */
#define SKYMEM_BULK_PENDING     0u
#define SKYMEM_BULK_OK          1u
#define SKYMEM_BULK_NOT_FOUND   2u
#define SKYMEM_BULK_SEAL_FAILED 3u /* get, sealed: the chunk came (CRC and trailer right) and does not open --
                                    * altered, another chunk's, an unknown key id. The bytes the satellite
                                    * keeps are bad: not asked again, its content in buf zeroed */
#define SKYMEM_BULK_UNNEEDED    4u /* get, coded: its stripe was complete without it (not waited for) */
#define SKYMEM_BULK_HELD        6u /* get, coded: a parity chunk not asked (yet): its stripe has needed none */
#define SKYMEM_BULK_REBUILT  0x80u /* get, coded, a flag: a data chunk rebuilt from its stripe's other chunks, over
                                    * what it was (PENDING: never came; NOT_FOUND, SEAL_FAILED: whom to blame) */

typedef struct {
    const uint8_t *hash;   /* 32-byte block hash */
    uint8_t *buf;          /* get: destination; set: source. n_bytes long (sealed: the content) */
    uint64_t n_bytes;
    uint32_t chunk_bytes;  /* every chunk but the last is this long (sealed: on the wire) */
    uint32_t chunk_count;  /* sealed: skymem_seal_chunk_count(n_bytes, chunk_bytes) */
    uint32_t server0;      /* first server of this block in the server table */
    uint32_t n_servers;
    uint64_t created_ms;   /* set: descriptor creation time */
    uint8_t *status;       /* chunk_count bytes, SKYMEM_BULK_* (caller zeroes them) */
    uint32_t *prefix;      /* get: chunks received (and opened) contiguously from chunk 0 (written while
                            * running; coded: data chunks, received or rebuilt) */
    uint32_t *chunk_crcs;  /* get, optional: chunk_count entries, each chunk's verified CRC32C as it arrived
                            * (skymem_crc32c_fold turns them into the block's CRC without rereading it;
                            * sealed: the CRCs of the sealed chunks as their satellites declare them: a chunk
                            * that opens needs no CRC check, the seal vouches for it) */
    uint32_t stripe_k, stripe_m; /* coded: k data + m parity chunks a stripe (0, 0: uncoded); n_servers at
                                  * least k + m, so that a stripe's chunks are on distinct servers */
} skymem_bulk_block_t;

typedef struct {
    int fd;                  /* bound UDP socket owned by the caller (blocking or not) */
    uint16_t station_id;     /* ground station id in the route header */
    uint32_t request_id;     /* first request id to use; ids base..base+n are used (a random base per call) */
    uint32_t window_bytes;   /* chunk bytes requested/sent and not yet answered, at most */
    uint32_t wave_chunks;    /* get: chunk ids per block per request wave (0 = whole block) */
    int wave_doubling;       /* get: each wave after the first asks twice the chunk ids of the one before */
    double rto_s;            /* no progress on a request for this long: ask again */
    double deadline_s;       /* give up after this long in all */
    uint32_t max_retries;    /* re-requests per request, at most */
    double pace_Bps;         /* get: after the first wave, ask for at most this many chunk bytes per
                              * second (0 = as fast as the window allows); see skymem_bulk_get.
                              * set: send new chunks no faster than this (resends are not metered) */
    /* results */
    uint64_t packets_rx, packets_tx, bytes_rx;
    uint64_t crc_failures, retransmits, ignored;
    /* A keyed constellation (keyed not 0, skymem_auth.h): every request is signed with the
     * UP key of the server it is for -- each packet, resends included, takes the next sequence
     * of the range [auth_seq_first, auth_seq_first + auth_seq_count) the caller reserved from
     * its signer, so no sequence is ever used twice -- and a reply counts only when signed
     * with the DOWN key of the satellite it comes from (others: auth_failures). */
    int keyed;
    uint32_t auth_key_id;
    uint64_t auth_seq_first, auth_seq_count;
    uint64_t auth_seq_used;  /* result: sequences consumed */
    uint64_t auth_failures;  /* result: replies refused for their trailer (unsigned, other key, bad tag) */
    uint8_t nak_status;      /* result: SKYMEM_NAK_* of the refusal when REFUSED */
    double first_reply_s;    /* result, get: seconds from the start to the first valid reply (one round
                              * trip plus a service time: the ground's measure of the link's latency) */
    /* Keyed call: with replies set, a reply's sequence must be fresh too (skymem_reply_window_check);
     * without, only its tag is checked. */
    skymem_reply_window_t *replies;
    uint64_t replayed;       /* result: replies with a right tag and a sequence already seen or too old */
    uint64_t wrong_source;   /* result: replies naming as their source another satellite than the one
                              * asked (a NAK about the route itself -- NO_ROUTE, TTL_EXPIRED,
                              * AUTH_FAILED -- comes from where the request stopped, and may) */
    /* Sealed content (skymem_seal.h): with seal set, set seals every chunk under seal->keys[0] and get
     * opens every chunk under the key its id names (the blocks' layout: see the top of this file);
     * NULL: chunks travel as they are. The call uses its own copy of the table. */
    const skymem_seal_keys_t *seal;
    uint64_t seal_failures;  /* result, get: chunks that came and did not open (SKYMEM_BULK_SEAL_FAILED) */
    double hedge_s;          /* get, coded: a data request unanswered this long has its stripes' parity asked
                              * (0: parity asked with the data) */
    uint64_t rebuilt;        /* result, get: data chunks rebuilt from parity (SKYMEM_BULK_REBUILT) */
    uint64_t parity_asked;   /* result, get: parity chunks asked */
    /* get, streamed (blocks with a prefix): with progress_want set, the call writes 1 to the eventfd progress_fd
     * once every block's prefix has reached *progress_want chunks (0: nothing wanted), so that one reader
     * waiting for the first layers sleeps until they are in instead of polling the prefixes (each wake-up of a
     * poll takes CPU from the transfer). The reader sets it with skymem_bulk_want, then reads the prefixes,
     * then waits on the fd; NULL: no bell. */
    const uint32_t *progress_want;
    int progress_fd;
} skymem_bulk_opts_t;

/* Return values (negative: error before/while moving data). */
#define SKYMEM_BULK_DONE        0  /* every chunk answered (OK, NOT_FOUND or SEAL_FAILED; coded: or its stripe
                                    * complete, or lost) */
#define SKYMEM_BULK_INCOMPLETE  1  /* deadline or retries exhausted with chunks pending */
#define SKYMEM_BULK_REFUSED     2  /* a satellite refused a request as a whole (NAK other than not-found) */
#define SKYMEM_BULK_E_ARG      -1
#define SKYMEM_BULK_E_NOMEM    -2
#define SKYMEM_BULK_E_SOCKET   -3
#define SKYMEM_BULK_E_CRYPTO   -4  /* sealed: libcrypto failed (no randomness, out of memory) */

/* Fetch every chunk of the blocks with GET_CHUNKS (one per server per block
 * per wave), in wave order: wave w asks chunk ids [w*wave, (w+1)*wave) of
 * every block, so with layer-major blocks the first layers of all blocks
 * come first (with wave_doubling, waves of wave, 2*wave, 4*wave, ... chunk
 * ids: the first layers as soon, the rest in fewer requests). Each reply is parsed, its request id, block hash, chunk id
 * and length checked, its CRC32C verified, and its data copied to its
 * place (sealed: opened into it). A request with chunks still missing
 * after rto_s is asked again (only the missing span), at most max_retries
 * times.
 *
 * With pace_Bps > 0 the first wave is asked at once and the rest no faster
 * than pace_Bps: when all of a window is asked in one burst, every
 * satellite answers all of it at the same moment and the first wave's
 * replies queue behind later waves at the shared receiver; paced, the
 * replies arrive in the order they were asked. */
int skymem_bulk_get(const skymem_bulk_server_t *servers, uint32_t n_servers_total,
                    skymem_bulk_block_t *blocks, uint32_t n_blocks, skymem_bulk_opts_t *opts);
/* The reader of a streamed get asks to be woken once every block's prefix reaches `chunks` (opts.progress_want):
 * a store with a full barrier, so that either the reader then sees the prefixes that meet it, or the call sees
 * the new want and rings. */
void skymem_bulk_want(uint32_t *want, uint32_t chunks);
/* How many GET_CHUNKS requests skymem_bulk_get makes for these blocks before any resend (a
 * caller reserves (max_retries + 1) times as many sequences when it signs). */
uint32_t skymem_bulk_get_requests(const skymem_bulk_block_t *blocks, uint32_t n_blocks, uint32_t wave_chunks,
                                   int wave_doubling);

/* Store every chunk of the blocks with SET_CHUNK (but those whose status is OK on entry: a repair sends only the
 * chunks that were lost; the caller zeroes the rest), at most window_bytes
 * unacknowledged, resending a chunk whose ACK has not come after rto_s.
 * With pace_Bps > 0 new chunks leave no faster than pace_Bps: a link that
 * queues what it cannot carry at once (the node's token bucket) would
 * otherwise hold the tail of a burst past rto_s, and every resend of it
 * would only lengthen the queue.
 * Keyed, every packet sent is signed with a fresh sequence;
 * running out of the reserved range is SKYMEM_BULK_E_ARG.
 * Sealed, each send of a chunk (resends too) is sealed as it leaves, under
 * a nonce of its own: no staging copy of the blocks. */
int skymem_bulk_set(const skymem_bulk_server_t *servers, uint32_t n_servers_total,
                    skymem_bulk_block_t *blocks, uint32_t n_blocks, skymem_bulk_opts_t *opts);

/* CRC32C as the flight core computes it (hardware instruction when available). */
uint32_t skymem_bulk_crc32c(const uint8_t *data, size_t len);

#endif /* SKYMEM_BULK_H */
