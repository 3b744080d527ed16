/*
 * skymem_codec.h -- encode and parse SkyMemory packets (see skymem_wire.h).
 *
 * Plain C99: every function works on caller-owned byte buffers, keeps no
 * state and never reads or writes outside [buf, buf + len). Parsers check every
 * length field against the bytes actually received and return a distinct
 * negative SKYMEM_E_* code for each kind of malformed input. Builders return
 * the packet length written (> 0) or a negative SKYMEM_E_* code.
 */
#ifndef SKYMEM_CODEC_H
#define SKYMEM_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Error codes (all negative; 0 = OK) --------------------------------- */
#define SKYMEM_OK                 0
#define SKYMEM_E_NULL            -1  /* NULL pointer argument */
#define SKYMEM_E_SHORT           -2  /* fewer bytes than the headers need */
#define SKYMEM_E_LENGTH          -3  /* primary header length field != bytes received */
#define SKYMEM_E_VERSION         -4  /* CCSDS version not 0 */
#define SKYMEM_E_NO_SEC_HDR      -5  /* secondary header flag clear */
#define SKYMEM_E_SEQ_FLAGS       -6  /* not an unsegmented packet (flags != 3) */
#define SKYMEM_E_CHECKSUM        -7  /* command checksum does not XOR to zero */
#define SKYMEM_E_MID             -8  /* message id not a SkyMemory one */
#define SKYMEM_E_CC              -9  /* function code not valid for this MID */
#define SKYMEM_E_BODY_LEN        -10 /* payload length wrong for this command / reply */
#define SKYMEM_E_DATA_LEN        -11 /* chunk descriptor data_len disagrees with the bytes */
#define SKYMEM_E_RANGE           -12 /* a field is out of its allowed range */
#define SKYMEM_E_REPLY_KIND      -13 /* unknown reply kind */
#define SKYMEM_E_AUTH_TRAILER    -14 /* AUTH flag set but no room for the trailer */
#define SKYMEM_E_BUF_SMALL       -15 /* output buffer too small (builders) */
#define SKYMEM_E_RESERVED        -16 /* a must-be-zero field is not zero */
#define SKYMEM_E_TYPE            -17 /* command MID with telemetry type bit or vice versa */
#define SKYMEM_E_MIN             -17

/* Human-readable name of an error code ("ok", "short", ...). */
const char *skymem_strerror(int err);

/* ---- Big-endian helpers -------------------------------------------------- */
uint16_t skymem_get_u16(const uint8_t *p);
uint32_t skymem_get_u32(const uint8_t *p);
uint64_t skymem_get_u64(const uint8_t *p);
void skymem_put_u16(uint8_t *p, uint16_t v);
void skymem_put_u32(uint8_t *p, uint32_t v);
void skymem_put_u64(uint8_t *p, uint64_t v);

/* ---- Primary header ----------------------------------------------------- */
typedef struct {
    uint16_t mid;        /* first 16-bit word (MsgId V1) */
    uint8_t version;     /* 3 bits */
    uint8_t is_cmd;      /* type bit */
    uint8_t has_sec_hdr; /* secondary header flag */
    uint16_t apid;       /* 11 bits */
    uint8_t seq_flags;   /* 2 bits, 3 = unsegmented */
    uint16_t seq_count;  /* 14 bits */
    size_t total_len;    /* length field + 7 */
} skymem_pri_hdr_t;

/* Writes 6 bytes: the MID word, sequence flags 3 | seq_count, total_len - 7.
 * total_len must be 7..65542. */
int skymem_pri_encode(uint8_t *buf, size_t cap, uint16_t mid, uint16_t seq_count, size_t total_len);
/* Decodes the first 6 bytes; checks only that len >= 6 (no semantic checks). */
int skymem_pri_decode(const uint8_t *buf, size_t len, skymem_pri_hdr_t *out);

/* ---- Command secondary header ------------------------------------------- */
/* cFS checksum: byte 7 = 0xFF XOR every byte of the packet with byte 7 taken as 0. */
uint8_t skymem_cmd_checksum(const uint8_t *pkt, size_t len);
/* Stores the checksum in byte 7 (len >= 8). */
int skymem_cmd_finalize(uint8_t *pkt, size_t len);
/* 1 if 0xFF XOR all bytes == 0, else 0. */
int skymem_cmd_checksum_ok(const uint8_t *pkt, size_t len);

