/* test_codec.c -- golden bytes, round trips, and rejection of every truncated or overlong packet. */
#include <string.h>

#include "check.h"
#include "skymem_codec.h"
#include "skymem_crc32c.h"

static uint8_t HASH[32];

static skymem_route_t sample_route(void)
{
    skymem_route_t r;
    memset(&r, 0, sizeof r);
    r.dst_plane = 3;
    r.dst_sat = 1;
    r.src_plane = SKYMEM_GROUND_PLANE;
    r.src_sat = 7;
    r.via_plane = 0;
    r.via_sat = 2;
    r.request_id = 0xA1B2C3D4u;
    r.ttl = SKYMEM_DEFAULT_TTL;
    r.hops = 0;
    r.flags = 0;
    return r;
}

/* Truncations and extensions of a valid packet: all must be rejected. When the
 * length field is patched to agree (and checksum recomputed), the per-command
 * body checks must still reject, except at `ok_len` (a valid shorter form, or 0). */
static void check_mutations(const uint8_t *pkt, size_t len, size_t ok_len)
{
    uint8_t buf[SKYMEM_MAX_PACKET + 16];
    skymem_msg_t m;
    size_t n;
    int bad = 0;
    for (n = 0; n < len; n++) { /* raw truncation: length field now disagrees */
        if (skymem_parse(pkt, n, &m) == SKYMEM_OK) bad++;
    }
    memcpy(buf, pkt, len);
    buf[len] = 0;
    if (skymem_parse(buf, len + 1, &m) != SKYMEM_E_LENGTH) bad++; /* overlong */
    for (n = 7; n < len; n++) { /* consistent truncation */
        memcpy(buf, pkt, n);
        skymem_put_u16(buf + 4, (uint16_t)(n - 7));
        if (buf[0] & 0x10) skymem_cmd_finalize(buf, n);
        if (skymem_parse(buf, n, &m) == SKYMEM_OK && n != ok_len) bad++;
    }
    for (n = len + 1; n < len + 9 && n <= SKYMEM_MAX_PACKET; n++) { /* consistent extension */
        memcpy(buf, pkt, len);
        memset(buf + len, 0xAB, n - len);
        skymem_put_u16(buf + 4, (uint16_t)(n - 7));
        if (buf[0] & 0x10) skymem_cmd_finalize(buf, n);
        if (skymem_parse(buf, n, &m) == SKYMEM_OK) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_golden(void)
{
    uint8_t buf[64];
    static const uint8_t noop[8] = {0x18, 0x82, 0xC0, 0x00, 0x00, 0x01, 0x00, 0xA4};
    static const uint8_t sky_noop[8] = {0x18, 0x90, 0xC0, 0x00, 0x00, 0x01, 0x00, 0xB6};
    skymem_msg_t m;
    /* SAMPLE_APP NOOP as cmdUtil sends it */
    CHECK_EQ_INT(skymem_build_cmd(buf, sizeof buf, 0x1882, 0, 0, NULL, 0), 8);
    CHECK(memcmp(buf, noop, 8) == 0);
    CHECK(skymem_cmd_checksum_ok(noop, 8));
    /* SKYMEM NOOP: 0xFF ^ 0x18 ^ 0x90 ^ 0xC0 ^ 0x01 = 0xB6 */
    CHECK_EQ_INT(skymem_build_cmd(buf, sizeof buf, SKYMEM_CMD_MID, SKYMEM_NOOP_CC, 0, NULL, 0), 8);
    CHECK(memcmp(buf, sky_noop, 8) == 0);
    CHECK_EQ_INT(skymem_parse(sky_noop, 8, &m), SKYMEM_OK);
    CHECK(m.mid == SKYMEM_CMD_MID && m.is_cmd && m.cc == SKYMEM_NOOP_CC && !m.has_route);
    check_mutations(sky_noop, 8, 0);
    /* bad checksum */
    memcpy(buf, sky_noop, 8);
    buf[7] ^= 1;
    CHECK_EQ_INT(skymem_parse(buf, 8, &m), SKYMEM_E_CHECKSUM);
    /* wrong MID */
    CHECK_EQ_INT(skymem_parse(noop, 8, &m), SKYMEM_E_MID);
    /* unknown cc on the control MID */
    skymem_build_cmd(buf, sizeof buf, SKYMEM_CMD_MID, SKYMEM_GET_CHUNK_CC, 0, NULL, 0);
    CHECK_EQ_INT(skymem_parse(buf, 8, &m), SKYMEM_E_CC);
    /* version, sec hdr, seq flags */
    memcpy(buf, sky_noop, 8);
    buf[0] |= 0x20;
    skymem_cmd_finalize(buf, 8);
    CHECK_EQ_INT(skymem_parse(buf, 8, &m), SKYMEM_E_VERSION);
    memcpy(buf, sky_noop, 8);
    buf[0] &= (uint8_t)~0x08;
    skymem_cmd_finalize(buf, 8);
    CHECK_EQ_INT(skymem_parse(buf, 8, &m), SKYMEM_E_NO_SEC_HDR);
    memcpy(buf, sky_noop, 8);
    buf[2] = 0x40;
    skymem_cmd_finalize(buf, 8);
    CHECK_EQ_INT(skymem_parse(buf, 8, &m), SKYMEM_E_SEQ_FLAGS);
    /* telemetry type with a command MID */
    memcpy(buf, sky_noop, 8);
    CHECK_EQ_INT(skymem_parse(buf, 5, &m), SKYMEM_E_SHORT);
    /* SEND_HK */
    CHECK_EQ_INT(skymem_build_cmd(buf, sizeof buf, SKYMEM_SEND_HK_MID, 0, 5, NULL, 0), 8);
    CHECK(buf[0] == 0x18 && buf[1] == 0x91 && buf[2] == 0xC0 && buf[3] == 5 && buf[4] == 0 && buf[5] == 1);
    CHECK_EQ_INT(skymem_parse(buf, 8, &m), SKYMEM_OK);
    CHECK_EQ_INT(skymem_strerror(SKYMEM_E_CHECKSUM)[0] != 'u', 1);
}

static void test_set_param(void)
{
    uint8_t buf[64];
    skymem_msg_t m;
    skymem_route_t r = sample_route();
    int n = skymem_build_set_param(buf, sizeof buf, 1, NULL, SKYMEM_PARAM_MEMORY_BUDGET_KB, 4096);
    CHECK_EQ_INT(n, 16);
    CHECK(buf[5] == 9 && buf[6] == 2 && buf[8] == 0 && buf[9] == 1 && buf[14] == 0x10 && buf[15] == 0);
    CHECK_EQ_INT(skymem_parse(buf, 16, &m), SKYMEM_OK);
    CHECK(m.cc == SKYMEM_SET_PARAM_CC && m.param_id == 1 && m.param_value == 4096);
    check_mutations(buf, 16, 0);
    buf[10] = 1; /* spare must be zero */
    skymem_cmd_finalize(buf, 16);
    CHECK_EQ_INT(skymem_parse(buf, 16, &m), SKYMEM_E_RESERVED);
    n = skymem_build_set_param(buf, sizeof buf, 1, &r, SKYMEM_PARAM_CHUNK_SIZE, 1024);
    CHECK_EQ_INT(n, 36);
    CHECK_EQ_INT(skymem_parse(buf, 36, &m), SKYMEM_OK);
    CHECK(m.has_route && m.param_id == 2 && m.param_value == 1024 && m.route.request_id == 0xA1B2C3D4u);
    check_mutations(buf, 36, 0);
}

static void test_data_cmds(void)
{
    static uint8_t buf[SKYMEM_MAX_PACKET], data[6144];
    skymem_msg_t m;
    skymem_route_t r = sample_route(), r2;
    skymem_chunk_desc_t d;
    int n;
    size_t i;
    for (i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7u);

    /* GET_CHUNK: layout at fixed offsets */
    n = skymem_build_get_chunk(buf, sizeof buf, 42, &r, HASH, 9);
    CHECK_EQ_INT(n, 8 + 20 + 36);
    CHECK(buf[0] == 0x18 && buf[1] == 0x92 && buf[2] == 0xC0 && buf[3] == 42 && buf[4] == 0 && buf[5] == 57);
    CHECK(buf[6] == SKYMEM_GET_CHUNK_CC && skymem_cmd_checksum_ok(buf, (size_t)n));
    CHECK(buf[8] == 0 && buf[9] == 3 && buf[10] == 0 && buf[11] == 1 && buf[12] == 0xFF && buf[13] == 0xFF);
    CHECK(buf[20] == 0xA1 && buf[23] == 0xD4 && buf[24] == SKYMEM_DEFAULT_TTL && buf[25] == 0);
    CHECK(memcmp(buf + 28, HASH, 32) == 0 && buf[63] == 9);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(m.cc == SKYMEM_GET_CHUNK_CC && m.chunk_id == 9 && memcmp(m.block_hash, HASH, 32) == 0);
    CHECK(memcmp(&m.route, &r, sizeof r) == 0);
    check_mutations(buf, (size_t)n, 0);

    n = skymem_build_probe(buf, sizeof buf, 1, &r, HASH, 0);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(m.cc == SKYMEM_PROBE_CC && m.chunk_id == 0);
    check_mutations(buf, (size_t)n, 0);

    n = skymem_build_get_chunks(buf, sizeof buf, 1, &r, HASH, 2, 5, 3);
    CHECK_EQ_INT(n, 8 + 20 + 44);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(m.first == 2 && m.count == 5 && m.stride == 3);
    check_mutations(buf, (size_t)n, 0);
    CHECK_EQ_INT(skymem_build_get_chunks(buf, sizeof buf, 1, &r, HASH, 0, 0, 1), SKYMEM_E_RANGE);
    CHECK_EQ_INT(skymem_build_get_chunks(buf, sizeof buf, 1, &r, HASH, 0, SKYMEM_MAX_GET_CHUNKS + 1, 1), SKYMEM_E_RANGE);
    CHECK_EQ_INT(skymem_build_get_chunks(buf, sizeof buf, 1, &r, HASH, 0xFFFFFFF0u, 100, 1), SKYMEM_E_RANGE);
    /* a range that overflows, forged on the wire */
    n = skymem_build_get_chunks(buf, sizeof buf, 1, &r, HASH, 0, 5, 3);
    skymem_put_u32(buf + 28 + SKYMEM_CR_STRIDE, 0);
    skymem_cmd_finalize(buf, (size_t)n);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_RANGE);

    n = skymem_build_evict(buf, sizeof buf, 1, &r, HASH, 77, 2);
    CHECK_EQ_INT(n, 8 + 20 + 40);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(m.cc == SKYMEM_EVICT_BLOCK_CC && m.evict_id == 77 && m.radius == 2);
    check_mutations(buf, (size_t)n, 0);

    n = skymem_build_migrate(buf, sizeof buf, 1, &r, HASH, 1, 4, 2, 5, 6);
    CHECK_EQ_INT(n, 8 + 20 + 48);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(m.cc == SKYMEM_MIGRATE_CC && m.first == 1 && m.count == 4 && m.stride == 2 && m.target_plane == 5 &&
          m.target_sat == 6);
    check_mutations(buf, (size_t)n, 0);

    for (i = 0; i < 3; i++) {
        static const uint8_t ccs[3] = {SKYMEM_NOOP_CC, SKYMEM_RESET_COUNTERS_CC, SKYMEM_STATS_CC};
        n = skymem_build_data_cmd(buf, sizeof buf, ccs[i], 1, &r, NULL, 0);
        CHECK_EQ_INT(n, 28);
        CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
        CHECK(m.cc == ccs[i] && m.payload_len == 0);
        check_mutations(buf, (size_t)n, 0);
    }
    n = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_NUM_CC, 1, &r, NULL, 0);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_CC);

    /* SET_CHUNK with a full 6 KB chunk */
    memset(&d, 0, sizeof d);
    memcpy(d.block_hash, HASH, 32);
    d.chunk_id = 3;
    d.chunk_count = 10;
    d.created_ms = 0x0102030405060708ull;
    d.data_len = 6144;
    d.crc32c = skymem_crc32c(data, d.data_len);
    d.gossip_radius = 2;
    n = skymem_build_set_chunk(buf, sizeof buf, 1, &r, &d, data);
    CHECK_EQ_INT(n, 8 + 20 + 56 + 6144);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(memcmp(&m.desc, &d, sizeof d) == 0 && m.data == buf + 84 && memcmp(m.data, data, 6144) == 0);
    CHECK(buf[28 + 40] == 1 && buf[28 + 47] == 8); /* created_ms big-endian */
    check_mutations(buf, (size_t)n, 0);
    /* data_len lies (one more than sent) */
    skymem_put_u16(buf + 28 + SKYMEM_CD_DATA_LEN, 6145);
    skymem_cmd_finalize(buf, (size_t)n);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_DATA_LEN);

    /* AUTH trailer is split off */
    r2 = r;
    r2.flags = SKYMEM_RF_AUTH;
    {
        uint8_t body[36 + SKYMEM_AUTH_TRAILER_LEN];
        memset(body, 0x5A, sizeof body);
        memcpy(body, HASH, 32);
        skymem_put_u32(body + 32, 4);
        n = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_GET_CHUNK_CC, 1, &r2, body, sizeof body);
        CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
        CHECK(m.auth == buf + 8 + 20 + 36 && m.chunk_id == 4);
        n = skymem_build_data_cmd(buf, sizeof buf, SKYMEM_NOOP_CC, 1, &r2, body, 10);
        CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_AUTH_TRAILER);
    }
    /* builders refuse a small buffer */
    CHECK_EQ_INT(skymem_build_get_chunk(buf, 63, 1, &r, HASH, 1), SKYMEM_E_BUF_SMALL);
    CHECK_EQ_INT(skymem_build_get_chunk(NULL, 100, 1, &r, HASH, 1), SKYMEM_E_NULL);
}

