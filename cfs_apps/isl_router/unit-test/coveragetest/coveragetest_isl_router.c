/*
 * ISL_ROUTER coverage tests (cFE unit-test framework).
 *
 * Packets are built and checked with the real skymem_core codec; the routing
 * decision uses the real +GRID router. The OS_SocketSendTo stub keeps a copy
 * of the datagram that would have gone on the link.
 */
#include "isl_router.h"
#include "isl_router_cmds.h"
#include "isl_router_dispatch.h"
#include "isl_router_forward.h"
#include "isl_router_rx.h"
#include "isl_router_utils.h"

#include "skymem_codec.h"

#include "utassert.h"
#include "utstubs.h"
#include "uttest.h"

typedef union
{
    CFE_SB_Buffer_t Sb;
    uint8           Bytes[2048];
} UT_Packet_t;

static UT_Packet_t      UT_Pkt;
static UT_Packet_t      UT_Sent;
static UT_Packet_t      UT_Bus;
static CFE_SB_Buffer_t *UT_BusPtr;
static uint8            UT_Hash[SKYMEM_BLOCK_HASH_LEN];

/* This satellite is (0,0) of a 3x3 grid. */
static void UT_Setup(void)
{
    UT_ResetState(0);
    memset(&ISL_ROUTER_Data, 0, sizeof(ISL_ROUTER_Data));
    ISL_ROUTER_Data.Planes         = 3;
    ISL_ROUTER_Data.SatsPerPlane   = 3;
    ISL_ROUTER_Data.IslPortBase    = 21000;
    ISL_ROUTER_Data.GroundPortBase = 41000;
    ISL_ROUTER_Data.HostCount      = 1;
    strcpy(ISL_ROUTER_Data.Hosts[0], "127.0.0.1");
    strcpy(ISL_ROUTER_Data.Host, "127.0.0.1");
    memset(UT_Hash, 0x5A, sizeof(UT_Hash));
    memset(&UT_Sent, 0, sizeof(UT_Sent));
    UT_SetDataBuffer(UT_KEY(OS_SocketSendTo), UT_Sent.Bytes, sizeof(UT_Sent.Bytes), false);
    UT_BusPtr = &UT_Bus.Sb;
    UT_SetDataBuffer(UT_KEY(CFE_SB_AllocateMessageBuffer), &UT_BusPtr, sizeof(UT_BusPtr), false);
}

static skymem_route_t UT_Route(uint16 DstPlane, uint16 DstSat, uint8 Ttl)
{
    skymem_route_t R;

    memset(&R, 0, sizeof(R));
    R.dst_plane  = DstPlane;
    R.dst_sat    = DstSat;
    R.src_plane  = SKYMEM_GROUND_PLANE;
    R.src_sat    = 4;
    R.via_plane  = 0;
    R.via_sat    = 0;
    R.request_id = 31;
    R.ttl        = Ttl;
    return R;
}

/* Builds a GET_CHUNK with this route and routes it as if it arrived over a link. */
static int UT_RouteGet(skymem_route_t Route, skymem_msg_t *Msg)
{
    int Len = skymem_build_get_chunk(UT_Pkt.Bytes, sizeof(UT_Pkt.Bytes), 1, &Route, UT_Hash, 0);

    UtAssert_True(Len > 0, "packet built");
    UtAssert_INT32_EQ(skymem_parse(UT_Pkt.Bytes, (size_t)Len, Msg), SKYMEM_OK);
    ISL_ROUTER_RoutePacket(UT_Pkt.Bytes, (size_t)Len, Msg, &ISL_ROUTER_Data.RxCounters, false);
    return Len;
}

