/* ISL_ROUTER command handlers and housekeeping. */
#ifndef ISL_ROUTER_CMDS_H
#define ISL_ROUTER_CMDS_H

#include "cfe.h"
#include "isl_router_msg.h"

CFE_Status_t ISL_ROUTER_NoopCmd(const ISL_ROUTER_NoopCmd_t *Msg);
CFE_Status_t ISL_ROUTER_ResetCountersCmd(const ISL_ROUTER_ResetCountersCmd_t *Msg);
CFE_Status_t ISL_ROUTER_SendHkCmd(const ISL_ROUTER_SendHkCmd_t *Msg);
/* SKYMEM_ISL_OUT_MID, SKYMEM_ISL_OUT_LEARN_CC (length checked): the station learns its request's address. */
CFE_Status_t ISL_ROUTER_StationVerifiedCmd(const CFE_SB_Buffer_t *SBBufPtr);

#endif
