/* skymem_codec.c -- packet encode/parse for the SkyMemory wire format. */
#include "skymem_codec.h"

#include <string.h>

/* ---- errors ---------------------------------------------------------------- */
const char *skymem_strerror(int err)
{
    switch (err) {
    case SKYMEM_OK: return "ok";
    case SKYMEM_E_NULL: return "null argument";
    case SKYMEM_E_SHORT: return "packet shorter than its headers";
    case SKYMEM_E_LENGTH: return "length field disagrees with bytes received";
    case SKYMEM_E_VERSION: return "bad CCSDS version";
    case SKYMEM_E_NO_SEC_HDR: return "secondary header flag clear";
    case SKYMEM_E_SEQ_FLAGS: return "segmented packet";
    case SKYMEM_E_CHECKSUM: return "bad command checksum";
    case SKYMEM_E_MID: return "unknown message id";
    case SKYMEM_E_CC: return "bad function code";
    case SKYMEM_E_BODY_LEN: return "wrong payload length";
    case SKYMEM_E_DATA_LEN: return "chunk data_len disagrees with bytes received";
    case SKYMEM_E_RANGE: return "field out of range";
    case SKYMEM_E_REPLY_KIND: return "unknown reply kind";
    case SKYMEM_E_AUTH_TRAILER: return "auth flag without room for trailer";
    case SKYMEM_E_BUF_SMALL: return "output buffer too small";
    case SKYMEM_E_RESERVED: return "reserved field not zero";
    case SKYMEM_E_TYPE: return "type bit disagrees with message id";
    default: return "unknown error";
    }
}

/* ---- big-endian ------------------------------------------------------------ */
uint16_t skymem_get_u16(const uint8_t *p) { return (uint16_t)((uint16_t)p[0] << 8 | p[1]); }
uint32_t skymem_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
uint64_t skymem_get_u64(const uint8_t *p) { return (uint64_t)skymem_get_u32(p) << 32 | skymem_get_u32(p + 4); }
void skymem_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
void skymem_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
void skymem_put_u64(uint8_t *p, uint64_t v)
{
    skymem_put_u32(p, (uint32_t)(v >> 32));
    skymem_put_u32(p + 4, (uint32_t)v);
}

/* ---- primary header -------------------------------------------------------- */
int skymem_pri_encode(uint8_t *buf, size_t cap, uint16_t mid, uint16_t seq_count, size_t total_len)
{
    if (buf == NULL) return SKYMEM_E_NULL;
    if (cap < SKYMEM_PRI_HDR_LEN) return SKYMEM_E_BUF_SMALL;
    if (total_len < SKYMEM_PRI_HDR_LEN + 1 || total_len > 65542u) return SKYMEM_E_RANGE;
    skymem_put_u16(buf, mid);
    skymem_put_u16(buf + 2, (uint16_t)(0xC000u | (seq_count & 0x3FFFu)));
    skymem_put_u16(buf + 4, (uint16_t)(total_len - 7u));
    return SKYMEM_OK;
}

int skymem_pri_decode(const uint8_t *buf, size_t len, skymem_pri_hdr_t *out)
{
    uint16_t w0, w1;
    if (buf == NULL || out == NULL) return SKYMEM_E_NULL;
    if (len < SKYMEM_PRI_HDR_LEN) return SKYMEM_E_SHORT;
    w0 = skymem_get_u16(buf);
    w1 = skymem_get_u16(buf + 2);
    out->mid = w0;
    out->version = (uint8_t)(w0 >> 13);
    out->is_cmd = (uint8_t)((w0 >> 12) & 1u);
    out->has_sec_hdr = (uint8_t)((w0 >> 11) & 1u);
    out->apid = (uint16_t)(w0 & 0x7FFu);
    out->seq_flags = (uint8_t)(w1 >> 14);
    out->seq_count = (uint16_t)(w1 & 0x3FFFu);
    out->total_len = (size_t)skymem_get_u16(buf + 4) + 7u;
    return SKYMEM_OK;
}

/* ---- command checksum ------------------------------------------------------ */
uint8_t skymem_cmd_checksum(const uint8_t *pkt, size_t len)
{
    uint64_t w = 0, w1 = 0, w2 = 0, w3 = 0, v[4];
    uint8_t x = 0xFF;
    size_t i = 0;
    /* 32 bytes a step into four independent words (XOR does not care how bytes are grouped), then
     * fold them to a byte: a byte loop cost a 6 KiB SET_CHUNK more than its authentication tag */
    for (; i + 32u <= len; i += 32u) {
        memcpy(v, pkt + i, 32u);
        w ^= v[0];
        w1 ^= v[1];
        w2 ^= v[2];
        w3 ^= v[3];
    }
    w ^= w1 ^ w2 ^ w3;
    for (; i + 8u <= len; i += 8u) {
        memcpy(v, pkt + i, 8u);
        w ^= v[0];
    }
    w ^= w >> 32;
    w ^= w >> 16;
    w ^= w >> 8;
    x ^= (uint8_t)w;
    for (; i < len; i++) x ^= pkt[i];
    if (len > 7) x ^= pkt[7]; /* byte 7 counts as zero */
    return x;
}

int skymem_cmd_finalize(uint8_t *pkt, size_t len)
{
    if (pkt == NULL) return SKYMEM_E_NULL;
    if (len < SKYMEM_CMD_HDR_LEN) return SKYMEM_E_SHORT;
    pkt[7] = skymem_cmd_checksum(pkt, len);
    return SKYMEM_OK;
}