static void Test_ForwardOneHop(void)
{
    skymem_msg_t Msg;
    skymem_msg_t Sent;
    int          Len;

    /* (0,0) -> (2,2) on a 3x3 torus: north first (wraps to plane 2), as the paper's rule says. */
    Len = UT_RouteGet(UT_Route(2, 2, 10), &Msg);
    UtAssert_STUB_COUNT(OS_SocketSendTo, 1);
    UtAssert_STUB_COUNT(OS_SocketAddrSetPort, 1);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.Forwarded, 1);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.TxIsl, 1);

    /* What went on the link: TTL spent, hop counted, checksum still valid. */
    UtAssert_INT32_EQ(skymem_parse(UT_Sent.Bytes, (size_t)Len, &Sent), SKYMEM_OK);
    UtAssert_UINT32_EQ(Sent.route.ttl, 9);
    UtAssert_UINT32_EQ(Sent.route.hops, 1);
    UtAssert_UINT32_EQ(Sent.route.request_id, 31);
}

/* OS_SocketSendTo hook: keeps the address a datagram went to (UserObj: an OS_SockAddr_t). */
static int32 UT_SentTo(void *UserObj, int32 StubRetcode, uint32 CallCount, const UT_StubContext_t *Context)
{
    *(OS_SockAddr_t *)UserObj = *UT_Hook_GetArgValueByName(Context, "RemoteAddr", const OS_SockAddr_t *);
    return (int32)UT_Hook_GetArgValueByName(Context, "buflen", size_t); /* all of it sent */
}

/* Re-arms the OS_SocketSendTo capture so the next datagram lands at the start of UT_Sent. */
static void UT_CaptureNextSend(void)
{
    UT_ResetState(UT_KEY(OS_SocketSendTo));
    memset(&UT_Sent, 0, sizeof(UT_Sent));
    UT_SetDataBuffer(UT_KEY(OS_SocketSendTo), UT_Sent.Bytes, sizeof(UT_Sent.Bytes), false);
}

static void Test_TtlAndBadDestination(void)
{
    skymem_msg_t  Msg;
    skymem_msg_t  Nak;
    OS_SockAddr_t Station;
    const size_t  NakLen = SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_REPLY_HDR_LEN;

    /* Ground station 4 sent the requests to us, so we hold its link. */
    memset(&Station, 0, sizeof(Station));
    ISL_ROUTER_RememberGroundStation(4, &Station);

    /* TTL spent: not forwarded; the sender gets NAK TTL_EXPIRED instead. */
    UT_CaptureNextSend();
    UT_RouteGet(UT_Route(1, 1, 0), &Msg);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.Dropped, 1);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.TxIsl, 0);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.TxGround, 1);
    UtAssert_INT32_EQ(skymem_parse(UT_Sent.Bytes, NakLen, &Nak), SKYMEM_OK);
    UtAssert_UINT32_EQ(Nak.reply_kind, SKYMEM_REPLY_NAK);
    UtAssert_UINT32_EQ(Nak.reply_status, SKYMEM_NAK_TTL_EXPIRED);
    UtAssert_UINT32_EQ(Nak.route.request_id, 31);

    /* No plane 7 in a 3x3 grid: NAK NO_ROUTE. */
    UT_CaptureNextSend();
    UT_RouteGet(UT_Route(7, 0, 10), &Msg);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.Dropped, 2);
    UtAssert_INT32_EQ(skymem_parse(UT_Sent.Bytes, NakLen, &Nak), SKYMEM_OK);
    UtAssert_UINT32_EQ(Nak.reply_status, SKYMEM_NAK_NO_ROUTE);

    /* Keyed (SKYMEM's key file there): a relay cannot verify these, so it drops them unanswered. */
    ISL_ROUTER_Data.Keyed = true;
    UT_RouteGet(UT_Route(1, 1, 0), &Msg);
    UT_RouteGet(UT_Route(7, 0, 10), &Msg);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.Dropped, 4);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.TxGround, 2);
    ISL_ROUTER_Data.Keyed = false;
}

static void Test_DeliverLocal(void)
{
    skymem_msg_t Msg;
    int          Len;

    Len = UT_RouteGet(UT_Route(0, 0, 10), &Msg);
    UtAssert_STUB_COUNT(OS_SocketSendTo, 0);
    UtAssert_STUB_COUNT(CFE_SB_TransmitBuffer, 1);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.Delivered, 1);
    UtAssert_MemCmp(UT_Bus.Bytes, UT_Pkt.Bytes, (size_t)Len, "delivered byte for byte");
}

