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

#endif