int skymem_cmd_checksum_ok(const uint8_t *pkt, size_t len)
{
    if (pkt == NULL || len < SKYMEM_CMD_HDR_LEN) return 0;
    return skymem_cmd_checksum(pkt, len) == pkt[7];
}

/* ---- route header / chunk descriptor / stats ------------------------------ */
void skymem_route_encode(uint8_t *out, const skymem_route_t *r)
{
    skymem_put_u16(out + SKYMEM_ROUTE_DST_PLANE, r->dst_plane);
    skymem_put_u16(out + SKYMEM_ROUTE_DST_SAT, r->dst_sat);
    skymem_put_u16(out + SKYMEM_ROUTE_SRC_PLANE, r->src_plane);
    skymem_put_u16(out + SKYMEM_ROUTE_SRC_SAT, r->src_sat);
    skymem_put_u16(out + SKYMEM_ROUTE_VIA_PLANE, r->via_plane);
    skymem_put_u16(out + SKYMEM_ROUTE_VIA_SAT, r->via_sat);
    skymem_put_u32(out + SKYMEM_ROUTE_REQUEST_ID, r->request_id);
    out[SKYMEM_ROUTE_TTL] = r->ttl;
    out[SKYMEM_ROUTE_HOPS] = r->hops;
    out[SKYMEM_ROUTE_FLAGS] = r->flags;
    out[SKYMEM_ROUTE_RESERVED] = r->reserved;
}

void skymem_route_decode(const uint8_t *in, skymem_route_t *r)
{
    r->dst_plane = skymem_get_u16(in + SKYMEM_ROUTE_DST_PLANE);
    r->dst_sat = skymem_get_u16(in + SKYMEM_ROUTE_DST_SAT);
    r->src_plane = skymem_get_u16(in + SKYMEM_ROUTE_SRC_PLANE);
    r->src_sat = skymem_get_u16(in + SKYMEM_ROUTE_SRC_SAT);
    r->via_plane = skymem_get_u16(in + SKYMEM_ROUTE_VIA_PLANE);
    r->via_sat = skymem_get_u16(in + SKYMEM_ROUTE_VIA_SAT);
    r->request_id = skymem_get_u32(in + SKYMEM_ROUTE_REQUEST_ID);
    r->ttl = in[SKYMEM_ROUTE_TTL];
    r->hops = in[SKYMEM_ROUTE_HOPS];
    r->flags = in[SKYMEM_ROUTE_FLAGS];
    r->reserved = in[SKYMEM_ROUTE_RESERVED];
}

void skymem_chunk_desc_encode(uint8_t *out, const skymem_chunk_desc_t *d)
{
    memcpy(out + SKYMEM_CD_BLOCK_HASH, d->block_hash, SKYMEM_BLOCK_HASH_LEN);
    skymem_put_u32(out + SKYMEM_CD_CHUNK_ID, d->chunk_id);
    skymem_put_u32(out + SKYMEM_CD_CHUNK_COUNT, d->chunk_count);
    skymem_put_u64(out + SKYMEM_CD_CREATED_MS, d->created_ms);
    skymem_put_u32(out + SKYMEM_CD_CRC32C, d->crc32c);
    skymem_put_u16(out + SKYMEM_CD_DATA_LEN, d->data_len);
    out[SKYMEM_CD_GOSSIP_RADIUS] = d->gossip_radius;
    out[SKYMEM_CD_FLAGS] = d->flags;
}

void skymem_chunk_desc_decode(const uint8_t *in, skymem_chunk_desc_t *d)
{
    memcpy(d->block_hash, in + SKYMEM_CD_BLOCK_HASH, SKYMEM_BLOCK_HASH_LEN);
    d->chunk_id = skymem_get_u32(in + SKYMEM_CD_CHUNK_ID);
    d->chunk_count = skymem_get_u32(in + SKYMEM_CD_CHUNK_COUNT);
    d->created_ms = skymem_get_u64(in + SKYMEM_CD_CREATED_MS);
    d->crc32c = skymem_get_u32(in + SKYMEM_CD_CRC32C);
    d->data_len = skymem_get_u16(in + SKYMEM_CD_DATA_LEN);
    d->gossip_radius = in[SKYMEM_CD_GOSSIP_RADIUS];
    d->flags = in[SKYMEM_CD_FLAGS];
}

