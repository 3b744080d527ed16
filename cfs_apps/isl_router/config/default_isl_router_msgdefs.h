/*
 * ISL_ROUTER housekeeping payload: 48 bytes, explicit big-endian like every
 * SkyMemory payload. The offsets (ISL_ROUTER_HK_*) are part of the wire format
 * the native node shares, so they live in skymem_wire.h.
 */
#ifndef ISL_ROUTER_MSGDEFS_H
#define ISL_ROUTER_MSGDEFS_H

#include "common_types.h"
#include "isl_router_fcncodes.h"
#include "skymem_wire.h"

typedef struct ISL_ROUTER_HkTlm_Payload
{
    uint8 Bytes[ISL_ROUTER_HK_LEN];
} ISL_ROUTER_HkTlm_Payload_t;

#endif
