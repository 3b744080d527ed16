/* test_link.c -- hop-by-hop authentication of satellite-to-satellite traffic (skymem_link.h, skymem_auth.h):
 * per-link keys from version 4 key files, signing and checking across two rings, what a relay does
 * (skymem_link_prepare: check the last hop, strip, sign for the next), what may go onto a link at all,
 * sequences ahead of the clock, and one replay window per signing neighbour.
 *
 * The constellation is 3x3; north/south change the plane, west/east the sat. Satellite (0,1)'s neighbours
 * are (2,1), (1,1), (0,0) and (0,2); (0,2)'s are (2,2), (1,2), (0,1) and (0,0). */
#include <string.h>

#include "check.h"
#include "link_keys.h"
#include "skymem_codec.h"
#include "skymem_link.h"

#define UP "101112131415161718191a1b1c1d1e1f"
#define DOWN "202122232425262728292a2b2c2d2e2f"
#define T0 1700000000000000ull /* the clock of these tests, Unix microseconds */

static skymem_auth_t A, B, C, D, F; /* (0,1), (0,2), (1,1), (2,2), (1,2) */

static void load_all(void)
{
    CHECK_EQ_INT(load_sat_keys(&A, 0, 3, 3, 0, 1, UP, DOWN), 10);
    CHECK_EQ_INT(load_sat_keys(&B, 0, 3, 3, 0, 2, UP, DOWN), 10);
    CHECK_EQ_INT(load_sat_keys(&C, 0, 3, 3, 1, 1, UP, DOWN), 10);
    CHECK_EQ_INT(load_sat_keys(&D, 0, 3, 3, 2, 2, UP, DOWN), 10);
    CHECK_EQ_INT(load_sat_keys(&F, 0, 3, 3, 1, 2, UP, DOWN), 10);
}

static skymem_route_t route(uint16_t dp, uint16_t ds, uint16_t sp, uint16_t ss, uint8_t flags, uint32_t request_id)
{
    skymem_route_t r;
    memset(&r, 0, sizeof r);
    r.dst_plane = dp, r.dst_sat = ds, r.src_plane = sp, r.src_sat = ss;
    r.via_plane = SKYMEM_NO_SAT, r.via_sat = SKYMEM_NO_SAT, r.request_id = request_id, r.ttl = SKYMEM_DEFAULT_TTL;
    r.flags = flags;
    return r;
}

/* A migration's SET_CHUNK from (sp,ss) to (dp,ds), unsigned; returns its length. */
static size_t migration_chunk(uint8_t *buf, size_t cap, uint16_t dp, uint16_t ds, uint16_t sp, uint16_t ss, uint32_t id)
{
    skymem_route_t r = route(dp, ds, sp, ss, SKYMEM_RF_MIGRATION, id);
    skymem_chunk_desc_t d;
    uint8_t data[100];
    int len;
    memset(data, (int)(id & 0xFFu), sizeof data);
    memset(&d, 0, sizeof d);
    memset(d.block_hash, 0x5C, sizeof d.block_hash);
    d.chunk_id = id, d.chunk_count = id + 1u, d.data_len = sizeof data;
    len = skymem_build_set_chunk(buf, cap, 3, &r, &d, data);
    CHECK(len > 0);
    return len > 0 ? (size_t)len : 0;
}

/* A gossip EVICT_BLOCK from (sp,ss) to (dp,ds), unsigned. */
static size_t gossip_evict(uint8_t *buf, size_t cap, uint16_t dp, uint16_t ds, uint16_t sp, uint16_t ss, uint32_t id)
{
    skymem_route_t r = route(dp, ds, sp, ss, SKYMEM_RF_GOSSIP, id);
    uint8_t hash[32];
    int len;
    memset(hash, 0x42, sizeof hash);
    len = skymem_build_evict(buf, cap, 5, &r, hash, id, 0);
    CHECK(len > 0);
    return len > 0 ? (size_t)len : 0;
}

static uint32_t trailer_key(const uint8_t *pkt, size_t len)
{
    return skymem_get_u32(pkt + len - SKYMEM_AUTH_TRAILER_LEN + SKYMEM_AT_KEY_ID);
}

static uint32_t windows_used(const skymem_auth_t *a)
{
    uint32_t i, n = 0;
    for (i = 0; i < SKYMEM_AUTH_SOURCES; i++) n += a->windows[i].used != 0;
    return n;
}