void skymem_stats_encode(uint8_t *out, const skymem_stats_t *s)
{
    skymem_put_u16(out + SKYMEM_ST_PLANE, s->plane);
    skymem_put_u16(out + SKYMEM_ST_SAT, s->sat);
    skymem_put_u32(out + SKYMEM_ST_CMD_COUNT, s->cmd_count);
    skymem_put_u32(out + SKYMEM_ST_ERR_COUNT, s->err_count);
    skymem_put_u32(out + SKYMEM_ST_CHUNKS, s->chunks);
    skymem_put_u64(out + SKYMEM_ST_BYTES_USED, s->bytes_used);
    skymem_put_u64(out + SKYMEM_ST_BYTES_BUDGET, s->bytes_budget);
    skymem_put_u32(out + SKYMEM_ST_LRU_EVICTIONS, s->lru_evictions);
    skymem_put_u32(out + SKYMEM_ST_BLOCKS_PURGED, s->blocks_purged);
    skymem_put_u32(out + SKYMEM_ST_RX_PACKETS, s->rx_packets);
    skymem_put_u32(out + SKYMEM_ST_TX_PACKETS, s->tx_packets);
    skymem_put_u32(out + SKYMEM_ST_FORWARDED, s->forwarded);
    skymem_put_u32(out + SKYMEM_ST_DROPPED, s->dropped);
    skymem_put_u32(out + SKYMEM_ST_INVALID, s->invalid);
    skymem_put_u32(out + SKYMEM_ST_AUTH_FAILURES, s->auth_failures);
    skymem_put_u32(out + SKYMEM_ST_MIGRATED_OUT, s->migrated_out);
    skymem_put_u32(out + SKYMEM_ST_MIGRATED_IN, s->migrated_in);
    skymem_put_u64(out + SKYMEM_ST_MISSION_TIME_MS, s->mission_time_ms);
    skymem_put_u32(out + SKYMEM_ST_UPTIME_S, s->uptime_s);
    skymem_put_u32(out + SKYMEM_ST_SPARE, 0);
}

void skymem_stats_decode(const uint8_t *in, skymem_stats_t *s)
{
    s->plane = skymem_get_u16(in + SKYMEM_ST_PLANE);
    s->sat = skymem_get_u16(in + SKYMEM_ST_SAT);
    s->cmd_count = skymem_get_u32(in + SKYMEM_ST_CMD_COUNT);
    s->err_count = skymem_get_u32(in + SKYMEM_ST_ERR_COUNT);
    s->chunks = skymem_get_u32(in + SKYMEM_ST_CHUNKS);
    s->bytes_used = skymem_get_u64(in + SKYMEM_ST_BYTES_USED);
    s->bytes_budget = skymem_get_u64(in + SKYMEM_ST_BYTES_BUDGET);
    s->lru_evictions = skymem_get_u32(in + SKYMEM_ST_LRU_EVICTIONS);
    s->blocks_purged = skymem_get_u32(in + SKYMEM_ST_BLOCKS_PURGED);
    s->rx_packets = skymem_get_u32(in + SKYMEM_ST_RX_PACKETS);
    s->tx_packets = skymem_get_u32(in + SKYMEM_ST_TX_PACKETS);
    s->forwarded = skymem_get_u32(in + SKYMEM_ST_FORWARDED);
    s->dropped = skymem_get_u32(in + SKYMEM_ST_DROPPED);
    s->invalid = skymem_get_u32(in + SKYMEM_ST_INVALID);
    s->auth_failures = skymem_get_u32(in + SKYMEM_ST_AUTH_FAILURES);
    s->migrated_out = skymem_get_u32(in + SKYMEM_ST_MIGRATED_OUT);
    s->migrated_in = skymem_get_u32(in + SKYMEM_ST_MIGRATED_IN);
    s->mission_time_ms = skymem_get_u64(in + SKYMEM_ST_MISSION_TIME_MS);
    s->uptime_s = skymem_get_u32(in + SKYMEM_ST_UPTIME_S);
}

/* ---- parsing --------------------------------------------------------------- */

/* GET_CHUNKS / MIGRATE range: count 1..MAX, stride >= 1, last id fits in u32. */
static int check_range(uint32_t first, uint32_t count, uint32_t stride)
{
    if (count == 0 || count > SKYMEM_MAX_GET_CHUNKS || stride == 0) return SKYMEM_E_RANGE;
    if ((uint64_t)first + (uint64_t)(count - 1u) * stride > 0xFFFFFFFFull) return SKYMEM_E_RANGE;
    return SKYMEM_OK;
}

/* Chunk descriptor [+ origin record] + data: data_len must match the remaining bytes exactly,
 * the chunk id must be one of the block's chunk_count (>= 1) chunks, and only known flags may be
 * set. An origin record is allowed only in a migration's SET_CHUNK (`origin_ok`). */
static int parse_chunk(const uint8_t *p, size_t n, skymem_msg_t *m, int origin_ok)
{
    size_t head = SKYMEM_CHUNK_DESC_LEN;
    if (n < SKYMEM_CHUNK_DESC_LEN) return SKYMEM_E_BODY_LEN;
    skymem_chunk_desc_decode(p, &m->desc);
    if (m->desc.flags & (uint8_t)~SKYMEM_CDF_KNOWN) return SKYMEM_E_RESERVED; /* before the flags say a length */
    if (m->desc.flags & SKYMEM_CDF_ORIGIN) {
        head += SKYMEM_ORIGIN_LEN;
        if (n < head) return SKYMEM_E_BODY_LEN;
    }
    if ((size_t)m->desc.data_len != n - head) return SKYMEM_E_DATA_LEN;
    if (m->desc.data_len > SKYMEM_MAX_CHUNK_DATA) return SKYMEM_E_RANGE;
    if (m->desc.chunk_count == 0 || m->desc.chunk_id >= m->desc.chunk_count) return SKYMEM_E_RANGE;
    if (m->desc.flags & SKYMEM_CDF_ORIGIN) {
        const uint8_t *o = p + SKYMEM_CHUNK_DESC_LEN;
        if (!origin_ok || skymem_get_u16(o + SKYMEM_OR_RESERVED) != 0) return SKYMEM_E_RESERVED;
        m->has_origin = 1;
        m->origin.ground = skymem_get_u16(o + SKYMEM_OR_GROUND);
        m->origin.via_plane = skymem_get_u16(o + SKYMEM_OR_VIA_PLANE);
        m->origin.via_sat = skymem_get_u16(o + SKYMEM_OR_VIA_SAT);
    }
    memcpy(m->block_hash, m->desc.block_hash, SKYMEM_BLOCK_HASH_LEN);
    m->has_block_hash = 1;
    m->chunk_id = m->desc.chunk_id;
    m->data = p + head;
    return SKYMEM_OK;
}

