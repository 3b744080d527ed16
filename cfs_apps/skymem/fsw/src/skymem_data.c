/*
 * SKYMEM data-plane service: the chunk store operations of the SkyMemory
 * protocol (skymem_wire.h) on top of the skymem_core store and codec.
 *
 * Every request is answered on SKYMEM_REPLY_TLM_MID with the request's id, so
 * the ground can match and retry (all operations are idempotent). ISL_ROUTER
 * only delivers packets addressed to this satellite; any other is ignored.
 */
#include "skymem.h"
#include "skymem_auth_app.h"
#include "skymem_data.h"
#include "skymem_eventids.h"
#include "skymem_gossip.h"
#include "skymem_migrate.h"
#include "skymem_utils.h"

#include "skymem_crc32c.h"

/* ---- replies -------------------------------------------------------------- */

/* The send time for a reply's telemetry header, written when it is built: the tag of a signed
 * reply covers it, so nothing may stamp it afterwards. */
static void SKYMEM_ReplyTime(uint32 *Seconds, uint16 *Subsecs)
{
    CFE_TIME_SysTime_t Now = CFE_TIME_GetTime();

    *Seconds = Now.Seconds;
    *Subsecs = (uint16)(Now.Subseconds >> 16);
}

/* Signs (when keys are on) and publishes a reply built in the scratch buffer. */
static void SKYMEM_PublishReply(int Len, const skymem_route_t *Route)
{
    Len = SKYMEM_AuthSignReply(SKYMEM_Data.Scratch, Len, sizeof(SKYMEM_Data.Scratch), Route);
    SKYMEM_Publish(SKYMEM_Data.Scratch, Len);
}

static void SKYMEM_SendReply(const skymem_route_t *Route, uint8 Kind, uint8 Cc, uint8 Status, uint32 ChunkId,
                             uint32 Value, const uint8 *Body, size_t BodyLen)
{
    uint32 Seconds;
    uint16 Subsecs;
    int    Len;

    SKYMEM_ReplyTime(&Seconds, &Subsecs);
    Len = skymem_build_reply(SKYMEM_Data.Scratch, sizeof(SKYMEM_Data.Scratch), SKYMEM_Data.SeqCount++, Seconds,
                             Subsecs, Route, Kind, Cc, Status, ChunkId, Value, Body, BodyLen);
    SKYMEM_PublishReply(Len, Route);
}

void SKYMEM_SendAck(const skymem_route_t *Route, uint8 Cc, uint32 ChunkId, uint32 Value, const uint8 *Hash)
{
    SKYMEM_Data.CmdCounter++;
    SKYMEM_SendReply(Route, SKYMEM_REPLY_ACK, Cc, 0, ChunkId, Value, Hash, Hash ? SKYMEM_BLOCK_HASH_LEN : 0);
}

void SKYMEM_SendNakValue(const skymem_route_t *Route, uint8 Cc, uint8 Reason, uint32 Value, const uint8 *Hash)
{
    SKYMEM_Data.ErrCounter++;
    CFE_EVS_SendEvent(SKYMEM_DATA_NAK_EID, CFE_EVS_EventType_DEBUG, "SKYMEM: request %lu (cc %u) NAK %u",
                      (unsigned long)Route->request_id, (unsigned int)Cc, (unsigned int)Reason);
    SKYMEM_SendReply(Route, SKYMEM_REPLY_NAK, Cc, Reason, 0, Value, Hash, Hash ? SKYMEM_BLOCK_HASH_LEN : 0);
}

void SKYMEM_SendNak(const skymem_route_t *Route, uint8 Cc, uint8 Reason, uint32 ChunkId, const uint8 *Hash)
{
    SKYMEM_Data.ErrCounter++;
    CFE_EVS_SendEvent(SKYMEM_DATA_NAK_EID, CFE_EVS_EventType_DEBUG, "SKYMEM: request %lu (cc %u) NAK %u",
                      (unsigned long)Route->request_id, (unsigned int)Cc, (unsigned int)Reason);
    SKYMEM_SendReply(Route, SKYMEM_REPLY_NAK, Cc, Reason, ChunkId, 0, Hash, Hash ? SKYMEM_BLOCK_HASH_LEN : 0);
}