static void test_replies(void)
{
    static uint8_t buf[SKYMEM_MAX_PACKET], data[100];
    skymem_msg_t m;
    skymem_route_t r = sample_route();
    skymem_chunk_desc_t d;
    skymem_stats_t st, st2;
    uint32_t sec;
    uint16_t sub;
    int n;
    size_t i;
    for (i = 0; i < sizeof data; i++) data[i] = (uint8_t)i;

    n = skymem_build_reply(buf, sizeof buf, 3, 1000, 0x8000, &r, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 5, 1, HASH,
                           32);
    CHECK_EQ_INT(n, 16 + 20 + 12 + 32);
    CHECK(buf[0] == 0x08 && buf[1] == 0x92 && buf[2] == 0xC0 && buf[3] == 3);
    CHECK(buf[6] == 0 && buf[7] == 0 && buf[8] == 0x03 && buf[9] == 0xE8 && buf[10] == 0x80 && buf[11] == 0);
    CHECK(buf[12] == 0 && buf[13] == 0 && buf[14] == 0 && buf[15] == 0);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(!m.is_cmd && m.tlm_seconds == 1000 && m.tlm_subsecs == 0x8000 && m.reply_kind == SKYMEM_REPLY_ACK &&
          m.reply_cc == SKYMEM_SET_CHUNK_CC && m.reply_chunk_id == 5 && m.reply_value == 1 && m.has_block_hash);
    check_mutations(buf, (size_t)n, 16 + 20 + 12); /* ACK without hash is a valid shorter form */

    n = skymem_build_reply(buf, sizeof buf, 3, 0, 0, &r, SKYMEM_REPLY_NAK, SKYMEM_GET_CHUNK_CC, SKYMEM_NAK_NOT_FOUND, 5,
                           0, HASH, 32);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(m.reply_kind == SKYMEM_REPLY_NAK && m.reply_status == SKYMEM_NAK_NOT_FOUND);

    n = skymem_build_reply(buf, sizeof buf, 3, 0, 0, &r, SKYMEM_REPLY_EVICTED, 0, 0, 0, 0, HASH, 32);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    check_mutations(buf, (size_t)n, 0);

    n = skymem_build_reply(buf, sizeof buf, 3, 0, 0, &r, 99, 0, 0, 0, 0, NULL, 0);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_REPLY_KIND);

    memset(&d, 0, sizeof d);
    memcpy(d.block_hash, HASH, 32);
    d.chunk_id = 8;
    d.chunk_count = 9;
    d.data_len = sizeof data;
    d.crc32c = skymem_crc32c(data, sizeof data);
    n = skymem_build_reply_data(buf, sizeof buf, 1, 0, 0, &r, SKYMEM_GET_CHUNKS_CC, &d, data);
    CHECK_EQ_INT(n, 16 + 20 + 12 + 56 + 100);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(m.reply_kind == SKYMEM_REPLY_DATA && m.reply_chunk_id == 8 && m.desc.chunk_count == 9 &&
          memcmp(m.data, data, 100) == 0 && skymem_crc32c(m.data, m.desc.data_len) == m.desc.crc32c);
    check_mutations(buf, (size_t)n, 0);

    memset(&st, 0, sizeof st);
    st.plane = 2;
    st.sat = 3;
    st.cmd_count = 10;
    st.bytes_used = 0x1122334455667788ull;
    st.bytes_budget = 64ull << 20;
    st.mission_time_ms = 123456789012ull;
    st.uptime_s = 99;
    st.migrated_in = 4;
    n = skymem_build_reply_stats(buf, sizeof buf, 1, 0, 0, &r, &st);
    CHECK_EQ_INT(n, 16 + 20 + 12 + 88);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(memcmp(&m.stats, &st, sizeof st) == 0);
    check_mutations(buf, (size_t)n, 0);
    n = skymem_build_hk(buf, sizeof buf, 1, 7, 0, &st);
    CHECK_EQ_INT(n, 104);
    CHECK(buf[0] == 0x08 && buf[1] == 0x90 && buf[5] == 97);
    CHECK(buf[16] == 0 && buf[17] == 2 && buf[18] == 0 && buf[19] == 3);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    memset(&st2, 0, sizeof st2);
    skymem_stats_decode(buf + 16, &st2);
    CHECK(memcmp(&st2, &st, sizeof st) == 0);
    check_mutations(buf, (size_t)n, 0);

    /* route rewrite when forwarding */
    n = skymem_build_get_chunk(buf, sizeof buf, 1, &r, HASH, 1);
    r.ttl = 63;
    r.hops = 1;
    CHECK_EQ_INT(skymem_rewrite_route(buf, (size_t)n, &r), SKYMEM_OK);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(m.route.ttl == 63 && m.route.hops == 1);

    skymem_ms_to_tlm_time(1500, &sec, &sub);
    CHECK(sec == 1 && sub == 0x8000);
}

