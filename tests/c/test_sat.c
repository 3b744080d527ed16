/* test_sat.c -- skymem_core's command handling (skymem_sat.c) through a test io: what both runtimes
 * run. A 3x3 satellite (0,1) with keys on; packets are built and signed with the real codec and tag.
 * What the core sends another satellite leaves it unsigned: the test signs it as a runtime's link layer
 * does (skymem_link_prepare, with the sender's ring) before handing it to the satellite it is for. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "link_keys.h"
#include "skymem_crc32c.h"
#include "skymem_link.h"
#include "skymem_sat.h"

/* ---- the test io: records what is sent, a settable clock, a floor "file" ---------------- */
static uint8_t sent[8][SKYMEM_MAX_PACKET];
static size_t sent_len[8];
static int n_sent, persist_calls, persist_fails;
static uint64_t clock_us = 1700000000000000ull, persisted;
static skymem_floor_t kept; /* what the core last wrote (persisted: its mark) */
static uint8_t nb_radius;   /* the radius of from_neighbour's EVICT_BLOCK */

static void io_send(void *ctx, uint8_t *pkt, size_t len, const skymem_route_t *r, int is_reply)
{
    (void)ctx, (void)r, (void)is_reply;
    if (n_sent < 8) {
        memcpy(sent[n_sent], pkt, len);
        sent_len[n_sent] = len;
    }
    n_sent++;
}
static char last_log[256]; /* the latest line the core logged */
static void io_log(void *ctx, int level, int about, const char *text)
{
    (void)ctx, (void)level, (void)about;
    snprintf(last_log, sizeof last_log, "%s", text);
}
static uint64_t io_clock(void *ctx) { return (void)ctx, clock_us; }
static uint64_t io_mono(void *ctx) { return (void)ctx, clock_us / 1000u; }
static void io_tlm(void *ctx, uint32_t *s, uint16_t *sub) { (void)ctx, *s = 1, *sub = 0; }
static uint8_t io_param(void *ctx, uint16_t id, uint32_t v) { return (void)ctx, (void)v, id == 1 ? 0 : SKYMEM_NAK_BAD_PARAM; }
static int io_persist(void *ctx, const skymem_floor_t *f)
{
    (void)ctx;
    persist_calls++;
    if (persist_fails) return -1;
    kept = *f;
    persisted = f->mark;
    return 0;
}
static const skymem_sat_io_t io = {io_send, io_clock, io_mono, io_tlm, io_log, io_param, NULL, NULL, io_persist};

static skymem_sat_t sat;
/* satellite (0,1)'s keys (a version 4 file: its UP and DOWN keys, and its four links'); the ground here
 * holds the same UP and DOWN keys (skymem_auth_sign picks by direction). nb: its neighbour (0,2)'s. */
static skymem_auth_t ring, ground, nb;
#define UP01 "101112131415161718191a1b1c1d1e1f"
#define DOWN01 "202122232425262728292a2b2c2d2e2f"
#define UP02 "303132333435363738393a3b3c3d3e3f"
#define DOWN02 "404142434445464748494a4b4c4d4e4f"
#define N_KEYS 10 /* up, down and a link-in and a link-out for each of four neighbours */
static uint8_t pkt[SKYMEM_MAX_PACKET];

static void setup(void)
{
    static skymem_store_t *store;
    if (store) skymem_store_destroy(store);
    CHECK(skymem_store_create(&store, 1u << 20, 1024, skymem_sat_store_evicted, &sat) == SKYMEM_STORE_OK);
    memset(&sat, 0, sizeof sat);
    sat.plane = 0, sat.sat = 1, sat.planes = 3, sat.sats = 3, sat.altitude_m = 550000.0, sat.store = store;
    skymem_sat_init(&sat, &io, NULL);
    CHECK(load_sat_keys(&ring, 0, 3, 3, 0, 1, UP01, DOWN01) == N_KEYS);
    CHECK(load_sat_keys(&ground, 0, 3, 3, 0, 1, UP01, DOWN01) == N_KEYS);
    CHECK(load_sat_keys(&nb, 0, 3, 3, 0, 2, UP02, DOWN02) == N_KEYS);
    persisted = 0, nb_radius = 0;
    memset(&kept, 0, sizeof kept);
    CHECK(skymem_sat_auth_on(&sat, &ring, NULL) == 0);
    n_sent = persist_calls = persist_fails = 0;
}

static skymem_route_t from_ground(uint16_t dst_sat, uint32_t request_id)
{
    skymem_route_t r;
    memset(&r, 0, sizeof r);
    r.dst_plane = 0, r.dst_sat = dst_sat, r.src_plane = SKYMEM_GROUND_PLANE, r.src_sat = 1;
    r.via_plane = SKYMEM_NO_SAT, r.via_sat = SKYMEM_NO_SAT, r.request_id = request_id, r.ttl = SKYMEM_DEFAULT_TTL;
    return r;
}

/* A NOOP for (0,dst) signed by the ground with sequence seq (0: unsigned); returns its length. */
static size_t noop(uint16_t dst, uint32_t request_id, uint64_t seq)
{
    skymem_route_t r = from_ground(dst, request_id);
    int len = skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    if (seq) len = skymem_auth_sign(&ground, 1, seq, pkt, (size_t)len, sizeof pkt);
    CHECK(len > 0);
    return (size_t)len;
}

/* The whole ground-link path of a runtime: from_ground, then accept and serve when it is ours. */
static int deliver_from_ground(size_t len, int *what)
{
    skymem_msg_t m;
    skymem_route_t r;
    CHECK(skymem_parse(pkt, len, &m) == SKYMEM_OK);
    r = m.route;
    *what = skymem_sat_from_ground(&sat, &m, pkt, len, &r);
    if (*what == SKYMEM_SAT_DROP) return 0;
    m.route = r;
    if (r.dst_plane != 0 || r.dst_sat != 1) return 0;
    if (!skymem_sat_accept(&sat, &m, pkt, len, 1)) return 0;
    skymem_sat_serve(&sat, &m);
    return 1;
}

static uint64_t now_seq(void) { return skymem_auth_seq_at(clock_us); }

