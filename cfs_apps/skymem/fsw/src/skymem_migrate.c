/*
 * SKYMEM MIGRATE (docs/PROTOCOL.md "Migration"): each chunk of the range held
 * here goes to the target as SET_CHUNK with route flag MIGRATION; our copy is
 * deleted only when the target ACKs it. At most SKYMEM_MIGRATE_WINDOW chunks
 * of a job are in flight; an unanswered chunk is resent after 1 s plus four
 * times the path's light time, at most SKYMEM_MIGRATE_RETRIES times. When every
 * chunk is settled the requester gets ACK (value = chunks moved) or NAK
 * MIGRATE_FAILED (value = chunks moved).
 *
 * The SET_CHUNKs leave through ISL_ROUTER (SKYMEM_ISL_OUT_MID); the target's
 * answers come back from ISL_ROUTER on SKYMEM_ISL_IN_MID. Request ids carry
 * the job id in the top 20 bits and the chunk's index in the low 12.
 */
#include "skymem.h"
#include "skymem_auth_app.h"
#include "skymem_data.h"
#include "skymem_eventids.h"
#include "skymem_migrate.h"
#include "skymem_utils.h"

#include "skymem_geometry.h"
#include "skymem_router.h"

#define SKYMEM_MIGRATE_IDX_BITS 12u

enum
{
    SKYMEM_MC_WAITING = 0,
    SKYMEM_MC_IN_FLIGHT,
    SKYMEM_MC_DONE,
    SKYMEM_MC_FAILED
};

static uint64 SKYMEM_NowMs(void)
{
    OS_time_t Now;

    OS_GetLocalTime(&Now);
    return (uint64)OS_TimeGetTotalMilliseconds(Now);
}

/* 1 s plus four times the worst one-way light time of the path. */
static uint64 SKYMEM_MigrateTimeoutMs(const SKYMEM_Migration_t *Job)
{
    double Altitude = (double)SKYMEM_Data.AltitudeM;
    double Along    = skymem_intra_plane_distance_m(Altitude, SKYMEM_Data.SatsPerPlane);
    double Across   = skymem_inter_plane_distance_max_m(Altitude, SKYMEM_Data.Planes);
    double WorstS   = skymem_light_time_s(Along > Across ? Along : Across);
    uint32 Hops     = skymem_torus_hops(SKYMEM_Data.Planes, SKYMEM_Data.SatsPerPlane, SKYMEM_Data.Plane,
                                        SKYMEM_Data.Sat, Job->TargetPlane, Job->TargetSat);

    return SKYMEM_MIGRATE_TIMEOUT_MS + (uint64)(4.0 * Hops * WorstS * 1000.0);
}

static void SKYMEM_MigrateSendChunk(SKYMEM_Migration_t *Job, uint32 Index)
{
    SKYMEM_MigratedChunk_t *Chunk = &Job->Chunks[Index];
    skymem_chunk_meta_t     Meta;
    skymem_chunk_desc_t     Desc;
    skymem_route_t          Route;
    skymem_origin_t         Origin;
    const uint8_t          *Data;
    size_t                  Len;
    int                     PacketLen;

    if (skymem_store_peek(SKYMEM_Data.Store, Job->BlockHash, Chunk->ChunkId, &Meta, &Data, &Len) !=
        SKYMEM_STORE_OK)
    {
        Chunk->State = SKYMEM_MC_FAILED; /* evicted or purged meanwhile */
        Job->Failed++;
        return;
    }

    skymem_chunk_desc_from_meta(&Desc, Job->BlockHash, Chunk->ChunkId, &Meta, Len);

    memset(&Route, 0, sizeof(Route));
    Route.dst_plane  = Job->TargetPlane;
    Route.dst_sat    = Job->TargetSat;
    Route.src_plane  = SKYMEM_Data.Plane;
    Route.src_sat    = SKYMEM_Data.Sat;
    Route.via_plane  = SKYMEM_NO_SAT;
    Route.via_sat    = SKYMEM_NO_SAT;
    Route.request_id = (Job->JobId << SKYMEM_MIGRATE_IDX_BITS) | Index;
    Route.ttl        = SKYMEM_DEFAULT_TTL;
    Route.flags      = SKYMEM_RF_MIGRATION;

    /* the origin record keeps the chunk's ground station, so an LRU eviction there still reaches it */
    PacketLen = skymem_build_set_chunk_origin(SKYMEM_Data.Scratch, sizeof(SKYMEM_Data.Scratch),
                                              SKYMEM_Data.SeqCount++, &Route, &Desc,
                                              skymem_chunk_origin(&Meta, &Origin) ? &Origin : NULL, Data);
    PacketLen = SKYMEM_AuthSign(SKYMEM_Data.Scratch, PacketLen, sizeof(SKYMEM_Data.Scratch)); /* key 0 when keys are on */
    SKYMEM_PublishToRouter(SKYMEM_Data.Scratch, PacketLen);

    Chunk->State      = SKYMEM_MC_IN_FLIGHT;
    Chunk->Tries++;
    Chunk->DeadlineMs = SKYMEM_NowMs() + SKYMEM_MigrateTimeoutMs(Job);
    Job->InFlight++;
}