/* DATA reply for one stored chunk, or NAK NOT_FOUND. Shared by GET_CHUNK and GET_CHUNKS. */
static void SKYMEM_AnswerChunk(const skymem_route_t *Route, uint8 Cc, const uint8 *Hash, uint32 ChunkId)
{
    skymem_chunk_meta_t Meta;
    skymem_chunk_desc_t Desc;
    const uint8_t      *Data = NULL;
    size_t              Len  = 0;
    int                 PacketLen;
    uint32              Seconds;
    uint16              Subsecs;

    if (skymem_store_get(SKYMEM_Data.Store, Hash, ChunkId, &Meta, &Data, &Len) != SKYMEM_STORE_OK)
    {
        SKYMEM_SendNak(Route, Cc, SKYMEM_NAK_NOT_FOUND, ChunkId, Hash);
        return;
    }

    skymem_chunk_desc_from_meta(&Desc, Hash, ChunkId, &Meta, Len);

    SKYMEM_Data.CmdCounter++;
    SKYMEM_ReplyTime(&Seconds, &Subsecs);
    PacketLen = skymem_build_reply_data(SKYMEM_Data.Scratch, sizeof(SKYMEM_Data.Scratch), SKYMEM_Data.SeqCount++,
                                        Seconds, Subsecs, Route, Cc, &Desc, Data);
    SKYMEM_PublishReply(PacketLen, Route);
}

/* ---- request handlers ----------------------------------------------------- */

static void SKYMEM_SetChunk(const skymem_msg_t *Msg, const skymem_route_t *Reply)
{
    const skymem_chunk_desc_t *Desc = &Msg->desc;
    skymem_chunk_meta_t        Meta;
    int                        rc;

    if (Desc->data_len > SKYMEM_Data.ChunkSize)
    {
        SKYMEM_SendNak(Reply, SKYMEM_SET_CHUNK_CC, SKYMEM_NAK_TOO_LARGE, Desc->chunk_id, Desc->block_hash);
        return;
    }
    if (skymem_crc32c(Msg->data, Desc->data_len) != Desc->crc32c)
    {
        SKYMEM_SendNak(Reply, SKYMEM_SET_CHUNK_CC, SKYMEM_NAK_BAD_CRC, Desc->chunk_id, Desc->block_hash);
        return;
    }

    /* also whom to tell if LRU later purges it (a migration's origin record, else the route) */
    skymem_chunk_meta_from_set(&Meta, Desc, &Msg->route, Msg->has_origin ? &Msg->origin : NULL);

    rc = skymem_store_set(SKYMEM_Data.Store, Desc->block_hash, Desc->chunk_id, &Meta, Msg->data, Desc->data_len);
    if (rc == SKYMEM_STORE_E_TOO_LARGE)
    {
        SKYMEM_SendNak(Reply, SKYMEM_SET_CHUNK_CC, SKYMEM_NAK_TOO_LARGE, Desc->chunk_id, Desc->block_hash);
        return;
    }
    if (rc != SKYMEM_STORE_OK)
    {
        SKYMEM_SendNak(Reply, SKYMEM_SET_CHUNK_CC, SKYMEM_NAK_NO_SPACE, Desc->chunk_id, Desc->block_hash);
        return;
    }

    if (Msg->route.flags & SKYMEM_RF_MIGRATION)
    {
        SKYMEM_Data.MigratedIn++;
    }
    SKYMEM_SendAck(Reply, SKYMEM_SET_CHUNK_CC, Desc->chunk_id, 1, Desc->block_hash);
}

static void SKYMEM_Probe(const skymem_msg_t *Msg, const skymem_route_t *Reply)
{
    skymem_chunk_meta_t Meta;
    const uint8_t      *Data;
    size_t              Len;

    /* A probe must not refresh the chunk's place in the LRU order. */
    if (skymem_store_peek(SKYMEM_Data.Store, Msg->block_hash, Msg->chunk_id, &Meta, &Data, &Len) != SKYMEM_STORE_OK)
    {
        SKYMEM_SendNak(Reply, SKYMEM_PROBE_CC, SKYMEM_NAK_NOT_FOUND, Msg->chunk_id, Msg->block_hash);
        return;
    }
    SKYMEM_SendAck(Reply, SKYMEM_PROBE_CC, Msg->chunk_id, Meta.chunk_count, Msg->block_hash);
}