/* Served and answered with a signed ACK; the counters say so. */
static void test_signed_command_served(void)
{
    int what;
    skymem_msg_t reply;
    setup();
    CHECK(deliver_from_ground(noop(1, 7, now_seq() + 1), &what) == 1);
    CHECK(what == SKYMEM_SAT_LEARN);
    CHECK(n_sent == 1 && sat.c.cmd_count == 1 && sat.c.auth_failures == 0);
    CHECK(skymem_parse(sent[0], sent_len[0], &reply) == SKYMEM_OK);
    CHECK(reply.reply_kind == SKYMEM_REPLY_ACK && reply.route.request_id == 7 && reply.auth != NULL);
    CHECK(skymem_auth_check_reply(&skymem_auth_find_key_for(&ground, 1, SKYMEM_KEY_DOWN)->mac, 1, sent[0],
                                  sent_len[0]) == SKYMEM_AUTH_OK);
}

/* Item 6: unsigned, forged and replayed commands are counted and get no answer at all. */
static void test_no_answer_to_unauthenticated(void)
{
    int what;
    size_t len;
    setup();
    CHECK(deliver_from_ground(noop(1, 1, 0), &what) == 0 && what == SKYMEM_SAT_DROP); /* unsigned */
    len = noop(1, 2, now_seq() + 1);
    pkt[len - 1] ^= 1; /* forged: a tag bit flipped, the checksum made right again */
    skymem_cmd_finalize(pkt, len);
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_DROP);
    len = noop(1, 3, now_seq() + 2);
    CHECK(deliver_from_ground(len, &what) == 1);
    n_sent = 0;
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_DROP); /* replayed */
    CHECK(n_sent == 0);
    CHECK(sat.c.auth_failures == 3 && sat.c.cmd_count == 1);
    { /* a malformed command for us: NAKed only when its tag verifies */
        skymem_route_t r;
        len = noop(1, 4, 0);
        CHECK(skymem_intact_data_cmd(pkt, len, &r));
        CHECK(skymem_sat_malformed(&sat, pkt, len, &r) == 0 && sat.c.auth_failures == 4);
        len = noop(1, 5, now_seq() + 3);
        CHECK(skymem_intact_data_cmd(pkt, len, &r));
        CHECK(skymem_sat_malformed(&sat, pkt, len, &r) == 1);
    }
}

/* Items 3 and 7: a ground command verifies only with the UP key of the satellite it is for, so one signed
 * for (0,2) is no good here even re-addressed to us; one for (0,2) entering here is relayed unverified when
 * it carries a known ground key id (its destination checks it), and dropped unsigned or under an unknown id;
 * nothing this satellite holds signs a ground command or verifies as another satellite's reply. */
static void test_keys_bind_destination_and_direction(void)
{
    static skymem_auth_t other; /* satellite (0,2)'s UP key, as the ground derives it */
    int what;
    size_t len;
    skymem_route_t r = from_ground(1, 21);
    setup();
    CHECK(load_sat_keys(&other, 0, 3, 3, 0, 2, UP02, DOWN02) == N_KEYS);
    /* signed for (0,2), the same bytes addressed to us: the tag was made with (0,2)'s UP key */
    len = (size_t)skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    len = (size_t)skymem_auth_sign(&other, 1, now_seq() + 1, pkt, len, sizeof pkt);
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_DROP && sat.c.auth_failures == 1);
    /* for (0,2), signed for it: relayed, not checked here, nothing learned, nothing counted */
    r = from_ground(2, 22);
    len = (size_t)skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    len = (size_t)skymem_auth_sign(&other, 1, now_seq() + 2, pkt, len, sizeof pkt);
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_RELAYED && sat.c.auth_failures == 1);
    CHECK(deliver_from_ground(noop(2, 23, 0), &what) == 0 && what == SKYMEM_SAT_DROP); /* unsigned: dropped */
    len = (size_t)skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    len = (size_t)skymem_auth_sign_with(&skymem_auth_find_key_for(&other, 1, SKYMEM_KEY_UP)->mac, 9, now_seq() + 3,
                                        pkt, len, sizeof pkt);
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_DROP && sat.c.auth_failures == 3); /* id 9 */
    /* direction: this satellite's DOWN key (what it signs with) does not make a ground command it accepts */
    r = from_ground(1, 24);
    len = (size_t)skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    len = (size_t)skymem_auth_sign_with(&skymem_auth_find_key_for(&ring, 1, SKYMEM_KEY_DOWN)->mac, 1, now_seq() + 4,
                                        pkt, len, sizeof pkt);
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_DROP && sat.c.auth_failures == 4);
    /* and its reply verifies only with its own DOWN key: not as (0,2)'s */
    CHECK(deliver_from_ground(noop(1, 25, now_seq() + 5), &what) == 1);
    CHECK(skymem_auth_check_reply(&skymem_auth_find_key_for(&ground, 1, SKYMEM_KEY_DOWN)->mac, 1, sent[n_sent - 1],
                                  sent_len[n_sent - 1]) == SKYMEM_AUTH_OK);
    CHECK(skymem_auth_check_reply(&skymem_auth_find_key_for(&other, 1, SKYMEM_KEY_DOWN)->mac, 1, sent[n_sent - 1],
                                  sent_len[n_sent - 1]) == SKYMEM_AUTH_E_BAD_MAC);
}

/* Item 2: only a command verified with this satellite as its destination teaches the station's address. */
static void test_learn_only_what_verifies_here(void)
{
    int what;
    setup();
    CHECK(deliver_from_ground(noop(2, 9, now_seq() + 1), &what) == 0); /* for (0,2): relayed */
    CHECK(what == SKYMEM_SAT_RELAYED);
    CHECK(deliver_from_ground(noop(1, 10, now_seq() + 2), &what) == 1 && what == SKYMEM_SAT_LEARN);
    /* keys off (an unkeyed constellation): everything teaches, as it always did */
    sat.auth = NULL;
    CHECK(deliver_from_ground(noop(2, 11, 0), &what) == 0 && what == SKYMEM_SAT_LEARN);
}

/* Item 4: a sequence more than SKYMEM_SAT_SEQ_AHEAD_US ahead is refused; what is accepted ahead of the clock
 * is kept in the floor file before it takes effect, and a restart starts past it. What is accepted on the
 * clock writes nothing: a restart's clock is past it, and a fresh command right after the restart is taken. */
