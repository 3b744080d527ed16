/*
 * SKYMEM command and telemetry message structures (fixed-length control
 * commands and housekeeping). Data-plane commands and replies have variable
 * length and are handled as byte buffers through the skymem_core codec.
 */
#ifndef SKYMEM_MSGSTRUCT_H
#define SKYMEM_MSGSTRUCT_H

#include "cfe_msg_hdr.h"
#include "skymem_msgdefs.h"

typedef struct
{
    CFE_MSG_CommandHeader_t CommandHeader;
} SKYMEM_NoopCmd_t;

typedef struct
{
    CFE_MSG_CommandHeader_t CommandHeader;
} SKYMEM_ResetCountersCmd_t;

typedef struct
{
    CFE_MSG_CommandHeader_t   CommandHeader;
    SKYMEM_SetParam_Payload_t Payload;
} SKYMEM_SetParamCmd_t;

typedef struct
{
    CFE_MSG_CommandHeader_t CommandHeader;
} SKYMEM_SendHkCmd_t;

typedef struct
{
    CFE_MSG_TelemetryHeader_t TelemetryHeader;
    SKYMEM_HkTlm_Payload_t    Payload;
} SKYMEM_HkTlm_t;

#endif
