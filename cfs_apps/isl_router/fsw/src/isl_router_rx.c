/*
 * ISL_ROUTER receive task (a cFE child task). Waits on both UDP sockets with
 * OS_SelectMultiple, validates every datagram with the skymem_core codec and
 * routes it. Runs beside the main task so a busy software-bus pipe never
 * delays the links, and the links never delay commands.
 */
#include "isl_router.h"
#include "isl_router_eventids.h"
#include "isl_router_forward.h"
#include "isl_router_rx.h"
#include "isl_router_utils.h"

/* A data-plane command with a consistent length field, a valid checksum and a
 * route header naming this satellite (its body may still be wrong). */
static bool ISL_ROUTER_IntactRequestForMe(const uint8 *Pkt, size_t Len)
{
    return Len >= SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN && skymem_get_u16(Pkt) == SKYMEM_DATA_CMD_MID &&
           (size_t)skymem_get_u16(Pkt + 4) + 7u == Len && skymem_cmd_checksum_ok(Pkt, Len) &&
           ISL_ROUTER_IsMe(skymem_get_u16(Pkt + SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_DST_PLANE),
                           skymem_get_u16(Pkt + SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_DST_SAT));
}

/* Reads and handles one datagram; false when none was waiting. */
static bool ISL_ROUTER_ReceiveOne(osal_id_t Sock, bool FromGround)
{
    ISL_ROUTER_Counters_t *Counters = &ISL_ROUTER_Data.RxCounters;
    skymem_msg_t          *Msg      = &ISL_ROUTER_Data.RxMsg;
    OS_SockAddr_t          From;
    int32                  Len;
    int                    rc;
    bool                   Intact;
    bool                   Malformed;

    /* The socket is readable, so this returns at once (OS_CHECK = do not wait). */
    Len = OS_SocketRecvFrom(Sock, ISL_ROUTER_Data.RxBuf, sizeof(ISL_ROUTER_Data.RxBuf), &From, OS_CHECK);
    if (Len <= 0)
    {
        return false;
    }
    if (FromGround)
    {
        Counters->RxGround++;
    }
    else
    {
        Counters->RxIsl++;
    }

    rc = skymem_parse(ISL_ROUTER_Data.RxBuf, (size_t)Len, Msg);
    Intact = (rc == SKYMEM_OK && Msg->has_route);
    /* Body wrong but headers sound and addressed here: SKYMEM answers it with a NAK. */
    Malformed = (rc != SKYMEM_OK && ISL_ROUTER_IntactRequestForMe(ISL_ROUTER_Data.RxBuf, (size_t)Len));
    if (!Intact && !Malformed)
    {
        Counters->Invalid++;
        CFE_EVS_SendEvent(ISL_ROUTER_INVALID_EID, CFE_EVS_EventType_DEBUG,
                          "ISL_ROUTER: dropped invalid %ld-byte datagram (%s)", (long)Len,
                          rc != SKYMEM_OK ? skymem_strerror(rc) : "no route header");
        return true;
    }
    if (Malformed)
    {
        skymem_route_decode(ISL_ROUTER_Data.RxBuf + SKYMEM_CMD_HDR_LEN, &Msg->route);
    }

    if (FromGround && ISL_ROUTER_Data.Keyed && Msg->route.src_plane != SKYMEM_GROUND_PLANE)
    {
        /* a satellite's traffic never comes up a ground link: whoever sent it, it goes nowhere from here */
        Counters->Dropped++;
        CFE_EVS_SendEvent(ISL_ROUTER_DROP_EID, CFE_EVS_EventType_DEBUG,
                          "ISL_ROUTER: a packet from satellite (%u,%u) on the ground port dropped",
                          (unsigned int)Msg->route.src_plane, (unsigned int)Msg->route.src_sat);
        return true;
    }
    if (FromGround && Msg->route.src_plane == SKYMEM_GROUND_PLANE)
    {
        /* Answers to this request come back to where it was sent from, through us. */
        ISL_ROUTER_RememberRequest(Msg->route.src_sat, Msg->route.request_id, &From);
        if (!ISL_ROUTER_Data.Keyed)
        {
            /* Unkeyed nothing can be verified: every request teaches the station's address, as it always
             * has. Keyed, the router holds no key, so it learns only when SKYMEM says a command verified
             * (SKYMEM_ISL_OUT_LEARN_CC): an unsigned or replayed packet moves nothing. */
            ISL_ROUTER_RememberGroundStation(Msg->route.src_sat, &From);
        }
        if (Msg->route.via_plane == SKYMEM_NO_SAT)
        {
            Msg->route.via_plane = ISL_ROUTER_Data.Plane;
            Msg->route.via_sat   = ISL_ROUTER_Data.Sat;
            skymem_rewrite_route(ISL_ROUTER_Data.RxBuf, (size_t)Len, &Msg->route);
        }
    }

    if (Malformed)
    {
        Counters->Invalid++;
        if (ISL_ROUTER_DeliverToBus(ISL_ROUTER_Data.RxBuf, (size_t)Len))
        {
            Counters->Delivered++;
        }
        return true;
    }

    ISL_ROUTER_RoutePacket(ISL_ROUTER_Data.RxBuf, (size_t)Len, Msg, Counters, false);
    return true;
}

/* Up to ISL_ROUTER_RX_BURST datagrams from one readable socket. */
static void ISL_ROUTER_ReceiveBurst(osal_id_t Sock, bool FromGround)
{
    uint32 i;

    for (i = 0; i < ISL_ROUTER_RX_BURST && ISL_ROUTER_ReceiveOne(Sock, FromGround); i++)
    {
    }
}

void ISL_ROUTER_RxTask(void)
{
    OS_FdSet ReadSet;
    int32    rc;

    CFE_EVS_SendEvent(ISL_ROUTER_RX_TASK_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "ISL_ROUTER: receive task listening on the ISL and ground ports");

    while (ISL_ROUTER_Data.RunStatus == CFE_ES_RunStatus_APP_RUN)
    {
        OS_SelectFdZero(&ReadSet);
        OS_SelectFdAdd(&ReadSet, ISL_ROUTER_Data.IslSock);
        OS_SelectFdAdd(&ReadSet, ISL_ROUTER_Data.GroundSock);

        /* Bounded wait, so the loop notices when the app is told to stop. */
        rc = OS_SelectMultiple(&ReadSet, NULL, ISL_ROUTER_RX_SELECT_MS);
        if (rc == OS_ERROR_TIMEOUT)
        {
            continue;
        }
        if (rc != OS_SUCCESS)
        {
            CFE_EVS_SendEvent(ISL_ROUTER_SOCKET_ERR_EID, CFE_EVS_EventType_ERROR,
                              "ISL_ROUTER: select failed (OSAL %ld)", (long)rc);
            OS_TaskDelay(ISL_ROUTER_RX_SELECT_MS);
            continue;
        }

        CFE_ES_PerfLogEntry(ISL_ROUTER_RX_PERF_ID);
        if (OS_SelectFdIsSet(&ReadSet, ISL_ROUTER_Data.IslSock))
        {
            ISL_ROUTER_ReceiveBurst(ISL_ROUTER_Data.IslSock, false);
        }
        if (OS_SelectFdIsSet(&ReadSet, ISL_ROUTER_Data.GroundSock))
        {
            ISL_ROUTER_ReceiveBurst(ISL_ROUTER_Data.GroundSock, true);
        }
        CFE_ES_PerfLogExit(ISL_ROUTER_RX_PERF_ID);
    }

    CFE_ES_ExitChildTask();
}