static void test_bounded_sequences_and_floor(void)
{
    int what;
    size_t len;
    uint64_t ahead = SKYMEM_SAT_SEQ_AHEAD_US / SKYMEM_AUTH_SEQ_US;
    size_t on_clock;
    uint8_t recorded[SKYMEM_MAX_PACKET], ahead_pkt[SKYMEM_MAX_PACKET];
    setup();
    clock_us += 1000u;
    on_clock = noop(1, 9, now_seq()); /* signed as it arrived, by a station on the same clock */
    memcpy(recorded, pkt, on_clock);
    CHECK(deliver_from_ground(on_clock, &what) == 1);
    CHECK(persist_calls == 0); /* on the clock: nothing to keep */
    CHECK(deliver_from_ground(noop(1, 1, now_seq() + ahead + 1), &what) == 0 && what == SKYMEM_SAT_DROP);
    CHECK(sat.c.auth_failures == 1 && persist_calls == 1 && kept.n_ahead == 1); /* its window's refusal kept */
    CHECK(kept.mark == persisted && persisted < now_seq());
    len = noop(1, 2, now_seq() + ahead - 1); /* just inside: taken, and the mark written first */
    memcpy(ahead_pkt, pkt, len);
    CHECK(deliver_from_ground(len, &what) == 1);
    CHECK(persist_calls == 2 && persisted >= now_seq() + ahead - 1 && kept.n_ahead == 1);
    CHECK(deliver_from_ground(noop(1, 3, now_seq() + ahead - 2), &what) == 1);
    CHECK(persist_calls == 2); /* under the mark: no write */
    /* a restart 0.1 s later: the captured datagram, replayed, stays refused */
    clock_us += 100000u;
    sat.auth = NULL;
    CHECK(load_sat_keys(&ring, 0, 3, 3, 0, 1, UP01, DOWN01) == N_KEYS);
    CHECK(skymem_sat_auth_on(&sat, &ring, &kept) == 0);
    skymem_sat_init(&sat, &io, NULL), sat.auth = &ring, sat.floor_mark = ring.floor;
    memcpy(pkt, ahead_pkt, len); /* the one taken ahead, replayed: its sequence is still inside the ahead
                                   * bound of the new clock, so only the kept mark refuses it */
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_DROP);
    memcpy(pkt, recorded, on_clock); /* and the one it took on the clock, by the restart's clock */
    CHECK(deliver_from_ground(on_clock, &what) == 0 && what == SKYMEM_SAT_DROP);
    /* a restart after traffic on the clock only: a fresh command right after it is taken */
    clock_us += 2000000u;
    CHECK(deliver_from_ground(noop(1, 5, now_seq()), &what) == 1);
    clock_us += 50000u; /* 50 ms later, the node restarts with what it kept */
    CHECK(load_sat_keys(&ring, 0, 3, 3, 0, 1, UP01, DOWN01) == N_KEYS);
    CHECK(skymem_sat_auth_on(&sat, &ring, &kept) == 0);
    clock_us += 1000u; /* the station's next command, a millisecond later */
    CHECK(deliver_from_ground(noop(1, 6, now_seq()), &what) == 1 && sat.c.auth_failures == 2);
    /* a floor that cannot be written is said, and the command still served */
    persist_fails = 1;
    clock_us += 2000000u;
    CHECK(deliver_from_ground(noop(1, 4, now_seq() + 1), &what) == 1 && sat.floor_write_failed == 1);
}

/* A command satellite (0,2) -- the neighbour nb holds the keys of -- sends (0,1) over their link: built with
 * route flags `flags` from source (src_plane, src_sat) (a satellite beyond (0,2) when not (0,2) itself: the
 * link key is still (0,2)'s, the last hop's), signed by nb's link layer for (0,1). cc picks the body. */
static size_t from_neighbour(uint8_t cc, uint8_t flags, uint16_t src_plane, uint16_t src_sat, uint32_t request_id,
                             const uint8_t *hash, uint32_t n)
{
    skymem_route_t r;
    skymem_chunk_desc_t d;
    static uint8_t data[64];
    int len = -1;
    memset(&r, 0, sizeof r);
    r.dst_plane = 0, r.dst_sat = 1, r.src_plane = src_plane, r.src_sat = src_sat;
    r.via_plane = SKYMEM_NO_SAT, r.via_sat = SKYMEM_NO_SAT, r.request_id = request_id, r.ttl = SKYMEM_DEFAULT_TTL;
    r.flags = flags;
    switch (cc) {
    case SKYMEM_SET_CHUNK_CC:
        memset(data, (int)(n & 0xFFu), sizeof data);
        memset(&d, 0, sizeof d);
        memcpy(d.block_hash, hash, SKYMEM_BLOCK_HASH_LEN);
        d.chunk_id = n, d.chunk_count = n + 1u, d.data_len = sizeof data, d.crc32c = skymem_crc32c(data, sizeof data);
        len = skymem_build_set_chunk(pkt, sizeof pkt, 0, &r, &d, data);
        break;
    case SKYMEM_SET_PARAM_CC: len = skymem_build_set_param(pkt, sizeof pkt, 0, &r, 1, 5); break;
    case SKYMEM_GET_CHUNK_CC: len = skymem_build_get_chunk(pkt, sizeof pkt, 0, &r, hash, n); break;
    case SKYMEM_PROBE_CC: len = skymem_build_probe(pkt, sizeof pkt, 0, &r, hash, n); break;
    case SKYMEM_GET_CHUNKS_CC: len = skymem_build_get_chunks(pkt, sizeof pkt, 0, &r, hash, n, 1, 1); break;
    case SKYMEM_EVICT_BLOCK_CC: len = skymem_build_evict(pkt, sizeof pkt, 0, &r, hash, n, nb_radius); break;
    case SKYMEM_MIGRATE_CC: len = skymem_build_migrate(pkt, sizeof pkt, 0, &r, hash, 0, 1, 1, 0, 2); break;
    default: len = skymem_build_data_cmd(pkt, sizeof pkt, cc, 0, &r, NULL, 0); break;
    }
    CHECK(len > 0);
    len = skymem_link_prepare(&nb, 0, 0, 1, clock_us, pkt, (size_t)len, sizeof pkt);
    CHECK(len > 0);
    return len > 0 ? (size_t)len : 0;
}

/* Over a link: parse, then the core's own check (skymem_sat_accept, not checked before); served if it passes. */
static int deliver_over_link(skymem_sat_t *to, const uint8_t *p, size_t len)
{
    skymem_msg_t m;
    CHECK(skymem_parse(p, len, &m) == SKYMEM_OK);
    if (!skymem_sat_accept(to, &m, p, len, 0)) return 0;
    skymem_sat_serve(to, &m);
    return 1;
}

/* MIGRATE: the chunk leaves the core unsigned; the link layer signs it for the link to the target (what a
 * runtime's route_packet does); the target checks it with that link's key and answers, unsigned too, and
 * its link signs the ACK back. Only an authentic, fresh ACK deletes our copy. */