/* Which packets travel satellite to satellite (signed per link), which have a ground station at one end. */
static void test_is_isl(void)
{
    uint8_t buf[512];
    skymem_route_t r;
    int len;
    len = (int)gossip_evict(buf, sizeof buf, 0, 2, 0, 1, 1);
    CHECK_EQ_INT(skymem_link_is_isl(buf, (size_t)len), 1);
    r = route(0, 2, SKYMEM_GROUND_PLANE, 7, 0, 2); /* a station's command */
    len = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    CHECK_EQ_INT(skymem_link_is_isl(buf, (size_t)len), 0);
    r = route(SKYMEM_GROUND_PLANE, 7, 0, 2, 0, 3); /* a reply to a station */
    len = skymem_build_reply(buf, sizeof buf, 0, 0, 0, &r, SKYMEM_REPLY_ACK, SKYMEM_NOOP_CC, 0, 0, 0, NULL, 0);
    CHECK_EQ_INT(skymem_link_is_isl(buf, (size_t)len), 0);
    r = route(0, 1, 0, 2, 0, 4); /* a migration's ACK */
    len = skymem_build_reply(buf, sizeof buf, 0, 0, 0, &r, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 0, 1, NULL, 0);
    CHECK_EQ_INT(skymem_link_is_isl(buf, (size_t)len), 1);
    len = skymem_build_cmd(buf, sizeof buf, SKYMEM_CMD_MID, SKYMEM_NOOP_CC, 0, NULL, 0); /* control: no route */
    CHECK_EQ_INT(skymem_link_is_isl(buf, (size_t)len), -1);
    CHECK_EQ_INT(skymem_link_is_isl(buf, 3), -1);
    CHECK_EQ_INT(skymem_link_is_isl(NULL, 0), -1);
}

/* A's LINK_OUT key for B is B's LINK_IN key for A: a packet A signs for B verifies at B, under A's link id,
 * once; not at C, another neighbour of A (its link from A has its own key), not at D (no link with A), not
 * at A itself; and B's key for A is another one (one per direction). */
