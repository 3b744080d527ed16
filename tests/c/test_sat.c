/* test_sat.c -- skymem_core's command handling (skymem_sat.c) through a test io: what both runtimes
 * run. A 3x3 satellite (0,1) with keys on; packets are built and signed with the real codec and tag. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "skymem_crc32c.h"
#include "skymem_sat.h"

/* ---- the test io: records what is sent, a settable clock, a floor "file" ---------------- */
static uint8_t sent[8][SKYMEM_MAX_PACKET];
static size_t sent_len[8];
static int n_sent, persist_calls, persist_fails;
static uint64_t clock_us = 1700000000000000ull, persisted;

static void io_send(void *ctx, uint8_t *pkt, size_t len, const skymem_route_t *r, int is_reply)
{
    (void)ctx, (void)r, (void)is_reply;
    if (n_sent < 8) {
        memcpy(sent[n_sent], pkt, len);
        sent_len[n_sent] = len;
    }
    n_sent++;
}
static uint64_t io_clock(void *ctx) { return (void)ctx, clock_us; }
static uint64_t io_mono(void *ctx) { return (void)ctx, clock_us / 1000u; }
static void io_tlm(void *ctx, uint32_t *s, uint16_t *sub) { (void)ctx, *s = 1, *sub = 0; }
static uint8_t io_param(void *ctx, uint16_t id, uint32_t v) { return (void)ctx, (void)v, id == 1 ? 0 : SKYMEM_NAK_BAD_PARAM; }
static int io_persist(void *ctx, uint64_t mark)
{
    (void)ctx;
    persist_calls++;
    if (persist_fails) return -1;
    persisted = mark;
    return 0;
}
static const skymem_sat_io_t io = {io_send, io_clock, io_mono, io_tlm, NULL, io_param, NULL, NULL, io_persist};

static skymem_sat_t sat;
static skymem_auth_t ring, ground;
/* satellite (0,1)'s file; the ground here holds the same UP and DOWN keys (skymem_auth_sign picks by direction) */
static const char keys[] = "skymem-keys 3 satellite 0 1\nisl 0 000102030405060708090a0b0c0d0e0f\n"
                           "up 1 101112131415161718191a1b1c1d1e1f\ndown 1 202122232425262728292a2b2c2d2e2f\n";
static uint8_t pkt[SKYMEM_MAX_PACKET];

static void setup(void)
{
    char err[64];
    static skymem_store_t *store;
    if (store) skymem_store_destroy(store);
    CHECK(skymem_store_create(&store, 1u << 20, 1024, skymem_sat_store_evicted, &sat) == SKYMEM_STORE_OK);
    memset(&sat, 0, sizeof sat);
    sat.plane = 0, sat.sat = 1, sat.planes = 3, sat.sats = 3, sat.altitude_m = 550000.0, sat.store = store;
    skymem_sat_init(&sat, &io, NULL);
    skymem_auth_init(&ring, 0);
    CHECK(skymem_auth_load_text(&ring, keys, sizeof keys - 1, err, sizeof err) == 3);
    skymem_auth_init(&ground, 0);
    CHECK(skymem_auth_load_text(&ground, keys, sizeof keys - 1, err, sizeof err) == 3);
    persisted = 0;
    CHECK(skymem_sat_auth_on(&sat, &ring, 0) == 0);
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
    static const char other_keys[] = "skymem-keys 3 satellite 0 2\nisl 0 000102030405060708090a0b0c0d0e0f\n"
                                     "up 1 303132333435363738393a3b3c3d3e3f\ndown 1 404142434445464748494a4b4c4d4e4f\n";
    char err[64];
    int what;
    size_t len;
    skymem_route_t r = from_ground(1, 21);
    setup();
    skymem_auth_init(&other, 0);
    CHECK(skymem_auth_load_text(&other, other_keys, sizeof other_keys - 1, err, sizeof err) == 3);
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
    CHECK(sat.c.auth_failures == 1 && persist_calls == 0);
    len = noop(1, 2, now_seq() + ahead - 1); /* just inside: taken, and the mark written first */
    memcpy(ahead_pkt, pkt, len);
    CHECK(deliver_from_ground(len, &what) == 1);
    CHECK(persist_calls == 1 && persisted >= now_seq() + ahead - 1);
    CHECK(deliver_from_ground(noop(1, 3, now_seq() + ahead - 2), &what) == 1);
    CHECK(persist_calls == 1); /* under the mark: no write */
    /* a restart 0.1 s later: the captured datagram, replayed, stays refused */
    clock_us += 100000u;
    sat.auth = NULL;
    skymem_auth_init(&ring, 0);
    {
        char err[64];
        CHECK(skymem_auth_load_text(&ring, keys, sizeof keys - 1, err, sizeof err) == 3);
    }
    CHECK(skymem_sat_auth_on(&sat, &ring, persisted) == 0);
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
    skymem_auth_init(&ring, 0);
    {
        char err[64];
        CHECK(skymem_auth_load_text(&ring, keys, sizeof keys - 1, err, sizeof err) == 3);
    }
    CHECK(skymem_sat_auth_on(&sat, &ring, persisted) == 0);
    clock_us += 1000u; /* the station's next command, a millisecond later */
    CHECK(deliver_from_ground(noop(1, 6, now_seq()), &what) == 1 && sat.c.auth_failures == 2);
    /* a floor that cannot be written is said, and the command still served */
    persist_fails = 1;
    clock_us += 2000000u;
    CHECK(deliver_from_ground(noop(1, 4, now_seq() + 1), &what) == 1 && sat.floor_write_failed == 1);
}

