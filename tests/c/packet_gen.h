/* packet_gen.h -- valid SkyMemory packets of every kind and random mutations of
 * them, for the replay tool and the fuzz corpus. Deterministic from a seed. */
#ifndef PACKET_GEN_H
#define PACKET_GEN_H

#include <stdint.h>
#include <string.h>

#include "skymem_codec.h"
#include "skymem_crc32c.h"

typedef struct {
    uint64_t s;
} pg_rng_t;

static uint32_t pg_next(pg_rng_t *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return (uint32_t)(r->s >> 16);
}

#define PG_KINDS 17

/* Builds valid packet number `kind` (0..PG_KINDS-1) with random fields. Returns its length. */
static int pg_valid(pg_rng_t *r, int kind, uint8_t *buf, size_t cap)
{
    skymem_route_t rt;
    skymem_chunk_desc_t d;
    skymem_stats_t st;
    uint8_t hash[32], data[512];
    uint16_t dlen = (uint16_t)(pg_next(r) % sizeof data);
    int i;
    memset(&rt, 0, sizeof rt);
    rt.dst_plane = 0;
    rt.dst_sat = 0;
    rt.src_plane = SKYMEM_GROUND_PLANE;
    rt.src_sat = (uint16_t)(pg_next(r) % 8);
    rt.via_plane = SKYMEM_NO_SAT;
    rt.via_sat = SKYMEM_NO_SAT;
    rt.request_id = pg_next(r);
    rt.ttl = SKYMEM_DEFAULT_TTL;
    for (i = 0; i < 32; i++) hash[i] = (uint8_t)pg_next(r);
    for (i = 0; i < (int)sizeof data; i++) data[i] = (uint8_t)pg_next(r);
    memset(&d, 0, sizeof d);
    memcpy(d.block_hash, hash, 32);
    d.chunk_id = pg_next(r) % 16;
    d.chunk_count = 16;
    d.data_len = dlen;
    d.crc32c = skymem_crc32c(data, dlen);
    d.gossip_radius = (uint8_t)(pg_next(r) % 3);
    memset(&st, 0, sizeof st);
    st.cmd_count = pg_next(r);
    switch (kind) {
    case 0: return skymem_build_cmd(buf, cap, SKYMEM_CMD_MID, SKYMEM_NOOP_CC, 0, NULL, 0);
    case 1: return skymem_build_cmd(buf, cap, SKYMEM_SEND_HK_MID, 0, 0, NULL, 0);
    case 2: return skymem_build_set_param(buf, cap, 0, NULL, SKYMEM_PARAM_DELAY_SCALE_PPM, 0);
    case 3: return skymem_build_data_cmd(buf, cap, SKYMEM_NOOP_CC, 1, &rt, NULL, 0);
    case 4: return skymem_build_data_cmd(buf, cap, SKYMEM_STATS_CC, 1, &rt, NULL, 0);
    case 5: return skymem_build_set_chunk(buf, cap, 2, &rt, &d, data);
    case 6: return skymem_build_get_chunk(buf, cap, 3, &rt, hash, d.chunk_id);
    case 7: return skymem_build_get_chunks(buf, cap, 4, &rt, hash, 0, 1 + pg_next(r) % 4, 1);
    case 8: return skymem_build_probe(buf, cap, 5, &rt, hash, 0);
    case 9: return skymem_build_evict(buf, cap, 6, &rt, hash, pg_next(r), 0);
    case 10: return skymem_build_migrate(buf, cap, 7, &rt, hash, 0, 2, 1, 0, 0);
    case 11: return skymem_build_reply(buf, cap, 8, 1, 2, &rt, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 1, 1, hash, 32);
    case 12: return skymem_build_reply(buf, cap, 8, 1, 2, &rt, SKYMEM_REPLY_NAK, SKYMEM_GET_CHUNK_CC, 1, 1, 0, hash, 32);
    case 13: return skymem_build_reply_data(buf, cap, 9, 1, 2, &rt, SKYMEM_GET_CHUNK_CC, &d, data);
    case 14: return skymem_build_reply_stats(buf, cap, 9, 1, 2, &rt, &st);
    case 15: return skymem_build_hk(buf, cap, 10, 1, 2, &st);
    default: {
        skymem_route_t ra = rt;
        uint8_t body[36 + SKYMEM_AUTH_TRAILER_LEN];
        ra.flags = SKYMEM_RF_AUTH;
        memset(body, 0x11, sizeof body);
        memcpy(body, hash, 32);
        return skymem_build_data_cmd(buf, cap, SKYMEM_PROBE_CC, 11, &ra, body, sizeof body);
    }
    }
}

/* Mutates buf[0..*len) in place (buffer capacity cap). */
static void pg_mutate(pg_rng_t *r, uint8_t *buf, size_t *len, size_t cap)
{
    int k, rounds = 1 + (int)(pg_next(r) % 4), fix_checksum = (pg_next(r) % 2) == 0;
    for (k = 0; k < rounds; k++) {
        size_t n = *len;
        switch (pg_next(r) % 8) {
        case 0: /* flip a bit */
            if (n) buf[pg_next(r) % n] ^= (uint8_t)(1u << (pg_next(r) % 8));
            break;
        case 1: /* overwrite a byte, headers more likely */
            if (n) buf[pg_next(r) % (n < 64 ? n : 64)] = (uint8_t)pg_next(r);
            break;
        case 2: /* truncate */
            *len = n ? pg_next(r) % n : 0;
            break;
        case 3: { /* extend */
            size_t add = 1 + pg_next(r) % 64, i;
            if (n + add > cap) add = cap - n;
            for (i = 0; i < add; i++) buf[n + i] = (uint8_t)pg_next(r);
            *len = n + add;
            break;
        }
        case 4: /* random length field */
            if (n >= 6) skymem_put_u16(buf + 4, (uint16_t)pg_next(r));
            break;
        case 5: /* length field consistent with a wrong size */
            if (n >= 7) skymem_put_u16(buf + 4, (uint16_t)(n - 7));
            break;
        case 6: /* interesting values in a 16-bit field (counts, data_len, ids) */
            if (n >= 2) {
                static const uint16_t v[] = {0, 1, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF};
                size_t at = pg_next(r) % (n - 1);
                skymem_put_u16(buf + at, v[pg_next(r) % 10]);
            }
            break;
        default: /* swap the message id */
            if (n >= 2) {
                static const uint16_t mids[] = {SKYMEM_CMD_MID, SKYMEM_SEND_HK_MID, SKYMEM_DATA_CMD_MID,
                                                ISL_ROUTER_CMD_MID, SKYMEM_HK_TLM_MID, SKYMEM_REPLY_TLM_MID,
                                                0x1882, 0x0000, 0xFFFF};
                skymem_put_u16(buf, mids[pg_next(r) % 9]);
            }
            break;
        }
    }
    if (fix_checksum && *len >= 8 && (buf[0] & 0x10)) skymem_cmd_finalize(buf, *len);
}

/* A random packet: 10% pure noise, 90% a mutated valid packet. */
static void pg_random_packet(pg_rng_t *r, uint8_t *buf, size_t *len, size_t cap)
{
    if (pg_next(r) % 10 == 0) {
        size_t n = pg_next(r) % 200, i;
        for (i = 0; i < n; i++) buf[i] = (uint8_t)pg_next(r);
        *len = n;
        return;
    }
    {
        int n = pg_valid(r, (int)(pg_next(r) % PG_KINDS), buf, cap);
        *len = n > 0 ? (size_t)n : 0;
        pg_mutate(r, buf, len, cap);
    }
}

#endif