static void test_sign_verify_across_rings(void)
{
    uint8_t buf[512], copy[512], t1[32], t2[32];
    size_t n;
    int len;
    skymem_route_t r;
    skymem_msg_t m;
    load_all();
    /* the two ends of one link hold one key; the other direction's differs */
    n = gossip_evict(buf, sizeof buf, 0, 2, 0, 1, 10);
    skymem_auth_mac(&skymem_auth_find_key_for(&A, skymem_auth_link_id(0, 2), SKYMEM_KEY_LINK_OUT)->mac, buf, n, t1);
    skymem_auth_mac(&skymem_auth_find_key_for(&B, skymem_auth_link_id(0, 1), SKYMEM_KEY_LINK_IN)->mac, buf, n, t2);
    CHECK(memcmp(t1, t2, 32) == 0);
    skymem_auth_mac(&skymem_auth_find_key_for(&B, skymem_auth_link_id(0, 1), SKYMEM_KEY_LINK_OUT)->mac, buf, n, t2);
    CHECK(memcmp(t1, t2, 32) != 0);
    skymem_auth_mac(&skymem_auth_find_key_for(&A, skymem_auth_link_id(1, 1), SKYMEM_KEY_LINK_OUT)->mac, buf, n, t2);
    CHECK(memcmp(t1, t2, 32) != 0);

    len = skymem_link_sign(&A, 0, 2, 5000, buf, n, sizeof buf);
    CHECK_EQ_INT(len, (int)(n + SKYMEM_AUTH_TRAILER_LEN));
    CHECK(trailer_key(buf, (size_t)len) == skymem_auth_link_id(0, 1)); /* whose link signed it: the sender's */
    CHECK(skymem_parse(buf, (size_t)len, &m) == SKYMEM_OK && m.auth != NULL && (m.route.flags & SKYMEM_RF_AUTH));
    CHECK(skymem_cmd_checksum_ok(buf, (size_t)len));
    memcpy(copy, buf, (size_t)len);
    /* a relay rewriting via, ttl and hops keeps it valid */
    r = m.route;
    r.via_plane = 2, r.via_sat = 2, r.ttl = 9, r.hops = 3;
    CHECK_EQ_INT(skymem_rewrite_route(copy, (size_t)len, &r), SKYMEM_OK);
    CHECK_EQ_INT(skymem_auth_verify(&C, buf, (size_t)len), SKYMEM_AUTH_E_BAD_MAC);     /* another link of A's */
    CHECK_EQ_INT(skymem_auth_verify(&D, buf, (size_t)len), SKYMEM_AUTH_E_UNKNOWN_KEY); /* not A's neighbour */
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)len), SKYMEM_AUTH_E_UNKNOWN_KEY); /* nobody signs as us */
    CHECK_EQ_INT(skymem_auth_verify(&B, copy, (size_t)len), SKYMEM_AUTH_OK);
    CHECK_EQ_INT(skymem_auth_verify(&B, buf, (size_t)len), SKYMEM_AUTH_E_REPLAY);
    /* the payload, a flag, the source: covered */
    n = gossip_evict(buf, sizeof buf, 0, 2, 0, 1, 11);
    len = skymem_link_sign(&A, 0, 2, 5001, buf, n, sizeof buf);
    memcpy(copy, buf, (size_t)len);
    copy[len - SKYMEM_AUTH_TRAILER_LEN - 3] ^= 1u;
    CHECK_EQ_INT(skymem_auth_verify(&B, copy, (size_t)len), SKYMEM_AUTH_E_BAD_MAC);
    memcpy(copy, buf, (size_t)len);
    copy[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_SRC_SAT + 1] ^= 2u; /* claims (0,3): the tag says otherwise */
    CHECK_EQ_INT(skymem_auth_verify(&B, copy, (size_t)len), SKYMEM_AUTH_E_BAD_MAC);
    memcpy(copy, buf, (size_t)len);
    copy[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_FLAGS] ^= SKYMEM_RF_MIGRATION;
    CHECK_EQ_INT(skymem_auth_verify(&B, copy, (size_t)len), SKYMEM_AUTH_E_BAD_MAC);
    CHECK_EQ_INT(skymem_auth_verify(&B, buf, (size_t)len), SKYMEM_AUTH_OK); /* the forgeries cost it nothing */
    /* and the other way: B's migration ACK for A, under B's link id */
    r = route(0, 1, 0, 2, 0, 12);
    len = skymem_build_reply(buf, sizeof buf, 0, 1, 2, &r, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 0, 1, NULL, 0);
    len = skymem_link_sign(&B, 0, 1, 5002, buf, (size_t)len, sizeof buf);
    CHECK(len > 0 && trailer_key(buf, (size_t)len) == skymem_auth_link_id(0, 2));
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)len), SKYMEM_AUTH_OK);
    CHECK_EQ_INT(skymem_auth_verify(&F, buf, (size_t)len), SKYMEM_AUTH_E_BAD_MAC); /* (1,2): B's other link */
    /* what cannot be link-signed: a station's command, a packet signed already, a link to a non-neighbour,
     * no room for the trailer */
    r = route(0, 2, SKYMEM_GROUND_PLANE, 7, 0, 13);
    len = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    CHECK_EQ_INT(skymem_link_sign(&A, 0, 2, 5003, buf, (size_t)len, sizeof buf), SKYMEM_AUTH_E_ARG);
    n = gossip_evict(buf, sizeof buf, 2, 2, 0, 1, 14);
    CHECK_EQ_INT(skymem_link_sign(&A, 2, 2, 5004, buf, n, sizeof buf), SKYMEM_AUTH_E_UNKNOWN_KEY);
    CHECK_EQ_INT(skymem_link_sign(&A, 0, 1, 5004, buf, n, sizeof buf), SKYMEM_AUTH_E_UNKNOWN_KEY); /* itself */
    CHECK_EQ_INT(skymem_link_sign(&A, 0, 2, 5004, buf, n, n + SKYMEM_AUTH_TRAILER_LEN - 1), SKYMEM_AUTH_E_ARG);
    len = skymem_link_sign(&A, 0, 2, 5004, buf, n, sizeof buf);
    CHECK(len > 0);
    CHECK_EQ_INT(skymem_link_sign(&A, 0, 2, 5005, buf, (size_t)len, sizeof buf), SKYMEM_AUTH_E_ARG);
    /* a ground key id on a satellite's packet: out of scope even for a ring holding it for every use */
    {
        static skymem_auth_t tool;
        uint8_t k[16];
        memset(k, 0x77, sizeof k);
        skymem_auth_init(&tool, 0);
        skymem_auth_add_key(&tool, 1, k, sizeof k);
        n = gossip_evict(buf, sizeof buf, 0, 2, 0, 1, 15);
        len = skymem_auth_sign(&tool, 1, 5006, buf, n, sizeof buf);
        CHECK(len > 0);
        CHECK_EQ_INT(skymem_auth_verify(&tool, buf, (size_t)len), SKYMEM_AUTH_E_KEY_SCOPE);
        CHECK_EQ_INT(skymem_auth_verify(&B, buf, (size_t)len), SKYMEM_AUTH_E_UNKNOWN_KEY);
    }
}