/* ---- Route header, chunk descriptor, stats ------------------------------ */
typedef struct {
    uint16_t dst_plane, dst_sat;
    uint16_t src_plane, src_sat;
    uint16_t via_plane, via_sat;
    uint32_t request_id;
    uint8_t ttl, hops, flags, reserved;
} skymem_route_t;

void skymem_route_encode(uint8_t *out, const skymem_route_t *r);
void skymem_route_decode(const uint8_t *in, skymem_route_t *r);

typedef struct {
    uint8_t block_hash[SKYMEM_BLOCK_HASH_LEN];
    uint32_t chunk_id;
    uint32_t chunk_count;
    uint64_t created_ms;
    uint32_t crc32c;
    uint16_t data_len;
    uint8_t gossip_radius;
    uint8_t flags;
} skymem_chunk_desc_t;

void skymem_chunk_desc_encode(uint8_t *out, const skymem_chunk_desc_t *d);

/* Where a migrated chunk came from (the origin record, skymem_wire.h). */
typedef struct {
    uint16_t ground;               /* ground station id that set the chunk */
    uint16_t via_plane, via_sat;   /* satellite holding that ground link */
} skymem_origin_t;
void skymem_chunk_desc_decode(const uint8_t *in, skymem_chunk_desc_t *d);

typedef struct {
    uint16_t plane, sat;
    uint32_t cmd_count, err_count, chunks;
    uint64_t bytes_used, bytes_budget;
    uint32_t lru_evictions, blocks_purged;
    uint32_t rx_packets, tx_packets, forwarded, dropped, invalid, auth_failures;
    uint32_t migrated_out, migrated_in;
    uint64_t mission_time_ms;
    uint32_t uptime_s;
} skymem_stats_t;

void skymem_stats_encode(uint8_t *out, const skymem_stats_t *s);
void skymem_stats_decode(const uint8_t *in, skymem_stats_t *s);

/* ---- Parsed packet ------------------------------------------------------ */
/* Zero-copy view of one packet: pointers refer into the caller's buffer. */
typedef struct {
    skymem_pri_hdr_t pri;
    uint16_t mid;
    uint8_t is_cmd;
    uint8_t cc;            /* commands: function code */
    uint32_t tlm_seconds;  /* telemetry: time */
    uint16_t tlm_subsecs;
    uint8_t has_route;     /* data-plane commands and replies */
    skymem_route_t route;
    const uint8_t *payload; /* after the cFS header (and route header if any), auth trailer excluded */
    size_t payload_len;
    const uint8_t *auth;   /* authentication trailer (SKYMEM_AUTH_TRAILER_LEN) or NULL */

    /* Decoded bodies; which fields are valid depends on mid / cc / reply kind. */
    uint8_t block_hash[SKYMEM_BLOCK_HASH_LEN]; /* GET/PROBE/GET_CHUNKS/EVICT/MIGRATE, ACK/NAK/EVICTED with hash, DATA, SET_CHUNK */
    uint8_t has_block_hash;
    uint32_t chunk_id;                         /* GET_CHUNK, PROBE */
    uint32_t first, count, stride;             /* GET_CHUNKS, MIGRATE */
    uint32_t evict_id;                         /* EVICT_BLOCK */
    uint8_t radius;                            /* EVICT_BLOCK */
    uint16_t target_plane, target_sat;         /* MIGRATE */
    uint16_t param_id;                         /* SET_PARAM */
    uint32_t param_value;
    skymem_chunk_desc_t desc;                  /* SET_CHUNK, reply DATA */
    const uint8_t *data;                       /* chunk data (desc.data_len bytes) */
    uint8_t has_origin;                        /* SET_CHUNK with descriptor flag ORIGIN */
    skymem_origin_t origin;
    uint8_t reply_kind, reply_cc, reply_status;/* replies */
    uint32_t reply_chunk_id, reply_value;
    skymem_stats_t stats;                      /* reply STATS, HK telemetry */
} skymem_msg_t;

/* Parses and validates one whole datagram. Returns SKYMEM_OK or SKYMEM_E_*.
 * Accepted: SKYMEM_CMD_MID (NOOP/RESET_COUNTERS 8 bytes, SET_PARAM 16 bytes),
 * SKYMEM_SEND_HK_MID / ISL_ROUTER_SEND_HK_MID (8 bytes), SKYMEM_DATA_CMD_MID
 * (route header + per-command body), ISL_ROUTER_CMD_MID (opaque payload),
 * SKYMEM_HK_TLM_MID (stats), SKYMEM_REPLY_TLM_MID, ISL_ROUTER_HK_TLM_MID (opaque). */
