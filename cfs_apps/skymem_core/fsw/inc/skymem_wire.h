/*
 * skymem_wire.h -- the SkyMemory wire format, the one definition shared by the
 * flight software (cFS apps, native node) and the ground library (through cffi).
 *
 * Every packet is a CCSDS Space Packet laid out exactly as cFS v7 "Draco" lays
 * it out with its default configuration (no extended header, MsgId V1):
 *
 *   command   = 6-byte primary header + 2-byte command secondary header
 *               (byte 6: function code, low 7 bits; byte 7: XOR checksum)
 *   telemetry = 6-byte primary header + 6-byte time (u32 seconds, u16 upper
 *               subseconds) + 4 spare bytes (zero)  -> 16 bytes
 *
 * Everything after the cFS headers is SkyMemory payload, in explicit
 * big-endian so any two hosts agree. Offsets below are from the start of the
 * payload they belong to. docs/PROTOCOL.md explains the flows.
 *
 * This header has no cFE/OSAL dependency.
 */
#ifndef SKYMEM_WIRE_H
#define SKYMEM_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* ---- CCSDS / cFS header sizes ------------------------------------------- */
#define SKYMEM_PRI_HDR_LEN 6u
#define SKYMEM_CMD_HDR_LEN 8u  /* primary + command secondary header */
#define SKYMEM_TLM_HDR_LEN 16u /* primary + time + 4 spare */

/* ---- Message IDs (MsgId V1 = first 16-bit header word) ------------------ */
/* Control commands: fixed-size, no route header, accepted from a cFS ground
 * tool through CI_LAB (cmdUtil --pktid=0x1890 --cmdcode=0 is a NOOP). */
#define SKYMEM_CMD_MID          0x1890u
#define SKYMEM_SEND_HK_MID      0x1891u
/* Data-plane commands: carry the route header, reach any satellite over ISL. */
#define SKYMEM_DATA_CMD_MID     0x1892u
#define ISL_ROUTER_CMD_MID      0x1893u
#define ISL_ROUTER_SEND_HK_MID  0x1894u
/* Telemetry */
#define SKYMEM_HK_TLM_MID       0x0890u
#define SKYMEM_REPLY_TLM_MID    0x0892u /* routed replies (route header follows) */
#define ISL_ROUTER_HK_TLM_MID   0x0893u

/* ---- Function codes (SKYMEM_CMD_MID and SKYMEM_DATA_CMD_MID) ------------ */
#define SKYMEM_NOOP_CC           0u
#define SKYMEM_RESET_COUNTERS_CC 1u
#define SKYMEM_SET_PARAM_CC      2u
#define SKYMEM_SET_CHUNK_CC      3u
#define SKYMEM_GET_CHUNK_CC      4u
#define SKYMEM_GET_CHUNKS_CC     5u
#define SKYMEM_PROBE_CC          6u
#define SKYMEM_EVICT_BLOCK_CC    7u
#define SKYMEM_MIGRATE_CC        8u
#define SKYMEM_STATS_CC          9u
#define SKYMEM_NUM_CC            10u

/* ISL_ROUTER_CMD_MID function codes */
#define ISL_ROUTER_NOOP_CC           0u
#define ISL_ROUTER_RESET_COUNTERS_CC 1u
#define ISL_ROUTER_SET_LINK_CC       2u /* link emulation parameters */

/* ---- Control command payloads (after the 8-byte command header) --------- */
/* NOOP, RESET_COUNTERS: no payload (total packet length 8).
 * SET_PARAM: u16 param_id, u16 spare(0), u32 value  -> total length 16. */
#define SKYMEM_SET_PARAM_LEN 8u
#define SKYMEM_PARAM_MEMORY_BUDGET_KB 1u /* memory budget, KiB */
#define SKYMEM_PARAM_CHUNK_SIZE       2u /* max chunk data bytes */
#define SKYMEM_PARAM_DELAY_SCALE_PPM  3u /* light-time delay scale, parts per million (1000000 = real) */
#define SKYMEM_PARAM_LOSS_PPM         4u /* emulated link loss, parts per million */

/* ---- Route header: first 20 bytes of every data-plane command payload and
 *      of every reply payload (after the cFS header) ----------------------- */
