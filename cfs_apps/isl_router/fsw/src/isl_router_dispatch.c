/*
 * ISL_ROUTER dispatch: its own commands and housekeeping request, plus the
 * SKYMEM packets it sends on (SKYMEM_REPLY_TLM_MID, SKYMEM_ISL_OUT_MID) and
 * SKYMEM's word that a station's request verified (SKYMEM_ISL_OUT_MID,
 * SKYMEM_ISL_OUT_LEARN_CC).
 */
#include "isl_router.h"
#include "isl_router_cmds.h"
#include "isl_router_dispatch.h"
#include "isl_router_eventids.h"
#include "isl_router_forward.h"

bool ISL_ROUTER_VerifyCmdLength(const CFE_MSG_Message_t *MsgPtr, size_t ExpectedLength)
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
    CFE_EVS_SendEvent(ISL_ROUTER_CMD_LEN_ERR_EID, CFE_EVS_EventType_ERROR,
                      "ISL_ROUTER: invalid msg length: ID = 0x%X, CC = %u, Len = %u, Expected = %u",
                      (unsigned int)CFE_SB_MsgIdToValue(MsgId), (unsigned int)FcnCode, (unsigned int)ActualLength,
                      (unsigned int)ExpectedLength);
    ISL_ROUTER_Data.ErrCounter++;
    return false;
}

void ISL_ROUTER_ProcessGroundCommand(const CFE_SB_Buffer_t *SBBufPtr)
{
    CFE_MSG_FcnCode_t CommandCode = 0;

    CFE_MSG_GetFcnCode(&SBBufPtr->Msg, &CommandCode);

    switch (CommandCode)
    {
        case ISL_ROUTER_NOOP_CC:
            if (ISL_ROUTER_VerifyCmdLength(&SBBufPtr->Msg, sizeof(ISL_ROUTER_NoopCmd_t)))
            {
                ISL_ROUTER_NoopCmd((const ISL_ROUTER_NoopCmd_t *)SBBufPtr);
            }
            break;

        case ISL_ROUTER_RESET_COUNTERS_CC:
            if (ISL_ROUTER_VerifyCmdLength(&SBBufPtr->Msg, sizeof(ISL_ROUTER_ResetCountersCmd_t)))
            {
                ISL_ROUTER_ResetCountersCmd((const ISL_ROUTER_ResetCountersCmd_t *)SBBufPtr);
            }
            break;

        default:
            ISL_ROUTER_Data.ErrCounter++;
            CFE_EVS_SendEvent(ISL_ROUTER_CC_ERR_EID, CFE_EVS_EventType_ERROR,
                              "ISL_ROUTER: invalid ground command code: CC = %d", (int)CommandCode);
            break;
    }
}

void ISL_ROUTER_TaskPipe(const CFE_SB_Buffer_t *SBBufPtr)
{
    CFE_SB_MsgId_t    MsgId   = CFE_SB_INVALID_MSG_ID;
    CFE_MSG_FcnCode_t FcnCode = 0;

    CFE_MSG_GetMsgId(&SBBufPtr->Msg, &MsgId);

    switch (CFE_SB_MsgIdToValue(MsgId))
    {
        case ISL_ROUTER_CMD_MID:
            ISL_ROUTER_ProcessGroundCommand(SBBufPtr);
            break;

        case ISL_ROUTER_SEND_HK_MID:
            if (ISL_ROUTER_VerifyCmdLength(&SBBufPtr->Msg, sizeof(ISL_ROUTER_SendHkCmd_t)))
            {
                ISL_ROUTER_SendHkCmd((const ISL_ROUTER_SendHkCmd_t *)SBBufPtr);
            }
            break;

        case SKYMEM_ISL_OUT_MID:
            CFE_MSG_GetFcnCode(&SBBufPtr->Msg, &FcnCode);
            if (FcnCode == SKYMEM_ISL_OUT_LEARN_CC)
            {
                if (ISL_ROUTER_VerifyCmdLength(&SBBufPtr->Msg,
                                               sizeof(CFE_MSG_CommandHeader_t) + SKYMEM_ISL_LEARN_PAYLOAD_LEN))
                {
                    ISL_ROUTER_StationVerifiedCmd(SBBufPtr);
                }
            }
            else
            {
                ISL_ROUTER_SendFromBus(SBBufPtr);
            }
            /* Done with it: SKYMEM may publish one more (it took a credit for each). */
            OS_CountSemGive(ISL_ROUTER_Data.TxCreditSem);
            break;

        case SKYMEM_REPLY_TLM_MID:
            ISL_ROUTER_SendFromBus(SBBufPtr);
            OS_CountSemGive(ISL_ROUTER_Data.TxCreditSem);
            break;

        default:
            CFE_EVS_SendEvent(ISL_ROUTER_MID_ERR_EID, CFE_EVS_EventType_ERROR,
                              "ISL_ROUTER: invalid command packet, MID = 0x%x",
                              (unsigned int)CFE_SB_MsgIdToValue(MsgId));
            break;
    }
}