/* skymem_auth_strip gives back the packet as it was before signing: bytes, length field, checksum. */
static void test_strip(void)
{
    uint8_t orig[512], buf[512];
    size_t n;
    int len;
    skymem_route_t r;
    load_all();
    n = migration_chunk(orig, sizeof orig, 0, 2, 0, 1, 20);
    memcpy(buf, orig, n);
    len = skymem_link_sign(&A, 0, 2, 6000, buf, n, sizeof buf);
    CHECK(len > 0 && memcmp(buf, orig, n) != 0);
    CHECK_EQ_INT(skymem_auth_strip(buf, (size_t)len), (int)n);
    CHECK(memcmp(buf, orig, n) == 0);
    CHECK(skymem_cmd_checksum_ok(buf, n));
    CHECK_EQ_INT(skymem_auth_strip(buf, n), SKYMEM_AUTH_E_NO_TRAILER); /* unsigned now */
    /* a reply too (no checksum there) */
    r = route(0, 1, 0, 2, 0, 21);
    len = skymem_build_reply(orig, sizeof orig, 0, 1, 2, &r, SKYMEM_REPLY_NAK, SKYMEM_SET_CHUNK_CC, 4, 0, 0, NULL, 0);
    n = (size_t)len;
    memcpy(buf, orig, n);
    len = skymem_link_sign(&B, 0, 1, 6001, buf, n, sizeof buf);
    CHECK_EQ_INT(skymem_auth_strip(buf, (size_t)len), (int)n);
    CHECK(memcmp(buf, orig, n) == 0);
    len = skymem_build_cmd(buf, sizeof buf, SKYMEM_CMD_MID, SKYMEM_NOOP_CC, 0, NULL, 0);
    CHECK_EQ_INT(skymem_auth_strip(buf, (size_t)len), SKYMEM_AUTH_E_NO_TRAILER);
}

/* A relay, B: what came from A over their link is checked with that link's key (and B's window for A,
 * and B's clock), its trailer removed, and signed again for the link to the next hop F. F sees B's link id
 * and the same packet. A forged or replayed one goes no further. */