static int parse_set_param(const uint8_t *p, size_t n, skymem_msg_t *m)
{
    if (n != SKYMEM_SET_PARAM_LEN) return SKYMEM_E_BODY_LEN;
    m->param_id = skymem_get_u16(p);
    if (skymem_get_u16(p + 2) != 0) return SKYMEM_E_RESERVED;
    m->param_value = skymem_get_u32(p + 4);
    return SKYMEM_OK;
}

static int parse_data_cmd_body(const uint8_t *p, size_t n, skymem_msg_t *m)
{
    switch (m->cc) {
    case SKYMEM_NOOP_CC:
    case SKYMEM_RESET_COUNTERS_CC:
    case SKYMEM_STATS_CC:
        return n == 0 ? SKYMEM_OK : SKYMEM_E_BODY_LEN;
    case SKYMEM_SET_PARAM_CC:
        return parse_set_param(p, n, m);
    case SKYMEM_SET_CHUNK_CC:
        return parse_chunk(p, n, m, (m->route.flags & SKYMEM_RF_MIGRATION) != 0);
    case SKYMEM_GET_CHUNK_CC:
    case SKYMEM_PROBE_CC:
        if (n != SKYMEM_CHUNK_REF_LEN) return SKYMEM_E_BODY_LEN;
        memcpy(m->block_hash, p, SKYMEM_BLOCK_HASH_LEN);
        m->has_block_hash = 1;
        m->chunk_id = skymem_get_u32(p + SKYMEM_BLOCK_HASH_LEN);
        return SKYMEM_OK;
    case SKYMEM_GET_CHUNKS_CC:
    case SKYMEM_MIGRATE_CC:
        if (n != (m->cc == SKYMEM_MIGRATE_CC ? SKYMEM_MIGRATE_LEN : SKYMEM_CHUNK_RANGE_LEN)) return SKYMEM_E_BODY_LEN;
        memcpy(m->block_hash, p, SKYMEM_BLOCK_HASH_LEN);
        m->has_block_hash = 1;
        m->first = skymem_get_u32(p + SKYMEM_CR_FIRST);
        m->count = skymem_get_u32(p + SKYMEM_CR_COUNT);
        m->stride = skymem_get_u32(p + SKYMEM_CR_STRIDE);
        if (m->cc == SKYMEM_MIGRATE_CC) {
            m->target_plane = skymem_get_u16(p + SKYMEM_MG_TARGET_PLANE);
            m->target_sat = skymem_get_u16(p + SKYMEM_MG_TARGET_SAT);
        }
        return check_range(m->first, m->count, m->stride);
    case SKYMEM_EVICT_BLOCK_CC:
        if (n != SKYMEM_EVICT_LEN) return SKYMEM_E_BODY_LEN;
        memcpy(m->block_hash, p, SKYMEM_BLOCK_HASH_LEN);
        m->has_block_hash = 1;
        m->evict_id = skymem_get_u32(p + SKYMEM_EV_EVICT_ID);
        m->radius = p[SKYMEM_EV_RADIUS];
        if (p[SKYMEM_EV_SPARE] | p[SKYMEM_EV_SPARE + 1] | p[SKYMEM_EV_SPARE + 2]) return SKYMEM_E_RESERVED;
        return SKYMEM_OK;
    default:
        return SKYMEM_E_CC;
    }
}

static int parse_reply_body(const uint8_t *p, size_t n, skymem_msg_t *m)
{
    if (n < SKYMEM_REPLY_HDR_LEN) return SKYMEM_E_BODY_LEN;
    m->reply_kind = p[SKYMEM_RH_KIND];
    m->reply_cc = p[SKYMEM_RH_CC];
    m->reply_status = p[SKYMEM_RH_STATUS];
    m->reply_chunk_id = skymem_get_u32(p + SKYMEM_RH_CHUNK_ID);
    m->reply_value = skymem_get_u32(p + SKYMEM_RH_VALUE);
    if (p[SKYMEM_RH_RESERVED] != 0) return SKYMEM_E_RESERVED;
    p += SKYMEM_REPLY_HDR_LEN;
    n -= SKYMEM_REPLY_HDR_LEN;
    switch (m->reply_kind) {
    case SKYMEM_REPLY_DATA:
        return parse_chunk(p, n, m, 0);
    case SKYMEM_REPLY_ACK:
    case SKYMEM_REPLY_NAK:
        if (n == 0) return SKYMEM_OK;
        if (n != SKYMEM_BLOCK_HASH_LEN) return SKYMEM_E_BODY_LEN;
        memcpy(m->block_hash, p, SKYMEM_BLOCK_HASH_LEN);
        m->has_block_hash = 1;
        return SKYMEM_OK;
    case SKYMEM_REPLY_EVICTED:
        if (n != SKYMEM_BLOCK_HASH_LEN) return SKYMEM_E_BODY_LEN;
        memcpy(m->block_hash, p, SKYMEM_BLOCK_HASH_LEN);
        m->has_block_hash = 1;
        return SKYMEM_OK;
    case SKYMEM_REPLY_STATS:
        if (n != SKYMEM_STATS_LEN) return SKYMEM_E_BODY_LEN;
        skymem_stats_decode(p, &m->stats);
        return SKYMEM_OK;
    default:
        return SKYMEM_E_REPLY_KIND;
    }
}