static void SKYMEM_QueueGetChunks(const skymem_msg_t *Msg, const skymem_route_t *Reply)
{
    SKYMEM_Job_t *Job;

    if (Msg->count == 0 || Msg->count > SKYMEM_MAX_GET_CHUNKS || (Msg->stride == 0 && Msg->count > 1))
    {
        SKYMEM_SendNak(Reply, SKYMEM_GET_CHUNKS_CC, SKYMEM_NAK_BAD_COMMAND, Msg->first, Msg->block_hash);
        return;
    }
    if (SKYMEM_Data.NumJobs >= SKYMEM_MAX_JOBS)
    {
        CFE_EVS_SendEvent(SKYMEM_BUSY_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: GET_CHUNKS queue full");
        SKYMEM_SendNak(Reply, SKYMEM_GET_CHUNKS_CC, SKYMEM_NAK_BUSY, Msg->first, Msg->block_hash);
        return;
    }

    Job = &SKYMEM_Data.Jobs[SKYMEM_Data.NumJobs++];
    Job->ReplyRoute  = *Reply;
    Job->NextChunkId = Msg->first;
    Job->Remaining   = Msg->count;
    Job->Stride      = Msg->stride;
    memcpy(Job->BlockHash, Msg->block_hash, SKYMEM_BLOCK_HASH_LEN);
}

void SKYMEM_RunJobs(uint32 Budget)
{
    SKYMEM_Job_t *Job;

    /* Oldest request first; each finished job is removed by moving the last one down. */
    while (Budget > 0 && SKYMEM_Data.NumJobs > 0)
    {
        Job = &SKYMEM_Data.Jobs[0];
        SKYMEM_AnswerChunk(&Job->ReplyRoute, SKYMEM_GET_CHUNKS_CC, Job->BlockHash, Job->NextChunkId);
        Job->NextChunkId += Job->Stride;
        Job->Remaining--;
        Budget--;

        if (Job->Remaining == 0)
        {
            SKYMEM_Data.NumJobs--;
            memmove(&SKYMEM_Data.Jobs[0], &SKYMEM_Data.Jobs[1], SKYMEM_Data.NumJobs * sizeof(SKYMEM_Job_t));
        }
    }
}

static void SKYMEM_EvictBlock(const skymem_msg_t *Msg, const skymem_route_t *Reply)
{
    uint32 Purged = skymem_store_purge_block(SKYMEM_Data.Store, Msg->block_hash);
    bool   IsGossip = (Msg->route.flags & SKYMEM_RF_GOSSIP) != 0;

    if (Purged > 0)
    {
        CFE_EVS_SendEvent(SKYMEM_EVICT_INF_EID, CFE_EVS_EventType_INFORMATION,
                          "SKYMEM: EVICT_BLOCK id %lu purged %lu chunks%s", (unsigned long)Msg->evict_id,
                          (unsigned long)Purged, IsGossip ? " (gossip)" : "");
    }

    /* Pass the eviction on once per (block, evict_id), radius permitting. */
    if (SKYMEM_GossipFirstSeen(Msg->block_hash, Msg->evict_id) && Msg->radius > 0)
    {
        SKYMEM_GossipForward(Msg->block_hash, Msg->evict_id, (uint8)(Msg->radius - 1u));
    }

    if (IsGossip)
    {
        SKYMEM_Data.CmdCounter++; /* a neighbour's gossip expects no answer */
        return;
    }
    SKYMEM_SendAck(Reply, SKYMEM_EVICT_BLOCK_CC, 0, Purged, Msg->block_hash);
}

static void SKYMEM_Stats(const skymem_route_t *Reply)
{
    skymem_stats_t Stats;
    uint32         Seconds;
    uint16         Subsecs;
    int            Len;

    SKYMEM_Data.CmdCounter++;
    SKYMEM_FillStats(&Stats);
    SKYMEM_ReplyTime(&Seconds, &Subsecs);
    Len = skymem_build_reply_stats(SKYMEM_Data.Scratch, sizeof(SKYMEM_Data.Scratch), SKYMEM_Data.SeqCount++, Seconds,
                                   Subsecs, Reply, &Stats);
    SKYMEM_PublishReply(Len, Reply);
}

static void SKYMEM_ServeRequest(const skymem_msg_t *Msg)
{
    skymem_route_t Reply;
    uint8          Nak;

    SKYMEM_ReplyRoute(&Msg->route, &Reply);

    switch (Msg->cc)
    {
        case SKYMEM_NOOP_CC:
            SKYMEM_SendAck(&Reply, Msg->cc, 0, 0, NULL);
            break;

        case SKYMEM_RESET_COUNTERS_CC:
            SKYMEM_ResetCounters();
            SKYMEM_SendAck(&Reply, Msg->cc, 0, 0, NULL);
            break;

        case SKYMEM_SET_PARAM_CC:
            Nak = SKYMEM_ApplyParam(Msg->param_id, Msg->param_value);
            if (Nak != 0)
            {
                SKYMEM_SendNak(&Reply, Msg->cc, Nak, 0, NULL);
            }
            else
            {
                SKYMEM_SendAck(&Reply, Msg->cc, 0, Msg->param_value, NULL);
            }
            break;

        case SKYMEM_SET_CHUNK_CC:
            SKYMEM_SetChunk(Msg, &Reply);
            break;

        case SKYMEM_GET_CHUNK_CC:
            SKYMEM_AnswerChunk(&Reply, Msg->cc, Msg->block_hash, Msg->chunk_id);
            break;

        case SKYMEM_GET_CHUNKS_CC:
            SKYMEM_QueueGetChunks(Msg, &Reply);
            break;

        case SKYMEM_PROBE_CC:
            SKYMEM_Probe(Msg, &Reply);
            break;

        case SKYMEM_EVICT_BLOCK_CC:
            SKYMEM_EvictBlock(Msg, &Reply);
            break;

        case SKYMEM_STATS_CC:
            SKYMEM_Stats(&Reply);
            break;

        case SKYMEM_MIGRATE_CC:
            SKYMEM_MigrateStart(Msg, &Reply);
            break;

        default:
            SKYMEM_SendNak(&Reply, Msg->cc, SKYMEM_NAK_BAD_COMMAND, 0, Msg->has_block_hash ? Msg->block_hash : NULL);
            break;
    }
}

/* A request the codec rejected but whose headers are intact (length field,
 * checksum, route) is answered, so the sender is not left waiting. */
static void SKYMEM_NakMalformed(int Error, const uint8 *Packet, size_t Size)
{
    skymem_route_t Req;
    skymem_route_t Reply;

    if (!skymem_intact_data_cmd(Packet, Size, &Req))
    {
        SKYMEM_Data.ErrCounter++;
        return;
    }
    if (Req.flags & SKYMEM_RF_GOSSIP)
    {
        SKYMEM_Data.ErrCounter++;
        return;
    }
    SKYMEM_ReplyRoute(&Req, &Reply);
    SKYMEM_SendNak(&Reply, Packet[6] & 0x7Fu, skymem_nak_for_parse_error(Error), 0, NULL);
}

void SKYMEM_ProcessDataPacket(const CFE_SB_Buffer_t *SBBufPtr)
{
    const uint8 *Packet = (const uint8 *)SBBufPtr;
    size_t       Size   = 0;
    int          rc;

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
        SKYMEM_NakMalformed(rc, Packet, Size);
        return;
    }

    SKYMEM_Data.RxPackets++;
    if (SKYMEM_AuthRefuse(Packet, Size, &SKYMEM_Data.Msg))
    {
        return; /* forged, unsigned or replayed: counted in AuthFailures */
    }
    SKYMEM_ServeRequest(&SKYMEM_Data.Msg);
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
    if (SKYMEM_AuthRefuseReply(Packet, Size, &SKYMEM_Data.Msg))
    {
        return; /* a forged or replayed ACK deletes nothing */
    }
    SKYMEM_MigrateOnReply(&SKYMEM_Data.Msg);
}

