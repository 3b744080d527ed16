/* ISL_ROUTER helpers: configuration, sockets, addresses, ground stations and requests, bus delivery. */
#include "isl_router.h"
#include "isl_router_eventids.h"
#include "isl_router_utils.h"

#include "cfe_psp.h"

CFE_Status_t ISL_ROUTER_LoadConfig(void)
{
    CFE_Status_t                     status = CFE_TBL_ERR_INVALID_NAME;
    void                            *TblAddr = NULL;
    const SKYMEM_ConstellationTbl_t *Tbl;
    uint32                           Waited;
    uint32                           CpuId;
    uint32                           Index;

    /* SKYMEM creates its credit semaphore as the last step of its init, after
     * the table holds its final values: wait (bounded) for it, then share. */
    for (Waited = 0; Waited <= ISL_ROUTER_TABLE_WAIT_MS; Waited += ISL_ROUTER_TABLE_RETRY_MS)
    {
        if (OS_CountSemGetIdByName(&ISL_ROUTER_Data.TxCreditSem, SKYMEM_TX_CREDIT_SEM) != OS_SUCCESS)
        {
            OS_TaskDelay(ISL_ROUTER_TABLE_RETRY_MS);
            continue;
        }
        status = CFE_TBL_Share(&ISL_ROUTER_Data.TblHandle, SKYMEM_CONSTELLATION_TBL_FULL_NAME);
        if (status == CFE_SUCCESS)
        {
            status = CFE_TBL_GetAddress(&TblAddr, ISL_ROUTER_Data.TblHandle);
            if (status == CFE_SUCCESS || status == CFE_TBL_INFO_UPDATED)
            {
                break;
            }
            CFE_TBL_Unregister(ISL_ROUTER_Data.TblHandle); /* shared but not loaded yet */
        }
        OS_TaskDelay(ISL_ROUTER_TABLE_RETRY_MS);
    }
    if (TblAddr == NULL)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: SKYMEM not ready (table %s) after %u ms (is SKYMEM running?), RC = 0x%08lX",
                          SKYMEM_CONSTELLATION_TBL_FULL_NAME, (unsigned int)ISL_ROUTER_TABLE_WAIT_MS,
                          (unsigned long)status);
        return status;
    }
    Tbl = TblAddr;

    CpuId = CFE_PSP_GetProcessorId();
    Index = CpuId - Tbl->FirstCpuId;
    if (CpuId < Tbl->FirstCpuId || Tbl->SatsPerPlane == 0 || Index >= (uint32)Tbl->Planes * Tbl->SatsPerPlane)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: cpuid %lu is not a satellite of the %ux%u grid", (unsigned long)CpuId,
                          (unsigned int)Tbl->Planes, (unsigned int)Tbl->SatsPerPlane);
        CFE_TBL_ReleaseAddress(ISL_ROUTER_Data.TblHandle);
        return CFE_STATUS_VALIDATION_FAILURE;
    }

    /* SKYMEM's validation function already checked ranges and termination. */
    ISL_ROUTER_Data.Planes         = Tbl->Planes;
    ISL_ROUTER_Data.SatsPerPlane   = Tbl->SatsPerPlane;
    ISL_ROUTER_Data.Plane          = (uint16)(Index / Tbl->SatsPerPlane);
    ISL_ROUTER_Data.Sat            = (uint16)(Index % Tbl->SatsPerPlane);
    ISL_ROUTER_Data.IslPortBase    = Tbl->IslPortBase;
    ISL_ROUTER_Data.GroundPortBase = Tbl->GroundPortBase;
    ISL_ROUTER_Data.HostCount      = Tbl->HostCount;
    memcpy(ISL_ROUTER_Data.Hosts, Tbl->Hosts, sizeof(ISL_ROUTER_Data.Hosts));
    memcpy(ISL_ROUTER_Data.Host, ISL_ROUTER_HostOf(Index), sizeof(ISL_ROUTER_Data.Host));

    CFE_TBL_ReleaseAddress(ISL_ROUTER_Data.TblHandle);
    return CFE_SUCCESS;
}