static void test_migrate_needs_an_authentic_ack(void)
{
    static skymem_sat_t tgt;
    static skymem_store_t *tstore;
    static uint8_t chunk[SKYMEM_MAX_PACKET];
    int what, rc;
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN], data[64], ack[512];
    skymem_chunk_meta_t meta;
    skymem_msg_t out, m;
    skymem_route_t r = from_ground(1, 20);
    int len;
    size_t chunk_len, ack_len;
    const uint8_t *got;
    size_t got_len;
    setup();
    /* the target, satellite (0,2), with its own store and keys (nb's file) */
    if (tstore) skymem_store_destroy(tstore);
    CHECK(skymem_store_create(&tstore, 1u << 20, 1024, skymem_sat_store_evicted, &tgt) == SKYMEM_STORE_OK);
    memset(&tgt, 0, sizeof tgt);
    tgt.plane = 0, tgt.sat = 2, tgt.planes = 3, tgt.sats = 3, tgt.altitude_m = 550000.0, tgt.store = tstore;
    skymem_sat_init(&tgt, &io, NULL);
    CHECK(skymem_sat_auth_on(&tgt, &nb, NULL) == 0);
    clock_us += 1000u; /* everything below is signed after both started */

    memset(hash, 0x44, sizeof hash), memset(data, 7, sizeof data), memset(&meta, 0, sizeof meta);
    meta.chunk_count = 1, meta.origin_ground = SKYMEM_NO_SAT, meta.crc32c = skymem_crc32c(data, sizeof data);
    CHECK(skymem_store_set(sat.store, hash, 0, &meta, data, sizeof data) == SKYMEM_STORE_OK);
    len = skymem_build_migrate(pkt, sizeof pkt, 0, &r, hash, 0, 1, 1, 0, 2);
    len = skymem_auth_sign(&ground, 1, now_seq() + 1, pkt, (size_t)len, sizeof pkt);
    CHECK(deliver_from_ground((size_t)len, &what) == 1);
    CHECK(n_sent == 1 && skymem_sat_migrations_active(&sat) == 1);
    /* out of the core: unsigned, for (0,2), flag MIGRATION */
    CHECK(skymem_parse(sent[0], sent_len[0], &out) == SKYMEM_OK && out.cc == SKYMEM_SET_CHUNK_CC && out.auth == NULL);
    CHECK(out.route.dst_plane == 0 && out.route.dst_sat == 2 && (out.route.flags & SKYMEM_RF_MIGRATION));
    CHECK(skymem_link_is_isl(sent[0], sent_len[0]) == 1);
    /* unsigned, the target refuses it (and stores nothing) */
    memcpy(chunk, sent[0], sent_len[0]);
    n_sent = 0;
    CHECK(deliver_over_link(&tgt, chunk, sent_len[0]) == 0 && tgt.c.auth_failures == 1 && n_sent == 0);
    /* the link layer of (0,1) signs it for (0,2): (0,1)'s link id in the trailer */
    rc = skymem_link_prepare(&ring, 0, 0, 2, clock_us, chunk, sent_len[0], sizeof chunk);
    CHECK(rc == (int)(sent_len[0] + SKYMEM_AUTH_TRAILER_LEN));
    chunk_len = rc > 0 ? (size_t)rc : 0;
    CHECK(skymem_parse(chunk, chunk_len, &out) == SKYMEM_OK && out.auth != NULL);
    CHECK(skymem_get_u32(out.auth + SKYMEM_AT_KEY_ID) == skymem_auth_link_id(0, 1));
    CHECK(skymem_cmd_checksum_ok(chunk, chunk_len));
    /* the target takes it: stored, counted, and an ACK for (0,1) -- unsigned, its link signs it */
    CHECK(deliver_over_link(&tgt, chunk, chunk_len) == 1);
    CHECK(tgt.c.migrated_in == 1 && tgt.c.auth_failures == 1 && n_sent == 1);
    CHECK(skymem_store_get(tstore, hash, 0, NULL, &got, &got_len) == SKYMEM_STORE_OK && got_len == sizeof data &&
          memcmp(got, data, sizeof data) == 0);
    CHECK(skymem_parse(sent[0], sent_len[0], &m) == SKYMEM_OK && m.reply_kind == SKYMEM_REPLY_ACK && m.auth == NULL);
    CHECK(m.route.dst_plane == 0 && m.route.dst_sat == 1 && m.route.src_plane == 0 && m.route.src_sat == 2);
    ack_len = sent_len[0];
    memcpy(ack, sent[0], ack_len);
    /* the same signed chunk again: a replay, refused */
    n_sent = 0;
    CHECK(deliver_over_link(&tgt, chunk, chunk_len) == 0 && tgt.c.auth_failures == 2 && n_sent == 0);
    CHECK(tgt.c.migrated_in == 1);

    /* the ACK as the target's core sent it, unsigned: ignored */
    CHECK(skymem_parse(ack, ack_len, &m) == SKYMEM_OK);
    skymem_sat_on_reply(&sat, &m, ack, ack_len);
    CHECK(sat.c.migrated_out == 0 && sat.c.auth_failures == 1);
    /* signed by the target's link for (0,1), one bit of it changed: ignored */
    rc = skymem_link_prepare(&nb, 0, 0, 1, clock_us, ack, ack_len, sizeof ack);
    CHECK(rc == (int)(ack_len + SKYMEM_AUTH_TRAILER_LEN));
    ack_len = rc > 0 ? (size_t)rc : 0;
    ack[ack_len - SKYMEM_AUTH_TRAILER_LEN - 1] ^= 0x10u;
    CHECK(skymem_parse(ack, ack_len, &m) == SKYMEM_OK);
    skymem_sat_on_reply(&sat, &m, ack, ack_len);
    CHECK(sat.c.migrated_out == 0 && sat.c.auth_failures == 2 && skymem_sat_migrations_active(&sat) == 1);
    /* as signed: our copy goes */
    ack[ack_len - SKYMEM_AUTH_TRAILER_LEN - 1] ^= 0x10u;
    CHECK(skymem_parse(ack, ack_len, &m) == SKYMEM_OK);
    skymem_sat_on_reply(&sat, &m, ack, ack_len);
    CHECK(sat.c.migrated_out == 1 && skymem_sat_migrations_active(&sat) == 0 && sat.c.auth_failures == 2);
    CHECK(skymem_store_peek(sat.store, hash, 0, NULL, NULL, NULL) == SKYMEM_STORE_E_NOT_FOUND);
    /* and replayed: refused */
    skymem_sat_on_reply(&sat, &m, ack, ack_len);
    CHECK(sat.c.auth_failures == 3);
    skymem_store_destroy(tstore);
    tstore = NULL;
}

