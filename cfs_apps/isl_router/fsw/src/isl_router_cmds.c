/* ISL_ROUTER command handlers, housekeeping, and SKYMEM's word that a station's request verified. */
#include "isl_router.h"
#include "isl_router_cmds.h"
#include "isl_router_eventids.h"
#include "isl_router_utils.h"
#include "isl_router_version.h"

CFE_Status_t ISL_ROUTER_NoopCmd(const ISL_ROUTER_NoopCmd_t *Msg)
{
    ISL_ROUTER_Data.CmdCounter++;
    CFE_EVS_SendEvent(ISL_ROUTER_NOOP_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "ISL_ROUTER: NOOP command %s, command counter %lu", ISL_ROUTER_VERSION,
                      (unsigned long)ISL_ROUTER_Data.CmdCounter);
    return CFE_SUCCESS;
}

CFE_Status_t ISL_ROUTER_ResetCountersCmd(const ISL_ROUTER_ResetCountersCmd_t *Msg)
{
    /* The receive task may be counting at the same moment; losing one of its
     * increments during a reset is harmless. */
    ISL_ROUTER_Data.CmdCounter = 0;
    ISL_ROUTER_Data.ErrCounter = 0;
    memset(&ISL_ROUTER_Data.MainCounters, 0, sizeof(ISL_ROUTER_Data.MainCounters));
    memset(&ISL_ROUTER_Data.RxCounters, 0, sizeof(ISL_ROUTER_Data.RxCounters));

    CFE_EVS_SendEvent(ISL_ROUTER_RESET_INF_EID, CFE_EVS_EventType_INFORMATION, "ISL_ROUTER: RESET command");
    return CFE_SUCCESS;
}

CFE_Status_t ISL_ROUTER_StationVerifiedCmd(const CFE_SB_Buffer_t *SBBufPtr)
{
    const uint8 *Payload   = (const uint8 *)SBBufPtr + sizeof(CFE_MSG_CommandHeader_t);
    uint16       StationId = skymem_get_u16(Payload + SKYMEM_ISL_LEARN_STATION);
    uint32       RequestId = skymem_get_u32(Payload + SKYMEM_ISL_LEARN_REQUEST);

    /* SKYMEM verified this request of the station, for this satellite, up this satellite's link: the
     * address it came from is the station's now (its replies not tied to a request go there). */
    if (ISL_ROUTER_LearnFromRequest(StationId, RequestId))
    {
        CFE_EVS_SendEvent(ISL_ROUTER_LEARN_EID, CFE_EVS_EventType_DEBUG,
                          "ISL_ROUTER: ground station %u at the address of its verified request %lu",
                          (unsigned int)StationId, (unsigned long)RequestId);
    }
    return CFE_SUCCESS;
}

CFE_Status_t ISL_ROUTER_SendHkCmd(const ISL_ROUTER_SendHkCmd_t *Msg)
{
    const ISL_ROUTER_Counters_t *M = &ISL_ROUTER_Data.MainCounters;
    const ISL_ROUTER_Counters_t *R = &ISL_ROUTER_Data.RxCounters;
    uint8                       *P = ISL_ROUTER_Data.HkTlm.Payload.Bytes;

    memset(P, 0, ISL_ROUTER_HK_LEN);
    skymem_put_u16(P + ISL_ROUTER_HK_PLANE, ISL_ROUTER_Data.Plane);
    skymem_put_u16(P + ISL_ROUTER_HK_SAT, ISL_ROUTER_Data.Sat);
    skymem_put_u32(P + ISL_ROUTER_HK_CMD_COUNT, ISL_ROUTER_Data.CmdCounter);
    skymem_put_u32(P + ISL_ROUTER_HK_ERR_COUNT, ISL_ROUTER_Data.ErrCounter);
    skymem_put_u32(P + ISL_ROUTER_HK_RX_ISL, M->RxIsl + R->RxIsl);
    skymem_put_u32(P + ISL_ROUTER_HK_RX_GROUND, M->RxGround + R->RxGround);
    skymem_put_u32(P + ISL_ROUTER_HK_TX_ISL, M->TxIsl + R->TxIsl);
    skymem_put_u32(P + ISL_ROUTER_HK_TX_GROUND, M->TxGround + R->TxGround);
    skymem_put_u32(P + ISL_ROUTER_HK_FORWARDED, M->Forwarded + R->Forwarded);
    skymem_put_u32(P + ISL_ROUTER_HK_DELIVERED, M->Delivered + R->Delivered);
    skymem_put_u32(P + ISL_ROUTER_HK_DROPPED, M->Dropped + R->Dropped);
    skymem_put_u32(P + ISL_ROUTER_HK_INVALID, M->Invalid + R->Invalid);
    skymem_put_u32(P + ISL_ROUTER_HK_GROUND_KNOWN, ISL_ROUTER_GroundStationCount());

    CFE_SB_TimeStampMsg(CFE_MSG_PTR(ISL_ROUTER_Data.HkTlm.TelemetryHeader));
    CFE_SB_TransmitMsg(CFE_MSG_PTR(ISL_ROUTER_Data.HkTlm.TelemetryHeader), true);
    return CFE_SUCCESS;
}