/* Splits off the route header and, if flagged, the auth trailer. Unknown flags and a
 * non-zero reserved byte are refused: a newer sender must not be misread. */
static int take_route(const uint8_t *p, size_t n, skymem_msg_t *m)
{
    if (n < SKYMEM_ROUTE_HDR_LEN) return SKYMEM_E_BODY_LEN;
    skymem_route_decode(p, &m->route);
    m->has_route = 1;
    if (m->route.reserved != 0 || (m->route.flags & (uint8_t)~SKYMEM_RF_KNOWN)) return SKYMEM_E_RESERVED;
    p += SKYMEM_ROUTE_HDR_LEN;
    n -= SKYMEM_ROUTE_HDR_LEN;
    if (m->route.flags & SKYMEM_RF_AUTH) {
        if (n < SKYMEM_AUTH_TRAILER_LEN) return SKYMEM_E_AUTH_TRAILER;
        n -= SKYMEM_AUTH_TRAILER_LEN;
        m->auth = p + n;
    }
    m->payload = p;
    m->payload_len = n;
    return SKYMEM_OK;
}

int skymem_parse(const uint8_t *buf, size_t len, skymem_msg_t *m)
{
    int rc;
    size_t hdr;
    if (buf == NULL || m == NULL) return SKYMEM_E_NULL;
    memset(m, 0, sizeof(*m));
    rc = skymem_pri_decode(buf, len, &m->pri);
    if (rc != SKYMEM_OK) return rc;
    if (m->pri.version != 0) return SKYMEM_E_VERSION;
    if (!m->pri.has_sec_hdr) return SKYMEM_E_NO_SEC_HDR;
    if (m->pri.seq_flags != 3u) return SKYMEM_E_SEQ_FLAGS;
    if (m->pri.total_len != len) return SKYMEM_E_LENGTH;
    m->mid = m->pri.mid;
    m->is_cmd = m->pri.is_cmd;
    hdr = m->is_cmd ? SKYMEM_CMD_HDR_LEN : SKYMEM_TLM_HDR_LEN;
    if (len < hdr) return SKYMEM_E_SHORT;

    switch (m->mid) {
    case SKYMEM_CMD_MID:
    case SKYMEM_SEND_HK_MID:
    case SKYMEM_DATA_CMD_MID:
    case ISL_ROUTER_CMD_MID:
    case ISL_ROUTER_SEND_HK_MID:
        break;
    case SKYMEM_HK_TLM_MID:
    case SKYMEM_REPLY_TLM_MID:
    case ISL_ROUTER_HK_TLM_MID:
        break;
    default:
        return SKYMEM_E_MID;
    }

    if (m->is_cmd) {
        if (!skymem_cmd_checksum_ok(buf, len)) return SKYMEM_E_CHECKSUM;
        if (buf[6] & 0x80u) return SKYMEM_E_RESERVED; /* function code is 7 bits */
        m->cc = buf[6] & 0x7Fu;
        m->payload = buf + SKYMEM_CMD_HDR_LEN;
        m->payload_len = len - SKYMEM_CMD_HDR_LEN;
        switch (m->mid) {
        case SKYMEM_CMD_MID:
            if (m->cc == SKYMEM_NOOP_CC || m->cc == SKYMEM_RESET_COUNTERS_CC)
                return m->payload_len == 0 ? SKYMEM_OK : SKYMEM_E_BODY_LEN;
            if (m->cc == SKYMEM_SET_PARAM_CC) return parse_set_param(m->payload, m->payload_len, m);
            return SKYMEM_E_CC;
        case SKYMEM_SEND_HK_MID:
        case ISL_ROUTER_SEND_HK_MID:
            /* the payload, if any, is padding: a request at least as long as its answer is answered to its
             * sender by the native node (PROTOCOL.md §7), so no sender can use it as an amplifier */
            return m->cc != 0 ? SKYMEM_E_CC : SKYMEM_OK;
        case ISL_ROUTER_CMD_MID:
            return SKYMEM_OK; /* payload layout belongs to the ISL_ROUTER app */
        case SKYMEM_DATA_CMD_MID:
            if (m->cc >= SKYMEM_NUM_CC) return SKYMEM_E_CC;
            rc = take_route(m->payload, m->payload_len, m);
            if (rc != SKYMEM_OK) return rc;
            return parse_data_cmd_body(m->payload, m->payload_len, m);
        default:
            return SKYMEM_E_TYPE; /* telemetry MID with the command bit set */
        }
    }

    m->tlm_seconds = skymem_get_u32(buf + 6);
    m->tlm_subsecs = skymem_get_u16(buf + 10);
    m->payload = buf + SKYMEM_TLM_HDR_LEN;
    m->payload_len = len - SKYMEM_TLM_HDR_LEN;
    switch (m->mid) {
    case SKYMEM_HK_TLM_MID:
        if (m->payload_len != SKYMEM_STATS_LEN) return SKYMEM_E_BODY_LEN;
        skymem_stats_decode(m->payload, &m->stats);
        return SKYMEM_OK;
    case SKYMEM_REPLY_TLM_MID:
        rc = take_route(m->payload, m->payload_len, m);
        if (rc != SKYMEM_OK) return rc;
        return parse_reply_body(m->payload, m->payload_len, m);
    case ISL_ROUTER_HK_TLM_MID:
        return SKYMEM_OK;
    default:
        return SKYMEM_E_TYPE; /* command MID with the command bit clear */
    }
}