/* A link key's scope (isl_may_carry): what satellites ask each other -- a migration's SET_CHUNK, a gossip
 * EVICT_BLOCK -- and nothing else. A reset, a parameter, a plain put, a read, ... signed with a valid link
 * key are refused: counted in auth_failures, nothing else changes, nothing is answered. */
static void test_link_key_scope(void)
{
    static const struct {
        uint8_t cc, flags;
    } refused[] = {
        {SKYMEM_RESET_COUNTERS_CC, 0}, {SKYMEM_SET_PARAM_CC, 0},       {SKYMEM_SET_CHUNK_CC, 0},
        {SKYMEM_GET_CHUNK_CC, 0},      {SKYMEM_NOOP_CC, 0},            {SKYMEM_STATS_CC, 0},
        {SKYMEM_EVICT_BLOCK_CC, 0},    {SKYMEM_MIGRATE_CC, 0},          {SKYMEM_PROBE_CC, 0},
        {SKYMEM_GET_CHUNKS_CC, 0},
        {SKYMEM_SET_CHUNK_CC, SKYMEM_RF_GOSSIP}, {SKYMEM_EVICT_BLOCK_CC, SKYMEM_RF_MIGRATION},
    };
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN], data[64];
    skymem_chunk_meta_t meta;
    skymem_store_info_t before, after;
    skymem_sat_counters_t c0;
    skymem_msg_t m;
    size_t i, len;
    uint32_t failures = 0;
    setup();
    clock_us += 1000u;
    memset(hash, 0x55, sizeof hash), memset(data, 9, sizeof data), memset(&meta, 0, sizeof meta);
    meta.chunk_count = 1, meta.origin_ground = SKYMEM_NO_SAT;
    meta.gossip_radius = 1; /* set with a gossip radius: a neighbour's gossip may purge it (D1) */
    CHECK(skymem_store_set(sat.store, hash, 0, &meta, data, sizeof data) == SKYMEM_STORE_OK);
    sat.c.cmd_count = 3, sat.c.err_count = 2, sat.c.migrated_out = 1; /* what a reset would clear */
    skymem_store_info(sat.store, &before);
    for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        /* from the neighbour itself, then from a satellite beyond it (the same link key: the last hop's) */
        int beyond;
        for (beyond = 0; beyond < 2; beyond++) {
            len = from_neighbour(refused[i].cc, refused[i].flags, beyond ? 1 : 0, 2, 100u + (uint32_t)i, hash, 0);
            CHECK(skymem_parse(pkt, len, &m) == SKYMEM_OK && m.auth != NULL);
            c0 = sat.c;
            n_sent = 0;
            last_log[0] = 0;
            if (deliver_over_link(&sat, pkt, len) != 0)
                fprintf(stderr, "  cc %u flags %u from a satellite: accepted\n", refused[i].cc, refused[i].flags);
            /* refused for its scope: its tag was right */
            CHECK(strstr(last_log, skymem_auth_strerror(SKYMEM_AUTH_E_KEY_SCOPE)) != NULL);
            failures++;
            CHECK_EQ_INT(sat.c.auth_failures, failures);
            CHECK(sat.c.cmd_count == c0.cmd_count && sat.c.err_count == c0.err_count &&
                  sat.c.migrated_in == c0.migrated_in && sat.c.migrated_out == c0.migrated_out);
            CHECK(n_sent == 0);
        }
    }
    skymem_store_info(sat.store, &after);
    CHECK(after.chunks == before.chunks && after.bytes_used == before.bytes_used);
    CHECK(skymem_store_peek(sat.store, hash, 0, NULL, NULL, NULL) == SKYMEM_STORE_OK);
    /* a satellite's command under a ground key: no link key of that id, refused */
    {
        skymem_route_t r;
        int n;
        memset(&r, 0, sizeof r);
        r.dst_plane = 0, r.dst_sat = 1, r.src_plane = 0, r.src_sat = 2, r.via_plane = r.via_sat = SKYMEM_NO_SAT;
        r.request_id = 150, r.ttl = SKYMEM_DEFAULT_TTL, r.flags = SKYMEM_RF_MIGRATION;
        n = skymem_build_evict(pkt, sizeof pkt, 0, &r, hash, 1, 0);
        n = skymem_auth_sign_with(&skymem_auth_find_key_for(&ground, 1, SKYMEM_KEY_UP)->mac, 1, now_seq() + 1, pkt,
                                  (size_t)n, sizeof pkt);
        CHECK(n > 0 && deliver_over_link(&sat, pkt, (size_t)n) == 0 && sat.c.auth_failures == ++failures);
    }
    /* unsigned, from a satellite: refused */
    {
        skymem_route_t r;
        int n;
        memset(&r, 0, sizeof r);
        r.dst_plane = 0, r.dst_sat = 1, r.src_plane = 0, r.src_sat = 2, r.via_plane = r.via_sat = SKYMEM_NO_SAT;
        r.request_id = 151, r.ttl = SKYMEM_DEFAULT_TTL, r.flags = SKYMEM_RF_GOSSIP;
        n = skymem_build_evict(pkt, sizeof pkt, 0, &r, hash, 1, 0);
        CHECK(n > 0 && deliver_over_link(&sat, pkt, (size_t)n) == 0 && sat.c.auth_failures == ++failures);
    }
    /* a migration's SET_CHUNK: taken, stored and answered (an ACK that leaves unsigned, for its link to sign) */
    c0 = sat.c;
    n_sent = 0;
    len = from_neighbour(SKYMEM_SET_CHUNK_CC, SKYMEM_RF_MIGRATION, 0, 2, 200, hash, 3);
    CHECK(deliver_over_link(&sat, pkt, len) == 1);
    CHECK(sat.c.auth_failures == failures && sat.c.migrated_in == c0.migrated_in + 1 && sat.c.cmd_count == c0.cmd_count + 1);
    CHECK(skymem_store_peek(sat.store, hash, 3, NULL, NULL, NULL) == SKYMEM_STORE_OK);
    CHECK(n_sent == 1 && skymem_parse(sent[0], sent_len[0], &m) == SKYMEM_OK && m.reply_kind == SKYMEM_REPLY_ACK &&
          m.auth == NULL && m.route.dst_plane == 0 && m.route.dst_sat == 2);
    /* and from beyond the neighbour, relayed by it */
    len = from_neighbour(SKYMEM_SET_CHUNK_CC, SKYMEM_RF_MIGRATION, 2, 2, 201, hash, 4);
    CHECK(deliver_over_link(&sat, pkt, len) == 1 && sat.c.migrated_in == c0.migrated_in + 2);
    /* a gossip EVICT_BLOCK: taken (radius 0: no further gossip, and no answer to a gossip) */
    n_sent = 0;
    len = from_neighbour(SKYMEM_EVICT_BLOCK_CC, SKYMEM_RF_GOSSIP, 0, 2, 202, hash, 77);
    CHECK(deliver_over_link(&sat, pkt, len) == 1 && n_sent == 0 && sat.c.auth_failures == failures);
    CHECK(skymem_store_peek(sat.store, hash, 0, NULL, NULL, NULL) == SKYMEM_STORE_E_NOT_FOUND);
    /* a ground command is still served (the refusals above changed nothing of the ground's) */
    {
        int what;
        CHECK(deliver_from_ground(noop(1, 203, now_seq() + 1), &what) == 1 && sat.c.auth_failures == failures);
    }
}

