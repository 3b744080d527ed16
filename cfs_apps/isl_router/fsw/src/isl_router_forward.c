/* ISL_ROUTER routing: one hop as skymem_core decides it (skymem_hop.h), signed per link (skymem_link.h). */
#include "isl_router.h"
#include "isl_router_eventids.h"
#include "isl_router_forward.h"
#include "isl_router_links.h"
#include "isl_router_utils.h"

#include "skymem_auth.h"
#include "skymem_hop.h"
#include "skymem_router.h"

static void ISL_ROUTER_Drop(ISL_ROUTER_Counters_t *Counters, const skymem_route_t *Route, const char *Why)
{
    Counters->Dropped++;
    CFE_EVS_SendEvent(ISL_ROUTER_DROP_EID, CFE_EVS_EventType_DEBUG,
                      "ISL_ROUTER: request %lu to (%u,%u) dropped: %s", (unsigned long)Route->request_id,
                      (unsigned int)Route->dst_plane, (unsigned int)Route->dst_sat, Why);
}

/* Answers a relayed command that cannot be delivered (receive task only), on an unkeyed constellation
 * only: keyed, this relay cannot verify the command (it holds no key), and an answer to it -- unsigned,
 * echoing its request id toward its claimed source -- would be what PROTOCOL.md §5 rules out, an answer
 * to what does not verify. It is dropped and counted; the ground's request times out. */
static void ISL_ROUTER_Nak(const skymem_msg_t *Req, uint8 Reason, ISL_ROUTER_Counters_t *Counters)
{
    skymem_route_t Reply;
    int            Len;

    if (!Req->is_cmd || (Req->route.flags & SKYMEM_RF_GOSSIP) || ISL_ROUTER_Data.Keyed)
    {
        return; /* replies and gossip are never answered; nothing is, keyed */
    }
    memset(&Reply, 0, sizeof(Reply));
    Reply.dst_plane  = Req->route.src_plane;
    Reply.dst_sat    = Req->route.src_sat;
    Reply.src_plane  = ISL_ROUTER_Data.Plane;
    Reply.src_sat    = ISL_ROUTER_Data.Sat;
    Reply.via_plane  = Req->route.via_plane;
    Reply.via_sat    = Req->route.via_sat;
    Reply.request_id = Req->route.request_id;
    Reply.ttl        = SKYMEM_DEFAULT_TTL;

    Len = skymem_build_reply(ISL_ROUTER_Data.NakBuf, sizeof(ISL_ROUTER_Data.NakBuf), ISL_ROUTER_Data.NakSeq++, 0, 0,
                             &Reply, SKYMEM_REPLY_NAK, Req->cc, Reason, 0, 0, NULL, 0);
    if (Len > 0 && skymem_parse(ISL_ROUTER_Data.NakBuf, (size_t)Len, &ISL_ROUTER_Data.NakMsg) == SKYMEM_OK)
    {
        ISL_ROUTER_RoutePacket(ISL_ROUTER_Data.NakBuf, (size_t)Len, &ISL_ROUTER_Data.NakMsg, Counters, true);
    }
}

