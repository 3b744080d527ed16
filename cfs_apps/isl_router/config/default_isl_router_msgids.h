/*
 * ISL_ROUTER message IDs, fixed by the wire format (skymem_wire.h):
 *   ISL_ROUTER_CMD_MID      0x1893  commands (NOOP, RESET_COUNTERS)
 *   ISL_ROUTER_SEND_HK_MID  0x1894  housekeeping request
 *   ISL_ROUTER_HK_TLM_MID   0x0893  housekeeping telemetry
 * It also subscribes to SKYMEM's SKYMEM_DATA_CMD_MID and SKYMEM_REPLY_TLM_MID
 * to send on the packets SKYMEM addressed to other satellites or the ground.
 */
#ifndef ISL_ROUTER_MSGIDS_H
#define ISL_ROUTER_MSGIDS_H

#include "skymem_wire.h"

#endif
