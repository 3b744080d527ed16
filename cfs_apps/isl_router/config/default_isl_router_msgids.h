/*
 * ISL_ROUTER message IDs, fixed by the wire format (skymem_wire.h):
 *   ISL_ROUTER_CMD_MID      0x1893  commands (NOOP, RESET_COUNTERS)
 *   ISL_ROUTER_SEND_HK_MID  0x1894  housekeeping request
 *   ISL_ROUTER_HK_TLM_MID   0x0893  housekeeping telemetry
 * It publishes SKYMEM_DATA_CMD_MID (requests for this satellite, to SKYMEM) and
 * subscribes to SKYMEM_REPLY_TLM_MID and SKYMEM_ISL_OUT_MID (SKYMEM's packets
 * for the ground and other satellites), giving back one SKYMEM_TX_CREDIT_SEM
 * credit per packet (see skymem_msgids.h).
 */
#ifndef ISL_ROUTER_MSGIDS_H
#define ISL_ROUTER_MSGIDS_H

#include "skymem_msgids.h"
#include "skymem_wire.h"

#endif