#define SKYMEM_ROUTE_HDR_LEN 20u
#define SKYMEM_ROUTE_DST_PLANE  0u  /* u16; SKYMEM_GROUND_PLANE = a ground station */
#define SKYMEM_ROUTE_DST_SAT    2u  /* u16; ground station id when dst is ground */
#define SKYMEM_ROUTE_SRC_PLANE  4u  /* u16 */
#define SKYMEM_ROUTE_SRC_SAT    6u  /* u16 */
#define SKYMEM_ROUTE_VIA_PLANE  8u  /* u16; satellite holding the ground link, or SKYMEM_NO_SAT */
#define SKYMEM_ROUTE_VIA_SAT    10u /* u16 */
#define SKYMEM_ROUTE_REQUEST_ID 12u /* u32; echoed in every reply */
#define SKYMEM_ROUTE_TTL        16u /* u8; hops still allowed */
#define SKYMEM_ROUTE_HOPS       17u /* u8; ISL hops taken so far */
#define SKYMEM_ROUTE_FLAGS      18u /* u8; SKYMEM_RF_* */
#define SKYMEM_ROUTE_RESERVED   19u /* u8; zero */

#define SKYMEM_GROUND_PLANE 0xFFFFu
#define SKYMEM_NO_SAT       0xFFFFu
/* the one-byte maximum: routes are shortest paths, so the ttl only guards against a routing bug, and a
 * 128x128 torus is 128 hops across (grids more than 255 hops across are refused by the launcher) */
#define SKYMEM_DEFAULT_TTL  255u

#define SKYMEM_RF_AUTH      0x01u /* an authentication trailer ends the packet */
#define SKYMEM_RF_GOSSIP    0x02u /* EVICT_BLOCK received from a neighbour */
#define SKYMEM_RF_MIGRATION 0x04u /* SET_CHUNK sent by a satellite carrying out MIGRATE */
#define SKYMEM_RF_KNOWN     0x07u /* every flag above; any other bit is refused (NAK BAD_PARAM) */

/* ---- Block hash and chunk descriptor ------------------------------------ */
#define SKYMEM_BLOCK_HASH_LEN 32u /* SHA-256 */

/* Chunk descriptor: precedes chunk data in SET_CHUNK and in DATA replies. */
#define SKYMEM_CHUNK_DESC_LEN 56u
#define SKYMEM_CD_BLOCK_HASH     0u  /* u8[32] */
#define SKYMEM_CD_CHUNK_ID       32u /* u32, 0-based */
#define SKYMEM_CD_CHUNK_COUNT    36u /* u32, chunks in the block */
#define SKYMEM_CD_CREATED_MS     40u /* u64, mission time the block was set, ms */
#define SKYMEM_CD_CRC32C         48u /* u32, CRC32C (Castagnoli) of the data */
#define SKYMEM_CD_DATA_LEN       52u /* u16, bytes of data that follow */
#define SKYMEM_CD_GOSSIP_RADIUS  54u /* u8, hops an eviction of this block is gossiped */
#define SKYMEM_CD_FLAGS          55u /* u8, SKYMEM_CDF_*; any other bit is refused */
#define SKYMEM_CDF_ORIGIN        0x01u /* an origin record follows the descriptor (migration SET_CHUNK only) */
#define SKYMEM_CDF_KNOWN         0x01u /* descriptor flags defined so far */

/* Origin record: in a SET_CHUNK with route flag MIGRATION and descriptor flag ORIGIN, these 8
 * bytes sit between the descriptor and the data. They carry whom to tell if LRU later purges the
 * chunk (the ground station that set it and the satellite that held its ground link), which a
 * satellite-to-satellite route header cannot say. Older packets (flag clear) are unchanged. */
#define SKYMEM_ORIGIN_LEN        8u
#define SKYMEM_OR_GROUND         0u /* u16 ground station id */
#define SKYMEM_OR_VIA_PLANE      2u /* u16 satellite that carried the original SET_CHUNK up */
#define SKYMEM_OR_VIA_SAT        4u /* u16 */
#define SKYMEM_OR_RESERVED       6u /* u16, zero */