/* Every out-of-range or reserved field docs/PROTOCOL.md names, one at a time in an otherwise valid
 * packet: skymem_parse refuses it with its own code, and skymem_nak_for_parse_error gives the NAK a
 * satellite answers with (the native node and the cFS app both use it). */
typedef struct {
    const char *field;
    uint8_t cc;
    size_t offset; /* from the start of the route header */
    uint8_t value;
    int err;
    uint8_t nak;
} strict_case_t;

static void test_strict_fields(void)
{
    enum { R = SKYMEM_CMD_HDR_LEN }; /* the route header's offset in a command */
    static const strict_case_t cases[] = {
        {"route reserved byte", SKYMEM_GET_CHUNK_CC, SKYMEM_ROUTE_RESERVED, 1, SKYMEM_E_RESERVED, SKYMEM_NAK_BAD_PARAM},
        {"route flags: undefined bit", SKYMEM_GET_CHUNK_CC, SKYMEM_ROUTE_FLAGS, 0x80, SKYMEM_E_RESERVED,
         SKYMEM_NAK_BAD_PARAM},
        {"descriptor flags 0xFF", SKYMEM_SET_CHUNK_CC, SKYMEM_ROUTE_HDR_LEN + SKYMEM_CD_FLAGS, 0xFF,
         SKYMEM_E_RESERVED, SKYMEM_NAK_BAD_PARAM},
        {"descriptor chunk_id >= chunk_count (5 of 2)", SKYMEM_SET_CHUNK_CC,
         SKYMEM_ROUTE_HDR_LEN + SKYMEM_CD_CHUNK_ID + 3, 5, SKYMEM_E_RANGE, SKYMEM_NAK_BAD_PARAM},
        {"descriptor chunk_count 0", SKYMEM_SET_CHUNK_CC, SKYMEM_ROUTE_HDR_LEN + SKYMEM_CD_CHUNK_COUNT + 3, 0,
         SKYMEM_E_RANGE, SKYMEM_NAK_BAD_PARAM},
        {"descriptor chunk_id 0xFFFFFFFF", SKYMEM_SET_CHUNK_CC, SKYMEM_ROUTE_HDR_LEN + SKYMEM_CD_CHUNK_ID, 0xFF,
         SKYMEM_E_RANGE, SKYMEM_NAK_BAD_PARAM},
        {"EVICT_BLOCK spare byte 1", SKYMEM_EVICT_BLOCK_CC, SKYMEM_ROUTE_HDR_LEN + SKYMEM_EV_SPARE, 1,
         SKYMEM_E_RESERVED, SKYMEM_NAK_BAD_PARAM},
        {"EVICT_BLOCK spare byte 3", SKYMEM_EVICT_BLOCK_CC, SKYMEM_ROUTE_HDR_LEN + SKYMEM_EV_SPARE + 2, 1,
         SKYMEM_E_RESERVED, SKYMEM_NAK_BAD_PARAM},
        {"SET_PARAM spare", SKYMEM_SET_PARAM_CC, SKYMEM_ROUTE_HDR_LEN + 3, 1, SKYMEM_E_RESERVED, SKYMEM_NAK_BAD_PARAM},
        {"GET_CHUNKS count 0", SKYMEM_GET_CHUNKS_CC, SKYMEM_ROUTE_HDR_LEN + SKYMEM_CR_COUNT + 3, 0, SKYMEM_E_RANGE,
         SKYMEM_NAK_BAD_PARAM},
        {"GET_CHUNKS count above 4096", SKYMEM_GET_CHUNKS_CC, SKYMEM_ROUTE_HDR_LEN + SKYMEM_CR_COUNT + 2, 0x20,
         SKYMEM_E_RANGE, SKYMEM_NAK_BAD_PARAM},
        {"GET_CHUNKS stride 0", SKYMEM_GET_CHUNKS_CC, SKYMEM_ROUTE_HDR_LEN + SKYMEM_CR_STRIDE + 3, 0, SKYMEM_E_RANGE,
         SKYMEM_NAK_BAD_PARAM},
        {"MIGRATE stride 0", SKYMEM_MIGRATE_CC, SKYMEM_ROUTE_HDR_LEN + SKYMEM_CR_STRIDE + 3, 0, SKYMEM_E_RANGE,
         SKYMEM_NAK_BAD_PARAM},
        {"function code top bit", SKYMEM_NOOP_CC, (size_t)-2, 0x80, SKYMEM_E_RESERVED, SKYMEM_NAK_BAD_PARAM},
        {"function code unknown", SKYMEM_NOOP_CC, (size_t)-2, 0x7F, SKYMEM_E_CC, SKYMEM_NAK_BAD_COMMAND},
    };
    static uint8_t buf[SKYMEM_MAX_PACKET];
    uint8_t data[100], hash[32];
    skymem_msg_t m;
    skymem_route_t r = sample_route(), got;
    skymem_chunk_desc_t d;
    size_t i;
    memset(data, 0x5A, sizeof data);
    memset(hash, 0x11, sizeof hash);
    memset(&d, 0, sizeof d);
    memcpy(d.block_hash, hash, 32);
    d.chunk_id = 1;
    d.chunk_count = 2;
    d.data_len = sizeof data;
    d.crc32c = skymem_crc32c(data, sizeof data);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const strict_case_t *c = &cases[i];
        int n, rc;
        switch (c->cc) {
        case SKYMEM_SET_CHUNK_CC: n = skymem_build_set_chunk(buf, sizeof buf, 0, &r, &d, data); break;
        case SKYMEM_GET_CHUNK_CC: n = skymem_build_get_chunk(buf, sizeof buf, 0, &r, hash, 1); break;
        case SKYMEM_GET_CHUNKS_CC: n = skymem_build_get_chunks(buf, sizeof buf, 0, &r, hash, 0, 2, 1); break;
        case SKYMEM_MIGRATE_CC: n = skymem_build_migrate(buf, sizeof buf, 0, &r, hash, 0, 2, 1, 1, 1); break;
        case SKYMEM_EVICT_BLOCK_CC: n = skymem_build_evict(buf, sizeof buf, 0, &r, hash, 7, 1); break;
        case SKYMEM_SET_PARAM_CC: n = skymem_build_set_param(buf, sizeof buf, 0, &r, 2, 4096); break;
        default: n = skymem_build_data_cmd(buf, sizeof buf, c->cc, 0, &r, NULL, 0); break;
        }
        CHECK(n > 0);
        CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK); /* valid before the change */
        if (c->offset == (size_t)-2) buf[6] = c->value; /* the function-code byte */
        else if (c->offset == SKYMEM_ROUTE_HDR_LEN + SKYMEM_CD_CHUNK_ID) memset(buf + R + c->offset, c->value, 4);
        else buf[R + c->offset] = c->value;
        skymem_cmd_finalize(buf, (size_t)n);
        rc = skymem_parse(buf, (size_t)n, &m);
        if (rc != c->err) fprintf(stderr, "strict field '%s': %s\n", c->field, skymem_strerror(rc));
        CHECK_EQ_INT(rc, c->err);
        CHECK_EQ_INT(skymem_nak_for_parse_error(rc), c->nak);
        CHECK(skymem_intact_data_cmd(buf, (size_t)n, &got) && got.request_id == r.request_id); /* NAKable */
    }
    CHECK_EQ_INT(skymem_nak_for_parse_error(SKYMEM_E_BODY_LEN), SKYMEM_NAK_BAD_LENGTH);
    CHECK(!skymem_intact_data_cmd(buf, 10, &got));
    { /* replies: the reply header's reserved byte and the route header's are refused too */
        int n = skymem_build_reply(buf, sizeof buf, 0, 0, 0, &r, SKYMEM_REPLY_ACK, 3, 0, 1, 1, hash, 32);
        CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
        buf[SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_RH_RESERVED] = 1;
        CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_RESERVED);
        buf[SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_RH_RESERVED] = 0;
        buf[SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_RESERVED] = 1;
        CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_RESERVED);
    }
}