static void test_prepare_relayed(void)
{
    static uint8_t orig[512], buf[512], copy[512], fresh[512];
    size_t n, fresh_len;
    int len, rc;
    uint64_t now = T0;
    uint32_t used;
    skymem_msg_t m;
    load_all();
    /* A's own packet (a migration chunk for F = (1,2), by way of B): its link signs it */
    n = migration_chunk(orig, sizeof orig, 1, 2, 0, 1, 30);
    memcpy(buf, orig, n);
    len = skymem_link_prepare(&A, 0, 0, 2, now, buf, n, sizeof buf);
    CHECK_EQ_INT(len, (int)(n + SKYMEM_AUTH_TRAILER_LEN));
    CHECK(trailer_key(buf, (size_t)len) == skymem_auth_link_id(0, 1));
    memcpy(copy, buf, (size_t)len); /* what an eavesdropper on link A->B kept */
    /* relayed by B toward F */
    now += 1000u;
    rc = skymem_link_prepare(&B, 1, 1, 2, now, buf, (size_t)len, sizeof buf);
    CHECK_EQ_INT(rc, len); /* one trailer off, one on */
    CHECK(trailer_key(buf, (size_t)rc) == skymem_auth_link_id(0, 2));
    CHECK(skymem_parse(buf, (size_t)rc, &m) == SKYMEM_OK && m.auth != NULL && m.cc == SKYMEM_SET_CHUNK_CC);
    CHECK(m.route.src_plane == 0 && m.route.src_sat == 1 && (m.route.flags & SKYMEM_RF_MIGRATION));
    CHECK(skymem_cmd_checksum_ok(buf, (size_t)rc));
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)rc), SKYMEM_AUTH_E_BAD_MAC);     /* B's link to A: another key */
    CHECK_EQ_INT(skymem_auth_verify(&C, buf, (size_t)rc), SKYMEM_AUTH_E_UNKNOWN_KEY); /* (1,1): no link with B */
    CHECK_EQ_INT(skymem_auth_verify(&F, buf, (size_t)rc), SKYMEM_AUTH_OK);            /* where it was signed for */
    CHECK_EQ_INT(skymem_auth_strip(buf, (size_t)rc), (int)n);
    CHECK(memcmp(buf, orig, n) == 0); /* the same packet, hop after hop */
    /* replayed into B: refused, nothing goes on */
    memcpy(buf, copy, (size_t)len);
    CHECK_EQ_INT(skymem_link_prepare(&B, 1, 1, 2, now, buf, (size_t)len, sizeof buf), SKYMEM_AUTH_E_REPLAY);
    /* forged: refused, and a forgery does not use up the sequence of the real one */
    n = migration_chunk(orig, sizeof orig, 1, 2, 0, 1, 31);
    memcpy(fresh, orig, n);
    len = skymem_link_prepare(&A, 0, 0, 2, now, fresh, n, sizeof fresh);
    fresh_len = (size_t)len;
    memcpy(buf, fresh, fresh_len);
    buf[fresh_len - SKYMEM_AUTH_TRAILER_LEN - 1] ^= 0x80u;
    CHECK_EQ_INT(skymem_link_prepare(&B, 1, 1, 2, now, buf, fresh_len, sizeof buf), SKYMEM_AUTH_E_BAD_MAC);
    memcpy(buf, fresh, fresh_len);
    buf[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_DST_SAT + 1] ^= 1u; /* sent elsewhere: (1,3) */
    CHECK_EQ_INT(skymem_link_prepare(&B, 1, 1, 2, now, buf, fresh_len, sizeof buf), SKYMEM_AUTH_E_BAD_MAC);
    /* the same packet, injected at C (another neighbour of A): its link from A has another key */
    memcpy(buf, fresh, fresh_len);
    CHECK_EQ_INT(skymem_link_prepare(&C, 1, 1, 2, now, buf, fresh_len, sizeof buf), SKYMEM_AUTH_E_BAD_MAC);
    /* ... and at D, no neighbour of A */
    memcpy(buf, fresh, fresh_len);
    CHECK_EQ_INT(skymem_link_prepare(&D, 1, 1, 2, now, buf, fresh_len, sizeof buf), SKYMEM_AUTH_E_UNKNOWN_KEY);
    memcpy(buf, fresh, fresh_len);
    CHECK_EQ_INT(skymem_link_prepare(&B, 1, 1, 2, now, buf, fresh_len, sizeof buf), (int)fresh_len);
    /* unsigned, relayed: refused; signed already, as our own: refused; a next hop that is no neighbour: refused */
    memcpy(buf, orig, n);
    CHECK_EQ_INT(skymem_link_prepare(&B, 1, 1, 2, now, buf, n, sizeof buf), SKYMEM_AUTH_E_NO_TRAILER);
    memcpy(buf, fresh, fresh_len);
    CHECK_EQ_INT(skymem_link_prepare(&A, 0, 0, 2, now, buf, fresh_len, sizeof buf), SKYMEM_AUTH_E_ARG);
    memcpy(buf, orig, n);
    CHECK_EQ_INT(skymem_link_prepare(&A, 0, 1, 2, now, buf, n, sizeof buf), SKYMEM_AUTH_E_UNKNOWN_KEY);
    memcpy(buf, orig, n);
    CHECK_EQ_INT(skymem_link_prepare(&A, 0, 0, 2, now, buf, n, n + 10), SKYMEM_AUTH_E_ARG); /* no room */
    /* signed 5 s ahead of the relay's clock: refused; and again once the clock has passed it */
    n = migration_chunk(orig, sizeof orig, 1, 2, 0, 1, 32);
    memcpy(fresh, orig, n);
    len = skymem_link_sign(&A, 0, 2, skymem_auth_seq_at(now + 5000000u), fresh, n, sizeof fresh);
    fresh_len = (size_t)len;
    memcpy(buf, fresh, fresh_len);
    used = windows_used(&B);
    CHECK_EQ_INT(skymem_link_prepare(&B, 1, 1, 2, now, buf, fresh_len, sizeof buf), SKYMEM_AUTH_E_AHEAD);
    memcpy(buf, fresh, fresh_len);
    rc = skymem_link_prepare(&B, 1, 1, 2, now + 6000000u, buf, fresh_len, sizeof buf);
    CHECK(rc == SKYMEM_AUTH_E_REPLAY || rc == SKYMEM_AUTH_E_AHEAD);
    CHECK_EQ_INT(windows_used(&B), used); /* all of A's traffic: B's one window for A */
    CHECK_EQ_INT(used, 1);
}