static void SKYMEM_MigrateFinishIfDone(SKYMEM_Migration_t *Job)
{
    skymem_route_t *Reply = &Job->ReplyRoute;

    if (Job->Moved + Job->Failed < Job->NumChunks)
    {
        return;
    }
    CFE_EVS_SendEvent(SKYMEM_MIGRATE_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "SKYMEM: migration %lu to (%u,%u): %lu moved, %lu failed", (unsigned long)Job->JobId,
                      (unsigned int)Job->TargetPlane, (unsigned int)Job->TargetSat, (unsigned long)Job->Moved,
                      (unsigned long)Job->Failed);
    if (Job->Failed == 0)
    {
        SKYMEM_SendAck(Reply, SKYMEM_MIGRATE_CC, 0, Job->Moved, Job->BlockHash);
    }
    else
    {
        SKYMEM_SendNakValue(Reply, SKYMEM_MIGRATE_CC, SKYMEM_NAK_MIGRATE_FAILED, Job->Moved, Job->BlockHash);
    }
    Job->Active = false;
}

static void SKYMEM_MigratePump(SKYMEM_Migration_t *Job)
{
    uint32 i;

    for (i = 0; i < Job->NumChunks && Job->InFlight < SKYMEM_MIGRATE_WINDOW; i++)
    {
        if (Job->Chunks[i].State == SKYMEM_MC_WAITING)
        {
            SKYMEM_MigrateSendChunk(Job, i);
        }
    }
    SKYMEM_MigrateFinishIfDone(Job);
}

void SKYMEM_MigrateStart(const skymem_msg_t *Msg, const skymem_route_t *Reply)
{
    SKYMEM_Migration_t *Job = NULL;
    uint32              i;
    uint32              Id;

    if (Msg->target_plane >= SKYMEM_Data.Planes || Msg->target_sat >= SKYMEM_Data.SatsPerPlane)
    {
        SKYMEM_SendNak(Reply, SKYMEM_MIGRATE_CC, SKYMEM_NAK_NO_ROUTE, 0, Msg->block_hash);
        return;
    }
    if (SKYMEM_IsMe(Msg->target_plane, Msg->target_sat))
    {
        SKYMEM_SendAck(Reply, SKYMEM_MIGRATE_CC, 0, 0, Msg->block_hash); /* already here */
        return;
    }
    for (i = 0; i < SKYMEM_MAX_MIGRATIONS && Job == NULL; i++)
    {
        if (!SKYMEM_Data.Migrations[i].Active)
        {
            Job = &SKYMEM_Data.Migrations[i];
        }
    }
    if (Job == NULL)
    {
        SKYMEM_SendNak(Reply, SKYMEM_MIGRATE_CC, SKYMEM_NAK_BUSY, 0, Msg->block_hash);
        return;
    }

    /* Only the chunks of the range held here take part. */
    memset(Job, 0, sizeof(*Job));
    for (i = 0; i < Msg->count && Job->NumChunks < SKYMEM_MAX_GET_CHUNKS; i++)
    {
        Id = Msg->first + i * Msg->stride;
        if (skymem_store_peek(SKYMEM_Data.Store, Msg->block_hash, Id, NULL, NULL, NULL) == SKYMEM_STORE_OK)
        {
            Job->Chunks[Job->NumChunks++].ChunkId = Id;
        }
    }
    if (Job->NumChunks == 0)
    {
        SKYMEM_SendAck(Reply, SKYMEM_MIGRATE_CC, 0, 0, Msg->block_hash);
        return;
    }

    SKYMEM_Data.NextJobId = (SKYMEM_Data.NextJobId + 1u) & 0xFFFFFu;
    if (SKYMEM_Data.NextJobId == 0)
    {
        SKYMEM_Data.NextJobId = 1;
    }
    Job->Active      = true;
    Job->JobId       = SKYMEM_Data.NextJobId;
    Job->ReplyRoute  = *Reply;
    Job->TargetPlane = Msg->target_plane;
    Job->TargetSat   = Msg->target_sat;
    memcpy(Job->BlockHash, Msg->block_hash, SKYMEM_BLOCK_HASH_LEN);

    CFE_EVS_SendEvent(SKYMEM_MIGRATE_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "SKYMEM: migration %lu: %lu chunks to (%u,%u)", (unsigned long)Job->JobId,
                      (unsigned long)Job->NumChunks, (unsigned int)Job->TargetPlane, (unsigned int)Job->TargetSat);
    SKYMEM_MigratePump(Job);
}