int skymem_parse(const uint8_t *buf, size_t len, skymem_msg_t *out);

/* What a satellite answers when skymem_parse refused a command addressed to it with `err`
 * (docs/PROTOCOL.md §4), so the native node and the cFS app answer alike: NAK BAD_COMMAND for an
 * unknown function code, BAD_PARAM for a field out of range or a reserved field not zero,
 * BAD_LENGTH for anything else. */
uint8_t skymem_nak_for_parse_error(int err);

/* 1 when pkt is a data-plane command whose primary header, length and checksum are intact (its
 * body may still be malformed), with its route header in *route: enough to NAK it; else 0. */
int skymem_intact_data_cmd(const uint8_t *pkt, size_t len, skymem_route_t *route);

/* ---- Builders ----------------------------------------------------------- */
/* Any command: 8-byte header + payload, checksum set. */
int skymem_build_cmd(uint8_t *buf, size_t cap, uint16_t mid, uint8_t cc, uint16_t seq,
                     const uint8_t *payload, size_t payload_len);
/* Data-plane command: header + route header + body. */
int skymem_build_data_cmd(uint8_t *buf, size_t cap, uint8_t cc, uint16_t seq, const skymem_route_t *route,
                          const uint8_t *body, size_t body_len);
/* Control SET_PARAM (SKYMEM_CMD_MID, 16 bytes) or, with route != NULL, data-plane SET_PARAM. */
int skymem_build_set_param(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           uint16_t param_id, uint32_t value);
int skymem_build_set_chunk(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           const skymem_chunk_desc_t *desc, const uint8_t *data);
/* A migration's SET_CHUNK: with origin != NULL the descriptor gets flag ORIGIN and the origin
 * record follows it (route->flags must include MIGRATION); with NULL, as skymem_build_set_chunk. */
int skymem_build_set_chunk_origin(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                                  const skymem_chunk_desc_t *desc, const skymem_origin_t *origin,
                                  const uint8_t *data);
int skymem_build_get_chunk(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                           const uint8_t *hash, uint32_t chunk_id);
int skymem_build_probe(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                       const uint8_t *hash, uint32_t chunk_id);
int skymem_build_get_chunks(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                            const uint8_t *hash, uint32_t first, uint32_t count,
                            uint32_t stride);
int skymem_build_evict(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                       const uint8_t *hash, uint32_t evict_id, uint8_t radius);
int skymem_build_migrate(uint8_t *buf, size_t cap, uint16_t seq, const skymem_route_t *route,
                         const uint8_t *hash, uint32_t first, uint32_t count,
                         uint32_t stride, uint16_t target_plane, uint16_t target_sat);

/* Any telemetry packet: 16-byte header + payload. */
int skymem_build_tlm(uint8_t *buf, size_t cap, uint16_t mid, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                     const uint8_t *payload, size_t payload_len);
/* Reply: telemetry header + route + reply header + body (body may be NULL when body_len is 0). */
int skymem_build_reply(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                       const skymem_route_t *route, uint8_t kind, uint8_t cc, uint8_t status, uint32_t chunk_id,
                       uint32_t value, const uint8_t *body, size_t body_len);
/* DATA reply: body = chunk descriptor + data. */
int skymem_build_reply_data(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                            const skymem_route_t *route, uint8_t cc, const skymem_chunk_desc_t *desc,
                            const uint8_t *data);
/* STATS reply and HK packet. */
int skymem_build_reply_stats(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                             const skymem_route_t *route, const skymem_stats_t *stats);
int skymem_build_hk(uint8_t *buf, size_t cap, uint16_t seq, uint32_t seconds, uint16_t subsecs,
                    const skymem_stats_t *stats);

/* Overwrites the route header of a data-plane command or reply in place and,
 * for commands, recomputes the checksum (used when forwarding). */
int skymem_rewrite_route(uint8_t *pkt, size_t len, const skymem_route_t *route);

/* Mission time (ms) -> cFS telemetry time (seconds, upper 16 bits of subseconds). */
void skymem_ms_to_tlm_time(uint64_t ms, uint32_t *seconds, uint16_t *subsecs);

#ifdef __cplusplus
}
#endif
#endif /* SKYMEM_CODEC_H */