void SKYMEM_OnEviction(void *Ctx, const uint8_t BlockHash[SKYMEM_BLOCK_HASH_LEN], const skymem_chunk_meta_t *Victim,
                       uint32_t Purged)
{
    skymem_route_t Route;
    uint32         EvictId;

    CFE_EVS_SendEvent(SKYMEM_EVICT_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "SKYMEM: LRU purged a block of %lu chunks to make room", (unsigned long)Purged);

    /* The rest of the block elsewhere is useless too: gossip the eviction
     * under an id of our own (satellite index << 16 | counter). */
    EvictId = ((uint32)(SKYMEM_Data.Plane * SKYMEM_Data.SatsPerPlane + SKYMEM_Data.Sat) << 16) |
              (SKYMEM_Data.NextEvictId++ & 0xFFFFu);
    (void)SKYMEM_GossipFirstSeen(BlockHash, EvictId);
    if (Victim->gossip_radius > 0)
    {
        SKYMEM_GossipForward(BlockHash, EvictId, (uint8)(Victim->gossip_radius - 1u));
    }

    if (Victim->origin_ground == SKYMEM_NO_SAT || Victim->ingress_plane == SKYMEM_NO_SAT)
    {
        return; /* not set from the ground (e.g. migrated): nobody to tell */
    }

    /* Unsolicited EVICTED notice (request id 0) to the ground station that set
     * the block, through the satellite that held its link when it was set. */
    memset(&Route, 0, sizeof(Route));
    Route.dst_plane = SKYMEM_GROUND_PLANE;
    Route.dst_sat   = Victim->origin_ground;
    Route.src_plane = SKYMEM_Data.Plane;
    Route.src_sat   = SKYMEM_Data.Sat;
    Route.via_plane = Victim->ingress_plane;
    Route.via_sat   = Victim->ingress_sat;
    Route.ttl       = SKYMEM_DEFAULT_TTL;
    SKYMEM_SendReply(&Route, SKYMEM_REPLY_EVICTED, 0, 0, 0, Purged, BlockHash, SKYMEM_BLOCK_HASH_LEN);
}