/* MIGRATE: a chunk goes out signed with key 0; only an authentic ACK deletes our copy. */
static void test_migrate_needs_an_authentic_ack(void)
{
    int what;
    uint8_t hash[SKYMEM_BLOCK_HASH_LEN], data[64], ack[256];
    skymem_chunk_meta_t meta;
    skymem_msg_t out, m;
    skymem_route_t r = from_ground(1, 20), ar;
    int len;
    setup();
    memset(hash, 0x44, sizeof hash), memset(data, 7, sizeof data), memset(&meta, 0, sizeof meta);
    meta.chunk_count = 1, meta.origin_ground = SKYMEM_NO_SAT;
    CHECK(skymem_store_set(sat.store, hash, 0, &meta, data, sizeof data) == SKYMEM_STORE_OK);
    len = skymem_build_migrate(pkt, sizeof pkt, 0, &r, hash, 0, 1, 1, 0, 2);
    len = skymem_auth_sign(&ground, 1, now_seq() + 1, pkt, (size_t)len, sizeof pkt);
    CHECK(deliver_from_ground((size_t)len, &what) == 1);
    CHECK(n_sent == 1 && skymem_sat_migrations_active(&sat) == 1);
    CHECK(skymem_parse(sent[0], sent_len[0], &out) == SKYMEM_OK && out.cc == SKYMEM_SET_CHUNK_CC && out.auth != NULL);
    memset(&ar, 0, sizeof ar);
    ar.dst_plane = 0, ar.dst_sat = 1, ar.src_plane = 0, ar.src_sat = 2, ar.via_plane = ar.via_sat = SKYMEM_NO_SAT;
    ar.request_id = out.route.request_id, ar.ttl = SKYMEM_DEFAULT_TTL;
    len = skymem_build_reply(ack, sizeof ack, 0, 0, 0, &ar, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 0, 1, hash, 32);
    CHECK(skymem_parse(ack, (size_t)len, &m) == SKYMEM_OK);
    skymem_sat_on_reply(&sat, &m, ack, (size_t)len); /* unsigned: ignored */
    CHECK(sat.c.migrated_out == 0 && sat.c.auth_failures == 1);
    len = skymem_auth_sign(&ground, 0, now_seq() + 2, ack, (size_t)len, sizeof ack);
    CHECK(skymem_parse(ack, (size_t)len, &m) == SKYMEM_OK);
    skymem_sat_on_reply(&sat, &m, ack, (size_t)len);
    CHECK(sat.c.migrated_out == 1 && skymem_sat_migrations_active(&sat) == 0);
    CHECK(skymem_store_peek(sat.store, hash, 0, NULL, NULL, NULL) == SKYMEM_STORE_E_NOT_FOUND);
}

int main(void)
{
    test_signed_command_served();
    test_no_answer_to_unauthenticated();
    test_learn_only_what_verifies_here();
    test_keys_bind_destination_and_direction();
    test_bounded_sequences_and_floor();
    test_migrate_needs_an_authentic_ack();
    return check_report("sat");
}
