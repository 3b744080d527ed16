/*
 * SKYMEM message IDs.
 *
 * The values are part of the SkyMemory wire format (skymem_wire.h, shared with
 * the ground library and the native node), so they are taken from there rather
 * than from cFE topic IDs:
 *   SKYMEM_CMD_MID       0x1890  control commands (NOOP, RESET_COUNTERS, SET_PARAM)
 *   SKYMEM_SEND_HK_MID   0x1891  housekeeping request (from SCH_LAB or the ground)
 *   SKYMEM_DATA_CMD_MID  0x1892  data-plane commands (route header), delivered by ISL_ROUTER
 *   SKYMEM_HK_TLM_MID    0x0890  housekeeping telemetry
 *   SKYMEM_REPLY_TLM_MID 0x0892  data-plane replies (route header), sent out by ISL_ROUTER
 */
#ifndef SKYMEM_MSGIDS_H
#define SKYMEM_MSGIDS_H

#include "skymem_wire.h"

/*
 * Software-bus interface between SKYMEM and ISL_ROUTER (never on a link):
 *
 * SKYMEM_ISL_OUT_MID carries a data-plane command that SKYMEM originates for
 * another satellite (eviction gossip): an 8-byte cFS command header whose
 * payload is the complete SkyMemory packet to send. A separate MID keeps
 * ISL_ROUTER from seeing the SKYMEM_DATA_CMD_MID packets it delivers itself.
 *
 * SKYMEM_TX_CREDIT_SEM is an OSAL counting semaphore (SKYMEM_TX_CREDITS deep)
 * that paces SKYMEM to ISL_ROUTER: SKYMEM takes one credit for every packet it
 * publishes for the router (SKYMEM_REPLY_TLM_MID, SKYMEM_ISL_OUT_MID) and
 * ISL_ROUTER gives one back when it has sent that packet, so a 4096-chunk
 * GET_CHUNKS cannot overflow the router's pipe however the tasks are scheduled.
 */
#define SKYMEM_ISL_OUT_MID   0x1895u

/* Its function code says what the payload is: SKYMEM_ISL_OUT_SEND_CC a packet to send (above);
 * SKYMEM_ISL_OUT_LEARN_CC "ground station S is at the address request R came from": SKYMEM verified a
 * command of S, request id R, for this satellite that came up this satellite's ground link (route via
 * this satellite). On a keyed constellation this is the only way ISL_ROUTER learns a station's address
 * (it holds no key, so a packet's arrival proves nothing); payload: station u16, request id u32, big-endian. */
#define SKYMEM_ISL_OUT_SEND_CC       0u
#define SKYMEM_ISL_OUT_LEARN_CC      1u
#define SKYMEM_ISL_LEARN_STATION     0u /* payload offsets */
#define SKYMEM_ISL_LEARN_REQUEST     2u
#define SKYMEM_ISL_LEARN_PAYLOAD_LEN 6u

/* SKYMEM_ISL_IN_MID carries a reply addressed to this satellite (a migration
 * target's ACK/NAK) from ISL_ROUTER to SKYMEM, wrapped the same way. */
#define SKYMEM_ISL_IN_MID    0x1896u
#define SKYMEM_TX_CREDIT_SEM "SKYMEM_TX_CREDIT"
#define SKYMEM_TX_CREDITS    32u /* below ISL_ROUTER's per-MID pipe limit */

#endif