uint8_t skymem_nak_for_parse_error(int err)
{
    if (err == SKYMEM_E_CC) return SKYMEM_NAK_BAD_COMMAND;
    if (err == SKYMEM_E_RANGE || err == SKYMEM_E_RESERVED) return SKYMEM_NAK_BAD_PARAM;
    return SKYMEM_NAK_BAD_LENGTH;
}

int skymem_intact_data_cmd(const uint8_t *pkt, size_t len, skymem_route_t *route)
{
    if (pkt == NULL || route == NULL) return 0;
    if (len < SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN || skymem_get_u16(pkt) != SKYMEM_DATA_CMD_MID ||
        (size_t)skymem_get_u16(pkt + 4) + 7u != len || !skymem_cmd_checksum_ok(pkt, len))
        return 0;
    skymem_route_decode(pkt + SKYMEM_CMD_HDR_LEN, route);
    return 1;
}

/* ---- builders --------------------------------------------------------------- */
int skymem_build_cmd(uint8_t *buf, size_t cap, uint16_t mid, uint8_t cc, uint16_t seq, const uint8_t *payload,
                     size_t payload_len)
{
    size_t total = SKYMEM_CMD_HDR_LEN + payload_len;
    int rc;
    if (buf == NULL || (payload == NULL && payload_len != 0)) return SKYMEM_E_NULL;
    if (payload_len > SKYMEM_MAX_PACKET - SKYMEM_CMD_HDR_LEN) return SKYMEM_E_RANGE;
    if (cap < total) return SKYMEM_E_BUF_SMALL;
    if (cc > 0x7Fu) return SKYMEM_E_CC;
    rc = skymem_pri_encode(buf, cap, mid, seq, total);
    if (rc != SKYMEM_OK) return rc;
    buf[6] = cc;
    buf[7] = 0;
    if (payload_len) memmove(buf + SKYMEM_CMD_HDR_LEN, payload, payload_len);
    skymem_cmd_finalize(buf, total);
    return (int)total;
}

/* Writes header + route + body pieces (up to two) for a data-plane command. */
static int build_data2(uint8_t *buf, size_t cap, uint8_t cc, uint16_t seq, const skymem_route_t *route,
                       const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    size_t total = SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + alen + blen;
    if (buf == NULL || route == NULL || (a == NULL && alen) || (b == NULL && blen)) return SKYMEM_E_NULL;
    if (alen + blen > SKYMEM_MAX_PACKET - SKYMEM_CMD_HDR_LEN - SKYMEM_ROUTE_HDR_LEN) return SKYMEM_E_RANGE;
    if (cap < total) return SKYMEM_E_BUF_SMALL;
    if (cc > 0x7Fu) return SKYMEM_E_CC;
    skymem_pri_encode(buf, cap, SKYMEM_DATA_CMD_MID, seq, total);
    buf[6] = cc;
    buf[7] = 0;
    skymem_route_encode(buf + SKYMEM_CMD_HDR_LEN, route);
    if (alen) memmove(buf + SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN, a, alen);
    if (blen) memmove(buf + SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + alen, b, blen);
    skymem_cmd_finalize(buf, total);
    return (int)total;
}

int skymem_build_data_cmd(uint8_t *buf, size_t cap, uint8_t cc, uint16_t seq, const skymem_route_t *route,
                          const uint8_t *body, size_t body_len)
{
    return build_data2(buf, cap, cc, seq, route, body, body_len, NULL, 0);
}

int skymem_build_set_param(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route, uint16_t param_id,
                           uint32_t value)
{
    uint8_t b[SKYMEM_SET_PARAM_LEN];
    skymem_put_u16(b, param_id);
    skymem_put_u16(b + 2, 0);
    skymem_put_u32(b + 4, value);
    if (route == NULL) return skymem_build_cmd(buf, cap, SKYMEM_CMD_MID, SKYMEM_SET_PARAM_CC, seq, b, sizeof b);
    return build_data2(buf, cap, SKYMEM_SET_PARAM_CC, seq, route, b, sizeof b, NULL, 0);
}

int skymem_build_set_chunk(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           const skymem_chunk_desc_t *desc, const uint8_t *data)
{
    return skymem_build_set_chunk_origin(buf, cap, seq, route, desc, NULL, data);
}

