/* ISL_ROUTER command and telemetry structures. */
#ifndef ISL_ROUTER_MSGSTRUCT_H
#define ISL_ROUTER_MSGSTRUCT_H

#include "cfe_msg_hdr.h"
#include "isl_router_msgdefs.h"

typedef struct
{
    CFE_MSG_CommandHeader_t CommandHeader;
} ISL_ROUTER_NoopCmd_t;

typedef struct
{
    CFE_MSG_CommandHeader_t CommandHeader;
} ISL_ROUTER_ResetCountersCmd_t;

typedef struct
{
    CFE_MSG_CommandHeader_t CommandHeader;
} ISL_ROUTER_SendHkCmd_t;

typedef struct
{
    CFE_MSG_TelemetryHeader_t  TelemetryHeader;
    ISL_ROUTER_HkTlm_Payload_t Payload;
} ISL_ROUTER_HkTlm_t;

#endif