uint32 ISL_ROUTER_SatIndex(uint16 Plane, uint16 Sat)
{
    return (uint32)Plane * ISL_ROUTER_Data.SatsPerPlane + Sat;
}

const char *ISL_ROUTER_HostOf(uint32 Index)
{
    uint32 Count = (uint32)ISL_ROUTER_Data.Planes * ISL_ROUTER_Data.SatsPerPlane;

    return ISL_ROUTER_Data.Hosts[SKYMEM_HOST_OF(Index, Count, ISL_ROUTER_Data.HostCount)];
}

uint16 ISL_ROUTER_IslPort(uint16 Plane, uint16 Sat)
{
    return (uint16)(ISL_ROUTER_Data.IslPortBase + ISL_ROUTER_SatIndex(Plane, Sat));
}

bool ISL_ROUTER_IsMe(uint16 Plane, uint16 Sat)
{
    return Plane == ISL_ROUTER_Data.Plane && Sat == ISL_ROUTER_Data.Sat;
}

static int32 ISL_ROUTER_MakeAddr(OS_SockAddr_t *Addr, const char *Host, uint16 Port)
{
    int32 rc = OS_SocketAddrInit(Addr, OS_SocketDomain_INET);

    if (rc == OS_SUCCESS)
    {
        rc = OS_SocketAddrFromString(Addr, Host);
    }
    if (rc == OS_SUCCESS)
    {
        rc = OS_SocketAddrSetPort(Addr, Port);
    }
    return rc;
}

static CFE_Status_t ISL_ROUTER_OpenOne(osal_id_t *Sock, uint16 Port, const char *What)
{
    OS_SockAddr_t Addr;
    int32         rc;

    rc = OS_SocketOpen(Sock, OS_SocketDomain_INET, OS_SocketType_DATAGRAM);
    if (rc == OS_SUCCESS)
    {
        rc = ISL_ROUTER_MakeAddr(&Addr, ISL_ROUTER_Data.Host, Port);
    }
    if (rc == OS_SUCCESS)
    {
        rc = OS_SocketBind(*Sock, &Addr);
    }
    if (rc != OS_SUCCESS)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_SOCKET_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: cannot open the %s socket on %s:%u (OSAL error %ld; port in use?)", What,
                          ISL_ROUTER_Data.Host, (unsigned int)Port, (long)rc);
        return CFE_STATUS_EXTERNAL_RESOURCE_FAIL;
    }
    return CFE_SUCCESS;
}

CFE_Status_t ISL_ROUTER_OpenSockets(void)
{
    uint32       Index = ISL_ROUTER_SatIndex(ISL_ROUTER_Data.Plane, ISL_ROUTER_Data.Sat);
    CFE_Status_t status;

    status = ISL_ROUTER_OpenOne(&ISL_ROUTER_Data.IslSock, (uint16)(ISL_ROUTER_Data.IslPortBase + Index), "ISL");
    if (status == CFE_SUCCESS)
    {
        status = ISL_ROUTER_OpenOne(&ISL_ROUTER_Data.GroundSock, (uint16)(ISL_ROUTER_Data.GroundPortBase + Index),
                                    "ground");
    }
    return status;
}

static bool ISL_ROUTER_SendTo(osal_id_t Sock, const OS_SockAddr_t *Addr, const uint8 *Pkt, size_t Len)
{
    int32 rc = OS_SocketSendTo(Sock, Pkt, Len, Addr);

    if (rc != (int32)Len)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_SEND_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: sending a %lu-byte datagram failed (OSAL %ld)", (unsigned long)Len, (long)rc);
        return false;
    }
    return true;
}