int skymem_build_set_chunk_origin(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                                  const skymem_chunk_desc_t *desc, const skymem_origin_t *origin,
                                  const uint8_t *data)
{
    uint8_t d[SKYMEM_CHUNK_DESC_LEN + SKYMEM_ORIGIN_LEN];
    skymem_chunk_desc_t e;
    size_t head = SKYMEM_CHUNK_DESC_LEN;
    if (desc == NULL) return SKYMEM_E_NULL;
    if (desc->data_len > SKYMEM_MAX_CHUNK_DATA) return SKYMEM_E_RANGE;
    e = *desc;
    e.flags = (uint8_t)(desc->flags & ~SKYMEM_CDF_ORIGIN);
    if (origin != NULL) {
        if (route == NULL || !(route->flags & SKYMEM_RF_MIGRATION)) return SKYMEM_E_RANGE;
        e.flags |= SKYMEM_CDF_ORIGIN;
        skymem_put_u16(d + head + SKYMEM_OR_GROUND, origin->ground);
        skymem_put_u16(d + head + SKYMEM_OR_VIA_PLANE, origin->via_plane);
        skymem_put_u16(d + head + SKYMEM_OR_VIA_SAT, origin->via_sat);
        skymem_put_u16(d + head + SKYMEM_OR_RESERVED, 0);
        head += SKYMEM_ORIGIN_LEN;
    }
    skymem_chunk_desc_encode(d, &e);
    return build_data2(buf, cap, SKYMEM_SET_CHUNK_CC, seq, route, d, head, data, desc->data_len);
}

static int build_ref(uint8_t *buf, size_t cap, uint8_t cc, uint16_t seq, const skymem_route_t *route,
                     const uint8_t *hash, uint32_t chunk_id)
{
    uint8_t b[SKYMEM_CHUNK_REF_LEN];
    if (hash == NULL) return SKYMEM_E_NULL;
    memcpy(b, hash, SKYMEM_BLOCK_HASH_LEN);
    skymem_put_u32(b + SKYMEM_BLOCK_HASH_LEN, chunk_id);
    return build_data2(buf, cap, cc, seq, route, b, sizeof b, NULL, 0);
}

int skymem_build_get_chunk(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route, const uint8_t *hash,
                           uint32_t chunk_id)
{
    return build_ref(buf, cap, SKYMEM_GET_CHUNK_CC, seq, route, hash, chunk_id);
}

int skymem_build_probe(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route, const uint8_t *hash,
                       uint32_t chunk_id)
{
    return build_ref(buf, cap, SKYMEM_PROBE_CC, seq, route, hash, chunk_id);
}

int skymem_build_get_chunks(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route, const uint8_t *hash,
                            uint32_t first, uint32_t count, uint32_t stride)
{
    uint8_t b[SKYMEM_CHUNK_RANGE_LEN];
    if (hash == NULL) return SKYMEM_E_NULL;
    if (check_range(first, count, stride) != SKYMEM_OK) return SKYMEM_E_RANGE;
    memcpy(b, hash, SKYMEM_BLOCK_HASH_LEN);
    skymem_put_u32(b + SKYMEM_CR_FIRST, first);
    skymem_put_u32(b + SKYMEM_CR_COUNT, count);
    skymem_put_u32(b + SKYMEM_CR_STRIDE, stride);
    return build_data2(buf, cap, SKYMEM_GET_CHUNKS_CC, seq, route, b, sizeof b, NULL, 0);
}

int skymem_build_evict(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route, const uint8_t *hash,
                       uint32_t evict_id, uint8_t radius)
{
    uint8_t b[SKYMEM_EVICT_LEN];
    if (hash == NULL) return SKYMEM_E_NULL;
    memset(b, 0, sizeof b);
    memcpy(b, hash, SKYMEM_BLOCK_HASH_LEN);
    skymem_put_u32(b + SKYMEM_EV_EVICT_ID, evict_id);
    b[SKYMEM_EV_RADIUS] = radius;
    return build_data2(buf, cap, SKYMEM_EVICT_BLOCK_CC, seq, route, b, sizeof b, NULL, 0);
}

int skymem_build_migrate(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route, const uint8_t *hash,
                         uint32_t first, uint32_t count, uint32_t stride, uint16_t target_plane, uint16_t target_sat)
{
    uint8_t b[SKYMEM_MIGRATE_LEN];
    if (hash == NULL) return SKYMEM_E_NULL;
    if (check_range(first, count, stride) != SKYMEM_OK) return SKYMEM_E_RANGE;
    memcpy(b, hash, SKYMEM_BLOCK_HASH_LEN);
    skymem_put_u32(b + SKYMEM_CR_FIRST, first);
    skymem_put_u32(b + SKYMEM_CR_COUNT, count);
    skymem_put_u32(b + SKYMEM_CR_STRIDE, stride);
    skymem_put_u16(b + SKYMEM_MG_TARGET_PLANE, target_plane);
    skymem_put_u16(b + SKYMEM_MG_TARGET_SAT, target_sat);
    return build_data2(buf, cap, SKYMEM_MIGRATE_CC, seq, route, b, sizeof b, NULL, 0);
}

/* Telemetry header + up to three payload pieces. */
static int build_tlm3(uint8_t *buf, size_t cap, uint16_t mid, uint16_t seq, uint32_t sec, uint16_t sub,
                      const uint8_t *a, size_t alen, const uint8_t *b, size_t blen, const uint8_t *c, size_t clen)
{
    size_t total = SKYMEM_TLM_HDR_LEN + alen + blen + clen;
    if (buf == NULL || (a == NULL && alen) || (b == NULL && blen) || (c == NULL && clen)) return SKYMEM_E_NULL;
    if (alen + blen + clen > SKYMEM_MAX_PACKET - SKYMEM_TLM_HDR_LEN) return SKYMEM_E_RANGE;
    if (cap < total) return SKYMEM_E_BUF_SMALL;
    skymem_pri_encode(buf, cap, mid, seq, total);
    skymem_put_u32(buf + 6, sec);
    skymem_put_u16(buf + 10, sub);
    memset(buf + 12, 0, 4);
    if (alen) memmove(buf + SKYMEM_TLM_HDR_LEN, a, alen);
    if (blen) memmove(buf + SKYMEM_TLM_HDR_LEN + alen, b, blen);
    if (clen) memmove(buf + SKYMEM_TLM_HDR_LEN + alen + blen, c, clen);
    return (int)total;
}