void ISL_ROUTER_RoutePacket(uint8 *Pkt, size_t Len, const skymem_msg_t *Msg, ISL_ROUTER_Counters_t *Counters,
                            bool OwnPacket)
{
    const skymem_route_t *Route = &Msg->route;
    skymem_hop_t          Hop;
    int                   Signed;

    /* Where it goes from here is skymem_core's (skymem_hop.h), as on the native node. */
    Hop = skymem_hop_decide(ISL_ROUTER_Data.Planes, ISL_ROUTER_Data.SatsPerPlane, ISL_ROUTER_Data.Plane,
                            ISL_ROUTER_Data.Sat, Route, !Msg->is_cmd);
    switch (Hop.kind)
    {
        case SKYMEM_HOP_GROUND:
            if (ISL_ROUTER_SendToGroundStation(Route->dst_sat, Route->request_id, !OwnPacket, Pkt, Len))
            {
                Counters->TxGround++;
            }
            else
            {
                ISL_ROUTER_Drop(Counters, Route, "ground station unknown or unreachable");
            }
            return;
        case SKYMEM_HOP_HERE:
            if (OwnPacket)
            {
                ISL_ROUTER_Drop(Counters, Route, "SKYMEM addressed its own satellite");
                return;
            }
            /* Commands, and replies to this satellite (a migration target's ACKs), go to SKYMEM. */
            if (ISL_ROUTER_DeliverToBus(Pkt, Len))
            {
                Counters->Delivered++;
            }
            else
            {
                ISL_ROUTER_Drop(Counters, Route, "software bus refused it");
            }
            return;
        case SKYMEM_HOP_DROP:
            ISL_ROUTER_Drop(Counters, Route, Hop.why);
            if (!OwnPacket && Hop.nak != 0)
            {
                ISL_ROUTER_Nak(Msg, Hop.nak, Counters);
            }
            return;
        case SKYMEM_HOP_LINK:
        default:
            break;
    }

    /* One ISL hop: one TTL spent, the hop counted (the codec fixes the checksum). */
    if (skymem_hop_advance(Pkt, Len, Route) != SKYMEM_OK)
    {
        ISL_ROUTER_Drop(Counters, Route, "route header rewrite failed");
        return;
    }
    CFE_EVS_SendEvent(ISL_ROUTER_ROUTE_DBG_EID, CFE_EVS_EventType_DEBUG,
                      "ISL_ROUTER: request %lu for (%u,%u) goes %s to (%u,%u), ttl %u", (unsigned long)Route->request_id,
                      (unsigned int)Route->dst_plane, (unsigned int)Route->dst_sat, skymem_dir_name(Hop.dir),
                      (unsigned int)Hop.next_plane, (unsigned int)Hop.next_sat, (unsigned int)(Route->ttl - 1u));

    /* keyed: checked for the link it came over (a relay), signed for the one it leaves by */
    Signed = ISL_ROUTER_LinksPrepare(!OwnPacket, Hop.next_plane, Hop.next_sat, Pkt, Len, SKYMEM_MAX_PACKET);
    if (Signed < 0)
    {
        ISL_ROUTER_Drop(Counters, Route, skymem_auth_strerror(Signed));
        return;
    }
    if (!ISL_ROUTER_SendToSat(Hop.next_plane, Hop.next_sat, Pkt, (size_t)Signed))
    {
        ISL_ROUTER_Drop(Counters, Route, "send failed");
        return;
    }
    Counters->TxIsl++;
    if (!OwnPacket)
    {
        Counters->Forwarded++; /* relayed for someone else */
    }
}

void ISL_ROUTER_SendFromBus(const CFE_SB_Buffer_t *SBBufPtr)
{
    const uint8   *Pkt  = (const uint8 *)SBBufPtr;
    size_t         Size = 0;
    CFE_SB_MsgId_t MsgId;
    int            rc;

    CFE_MSG_GetSize(&SBBufPtr->Msg, &Size);
    CFE_MSG_GetMsgId(&SBBufPtr->Msg, &MsgId);

    /* SKYMEM_ISL_OUT_MID wraps the packet to send in a command header. */
    if (CFE_SB_MsgIdToValue(MsgId) == SKYMEM_ISL_OUT_MID)
    {
        if (Size < sizeof(CFE_MSG_CommandHeader_t))
        {
            ISL_ROUTER_Data.MainCounters.Invalid++;
            return;
        }
        Pkt += sizeof(CFE_MSG_CommandHeader_t);
        Size -= sizeof(CFE_MSG_CommandHeader_t);
    }

    if (Size > sizeof(ISL_ROUTER_Data.TxBuf))
    {
        ISL_ROUTER_Data.MainCounters.Invalid++;
        return;
    }
    memcpy(ISL_ROUTER_Data.TxBuf, Pkt, Size);

    /* SKYMEM builds its packets with the same codec; checking costs little and
     * keeps a broken packet off the links. */
    rc = skymem_parse(ISL_ROUTER_Data.TxBuf, Size, &ISL_ROUTER_Data.TxMsg);
    if (rc != SKYMEM_OK || !ISL_ROUTER_Data.TxMsg.has_route)
    {
        ISL_ROUTER_Data.MainCounters.Invalid++;
        CFE_EVS_SendEvent(ISL_ROUTER_INVALID_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: invalid %lu-byte packet from SKYMEM (%s)", (unsigned long)Size,
                          skymem_strerror(rc));
        return;
    }

    ISL_ROUTER_RoutePacket(ISL_ROUTER_Data.TxBuf, Size, &ISL_ROUTER_Data.TxMsg, &ISL_ROUTER_Data.MainCounters, true);
}