/* Eviction gossip leaves the core unsigned, one EVICT_BLOCK per neighbour; each is signed by the link it
 * leaves over and verifies at that neighbour, and only there. */
static void test_gossip_signed_per_link(void)
{
    static skymem_auth_t there[4];
    static uint8_t g[4][256];
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN];
    skymem_msg_t m;
    size_t len;
    int i, k, rc;
    skymem_chunk_meta_t meta;
    uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    setup();
    clock_us += 1000u;
    memset(hash, 0x66, sizeof hash);
    /* held here, set with gossip radius 3 (a block its eviction must reach 3 hops further) */
    memset(&meta, 0, sizeof meta);
    meta.chunk_count = 1, meta.gossip_radius = 3, meta.origin_ground = SKYMEM_NO_SAT;
    CHECK(skymem_store_set(sat.store, hash, 0, &meta, data, sizeof data) == SKYMEM_STORE_OK);
    /* radius 2 from (0,2): served here, passed on with radius 1 to each of our neighbours */
    n_sent = 0;
    {
        skymem_route_t r;
        int n;
        memset(&r, 0, sizeof r);
        r.dst_plane = 0, r.dst_sat = 1, r.src_plane = 0, r.src_sat = 2, r.via_plane = r.via_sat = SKYMEM_NO_SAT;
        r.request_id = 300, r.ttl = SKYMEM_DEFAULT_TTL, r.flags = SKYMEM_RF_GOSSIP;
        n = skymem_build_evict(pkt, sizeof pkt, 0, &r, hash, 0x1234, 2);
        rc = skymem_link_prepare(&nb, 0, 0, 1, clock_us, pkt, (size_t)n, sizeof pkt);
        CHECK(rc > 0);
        len = rc > 0 ? (size_t)rc : 0;
    }
    CHECK(deliver_over_link(&sat, pkt, len) == 1);
    CHECK_EQ_INT(n_sent, 4); /* (2,1), (1,1), (0,0), (0,2) */
    for (i = 0; i < 4 && i < n_sent; i++) {
        uint16_t to_p, to_s;
        CHECK(skymem_parse(sent[i], sent_len[i], &m) == SKYMEM_OK && m.cc == SKYMEM_EVICT_BLOCK_CC && m.auth == NULL);
        CHECK((m.route.flags & SKYMEM_RF_GOSSIP) && m.radius == 1);
        to_p = m.route.dst_plane, to_s = m.route.dst_sat;
        CHECK(load_sat_keys(&there[i], 0, 3, 3, to_p, to_s, UP01, DOWN01) == N_KEYS);
        memcpy(g[i], sent[i], sent_len[i]);
        rc = skymem_link_prepare(&ring, 0, to_p, to_s, clock_us, g[i], sent_len[i], sizeof g[i]);
        CHECK(rc == (int)(sent_len[i] + SKYMEM_AUTH_TRAILER_LEN));
        len = rc > 0 ? (size_t)rc : 0;
        /* verifies where it goes ... */
        for (k = 0; k < i; k++) /* ... and not at a neighbour it was not signed for */
            CHECK_EQ_INT(skymem_auth_verify(&there[k], g[i], len), SKYMEM_AUTH_E_BAD_MAC);
        CHECK_EQ_INT(skymem_auth_verify(&there[i], g[i], len), SKYMEM_AUTH_OK);
    }
}

/* M3: a ground command signed 5 s ahead of this satellite's clock is refused -- and it stays refused once the
 * clock has passed its sequence (recorded as seen when refused), so a command captured then cannot be played
 * later. Its window's refusal is kept (one floor write; the mark itself does not move). */
static void test_ahead_stays_refused(void)
{
    static uint8_t saved[SKYMEM_MAX_PACKET];
    uint64_t high;
    size_t len;
    int what, rc;
    setup();
    clock_us += 1000u;
    high = skymem_auth_high(&ring);
    len = noop(1, 40, now_seq() + 5000000u / SKYMEM_AUTH_SEQ_US);
    memcpy(saved, pkt, len);
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_DROP);
    CHECK(sat.c.auth_failures == 1 && sat.c.cmd_count == 0 && n_sent == 0 && persist_calls == 1);
    CHECK(skymem_auth_high(&ring) == high);
    /* 6 s later its sequence is in the past of the clock: still refused, for good */
    clock_us += 6000000u;
    memcpy(pkt, saved, len);
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_DROP);
    CHECK(sat.c.auth_failures == 2 && sat.c.cmd_count == 0 && n_sent == 0);
    rc = skymem_auth_verify(&ring, saved, len);
    CHECK(rc == SKYMEM_AUTH_E_REPLAY || rc == SKYMEM_AUTH_E_AHEAD);
    /* a command on the clock now: served */
    CHECK(deliver_from_ground(noop(1, 41, now_seq()), &what) == 1 && sat.c.cmd_count == 1);
}

/* The replay window of link traffic is the neighbour's that signed it: 600 packets claiming 600 different
 * sources, all through (0,2), open one window between them -- so they cannot recycle the others (which would
 * raise the floor and refuse the ground's traffic). */