/* What has a ground station at one end crosses links as it is, signed end to end -- but signed: nothing
 * unsigned goes onto a link, and nothing under a link key id claims a ground end. */
static void test_prepare_ground(void)
{
    uint8_t buf[512], orig[512];
    skymem_route_t r;
    int len, relayed;
    uint32_t used;
    load_all();
    used = windows_used(&B);
    for (relayed = 0; relayed < 2; relayed++) {
        /* a station's command for (1,2), unsigned: refused */
        r = route(1, 2, SKYMEM_GROUND_PLANE, 7, 0, 40);
        len = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
        CHECK_EQ_INT(skymem_link_prepare(&B, relayed, 1, 2, T0, buf, (size_t)len, sizeof buf), SKYMEM_AUTH_E_NO_TRAILER);
        /* signed by the ground with (1,2)'s UP key (B cannot check it): passes unchanged */
        len = skymem_auth_sign(&F, 1, skymem_auth_seq_at(T0) + 1u, buf, (size_t)len, sizeof buf);
        CHECK(len > 0);
        memcpy(orig, buf, (size_t)len);
        CHECK_EQ_INT(skymem_link_prepare(&B, relayed, 1, 2, T0, buf, (size_t)len, sizeof buf), len);
        CHECK(memcmp(buf, orig, (size_t)len) == 0);
        CHECK_EQ_INT(skymem_auth_verify(&F, buf, (size_t)len), relayed ? SKYMEM_AUTH_E_REPLAY : SKYMEM_AUTH_OK);
        /* under a link id, a station's command: refused (nothing of the ground's is signed per link) */
        r = route(1, 2, SKYMEM_GROUND_PLANE, 7, 0, 41);
        len = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
        len = skymem_auth_sign_with(&skymem_auth_find_key_for(&B, skymem_auth_link_id(1, 2), SKYMEM_KEY_LINK_OUT)->mac,
                                    skymem_auth_link_id(0, 2), 77, buf, (size_t)len, sizeof buf);
        CHECK(len > 0);
        CHECK_EQ_INT(skymem_link_prepare(&B, relayed, 1, 2, T0, buf, (size_t)len, sizeof buf), SKYMEM_AUTH_E_NO_TRAILER);
        /* a reply to a station: unsigned refused, signed with the satellite's DOWN key passed unchanged */
        r = route(SKYMEM_GROUND_PLANE, 7, 1, 2, 0, 42);
        r.via_plane = 0, r.via_sat = 2;
        len = skymem_build_reply(buf, sizeof buf, 0, 1, 2, &r, SKYMEM_REPLY_ACK, SKYMEM_NOOP_CC, 0, 0, 0, NULL, 0);
        CHECK_EQ_INT(skymem_link_prepare(&B, relayed, 0, 1, T0, buf, (size_t)len, sizeof buf), SKYMEM_AUTH_E_NO_TRAILER);
        len = skymem_auth_sign(&F, 1, 9000u + (uint64_t)relayed, buf, (size_t)len, sizeof buf);
        CHECK(len > 0);
        memcpy(orig, buf, (size_t)len);
        CHECK_EQ_INT(skymem_link_prepare(&B, relayed, 0, 1, T0, buf, (size_t)len, sizeof buf), len);
        CHECK(memcmp(buf, orig, (size_t)len) == 0);
    }
    CHECK_EQ_INT(windows_used(&B), used); /* nothing of the ground's was checked (or recorded) at the relay */
    /* not a data-plane packet at all */
    len = skymem_build_cmd(buf, sizeof buf, SKYMEM_CMD_MID, SKYMEM_NOOP_CC, 0, NULL, 0);
    CHECK_EQ_INT(skymem_link_prepare(&B, 0, 1, 2, T0, buf, (size_t)len, sizeof buf), SKYMEM_AUTH_E_ARG);
    CHECK_EQ_INT(skymem_link_prepare(NULL, 0, 1, 2, T0, buf, (size_t)len, sizeof buf), SKYMEM_AUTH_E_ARG);
}

