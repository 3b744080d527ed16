/*
 * SKYMEM data plane on cFS: what ISL_ROUTER delivers on the software bus goes to
 * skymem_core's command handling (skymem_sat.c, shared with the native node),
 * and what the core sends comes back here to be published. This file is the
 * core's io for cFS: replies on SKYMEM_REPLY_TLM_MID, commands for other
 * satellites wrapped in SKYMEM_ISL_OUT_MID, the OSAL clock, cFE time for the
 * telemetry header, EVS events, SET_PARAM through the table's limits.
 *
 * ISL_ROUTER only delivers packets addressed to this satellite; any other is
 * counted and ignored.
 */
#include <stdarg.h>

#include "skymem.h"
#include "skymem_auth_app.h"
#include "skymem_data.h"
#include "skymem_eventids.h"
#include "skymem_utils.h"

/* ---- the core's io ------------------------------------------------------------- */

static void SKYMEM_IoSend(void *Ctx, uint8_t *Packet, size_t Len, const skymem_route_t *Route, int IsReply)
{
    (void)Ctx;
    (void)Route;
    if (IsReply)
    {
        SKYMEM_Publish(Packet, (int)Len);
    }
    else
    {
        SKYMEM_PublishToRouter(Packet, (int)Len);
    }
}

static uint64_t SKYMEM_IoClockUs(void *Ctx)
{
    OS_time_t Now;

    (void)Ctx;
    OS_GetLocalTime(&Now);
    return (uint64_t)OS_TimeGetTotalMicroseconds(Now);
}

static uint64_t SKYMEM_IoMonoMs(void *Ctx)
{
    return SKYMEM_IoClockUs(Ctx) / 1000u;
}

/* The send time for a reply's telemetry header, written when it is built: the tag of a signed
 * reply covers it, so nothing may stamp it afterwards. */
static void SKYMEM_IoTlmTime(void *Ctx, uint32_t *Seconds, uint16_t *Subsecs)
{
    CFE_TIME_SysTime_t Now = CFE_TIME_GetTime();

    (void)Ctx;
    *Seconds = Now.Seconds;
    *Subsecs = (uint16)(Now.Subseconds >> 16);
}

static void SKYMEM_IoLog(void *Ctx, int Level, int About, const char *Text)
{
    static const uint16 Eids[] = {SKYMEM_DATA_NAK_EID, SKYMEM_DATA_NAK_EID, SKYMEM_EVICT_INF_EID,
                                  SKYMEM_MIGRATE_INF_EID, SKYMEM_BUSY_ERR_EID};
    static const uint16 Types[] = {CFE_EVS_EventType_ERROR, CFE_EVS_EventType_ERROR, CFE_EVS_EventType_INFORMATION,
                                   CFE_EVS_EventType_DEBUG};

    (void)Ctx;
    CFE_EVS_SendEvent(Eids[(unsigned)About < sizeof(Eids) / sizeof(Eids[0]) ? About : 0],
                      Types[(unsigned)Level < 4u ? Level : 3], "SKYMEM: %s", Text);
}

static uint8_t SKYMEM_IoApplyParam(void *Ctx, uint16_t ParamId, uint32_t Value)
{
    (void)Ctx;
    return SKYMEM_ApplyParam(ParamId, Value);
}

static void SKYMEM_IoFillStats(void *Ctx, skymem_stats_t *Stats)
{
    CFE_TIME_SysTime_t Now = CFE_TIME_GetTime();

    (void)Ctx;
    Stats->rx_packets = SKYMEM_Data.RxPackets;
    Stats->tx_packets = SKYMEM_Data.TxPackets;
    Stats->invalid    = SKYMEM_Data.Invalid;
    /* Forwarded/dropped belong to ISL_ROUTER and are in its housekeeping. */
    Stats->mission_time_ms = SKYMEM_MissionTimeMs(&SKYMEM_Data.Time);
    Stats->uptime_s        = Now.Seconds - SKYMEM_Data.StartSeconds;
}

static void SKYMEM_IoResetCounters(void *Ctx)
{
    (void)Ctx;
    SKYMEM_Data.RxPackets = 0;
    SKYMEM_Data.TxPackets = 0;
    SKYMEM_Data.Invalid   = 0;
}

static const skymem_sat_io_t SKYMEM_Io = {SKYMEM_IoSend,       SKYMEM_IoClockUs,      SKYMEM_IoMonoMs,
                                          SKYMEM_IoTlmTime,    SKYMEM_IoLog,          SKYMEM_IoApplyParam,
                                          SKYMEM_IoFillStats,  SKYMEM_IoResetCounters, SKYMEM_AuthPersistFloor};