static void test_link_window_per_neighbour(void)
{
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN];
    uint64_t floor0;
    uint32_t i, used = 0, link_windows = 0;
    int what, ok = 0;
    static uint8_t first[512];
    size_t first_len = 0;
    setup();
    clock_us += 1000u;
    floor0 = ring.floor;
    memset(hash, 0x77, sizeof hash);
    for (i = 0; i < 600; i++) {
        /* a gossip from a different (claimed) source each time, radius 0, each its own eviction */
        size_t len = from_neighbour(SKYMEM_EVICT_BLOCK_CC, SKYMEM_RF_GOSSIP, (uint16_t)(3u + i / 200u),
                                    (uint16_t)(i % 200u), 1000u + i, hash, 5000u + i);
        if (i == 0) memcpy(first, pkt, first_len = len);
        ok += deliver_over_link(&sat, pkt, len);
    }
    CHECK_EQ_INT(ok, 600);
    CHECK(sat.c.auth_failures == 0 && sat.c.cmd_count == 600 && n_sent == 0);
    CHECK(ring.floor == floor0);
    for (i = 0; i < SKYMEM_AUTH_SOURCES; i++) {
        if (!ring.windows[i].used) continue;
        used++;
        if (ring.windows[i].key_id == skymem_auth_link_id(0, 2) && ring.windows[i].src_plane == 0 &&
            ring.windows[i].src_sat == 2)
            link_windows++;
    }
    CHECK_EQ_INT(used, 1);
    CHECK_EQ_INT(link_windows, 1);
    /* the first of them, again: a replay in that one window */
    CHECK(deliver_over_link(&sat, first, first_len) == 0 && sat.c.auth_failures == 1);
    /* and the ground's command is still taken */
    CHECK(deliver_from_ground(noop(1, 50, now_seq() + 1), &what) == 1 && what == SKYMEM_SAT_LEARN);
    CHECK(sat.c.auth_failures == 1 && sat.c.cmd_count == 601);
}

/* The M3 residual of issue 53: a ground command refused 5 s ahead, the satellite restarted (with what it kept),
 * the same datagram sent again just before its time (inside the ahead bound then): refused. Its window keeps
 * refusing until the clock passes it; other stations' commands are taken right after the restart, and the
 * station's own once the clock has passed it. More windows than the file keeps fold into the mark. */