bool ISL_ROUTER_SendToSat(uint16 Plane, uint16 Sat, const uint8 *Pkt, size_t Len)
{
    OS_SockAddr_t Addr;

    if (ISL_ROUTER_MakeAddr(&Addr, ISL_ROUTER_HostOf(ISL_ROUTER_SatIndex(Plane, Sat)), ISL_ROUTER_IslPort(Plane, Sat)) !=
        OS_SUCCESS)
    {
        return false;
    }
    /* From our ISL socket, so the neighbour sees our ISL port as the source. */
    return ISL_ROUTER_SendTo(ISL_ROUTER_Data.IslSock, &Addr, Pkt, Len);
}

/* Local time in milliseconds: when a station was heard, when a return slot expires. */
static uint64 ISL_ROUTER_NowMs(void)
{
    OS_time_t Now;

    OS_GetLocalTime(&Now);
    return (uint64)OS_TimeGetTotalMilliseconds(Now);
}

void ISL_ROUTER_RememberGroundStation(uint16 StationId, const OS_SockAddr_t *Addr)
{
    int Entry;

    OS_MutSemTake(ISL_ROUTER_Data.GroundMutex);
    Entry = skymem_station_learn(ISL_ROUTER_Data.Ground, ISL_ROUTER_MAX_GROUND_STATIONS, StationId,
                                 ISL_ROUTER_NowMs(), NULL);
    if (Entry >= 0)
    {
        ISL_ROUTER_Data.GroundAddr[Entry] = *Addr;
    }
    OS_MutSemGive(ISL_ROUTER_Data.GroundMutex);
}

/* The address the answers to this request go to, if a slot holds it (the caller holds GroundMutex). */
static const OS_SockAddr_t *ISL_ROUTER_ReturnAddr(uint16 StationId, uint32 RequestId)
{
    int Slot = skymem_return_find(ISL_ROUTER_Data.Returns, ISL_ROUTER_RETURN_SLOTS, StationId, RequestId,
                                  ISL_ROUTER_NowMs());

    return Slot >= 0 ? &ISL_ROUTER_Data.ReturnAddr[Slot] : NULL;
}

void ISL_ROUTER_RememberRequest(uint16 StationId, uint32 RequestId, const OS_SockAddr_t *Addr)
{
    int Slot;

    /* Unverified (the destination's UP key made its tag): the first request to claim (station, request id)
     * keeps it until it expires, so a packet forged later with a request id seen on the wire cannot take the
     * genuine request's answers or aim them at another host (skymem_returns.h, as on the native node). */
    OS_MutSemTake(ISL_ROUTER_Data.GroundMutex);
    Slot = skymem_return_claim(ISL_ROUTER_Data.Returns, ISL_ROUTER_RETURN_SLOTS, StationId, RequestId,
                               ISL_ROUTER_NowMs(), (uint64)ISL_ROUTER_RETURN_TTL_S * 1000u);
    if (Slot >= 0)
    {
        ISL_ROUTER_Data.ReturnAddr[Slot] = *Addr;
    }
    OS_MutSemGive(ISL_ROUTER_Data.GroundMutex);
}

bool ISL_ROUTER_LearnFromRequest(uint16 StationId, uint32 RequestId)
{
    const OS_SockAddr_t *Found;
    OS_SockAddr_t        Addr;

    OS_MutSemTake(ISL_ROUTER_Data.GroundMutex);
    Found = ISL_ROUTER_ReturnAddr(StationId, RequestId);
    if (Found != NULL)
    {
        Addr = *Found;
    }
    OS_MutSemGive(ISL_ROUTER_Data.GroundMutex);

    if (Found == NULL)
    {
        /* Its slot was taken by a newer request: the station keeps the address it had. */
        CFE_EVS_SendEvent(ISL_ROUTER_LEARN_EID, CFE_EVS_EventType_DEBUG,
                          "ISL_ROUTER: request %lu of ground station %u no longer held, nothing learnt",
                          (unsigned long)RequestId, (unsigned int)StationId);
        return false;
    }
    ISL_ROUTER_RememberGroundStation(StationId, &Addr);
    return true;
}

