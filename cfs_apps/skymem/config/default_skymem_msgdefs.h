/*
 * SKYMEM command and telemetry payloads.
 *
 * Unlike nasa/sample_app (native C structs), SkyMemory payloads are explicit
 * big-endian byte fields, because the same packets travel between hosts of any
 * byte order and the ground decodes them with one definition (skymem_wire.h).
 * The app reads and writes them with skymem_get_u16/u32 and skymem_put_*.
 */
#ifndef SKYMEM_MSGDEFS_H
#define SKYMEM_MSGDEFS_H

#include "common_types.h"
#include "skymem_fcncodes.h"
#include "skymem_wire.h"

/* SET_PARAM payload (8 bytes): u16 param_id, u16 spare (0), u32 value, all big-endian. */
typedef struct SKYMEM_SetParam_Payload
{
    uint8 ParamId[2]; /**< SKYMEM_PARAM_* */
    uint8 Spare[2];   /**< must be zero */
    uint8 Value[4];
} SKYMEM_SetParam_Payload_t;

/* Housekeeping payload: the 88-byte stats body of skymem_wire.h (SKYMEM_ST_*). */
typedef struct SKYMEM_HkTlm_Payload
{
    uint8 Stats[SKYMEM_STATS_LEN];
} SKYMEM_HkTlm_Payload_t;

#endif