static void test_ahead_stays_refused_across_a_restart(void)
{
    static uint8_t saved[SKYMEM_MAX_PACKET];
    uint64_t seq, lease = SKYMEM_SAT_FLOOR_LEASE_US / SKYMEM_AUTH_SEQ_US;
    size_t len;
    int what;
    skymem_floor_t back;
    char text[SKYMEM_FLOOR_TEXT_MAX];
    uint32_t i;
    setup();
    clock_us += 1000u;
    seq = now_seq() + 5000000u / SKYMEM_AUTH_SEQ_US;
    len = noop(1, 50, seq);
    memcpy(saved, pkt, len);
    CHECK(deliver_from_ground(len, &what) == 0 && sat.c.auth_failures == 1);
    CHECK(persist_calls == 1 && kept.n_ahead == 1 && kept.ahead[0].seq == seq + lease);
    CHECK(kept.ahead[0].key_id == 1 && kept.ahead[0].src_plane == SKYMEM_GROUND_PLANE && kept.ahead[0].src_sat == 1);
    /* through the file's text, as a runtime writes and reads it */
    CHECK(skymem_floor_format(&kept, text, sizeof text) > 0);
    CHECK(skymem_floor_parse(text, strlen(text), &back) == 0 && back.n_ahead == 1 && back.ahead[0].seq == seq + lease);
    /* a resend ahead, under what is kept: no second write */
    CHECK(deliver_from_ground(noop(1, 51, seq - 10u), &what) == 0 && persist_calls == 1);
    /* restarted 4.5 s later: the datagram is 0.5 s ahead now, inside the bound */
    clock_us += 4500000u;
    CHECK(load_sat_keys(&ring, 0, 3, 3, 0, 1, UP01, DOWN01) == N_KEYS);
    skymem_sat_init(&sat, &io, NULL);
    CHECK(skymem_sat_auth_on(&sat, &ring, &back) == 0 && sat.n_ahead == 1);
    memcpy(pkt, saved, len);
    CHECK(deliver_from_ground(len, &what) == 0 && what == SKYMEM_SAT_DROP && sat.c.auth_failures == 1);
    CHECK(sat.c.cmd_count == 0);
    clock_us += 1000u; /* past the restart's floor, its clock */
    /* another station (2), on the clock: taken */
    {
        skymem_route_t r = from_ground(1, 52);
        int n;
        r.src_sat = 2;
        n = skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
        n = skymem_auth_sign(&ground, 1, now_seq(), pkt, (size_t)n, sizeof pkt);
        CHECK(n > 0 && deliver_from_ground((size_t)n, &what) == 1);
    }
    /* station 1 once the clock is past what was kept: taken */
    clock_us += 1000000u;
    CHECK(now_seq() > seq + lease);
    CHECK(deliver_from_ground(noop(1, 53, now_seq()), &what) == 1 && sat.c.cmd_count == 2);
    /* what the clock has passed is dropped at the next write; 17 windows refused ahead: 16 kept, the one the
     * clock reaches first folded into the mark */
    for (i = 0; i < SKYMEM_FLOOR_AHEAD_MAX + 1u; i++) {
        skymem_route_t r = from_ground(1, 60 + i);
        int n;
        r.src_sat = (uint16_t)(100 + i);
        n = skymem_build_data_cmd(pkt, sizeof pkt, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
        n = skymem_auth_sign(&ground, 1, now_seq() + 3000000u / SKYMEM_AUTH_SEQ_US + i, pkt, (size_t)n, sizeof pkt);
        CHECK(n > 0 && deliver_from_ground((size_t)n, &what) == 0);
    }
    CHECK(kept.n_ahead == SKYMEM_FLOOR_AHEAD_MAX && kept.mark == now_seq() + 3000000u / SKYMEM_AUTH_SEQ_US + lease);
    for (i = 0; i < kept.n_ahead; i++) CHECK(kept.ahead[i].src_sat != 100);
}

/* D1 of issue 53: a neighbour's gossip EVICT_BLOCK (what a captured satellite can send) purges only chunks the
 * ground set with a gossip radius, and passes on no further than their radius less one, or one hop holding none.
 * The ground's own EVICT_BLOCK purges the whole block. */
static void test_link_gossip_reach_bounded(void)
{
    uint8_t rec[SKYMEM_BLOCK_HASH_LEN], blk[SKYMEM_BLOCK_HASH_LEN], none[SKYMEM_BLOCK_HASH_LEN];
    uint8_t data[16] = {9};
    skymem_chunk_meta_t meta;
    skymem_msg_t m;
    int i, what;
    setup();
    clock_us += 1000u;
    memset(rec, 0x71, sizeof rec), memset(blk, 0x72, sizeof blk), memset(none, 0x73, sizeof none);
    memset(&meta, 0, sizeof meta);
    meta.chunk_count = 2, meta.origin_ground = SKYMEM_NO_SAT;
    CHECK(skymem_store_set(sat.store, rec, 0, &meta, data, sizeof data) == SKYMEM_STORE_OK); /* a record: radius 0 */
    meta.gossip_radius = 2;
    CHECK(skymem_store_set(sat.store, blk, 0, &meta, data, sizeof data) == SKYMEM_STORE_OK);
    CHECK(skymem_store_set(sat.store, blk, 1, &meta, data, sizeof data) == SKYMEM_STORE_OK);
    nb_radius = 200;
    /* the record: not purged; passed on as by a satellite holding none of it, radius 0 onwards */
    n_sent = 0;
    CHECK(deliver_over_link(&sat, pkt, from_neighbour(SKYMEM_EVICT_BLOCK_CC, SKYMEM_RF_GOSSIP, 0, 2, 1, rec, 81)) == 1);
    CHECK(skymem_store_peek(sat.store, rec, 0, NULL, NULL, NULL) == SKYMEM_STORE_OK);
    CHECK_EQ_INT(n_sent, 4);
    for (i = 0; i < 4 && i < n_sent; i++)
        CHECK(skymem_parse(sent[i], sent_len[i], &m) == SKYMEM_OK && m.radius == 0);
    /* a block held here with radius 2: purged, passed on with radius 1 (its neighbours get 0) */
    n_sent = 0;
    CHECK(deliver_over_link(&sat, pkt, from_neighbour(SKYMEM_EVICT_BLOCK_CC, SKYMEM_RF_GOSSIP, 0, 2, 2, blk, 82)) == 1);
    CHECK(skymem_store_peek(sat.store, blk, 0, NULL, NULL, NULL) == SKYMEM_STORE_E_NOT_FOUND);
    CHECK(skymem_store_peek(sat.store, blk, 1, NULL, NULL, NULL) == SKYMEM_STORE_E_NOT_FOUND);
    CHECK_EQ_INT(n_sent, 4);
    for (i = 0; i < 4 && i < n_sent; i++)
        CHECK(skymem_parse(sent[i], sent_len[i], &m) == SKYMEM_OK && m.radius == 0);
    /* radius 0 from the neighbour: nothing passed on */
    nb_radius = 0;
    n_sent = 0;
    CHECK(deliver_over_link(&sat, pkt, from_neighbour(SKYMEM_EVICT_BLOCK_CC, SKYMEM_RF_GOSSIP, 0, 2, 3, none, 83)) == 1);
    CHECK_EQ_INT(n_sent, 0);
    /* the ground's EVICT_BLOCK (its UP key) purges the record too, and answers */
    {
        skymem_route_t r = from_ground(1, 84);
        int n = skymem_build_evict(pkt, sizeof pkt, 0, &r, rec, 84, 0);
        n = skymem_auth_sign(&ground, 1, now_seq(), pkt, (size_t)n, sizeof pkt);
        n_sent = 0;
        CHECK(n > 0 && deliver_from_ground((size_t)n, &what) == 1 && n_sent == 1);
        CHECK(skymem_store_peek(sat.store, rec, 0, NULL, NULL, NULL) == SKYMEM_STORE_E_NOT_FOUND);
    }
}

/* R1 of issue 53: a migration's SET_CHUNK (from a neighbour) never replaces a chunk held here with other bytes:
 * NAK CONFLICT, the bytes kept. The same bytes again are taken (a resend); the ground may overwrite. */
static void test_migration_never_replaces_other_bytes(void)
{
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN], held[64], same[64];
    skymem_chunk_meta_t meta;
    skymem_msg_t m;
    const uint8_t *data;
    size_t dlen;
    setup();
    clock_us += 1000u;
    memset(hash, 0x81, sizeof hash), memset(held, 0xEE, sizeof held), memset(same, 6, sizeof same);
    memset(&meta, 0, sizeof meta);
    meta.chunk_count = 6, meta.origin_ground = SKYMEM_NO_SAT;
    CHECK(skymem_store_set(sat.store, hash, 5, &meta, held, sizeof held) == SKYMEM_STORE_OK);
    CHECK(skymem_store_set(sat.store, hash, 6, &meta, same, sizeof same) == SKYMEM_STORE_OK);
    n_sent = 0; /* chunk 5, 64 bytes of 5: other bytes */
    CHECK(deliver_over_link(&sat, pkt, from_neighbour(SKYMEM_SET_CHUNK_CC, SKYMEM_RF_MIGRATION, 0, 2, 90, hash, 5)) == 1);
    CHECK(n_sent == 1 && skymem_parse(sent[0], sent_len[0], &m) == SKYMEM_OK);
    CHECK(m.reply_kind == SKYMEM_REPLY_NAK && m.reply_status == SKYMEM_NAK_CONFLICT);
    CHECK(skymem_store_peek(sat.store, hash, 5, NULL, &data, &dlen) == SKYMEM_STORE_OK);
    CHECK(dlen == sizeof held && memcmp(data, held, dlen) == 0 && sat.c.migrated_in == 0);
    n_sent = 0; /* chunk 6, 64 bytes of 6: the very bytes held */
    CHECK(deliver_over_link(&sat, pkt, from_neighbour(SKYMEM_SET_CHUNK_CC, SKYMEM_RF_MIGRATION, 0, 2, 91, hash, 6)) == 1);
    CHECK(n_sent == 1 && skymem_parse(sent[0], sent_len[0], &m) == SKYMEM_OK && m.reply_kind == SKYMEM_REPLY_ACK);
    CHECK(sat.c.migrated_in == 1);
    n_sent = 0; /* a chunk not held: taken */
    CHECK(deliver_over_link(&sat, pkt, from_neighbour(SKYMEM_SET_CHUNK_CC, SKYMEM_RF_MIGRATION, 0, 2, 92, hash, 7)) == 1);
    CHECK(n_sent == 1 && skymem_parse(sent[0], sent_len[0], &m) == SKYMEM_OK && m.reply_kind == SKYMEM_REPLY_ACK);
}

int main(void)
{
    test_signed_command_served();
    test_no_answer_to_unauthenticated();
    test_learn_only_what_verifies_here();
    test_keys_bind_destination_and_direction();
    test_bounded_sequences_and_floor();
    test_migrate_needs_an_authentic_ack();
    test_link_key_scope();
    test_gossip_signed_per_link();
    test_ahead_stays_refused();
    test_link_window_per_neighbour();
    test_ahead_stays_refused_across_a_restart();
    test_link_gossip_reach_bounded();
    test_migration_never_replaces_other_bytes();
    return check_report("sat");
}