/* M3: with the receiver's clock set, a sequence more than SKYMEM_AUTH_AHEAD_US ahead is refused (E_AHEAD)
 * and recorded as seen, so it is refused again once the clock has passed it; the high-water mark a restart
 * keeps does not move for it. Exactly at the bound is fine. */
static void test_ahead(void)
{
    static skymem_auth_t ground;
    uint8_t buf[256], saved[256];
    uint64_t now = T0, high, bound;
    skymem_route_t r;
    int len, rc;
    CHECK_EQ_INT(load_sat_keys(&ground, 0, 3, 3, 0, 1, UP, DOWN), 10);
    CHECK_EQ_INT(load_sat_keys(&A, skymem_auth_seq_at(now), 3, 3, 0, 1, UP, DOWN), 10);
    skymem_auth_set_clock(&A, now);
    bound = skymem_auth_seq_at(now) + SKYMEM_AUTH_AHEAD_US / SKYMEM_AUTH_SEQ_US;
    CHECK(A.ahead_limit == bound);
    high = skymem_auth_high(&A);
#define CMD(id, seq)                                                                      \
    (r = route(0, 1, SKYMEM_GROUND_PLANE, 7, 0, (id)),                                    \
     len = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_NOOP_CC, 0, &r, NULL, 0),        \
     len = skymem_auth_sign(&ground, 1, (seq), buf, (size_t)len, sizeof buf))
    CMD(1, skymem_auth_seq_at(now + 5000000u)); /* 5 s ahead */
    CHECK(len > 0);
    memcpy(saved, buf, (size_t)len);
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)len), SKYMEM_AUTH_E_AHEAD);
    CHECK(skymem_auth_high(&A) == high);
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)len), SKYMEM_AUTH_E_REPLAY); /* seen: a replay already */
    /* 6 s later: still refused */
    now += 6000000u;
    skymem_auth_set_clock(&A, now);
    rc = skymem_auth_verify(&A, saved, (size_t)len);
    CHECK(rc == SKYMEM_AUTH_E_REPLAY || rc == SKYMEM_AUTH_E_AHEAD);
    CHECK(skymem_auth_high(&A) == high);
    /* at the bound: accepted; one past: refused */
    bound = skymem_auth_seq_at(now) + SKYMEM_AUTH_AHEAD_US / SKYMEM_AUTH_SEQ_US;
    CMD(2, bound);
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)len), SKYMEM_AUTH_OK);
    CHECK(skymem_auth_high(&A) == bound);
    CMD(3, bound + 1u);
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)len), SKYMEM_AUTH_E_AHEAD);
    CHECK(skymem_auth_high(&A) == bound);
    /* a forgery ahead is no more than a forgery: not recorded (the real one, later, is judged on its own) */
    CMD(4, bound + 100u);
    buf[len - 1] ^= 1u;
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)len), SKYMEM_AUTH_E_BAD_MAC);
    buf[len - 1] ^= 1u;
    skymem_auth_set_clock(&A, now + 1000u * SKYMEM_AUTH_SEQ_US);
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)len), SKYMEM_AUTH_OK);
#undef CMD
}

/* The replay window of link traffic is the signing neighbour's: 600 packets claiming 600 different sources,
 * all signed by B for A, open one window -- where 600 sources of ground traffic would recycle every window
 * and raise the floor. A's floor stays put and a ground command is still accepted. */