#define SKYMEM_DEFAULT_CHUNK_DATA 6144u  /* the paper's 6 KB */
#define SKYMEM_MAX_CHUNK_DATA     60000u /* fits one UDP datagram with headers */
#define SKYMEM_MAX_PACKET         65507u /* largest UDP payload over IPv4 */
#define SKYMEM_MAX_GET_CHUNKS     4096u  /* chunks one GET_CHUNKS may ask for */

/* ---- Data-plane command bodies (after the route header) ----------------- */
/* NOOP, RESET_COUNTERS, STATS: empty body.
 * SET_PARAM: same 8 bytes as the control form.
 * SET_CHUNK: chunk descriptor + data (data_len bytes). */
/* GET_CHUNK, PROBE: block hash + u32 chunk_id */
#define SKYMEM_CHUNK_REF_LEN 36u
/* GET_CHUNKS: block hash + u32 first + u32 count + u32 stride; asks for chunk
 * ids first, first+stride, ... (count of them). Each gets its own reply. */
#define SKYMEM_CHUNK_RANGE_LEN 44u
#define SKYMEM_CR_FIRST  32u
#define SKYMEM_CR_COUNT  36u
#define SKYMEM_CR_STRIDE 40u
/* EVICT_BLOCK: block hash + u32 evict_id + u8 radius + 3 spare (zero). The receiver
 * purges the block and, if radius > 0, sends EVICT_BLOCK (radius-1, flag
 * GOSSIP, same evict_id) to its four neighbours; a recently seen
 * (block, evict_id) is not gossiped again. */
#define SKYMEM_EVICT_LEN 40u
#define SKYMEM_EV_EVICT_ID 32u
#define SKYMEM_EV_RADIUS   36u
#define SKYMEM_EV_SPARE    37u /* u8[3], zero */
/* MIGRATE: chunk range (as GET_CHUNKS) + u16 target_plane + u16 target_sat.
 * The holder sends each chunk to the target as SET_CHUNK (flag MIGRATION),
 * deletes its copy only after the target's ACK, then ACKs the requester with
 * value = chunks moved (NAK MIGRATE_FAILED if any chunk could not move). */
#define SKYMEM_MIGRATE_LEN 48u
#define SKYMEM_MG_TARGET_PLANE 44u
#define SKYMEM_MG_TARGET_SAT   46u

/* ---- Replies (SKYMEM_REPLY_TLM_MID): telemetry header + route header +
 *      reply header + body ------------------------------------------------ */
#define SKYMEM_REPLY_HDR_LEN 12u
#define SKYMEM_RH_KIND     0u /* u8, SKYMEM_REPLY_* */
#define SKYMEM_RH_CC       1u /* u8, function code of the request */
#define SKYMEM_RH_STATUS   2u /* u8, SKYMEM_NAK_* (0 unless NAK) */
#define SKYMEM_RH_RESERVED 3u /* u8, zero */
#define SKYMEM_RH_CHUNK_ID 4u /* u32, chunk the reply is about (0 if none) */
#define SKYMEM_RH_VALUE    8u /* u32, ACK: count (purged, moved); PROBE ACK: chunk_count */

#define SKYMEM_REPLY_DATA    1u /* body: chunk descriptor + data */
#define SKYMEM_REPLY_ACK     2u /* body: block hash (chunk-level requests) or empty */
#define SKYMEM_REPLY_NAK     3u /* body: block hash (chunk-level requests) or empty */
#define SKYMEM_REPLY_EVICTED 4u /* unsolicited: body = block hash purged by LRU */
#define SKYMEM_REPLY_STATS   5u /* body: stats (SKYMEM_STATS_LEN) */

#define SKYMEM_NAK_NOT_FOUND      1u
#define SKYMEM_NAK_BAD_LENGTH     2u
#define SKYMEM_NAK_BAD_CRC        3u
#define SKYMEM_NAK_NO_SPACE       4u /* chunk larger than the whole budget */
#define SKYMEM_NAK_TTL_EXPIRED    5u
#define SKYMEM_NAK_NO_ROUTE       6u
#define SKYMEM_NAK_BAD_COMMAND    7u
#define SKYMEM_NAK_AUTH_FAILED    8u
#define SKYMEM_NAK_TOO_LARGE      9u /* data_len above the configured chunk size */
#define SKYMEM_NAK_BUSY           10u
#define SKYMEM_NAK_MIGRATE_FAILED 11u
#define SKYMEM_NAK_BAD_PARAM      12u
#define SKYMEM_NAK_CONFLICT       13u /* a migration's SET_CHUNK for a chunk held here with other bytes */