/* The origin record (issue 15): a migration's SET_CHUNK carries the chunk's ground station after its
 * descriptor; it is refused anywhere else, and packets without it are what they always were. */
static void test_origin_record(void)
{
    static uint8_t buf[SKYMEM_MAX_PACKET];
    uint8_t data[64];
    skymem_msg_t m;
    skymem_route_t r = sample_route();
    skymem_chunk_desc_t d;
    skymem_origin_t o = {7, 2, 3};
    int n, plain;
    memset(data, 0x33, sizeof data);
    memset(&d, 0, sizeof d);
    memset(d.block_hash, 0x22, 32);
    d.chunk_id = 0;
    d.chunk_count = 1;
    d.data_len = sizeof data;
    d.crc32c = skymem_crc32c(data, sizeof data);
    plain = skymem_build_set_chunk(buf, sizeof buf, 0, &r, &d, data);
    CHECK_EQ_INT(skymem_build_set_chunk_origin(buf, sizeof buf, 0, &r, &d, &o, data), SKYMEM_E_RANGE); /* not MIGRATION */
    r.flags = SKYMEM_RF_MIGRATION;
    n = skymem_build_set_chunk_origin(buf, sizeof buf, 0, &r, &d, &o, data);
    CHECK_EQ_INT(n, plain + (int)SKYMEM_ORIGIN_LEN);
    CHECK_EQ_INT(buf[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_CD_FLAGS], SKYMEM_CDF_ORIGIN);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(m.has_origin && m.origin.ground == 7 && m.origin.via_plane == 2 && m.origin.via_sat == 3);
    CHECK(m.desc.data_len == sizeof data && memcmp(m.data, data, sizeof data) == 0);
    check_mutations(buf, (size_t)n, 0);
    /* the record's reserved field must be zero */
    buf[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_CHUNK_DESC_LEN + SKYMEM_OR_RESERVED + 1] = 1;
    skymem_cmd_finalize(buf, (size_t)n);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_RESERVED);
    /* a ground station may not claim an origin: only a migration (route flag MIGRATION) carries one */
    n = skymem_build_set_chunk_origin(buf, sizeof buf, 0, &r, &d, &o, data);
    buf[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_FLAGS] = 0;
    skymem_cmd_finalize(buf, (size_t)n);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_RESERVED);
    /* nor does a DATA reply */
    d.flags = SKYMEM_CDF_ORIGIN;
    {
        uint8_t body[SKYMEM_CHUNK_DESC_LEN + SKYMEM_ORIGIN_LEN + sizeof data];
        skymem_chunk_desc_encode(body, &d);
        memset(body + SKYMEM_CHUNK_DESC_LEN, 0, SKYMEM_ORIGIN_LEN);
        memcpy(body + SKYMEM_CHUNK_DESC_LEN + SKYMEM_ORIGIN_LEN, data, sizeof data);
        n = skymem_build_reply(buf, sizeof buf, 0, 0, 0, &r, SKYMEM_REPLY_DATA, SKYMEM_GET_CHUNK_CC, 0, 0, 0, body,
                               sizeof body);
        CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_E_RESERVED);
    }
    /* skymem_build_set_chunk never lets the flag through without its record */
    n = skymem_build_set_chunk(buf, sizeof buf, 0, &r, &d, data);
    CHECK_EQ_INT(n, plain);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)n, &m), SKYMEM_OK);
    CHECK(!m.has_origin);
}

int main(void)
{
    size_t i;
    for (i = 0; i < 32; i++) HASH[i] = (uint8_t)(0xC0 + i);
    test_golden();
    test_set_param();
    test_data_cmds();
    test_replies();
    test_strict_fields();
    test_origin_record();
    return check_report("codec");
}
