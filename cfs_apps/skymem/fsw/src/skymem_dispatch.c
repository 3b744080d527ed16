/*
 * SKYMEM dispatch (same shape as sample_app_dispatch.c). Control commands have
 * fixed lengths that are checked here; data-plane packets have variable
 * lengths and are validated by the skymem_core codec in skymem_data.c.
 */
#include "skymem.h"
#include "skymem_cmds.h"
#include "skymem_data.h"
#include "skymem_dispatch.h"
#include "skymem_eventids.h"

bool SKYMEM_VerifyCmdLength(const CFE_MSG_Message_t *MsgPtr, size_t ExpectedLength)
{
    size_t            ActualLength = 0;
    CFE_SB_MsgId_t    MsgId        = CFE_SB_INVALID_MSG_ID;
    CFE_MSG_FcnCode_t FcnCode      = 0;

    CFE_MSG_GetSize(MsgPtr, &ActualLength);
    if (ExpectedLength == ActualLength)
    {
        return true;
    }

    CFE_MSG_GetMsgId(MsgPtr, &MsgId);
    CFE_MSG_GetFcnCode(MsgPtr, &FcnCode);
    CFE_EVS_SendEvent(SKYMEM_CMD_LEN_ERR_EID, CFE_EVS_EventType_ERROR,
                      "SKYMEM: invalid msg length: ID = 0x%X, CC = %u, Len = %u, Expected = %u",
                      (unsigned int)CFE_SB_MsgIdToValue(MsgId), (unsigned int)FcnCode, (unsigned int)ActualLength,
                      (unsigned int)ExpectedLength);
    SKYMEM_Data.Core.c.err_count++;
    return false;
}

void SKYMEM_ProcessGroundCommand(const CFE_SB_Buffer_t *SBBufPtr)
{
    CFE_MSG_FcnCode_t CommandCode = 0;

    CFE_MSG_GetFcnCode(&SBBufPtr->Msg, &CommandCode);

    /* With keys configured, state changes need a signed data-plane command. */
    if (skymem_sat_refuse_control(&SKYMEM_Data.Core, (uint8)CommandCode))
    {
        return;
    }

    switch (CommandCode)
    {
        case SKYMEM_NOOP_CC:
            if (SKYMEM_VerifyCmdLength(&SBBufPtr->Msg, sizeof(SKYMEM_NoopCmd_t)))
            {
                SKYMEM_NoopCmd((const SKYMEM_NoopCmd_t *)SBBufPtr);
            }
            break;

        case SKYMEM_RESET_COUNTERS_CC:
            if (SKYMEM_VerifyCmdLength(&SBBufPtr->Msg, sizeof(SKYMEM_ResetCountersCmd_t)))
            {
                SKYMEM_ResetCountersCmd((const SKYMEM_ResetCountersCmd_t *)SBBufPtr);
            }
            break;

        case SKYMEM_SET_PARAM_CC:
            if (SKYMEM_VerifyCmdLength(&SBBufPtr->Msg, sizeof(SKYMEM_SetParamCmd_t)))
            {
                SKYMEM_SetParamCmd((const SKYMEM_SetParamCmd_t *)SBBufPtr);
            }
            break;

        default:
            SKYMEM_Data.Core.c.err_count++;
            CFE_EVS_SendEvent(SKYMEM_CC_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: invalid ground command code: CC = %d",
                              (int)CommandCode);
            break;
    }
}

void SKYMEM_TaskPipe(const CFE_SB_Buffer_t *SBBufPtr)
{
    CFE_SB_MsgId_t MsgId = CFE_SB_INVALID_MSG_ID;

    CFE_MSG_GetMsgId(&SBBufPtr->Msg, &MsgId);

    switch (CFE_SB_MsgIdToValue(MsgId))
    {
        case SKYMEM_CMD_MID:
            SKYMEM_ProcessGroundCommand(SBBufPtr);
            break;

        case SKYMEM_SEND_HK_MID:
            if (SKYMEM_VerifyCmdLength(&SBBufPtr->Msg, sizeof(SKYMEM_SendHkCmd_t)))
            {
                SKYMEM_SendHkCmd((const SKYMEM_SendHkCmd_t *)SBBufPtr);
            }
            break;

        case SKYMEM_DATA_CMD_MID:
            SKYMEM_ProcessDataPacket(SBBufPtr);
            break;

        case SKYMEM_ISL_IN_MID:
            SKYMEM_ProcessInboundReply(SBBufPtr);
            break;

        default:
            CFE_EVS_SendEvent(SKYMEM_MID_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: invalid command packet, MID = 0x%x",
                              (unsigned int)CFE_SB_MsgIdToValue(MsgId));
            break;
    }
}