static void test_window_per_neighbour(void)
{
    static skymem_auth_t ground, other;
    uint8_t buf[512];
    uint64_t floor0, seq = skymem_auth_seq_at(T0) + 10u;
    skymem_route_t r;
    uint32_t i, ok = 0;
    int len;
    load_all();
    CHECK_EQ_INT(load_sat_keys(&A, skymem_auth_seq_at(T0), 3, 3, 0, 1, UP, DOWN), 10);
    CHECK_EQ_INT(load_sat_keys(&ground, 0, 3, 3, 0, 1, UP, DOWN), 10);
    floor0 = A.floor;
    for (i = 0; i < 600; i++) {
        size_t n = gossip_evict(buf, sizeof buf, 0, 1, (uint16_t)(3u + i / 200u), (uint16_t)(i % 200u), 100u + i);
        len = skymem_link_prepare(&B, 0, 0, 1, T0 + 1000u, buf, n, sizeof buf); /* after A started */
        CHECK(len > 0);
        ok += skymem_auth_verify(&A, buf, (size_t)len) == SKYMEM_AUTH_OK;
    }
    CHECK_EQ_INT(ok, 600);
    CHECK(A.floor == floor0);
    CHECK_EQ_INT(windows_used(&A), 1);
    for (i = 0; i < SKYMEM_AUTH_SOURCES; i++)
        if (A.windows[i].used)
            CHECK(A.windows[i].key_id == skymem_auth_link_id(0, 2) && A.windows[i].src_plane == 0 &&
                  A.windows[i].src_sat == 2);
    /* a ground command: accepted */
    r = route(0, 1, SKYMEM_GROUND_PLANE, 7, 0, 50);
    len = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
    len = skymem_auth_sign(&ground, 1, seq, buf, (size_t)len, sizeof buf);
    CHECK_EQ_INT(skymem_auth_verify(&A, buf, (size_t)len), SKYMEM_AUTH_OK);
    CHECK_EQ_INT(windows_used(&A), 2);
    /* the contrast: sources that each have a window of their own (300 stations) do recycle and raise it */
    CHECK_EQ_INT(load_sat_keys(&other, skymem_auth_seq_at(T0), 3, 3, 0, 1, UP, DOWN), 10);
    floor0 = other.floor;
    for (i = 0; i < 300; i++) {
        r = route(0, 1, SKYMEM_GROUND_PLANE, (uint16_t)i, 0, 60u + i);
        len = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_NOOP_CC, 0, &r, NULL, 0);
        len = skymem_auth_sign(&ground, 1, seq + 1u + i, buf, (size_t)len, sizeof buf);
        CHECK_EQ_INT(skymem_auth_verify(&other, buf, (size_t)len), SKYMEM_AUTH_OK);
    }
    CHECK(other.floor > floor0);
}

/* skymem_link_keys_complete: a ring with both ground directions and both keys of every link of its owner. */
static void test_keys_complete(void)
{
    static skymem_auth_t a;
    char text[1024], err[128];
    const char *p;
    size_t len;
    int n;
    load_all();
    CHECK_EQ_INT(skymem_link_keys_complete(&A, 3, 3), 1);
    CHECK_EQ_INT(skymem_link_keys_complete(&B, 3, 3), 1);
    CHECK_EQ_INT(skymem_link_keys_complete(&A, 5, 5), 0); /* in a 5x5 grid (0,1) has neighbours (4,1), ... */
    CHECK_EQ_INT(skymem_link_keys_complete(NULL, 3, 3), 0);
    /* without one neighbour's link-out line */
    len = sat_key_file(text, sizeof text, 3, 3, 0, 1, UP, DOWN, &n);
    p = strstr(text, "link-out 0 2 ");
    CHECK(p != NULL);
    if (p != NULL) {
        const char *eol = strchr(p, '\n');
        memmove((char *)p, eol + 1, strlen(eol + 1) + 1);
        len = strlen(text);
    }
    skymem_auth_init(&a, 0);
    CHECK_EQ_INT(skymem_auth_load_text(&a, text, len, err, sizeof err), n - 1);
    CHECK_EQ_INT(skymem_link_keys_complete(&a, 3, 3), 0);
    /* without a DOWN key */
    len = sat_key_file(text, sizeof text, 3, 3, 0, 1, UP, DOWN, &n);
    p = strstr(text, "down 1 ");
    CHECK(p != NULL);
    if (p != NULL) *(char *)p = '\0', len = strlen(text);
    skymem_auth_init(&a, 0);
    CHECK_EQ_INT(skymem_auth_load_text(&a, text, len, err, sizeof err), n - 1);
    CHECK_EQ_INT(skymem_link_keys_complete(&a, 3, 3), 0);
    /* a 2-wide ring: north == south, one link for both */
    len = sat_key_file(text, sizeof text, 2, 3, 0, 1, UP, DOWN, &n);
    skymem_auth_init(&a, 0);
    CHECK_EQ_INT(skymem_auth_load_text(&a, text, len, err, sizeof err), n);
    CHECK_EQ_INT(n, 8);
    CHECK_EQ_INT(skymem_link_keys_complete(&a, 2, 3), 1);
}

int main(void)
{
    test_is_isl();
    test_sign_verify_across_rings();
    test_strip();
    test_prepare_relayed();
    test_prepare_ground();
    test_ahead();
    test_window_per_neighbour();
    test_keys_complete();
    return check_report("link");
}