static void Test_ReplyForThisSatellite(void)
{
    skymem_route_t Route = UT_Route(0, 0, 10);
    skymem_msg_t   Msg;
    int            Len;

    /* A migration target's ACK addressed to us goes to SKYMEM wrapped in SKYMEM_ISL_IN_MID. */
    Route.src_plane = 0;
    Route.src_sat   = 2;
    Len = skymem_build_reply(UT_Pkt.Bytes, sizeof(UT_Pkt.Bytes), 1, 0, 0, &Route, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC,
                             0, 0, 1, NULL, 0);
    UtAssert_INT32_EQ(skymem_parse(UT_Pkt.Bytes, (size_t)Len, &Msg), SKYMEM_OK);
    ISL_ROUTER_RoutePacket(UT_Pkt.Bytes, (size_t)Len, &Msg, &ISL_ROUTER_Data.RxCounters, false);
    UtAssert_STUB_COUNT(CFE_MSG_Init, 1);
    UtAssert_STUB_COUNT(CFE_SB_TransmitBuffer, 1);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.Delivered, 1);
    UtAssert_MemCmp(UT_Bus.Bytes + sizeof(CFE_MSG_CommandHeader_t), UT_Pkt.Bytes, (size_t)Len, "reply wrapped intact");
}

static void Test_ReplyToGround(void)
{
    skymem_route_t Route = UT_Route(SKYMEM_GROUND_PLANE, 4, 10);
    skymem_msg_t   Msg;
    OS_SockAddr_t  Station;
    int            Len;

    Route.src_plane = 1;
    Route.src_sat   = 1;
    Len = skymem_build_reply(UT_Pkt.Bytes, sizeof(UT_Pkt.Bytes), 1, 0, 0, &Route, SKYMEM_REPLY_ACK, SKYMEM_NOOP_CC,
                             0, 0, 0, NULL, 0);
    UtAssert_INT32_EQ(skymem_parse(UT_Pkt.Bytes, (size_t)Len, &Msg), SKYMEM_OK);

    /* We are the "via" satellite but station 4 never sent us anything: dropped. */
    ISL_ROUTER_RoutePacket(UT_Pkt.Bytes, (size_t)Len, &Msg, &ISL_ROUTER_Data.MainCounters, true);
    UtAssert_STUB_COUNT(OS_SocketSendTo, 0);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.MainCounters.Dropped, 1);

    /* After a request from station 4 the reply goes to its address. */
    memset(&Station, 0, sizeof(Station));
    ISL_ROUTER_RememberGroundStation(4, &Station);
    UtAssert_UINT32_EQ(ISL_ROUTER_GroundStationCount(), 1);
    ISL_ROUTER_RoutePacket(UT_Pkt.Bytes, (size_t)Len, &Msg, &ISL_ROUTER_Data.MainCounters, true);
    UtAssert_STUB_COUNT(OS_SocketSendTo, 1);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.MainCounters.TxGround, 1);
}

static void Test_BusPacketsAndCredits(void)
{
    skymem_route_t Route = UT_Route(0, 1, SKYMEM_DEFAULT_TTL);
    CFE_SB_MsgId_t MsgIds[2] = {CFE_SB_ValueToMsgId(SKYMEM_ISL_OUT_MID), CFE_SB_ValueToMsgId(SKYMEM_ISL_OUT_MID)};
    CFE_MSG_FcnCode_t Cc = SKYMEM_ISL_OUT_SEND_CC;
    CFE_MSG_Size_t Size;
    int            Len;

    /* Gossip from SKYMEM arrives wrapped in an 8-byte command header (function code: a packet to send). */
    Route.src_plane = 0;
    Route.src_sat   = 0;
    Route.flags     = SKYMEM_RF_GOSSIP;
    Len = skymem_build_evict(UT_Pkt.Bytes + 8, sizeof(UT_Pkt.Bytes) - 8, 1, &Route, UT_Hash, 3, 0);
    Size = (CFE_MSG_Size_t)Len + 8;
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetMsgId), MsgIds, sizeof(MsgIds), true); /* dispatch + SendFromBus */
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetSize), &Size, sizeof(Size), true);
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetFcnCode), &Cc, sizeof(Cc), true);
    ISL_ROUTER_TaskPipe(&UT_Pkt.Sb);

    UtAssert_STUB_COUNT(OS_SocketSendTo, 1);
    UtAssert_STUB_COUNT(OS_CountSemGive, 1); /* the credit goes back to SKYMEM */
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.MainCounters.TxIsl, 1);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.MainCounters.Forwarded, 0); /* our own packet, not a relay */
}

