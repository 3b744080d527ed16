/* SKYMEM control command handlers (SKYMEM_CMD_MID) and housekeeping. */
#ifndef SKYMEM_CMDS_H
#define SKYMEM_CMDS_H

#include "cfe.h"
#include "skymem_msg.h"

CFE_Status_t SKYMEM_NoopCmd(const SKYMEM_NoopCmd_t *Msg);
CFE_Status_t SKYMEM_ResetCountersCmd(const SKYMEM_ResetCountersCmd_t *Msg);
CFE_Status_t SKYMEM_SetParamCmd(const SKYMEM_SetParamCmd_t *Msg);
CFE_Status_t SKYMEM_SendHkCmd(const SKYMEM_SendHkCmd_t *Msg);

#endif