/* ---- Stats body: STATS reply body and the SKYMEM HK telemetry payload ---- */
#define SKYMEM_STATS_LEN 88u
#define SKYMEM_ST_PLANE           0u  /* u16 */
#define SKYMEM_ST_SAT             2u  /* u16 */
#define SKYMEM_ST_CMD_COUNT       4u  /* u32 commands accepted */
#define SKYMEM_ST_ERR_COUNT       8u  /* u32 commands rejected */
#define SKYMEM_ST_CHUNKS          12u /* u32 chunks stored */
#define SKYMEM_ST_BYTES_USED      16u /* u64 bytes accounted against the budget */
#define SKYMEM_ST_BYTES_BUDGET    24u /* u64 */
#define SKYMEM_ST_LRU_EVICTIONS   32u /* u32 chunks evicted for space */
#define SKYMEM_ST_BLOCKS_PURGED   36u /* u32 */
#define SKYMEM_ST_RX_PACKETS      40u /* u32 */
#define SKYMEM_ST_TX_PACKETS      44u /* u32 */
#define SKYMEM_ST_FORWARDED       48u /* u32 packets relayed over ISL */
#define SKYMEM_ST_DROPPED         52u /* u32 (ttl, no route, emulated loss) */
#define SKYMEM_ST_INVALID         56u /* u32 malformed packets */
#define SKYMEM_ST_AUTH_FAILURES   60u /* u32 */
#define SKYMEM_ST_MIGRATED_OUT    64u /* u32 chunks */
#define SKYMEM_ST_MIGRATED_IN     68u /* u32 chunks */
#define SKYMEM_ST_MISSION_TIME_MS 72u /* u64 */
#define SKYMEM_ST_UPTIME_S        80u /* u32 */
#define SKYMEM_ST_SPARE           84u /* u32 zero */

/* ---- ISL_ROUTER housekeeping payload (ISL_ROUTER_HK_TLM_MID): 48 bytes.
 *      Sent by the cFS ISL_ROUTER app and, for the same request, by the
 *      native node (which routes in-process). ---------------------------- */
#define ISL_ROUTER_HK_LEN           48u
#define ISL_ROUTER_HK_PLANE         0u  /* u16 this satellite */
#define ISL_ROUTER_HK_SAT           2u  /* u16 */
#define ISL_ROUTER_HK_CMD_COUNT     4u  /* u32 commands accepted */
#define ISL_ROUTER_HK_ERR_COUNT     8u  /* u32 commands rejected */
#define ISL_ROUTER_HK_RX_ISL        12u /* u32 datagrams received on the ISL port */
#define ISL_ROUTER_HK_RX_GROUND     16u /* u32 datagrams received on the ground port */
#define ISL_ROUTER_HK_TX_ISL        20u /* u32 datagrams sent to neighbour satellites */
#define ISL_ROUTER_HK_TX_GROUND     24u /* u32 datagrams sent to ground stations */
#define ISL_ROUTER_HK_FORWARDED     28u /* u32 packets relayed for other satellites */
#define ISL_ROUTER_HK_DELIVERED     32u /* u32 packets handed to SKYMEM */
#define ISL_ROUTER_HK_DROPPED       36u /* u32 TTL expired, no route, unknown ground station, send error */
#define ISL_ROUTER_HK_INVALID       40u /* u32 datagrams the codec rejected */
#define ISL_ROUTER_HK_GROUND_KNOWN  44u /* u32 ground stations with a known return address */

/* ---- Authentication trailer (present when route flag AUTH is set) -------
 * u32 key_id + u64 sequence + a 32-byte tag (POLYVAL under AES-128) over
 * every byte before the tag, with the cFS checksum byte taken as zero -- and the
 * route header's via (4 bytes), ttl and hops too, since satellites rewrite them
 * on the way. skymem_auth.h implements it (the tag, keys, replay windows). */
#define SKYMEM_AUTH_TRAILER_LEN 44u

#endif /* SKYMEM_WIRE_H */