static void Test_HostsOfAGridOverTwoMachines(void)
{
    /* 9 satellites on two machines: indexes 0-4 on the first, 5-8 on the second (the launcher's rule). */
    ISL_ROUTER_Data.HostCount = 2;
    strcpy(ISL_ROUTER_Data.Hosts[1], "10.0.0.6");
    UtAssert_StrCmp(ISL_ROUTER_HostOf(0), "127.0.0.1", "index 0 on the first machine");
    UtAssert_StrCmp(ISL_ROUTER_HostOf(4), "127.0.0.1", "index 4 on the first machine");
    UtAssert_StrCmp(ISL_ROUTER_HostOf(5), "10.0.0.6", "index 5 on the second machine");
    UtAssert_StrCmp(ISL_ROUTER_HostOf(8), "10.0.0.6", "index 8 on the second machine");
}

static void Test_CommandsAndHk(void)
{
    CFE_SB_MsgId_t    MsgId = CFE_SB_ValueToMsgId(ISL_ROUTER_CMD_MID);
    CFE_MSG_FcnCode_t Cc    = ISL_ROUTER_NOOP_CC;
    CFE_MSG_Size_t    Size  = sizeof(ISL_ROUTER_NoopCmd_t);

    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetMsgId), &MsgId, sizeof(MsgId), true);
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetFcnCode), &Cc, sizeof(Cc), true);
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetSize), &Size, sizeof(Size), true);
    ISL_ROUTER_TaskPipe(&UT_Pkt.Sb);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.CmdCounter, 1);

    ISL_ROUTER_Data.RxCounters.Forwarded   = 2;
    ISL_ROUTER_Data.MainCounters.Forwarded = 3;
    ISL_ROUTER_SendHkCmd(NULL);
    UtAssert_UINT32_EQ(skymem_get_u32(ISL_ROUTER_Data.HkTlm.Payload.Bytes + ISL_ROUTER_HK_CMD_COUNT), 1);
    UtAssert_UINT32_EQ(skymem_get_u32(ISL_ROUTER_Data.HkTlm.Payload.Bytes + ISL_ROUTER_HK_FORWARDED), 5);
    UtAssert_STUB_COUNT(CFE_SB_TransmitMsg, 1);
}

/* The receive task runs one wakeup: the app is told to stop while it waits. */
static int32 UT_StopAfterSelect(void *UserObj, int32 StubRetcode, uint32 CallCount, const UT_StubContext_t *Context)
{
    ISL_ROUTER_Data.RunStatus = CFE_ES_RunStatus_APP_EXIT;
    return StubRetcode;
}

static void Test_RxReadsABurstPerWakeup(void)
{
    /* Both sockets readable, and always another datagram waiting (the stub's zero-filled
     * datagrams, invalid): one wakeup reads ISL_ROUTER_RX_BURST from each socket, no more. */
    ISL_ROUTER_Data.RunStatus = CFE_ES_RunStatus_APP_RUN;
    UT_SetHookFunction(UT_KEY(OS_SelectMultiple), UT_StopAfterSelect, NULL);
    UT_SetDefaultReturnValue(UT_KEY(OS_SelectFdIsSet), true);
    ISL_ROUTER_RxTask();
    UtAssert_STUB_COUNT(OS_SelectMultiple, 1);
    UtAssert_STUB_COUNT(OS_SocketRecvFrom, 2 * ISL_ROUTER_RX_BURST);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.RxIsl, ISL_ROUTER_RX_BURST);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.RxGround, ISL_ROUTER_RX_BURST);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.Invalid, 2 * ISL_ROUTER_RX_BURST);
}