int skymem_build_tlm(uint8_t *buf, size_t cap, uint16_t mid, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                     const uint8_t *payload, size_t payload_len)
{
    return build_tlm3(buf, cap, mid, seq, seconds, subsecs, payload, payload_len, NULL, 0, NULL, 0);
}

/* Route header + reply header in one 32-byte prefix. */
static void reply_prefix(uint8_t out[SKYMEM_ROUTE_HDR_LEN + SKYMEM_REPLY_HDR_LEN], const skymem_route_t *route,
                         uint8_t kind, uint8_t cc, uint8_t status, uint32_t chunk_id, uint32_t value)
{
    uint8_t *rh = out + SKYMEM_ROUTE_HDR_LEN;
    skymem_route_encode(out, route);
    rh[SKYMEM_RH_KIND] = kind;
    rh[SKYMEM_RH_CC] = cc;
    rh[SKYMEM_RH_STATUS] = status;
    rh[SKYMEM_RH_RESERVED] = 0;
    skymem_put_u32(rh + SKYMEM_RH_CHUNK_ID, chunk_id);
    skymem_put_u32(rh + SKYMEM_RH_VALUE, value);
}

int skymem_build_reply(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                       const skymem_route_t *route, uint8_t kind, uint8_t cc, uint8_t status, uint32_t chunk_id,
                       uint32_t value, const uint8_t *body, size_t body_len)
{
    uint8_t pre[SKYMEM_ROUTE_HDR_LEN + SKYMEM_REPLY_HDR_LEN];
    if (route == NULL) return SKYMEM_E_NULL;
    reply_prefix(pre, route, kind, cc, status, chunk_id, value);
    return build_tlm3(buf, cap, SKYMEM_REPLY_TLM_MID, seq, seconds, subsecs, pre, sizeof pre, body, body_len, NULL,
                      0);
}

int skymem_build_reply_data(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                            const skymem_route_t *route, uint8_t cc, const skymem_chunk_desc_t *desc,
                            const uint8_t *data)
{
    uint8_t pre[SKYMEM_ROUTE_HDR_LEN + SKYMEM_REPLY_HDR_LEN];
    uint8_t d[SKYMEM_CHUNK_DESC_LEN];
    if (route == NULL || desc == NULL) return SKYMEM_E_NULL;
    if (desc->data_len > SKYMEM_MAX_CHUNK_DATA) return SKYMEM_E_RANGE;
    reply_prefix(pre, route, SKYMEM_REPLY_DATA, cc, 0, desc->chunk_id, 0);
    skymem_chunk_desc_encode(d, desc);
    return build_tlm3(buf, cap, SKYMEM_REPLY_TLM_MID, seq, seconds, subsecs, pre, sizeof pre, d, sizeof d, data,
                      desc->data_len);
}

int skymem_build_reply_stats(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                             const skymem_route_t *route, const skymem_stats_t *stats)
{
    uint8_t st[SKYMEM_STATS_LEN];
    if (stats == NULL) return SKYMEM_E_NULL;
    skymem_stats_encode(st, stats);
    return skymem_build_reply(buf, cap, seq, seconds, subsecs, route, SKYMEM_REPLY_STATS, SKYMEM_STATS_CC, 0, 0, 0,
                              st, sizeof st);
}

int skymem_build_hk(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                    const skymem_stats_t *stats)
{
    uint8_t st[SKYMEM_STATS_LEN];
    if (stats == NULL) return SKYMEM_E_NULL;
    skymem_stats_encode(st, stats);
    return skymem_build_tlm(buf, cap, SKYMEM_HK_TLM_MID, seq, seconds, subsecs, st, sizeof st);
}

int skymem_rewrite_route(uint8_t *pkt, size_t len, const skymem_route_t *route)
{
    skymem_pri_hdr_t h;
    int rc;
    if (pkt == NULL || route == NULL) return SKYMEM_E_NULL;
    rc = skymem_pri_decode(pkt, len, &h);
    if (rc != SKYMEM_OK) return rc;
    if (h.mid == SKYMEM_DATA_CMD_MID) {
        if (len < SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN) return SKYMEM_E_SHORT;
        skymem_route_encode(pkt + SKYMEM_CMD_HDR_LEN, route);
        return skymem_cmd_finalize(pkt, len);
    }
    if (h.mid == SKYMEM_REPLY_TLM_MID) {
        if (len < SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_HDR_LEN) return SKYMEM_E_SHORT;
        skymem_route_encode(pkt + SKYMEM_TLM_HDR_LEN, route);
        return SKYMEM_OK;
    }
    return SKYMEM_E_MID;
}

void skymem_ms_to_tlm_time(uint64_t ms, uint32_t *seconds, uint16_t *subsecs)
{
    /* cFE subseconds are a 32-bit fraction of a second; the header keeps the upper 16 bits. */
    if (seconds) *seconds = (uint32_t)(ms / 1000u);
    if (subsecs) *subsecs = (uint16_t)(((ms % 1000u) * 65536u) / 1000u);
}