bool ISL_ROUTER_SendToGroundStation(uint16 StationId, uint32 RequestId, bool Relayed, const uint8 *Pkt, size_t Len)
{
    const OS_SockAddr_t *Request;
    OS_SockAddr_t        Addr;
    bool                 Known = false;
    int                  Entry;

    /* SKYMEM's own reply answers a command verified here, up this link: the station's learned address (where
     * that command came from), never a return slot, which any packet relayed through here may claim with that
     * request id (N1 of issue 53). A relayed one answers a command this satellite relayed: its request's slot. */
    OS_MutSemTake(ISL_ROUTER_Data.GroundMutex);
    Request = Relayed ? ISL_ROUTER_ReturnAddr(StationId, RequestId) : NULL;
    if (Request != NULL)
    {
        Addr  = *Request;
        Known = true;
    }
    Entry = Known ? -1 : skymem_station_find(ISL_ROUTER_Data.Ground, ISL_ROUTER_MAX_GROUND_STATIONS, StationId);
    if (Entry >= 0)
    {
        Addr  = ISL_ROUTER_Data.GroundAddr[Entry];
        Known = true;
    }
    OS_MutSemGive(ISL_ROUTER_Data.GroundMutex);

    if (!Known)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_DROP_EID, CFE_EVS_EventType_DEBUG,
                          "ISL_ROUTER: no address for ground station %u, reply dropped", (unsigned int)StationId);
        return false;
    }
    /* From our ground socket: the station sees the port it sent its request to. */
    return ISL_ROUTER_SendTo(ISL_ROUTER_Data.GroundSock, &Addr, Pkt, Len);
}

uint32 ISL_ROUTER_GroundStationCount(void)
{
    uint32 Count;

    OS_MutSemTake(ISL_ROUTER_Data.GroundMutex);
    Count = skymem_station_count(ISL_ROUTER_Data.Ground, ISL_ROUTER_MAX_GROUND_STATIONS);
    OS_MutSemGive(ISL_ROUTER_Data.GroundMutex);
    return Count;
}

bool ISL_ROUTER_DeliverToBus(const uint8 *Pkt, size_t Len)
{
    bool             IsCmd  = (Pkt[0] & 0x10u) != 0;
    size_t           Offset = IsCmd ? 0 : sizeof(CFE_MSG_CommandHeader_t);
    CFE_SB_Buffer_t *Buf;
    CFE_Status_t     status;

    if (Len + Offset > CFE_MISSION_SB_MAX_SB_MSG_SIZE)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_DROP_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: %lu-byte packet exceeds the software-bus limit of %u bytes",
                          (unsigned long)Len, (unsigned int)CFE_MISSION_SB_MAX_SB_MSG_SIZE);
        return false;
    }

    Buf = CFE_SB_AllocateMessageBuffer(Len + Offset);
    if (Buf == NULL)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_SEND_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: no software-bus buffer for a %lu-byte packet", (unsigned long)Len);
        return false;
    }
    if (!IsCmd)
    {
        CFE_MSG_Init(&Buf->Msg, CFE_SB_ValueToMsgId(SKYMEM_ISL_IN_MID), Len + Offset);
    }
    memcpy((uint8 *)Buf + Offset, Pkt, Len);

    /* Not an origination: the packet stays byte-identical to what arrived. */
    status = CFE_SB_TransmitBuffer(Buf, false);
    if (status != CFE_SUCCESS)
    {
        CFE_SB_ReleaseMessageBuffer(Buf);
        CFE_EVS_SendEvent(ISL_ROUTER_SEND_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: software-bus transmit failed, RC = 0x%08lX", (unsigned long)status);
        return false;
    }
    return true;
}