static void Test_RxStopsWhenTheSocketIsDrained(void)
{
    /* Only the ISL socket readable, three datagrams waiting: the fourth read finds none. */
    ISL_ROUTER_Data.RunStatus = CFE_ES_RunStatus_APP_RUN;
    UT_SetHookFunction(UT_KEY(OS_SelectMultiple), UT_StopAfterSelect, NULL);
    UT_SetDeferredRetcode(UT_KEY(OS_SelectFdIsSet), 1, true);
    UT_SetDeferredRetcode(UT_KEY(OS_SocketRecvFrom), 4, OS_ERROR_TIMEOUT);
    ISL_ROUTER_RxTask();
    UtAssert_STUB_COUNT(OS_SocketRecvFrom, 4);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.RxIsl, 3);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.RxGround, 0);
}

/* OS_SocketRecvFrom's handler: the first read gets UT_RecvLen bytes of UT_Pkt from port UT_FromPort of
 * 127.0.0.1 (the port stands for the sender's address), the next finds the socket drained. */
static uint16 UT_FromPort;
static int32  UT_RecvLen;
static void   UT_RecvFrom(void *UserObj, UT_EntryKey_t FuncKey, const UT_StubContext_t *Context)
{
    uint8         *Buffer = UT_Hook_GetArgValueByName(Context, "buffer", uint8 *);
    OS_SockAddr_t *From   = UT_Hook_GetArgValueByName(Context, "RemoteAddr", OS_SockAddr_t *);
    int32          Status = OS_ERROR_TIMEOUT;

    if (UT_GetStubCount(FuncKey) == 1)
    {
        memcpy(Buffer, UT_Pkt.Bytes, (size_t)UT_RecvLen);
        memset(From, 0, sizeof(*From));
        skymem_put_u16((uint8 *)From->AddrData.Buffer, UT_FromPort);
        Status = UT_RecvLen;
    }
    UT_Stub_SetReturnValue(FuncKey, Status);
}

/* Station 4 sends request RequestId (a GET_CHUNK for (0,0): signed or not, the router cannot tell) from Port
 * into our ground port; the receive task runs one wakeup. */
static void UT_GroundRequest(uint32 RequestId, uint16 Port)
{
    skymem_route_t Route = UT_Route(0, 0, 10);
    int            Len;

    Route.request_id = RequestId;
    Route.via_plane  = SKYMEM_NO_SAT;
    Route.via_sat    = SKYMEM_NO_SAT;
    Len = skymem_build_get_chunk(UT_Pkt.Bytes, sizeof(UT_Pkt.Bytes), 1, &Route, UT_Hash, 0);
    UtAssert_True(Len > 0, "request built");
    UT_FromPort = Port;
    UT_RecvLen  = Len;
    UT_ResetState(UT_KEY(OS_SocketRecvFrom));
    UT_SetHandlerFunction(UT_KEY(OS_SocketRecvFrom), UT_RecvFrom, NULL);
    ISL_ROUTER_Data.RunStatus = CFE_ES_RunStatus_APP_RUN;
    UT_SetHookFunction(UT_KEY(OS_SelectMultiple), UT_StopAfterSelect, NULL);
    UT_ResetState(UT_KEY(OS_SelectFdIsSet));
    UT_SetDeferredRetcode(UT_KEY(OS_SelectFdIsSet), 2, true); /* the ISL socket (asked first): not readable */
    ISL_ROUTER_RxTask();
}

/* A reply to station 4's request RequestId goes down from us: SKYMEM's own (from the bus), or Relayed, one of
 * (1,1) that came over a link; returns the port it went to (0: not sent). */