void SKYMEM_MigrateOnReply(const skymem_msg_t *Msg)
{
    uint32                  JobId = Msg->route.request_id >> SKYMEM_MIGRATE_IDX_BITS;
    uint32                  Index = Msg->route.request_id & ((1u << SKYMEM_MIGRATE_IDX_BITS) - 1u);
    SKYMEM_Migration_t     *Job;
    SKYMEM_MigratedChunk_t *Chunk;
    uint32                  k;

    if (Msg->reply_cc != SKYMEM_SET_CHUNK_CC ||
        (Msg->reply_kind != SKYMEM_REPLY_ACK && Msg->reply_kind != SKYMEM_REPLY_NAK))
    {
        return;
    }
    for (k = 0; k < SKYMEM_MAX_MIGRATIONS; k++)
    {
        Job = &SKYMEM_Data.Migrations[k];
        if (!Job->Active || Job->JobId != JobId || Index >= Job->NumChunks)
        {
            continue;
        }
        Chunk = &Job->Chunks[Index];
        if (Chunk->State != SKYMEM_MC_IN_FLIGHT)
        {
            return; /* duplicate or late answer */
        }
        Job->InFlight--;
        if (Msg->reply_kind == SKYMEM_REPLY_ACK)
        {
            /* The target holds it now: only then does our copy go. */
            skymem_store_delete(SKYMEM_Data.Store, Job->BlockHash, Chunk->ChunkId);
            Chunk->State = SKYMEM_MC_DONE;
            Job->Moved++;
            SKYMEM_Data.MigratedOut++;
        }
        else
        {
            Chunk->State = SKYMEM_MC_FAILED;
            Job->Failed++;
        }
        SKYMEM_MigratePump(Job);
        return;
    }
}

void SKYMEM_MigrateTick(void)
{
    uint64              Now = SKYMEM_NowMs();
    SKYMEM_Migration_t *Job;
    uint32              k;
    uint32              i;

    for (k = 0; k < SKYMEM_MAX_MIGRATIONS; k++)
    {
        Job = &SKYMEM_Data.Migrations[k];
        if (!Job->Active)
        {
            continue;
        }
        for (i = 0; i < Job->NumChunks; i++)
        {
            if (Job->Chunks[i].State != SKYMEM_MC_IN_FLIGHT || Job->Chunks[i].DeadlineMs > Now)
            {
                continue;
            }
            Job->InFlight--;
            if (Job->Chunks[i].Tries > SKYMEM_MIGRATE_RETRIES)
            {
                Job->Chunks[i].State = SKYMEM_MC_FAILED;
                Job->Failed++;
            }
            else
            {
                SKYMEM_MigrateSendChunk(Job, i); /* resend */
            }
        }
        SKYMEM_MigratePump(Job);
    }
}

uint32 SKYMEM_MigrationsActive(void)
{
    uint32 Count = 0;
    uint32 k;

    for (k = 0; k < SKYMEM_MAX_MIGRATIONS; k++)
    {
        Count += SKYMEM_Data.Migrations[k].Active ? 1u : 0u;
    }
    return Count;
}
