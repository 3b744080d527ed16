/* SKYMEM control command handlers (same shape as sample_app_cmds.c). */
#include "skymem.h"
#include "skymem_cmds.h"
#include "skymem_eventids.h"
#include "skymem_utils.h"
#include "skymem_version.h"

CFE_Status_t SKYMEM_SendHkCmd(const SKYMEM_SendHkCmd_t *Msg)
{
    skymem_stats_t Stats;

    skymem_sat_fill_stats(&SKYMEM_Data.Core, &Stats);
    skymem_stats_encode(SKYMEM_Data.HkTlm.Payload.Stats, &Stats);

    CFE_SB_TimeStampMsg(CFE_MSG_PTR(SKYMEM_Data.HkTlm.TelemetryHeader));
    CFE_SB_TransmitMsg(CFE_MSG_PTR(SKYMEM_Data.HkTlm.TelemetryHeader), true);

    /* The table is read once at init (identity and ports must not change under
     * ISL_ROUTER's bound sockets); managing it still lets cFE validate loads. */
    CFE_TBL_Manage(SKYMEM_Data.TblHandle);

    return CFE_SUCCESS;
}

CFE_Status_t SKYMEM_NoopCmd(const SKYMEM_NoopCmd_t *Msg)
{
    SKYMEM_Data.Core.c.cmd_count++;

    CFE_EVS_SendEvent(SKYMEM_NOOP_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "SKYMEM: NOOP command %s, command counter %lu", SKYMEM_VERSION,
                      (unsigned long)SKYMEM_Data.Core.c.cmd_count);

    return CFE_SUCCESS;
}

CFE_Status_t SKYMEM_ResetCountersCmd(const SKYMEM_ResetCountersCmd_t *Msg)
{
    skymem_sat_reset_counters(&SKYMEM_Data.Core);

    CFE_EVS_SendEvent(SKYMEM_RESET_INF_EID, CFE_EVS_EventType_INFORMATION, "SKYMEM: RESET command");

    return CFE_SUCCESS;
}

CFE_Status_t SKYMEM_SetParamCmd(const SKYMEM_SetParamCmd_t *Msg)
{
    uint16 ParamId = skymem_get_u16(Msg->Payload.ParamId);
    uint16 Spare   = skymem_get_u16(Msg->Payload.Spare);
    uint32 Value   = skymem_get_u32(Msg->Payload.Value);
    uint8  Nak;

    Nak = (Spare != 0) ? SKYMEM_NAK_BAD_PARAM : SKYMEM_ApplyParam(ParamId, Value);
    if (Nak != 0)
    {
        SKYMEM_Data.Core.c.err_count++;
        CFE_EVS_SendEvent(SKYMEM_SET_PARAM_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: SET_PARAM id %u value %lu rejected (nak %u)", (unsigned int)ParamId,
                          (unsigned long)Value, (unsigned int)Nak);
        return CFE_STATUS_VALIDATION_FAILURE;
    }

    SKYMEM_Data.Core.c.cmd_count++;
    return CFE_SUCCESS;
}