static uint16 UT_AnswerGoesTo(uint32 RequestId, bool Relayed)
{
    skymem_route_t Route = UT_Route(SKYMEM_GROUND_PLANE, 4, 10);
    skymem_msg_t   Msg;
    OS_SockAddr_t  To;
    int            Len;

    Route.src_plane  = Relayed ? 1 : 0;
    Route.src_sat    = Relayed ? 1 : 0;
    Route.request_id = RequestId;
    Len = skymem_build_reply(UT_Pkt.Bytes, sizeof(UT_Pkt.Bytes), 1, 0, 0, &Route, SKYMEM_REPLY_ACK, SKYMEM_NOOP_CC,
                             0, 0, 0, NULL, 0);
    UtAssert_INT32_EQ(skymem_parse(UT_Pkt.Bytes, (size_t)Len, &Msg), SKYMEM_OK);
    UT_ResetState(UT_KEY(OS_SocketSendTo));
    memset(&To, 0, sizeof(To));
    UT_SetDataBuffer(UT_KEY(OS_SocketSendTo), UT_Sent.Bytes, sizeof(UT_Sent.Bytes), false);
    UT_SetHookFunction(UT_KEY(OS_SocketSendTo), UT_SentTo, &To);
    ISL_ROUTER_RoutePacket(UT_Pkt.Bytes, (size_t)Len, &Msg,
                           Relayed ? &ISL_ROUTER_Data.RxCounters : &ISL_ROUTER_Data.MainCounters, !Relayed);
    return UT_GetStubCount(UT_KEY(OS_SocketSendTo)) == 0 ? 0 : skymem_get_u16((const uint8 *)To.AddrData.Buffer);
}

/* SKYMEM's own answers go to the station's learnt address only; relayed ones to their request's slot first
 * (N1 of issue 53: a packet relayed through here may claim an own request's slot). */
static uint16 UT_ReplyGoesTo(uint32 RequestId)
{
    return UT_AnswerGoesTo(RequestId, false);
}

static uint16 UT_RelayedReplyGoesTo(uint32 RequestId)
{
    return UT_AnswerGoesTo(RequestId, true);
}

/* SKYMEM's word: station 4's request RequestId verified here (through the dispatcher, as on the bus). */
static void UT_StationVerified(uint32 RequestId, size_t PayloadLen)
{
    /* twice each: the dispatcher, and the length check's event when the length is wrong */
    CFE_SB_MsgId_t    MsgId[2] = {CFE_SB_ValueToMsgId(SKYMEM_ISL_OUT_MID), CFE_SB_ValueToMsgId(SKYMEM_ISL_OUT_MID)};
    CFE_MSG_FcnCode_t Cc[2]    = {SKYMEM_ISL_OUT_LEARN_CC, SKYMEM_ISL_OUT_LEARN_CC};
    CFE_MSG_Size_t    Size     = sizeof(CFE_MSG_CommandHeader_t) + PayloadLen;

    skymem_put_u16(UT_Bus.Bytes + sizeof(CFE_MSG_CommandHeader_t) + SKYMEM_ISL_LEARN_STATION, 4);
    skymem_put_u32(UT_Bus.Bytes + sizeof(CFE_MSG_CommandHeader_t) + SKYMEM_ISL_LEARN_REQUEST, RequestId);
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetMsgId), MsgId, sizeof(MsgId), true);
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetFcnCode), Cc, sizeof(Cc), true);
    UT_SetDataBuffer(UT_KEY(CFE_MSG_GetSize), &Size, sizeof(Size), true);
    ISL_ROUTER_TaskPipe(&UT_Bus.Sb);
}