void SKYMEM_CoreSetup(void)
{
    skymem_sat_t *Core = &SKYMEM_Data.Core;

    Core->plane       = SKYMEM_Data.Plane;
    Core->sat         = SKYMEM_Data.Sat;
    Core->planes      = SKYMEM_Data.Planes;
    Core->sats        = SKYMEM_Data.SatsPerPlane;
    Core->altitude_m  = (double)SKYMEM_Data.AltitudeM;
    Core->delay_scale = 1.0; /* the real links */
    Core->store       = SKYMEM_Data.Store;
    skymem_sat_init(Core, &SKYMEM_Io, NULL);
}

/* ---- packets from ISL_ROUTER --------------------------------------------------- */

/* A command that verified here: if it came up this satellite's own ground link (from a station, via
 * this satellite -- ISL_ROUTER fills an unset via with its satellite), ISL_ROUTER may now take the
 * address that request came from as the station's. Keyed only: ISL_ROUTER holds no key, so this is
 * the one thing that tells it a packet was genuine (M1, M2 of docs/RELIABILITY.md); unkeyed it learns
 * from every request itself, as it always has, and nothing is sent. */
static void SKYMEM_StationVerified(const skymem_route_t *Route)
{
    if (SKYMEM_Data.Core.auth != NULL && Route->src_plane == SKYMEM_GROUND_PLANE &&
        SKYMEM_IsMe(Route->via_plane, Route->via_sat))
    {
        SKYMEM_PublishStationLearned(Route->src_sat, Route->request_id);
    }
}

void SKYMEM_ProcessDataPacket(const CFE_SB_Buffer_t *SBBufPtr)
{
    const uint8   *Packet = (const uint8 *)SBBufPtr;
    size_t         Size   = 0;
    skymem_route_t Req;
    int            rc;

    CFE_MSG_GetSize(&SBBufPtr->Msg, &Size);

    /* Cheap ownership test before the full parse: route destination. */
    if (Size >= SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN &&
        !SKYMEM_IsMe(skymem_get_u16(Packet + SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_DST_PLANE),
                     skymem_get_u16(Packet + SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_DST_SAT)))
    {
        SKYMEM_Data.Invalid++; /* not ours: ISL_ROUTER should have forwarded it */
        return;
    }

    rc = skymem_parse(Packet, Size, &SKYMEM_Data.Msg);
    if (rc != SKYMEM_OK || !SKYMEM_Data.Msg.has_route)
    {
        SKYMEM_Data.Invalid++;
        CFE_EVS_SendEvent(SKYMEM_DATA_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: malformed data-plane packet of %lu bytes (%s)", (unsigned long)Size,
                          skymem_strerror(rc));
        /* headers sound: answered (PROTOCOL.md §4) so the sender is not left waiting */
        if (skymem_intact_data_cmd(Packet, Size, &Req) && skymem_sat_malformed(&SKYMEM_Data.Core, Packet, Size, &Req))
        {
            SKYMEM_StationVerified(&Req); /* before the NAK, so the router knows where to send it */
            skymem_sat_nak_malformed(&SKYMEM_Data.Core, rc, Packet, &Req);
        }
        else
        {
            SKYMEM_Data.Core.c.err_count++;
        }
        return;
    }

    SKYMEM_Data.RxPackets++;
    if (skymem_sat_accept(&SKYMEM_Data.Core, &SKYMEM_Data.Msg, Packet, Size, 0))
    {
        /* Before serving: the router's pipe is in order, so it has learnt before it sends the answer. */
        SKYMEM_StationVerified(&SKYMEM_Data.Msg.route);
        skymem_sat_serve(&SKYMEM_Data.Core, &SKYMEM_Data.Msg);
    }
}

void SKYMEM_ProcessInboundReply(const CFE_SB_Buffer_t *SBBufPtr)
{
    const uint8 *Packet = (const uint8 *)SBBufPtr + sizeof(CFE_MSG_CommandHeader_t);
    size_t       Size   = 0;
    int          rc;

    /* ISL_ROUTER wraps the reply in a command header (SKYMEM_ISL_IN_MID). */
    CFE_MSG_GetSize(&SBBufPtr->Msg, &Size);
    if (Size < sizeof(CFE_MSG_CommandHeader_t))
    {
        SKYMEM_Data.Invalid++;
        return;
    }
    Size -= sizeof(CFE_MSG_CommandHeader_t);

    rc = skymem_parse(Packet, Size, &SKYMEM_Data.Msg);
    if (rc != SKYMEM_OK || SKYMEM_Data.Msg.is_cmd || !SKYMEM_Data.Msg.has_route ||
        !SKYMEM_IsMe(SKYMEM_Data.Msg.route.dst_plane, SKYMEM_Data.Msg.route.dst_sat))
    {
        SKYMEM_Data.Invalid++;
        return;
    }
    skymem_sat_on_reply(&SKYMEM_Data.Core, &SKYMEM_Data.Msg, Packet, Size); /* a forged or replayed ACK deletes nothing */
}