static void Test_KeyedLearnsOnlyWhatSkymemVerified(void)
{
    ISL_ROUTER_Data.Keyed = true;

    /* Station 4's request 100 from port 5000: a relayed answer to it goes back there, but the station is not
     * learnt from the packet (the router cannot verify it), so SKYMEM's own answer has nowhere to go yet. */
    UT_GroundRequest(100, 5000);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.RxCounters.Delivered, 1);
    UtAssert_UINT32_EQ(ISL_ROUTER_GroundStationCount(), 0);
    UtAssert_UINT32_EQ(UT_RelayedReplyGoesTo(100), 5000);
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(100), 0);
    UtAssert_UINT32_EQ(UT_RelayedReplyGoesTo(101), 0); /* another request of the station: no address yet */

    /* SKYMEM verified request 100: station 4 is at port 5000, for every answer. */
    UT_StationVerified(100, SKYMEM_ISL_LEARN_PAYLOAD_LEN);
    UtAssert_STUB_COUNT(OS_CountSemGive, 1); /* SKYMEM took a credit for it */
    UtAssert_UINT32_EQ(ISL_ROUTER_GroundStationCount(), 1);
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(101), 5000);

    /* M1, M2: an attacker's packet as station 4 from port 6666 (unsigned, or a captured command
     * replayed) moves nothing: only relayed answers to its own request id would go to it (N1: never
     * SKYMEM's own). */
    UT_GroundRequest(200, 6666);
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(101), 5000);
    UtAssert_UINT32_EQ(UT_RelayedReplyGoesTo(200), 6666);
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(200), 5000);

    /* SKYMEM's word about a request the router no longer holds (or never saw) teaches nothing. */
    UT_StationVerified(300, SKYMEM_ISL_LEARN_PAYLOAD_LEN);
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(101), 5000);

    /* The station moved (port 7000) and SKYMEM verified its request there: learnt. */
    UT_GroundRequest(400, 7000);
    UT_StationVerified(400, SKYMEM_ISL_LEARN_PAYLOAD_LEN);
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(101), 7000);
    UtAssert_UINT32_EQ(ISL_ROUTER_GroundStationCount(), 1);

    /* A learn message of the wrong length is refused (counted, event), nothing learnt. */
    UT_GroundRequest(500, 8000);
    UT_StationVerified(500, SKYMEM_ISL_LEARN_PAYLOAD_LEN - 1);
    UtAssert_UINT32_EQ(ISL_ROUTER_Data.ErrCounter, 1);
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(101), 7000);
}

static void Test_UnkeyedLearnsFromEveryRequest(void)
{
    /* Unkeyed nothing verifies and SKYMEM sends no word: every request teaches, as it always has. */
    UT_GroundRequest(100, 5000);
    UtAssert_UINT32_EQ(ISL_ROUTER_GroundStationCount(), 1);
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(101), 5000);
    UT_GroundRequest(200, 6000);
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(101), 6000);
    UtAssert_UINT32_EQ(UT_RelayedReplyGoesTo(100), 5000); /* a relayed answer still goes where its request came from */
    UtAssert_UINT32_EQ(UT_ReplyGoesTo(100), 6000);        /* SKYMEM's own: the station's address */
}

void UtTest_Setup(void)
{
    UtTest_Add(Test_ForwardOneHop, UT_Setup, NULL, "forward one +GRID hop");
    UtTest_Add(Test_TtlAndBadDestination, UT_Setup, NULL, "TTL expired and unknown satellite dropped");
    UtTest_Add(Test_DeliverLocal, UT_Setup, NULL, "packet for this satellite goes to SKYMEM");
    UtTest_Add(Test_ReplyForThisSatellite, UT_Setup, NULL, "reply for this satellite goes to SKYMEM wrapped");
    UtTest_Add(Test_ReplyToGround, UT_Setup, NULL, "reply to a ground station");
    UtTest_Add(Test_BusPacketsAndCredits, UT_Setup, NULL, "SKYMEM gossip from the bus, credit returned");
    UtTest_Add(Test_KeyedLearnsOnlyWhatSkymemVerified, UT_Setup, NULL,
               "keyed: a station is learnt only from a request SKYMEM verified");
    UtTest_Add(Test_UnkeyedLearnsFromEveryRequest, UT_Setup, NULL, "unkeyed: every request teaches, as before");
    UtTest_Add(Test_HostsOfAGridOverTwoMachines, UT_Setup, NULL, "satellites spread over two machines");
    UtTest_Add(Test_CommandsAndHk, UT_Setup, NULL, "NOOP and housekeeping");
    UtTest_Add(Test_RxReadsABurstPerWakeup, UT_Setup, NULL, "receive task: a bounded burst per wakeup");
    UtTest_Add(Test_RxStopsWhenTheSocketIsDrained, UT_Setup, NULL, "receive task: stops at an empty socket");
}
