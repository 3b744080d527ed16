/*
 * SKYMEM -- the SkyMemory chunk service as a cFS application.
 *
 * SKYMEM owns this satellite's chunk store (skymem_core). It takes control
 * commands from the ground through CI_LAB (SKYMEM_CMD_MID), data-plane
 * requests that ISL_ROUTER received over UDP (SKYMEM_DATA_CMD_MID), and
 * publishes every answer on the software bus (SKYMEM_REPLY_TLM_MID) for
 * ISL_ROUTER to send on; commands it originates for other satellites
 * (eviction gossip, migration) go to ISL_ROUTER on SKYMEM_ISL_OUT_MID, and
 * replies addressed to it come back on SKYMEM_ISL_IN_MID. A credit
 * semaphore paces both (see skymem_msgids.h).
 */
#ifndef SKYMEM_H
#define SKYMEM_H

#include "cfe.h"

#include "skymem_internal_cfg.h"
#include "skymem_msg.h"
#include "skymem_msgids.h"
#include "skymem_perfids.h"
#include "skymem_tbl.h"

#include "skymem_config.h"
#include "skymem_codec.h"
#include "skymem_store.h"

/* A GET_CHUNKS request being answered a few chunks at a time. */
typedef struct
{
    skymem_route_t ReplyRoute;
    uint8          BlockHash[SKYMEM_BLOCK_HASH_LEN];
    uint32         NextChunkId;
    uint32         Remaining;
    uint32         Stride;
} SKYMEM_Job_t;

/* One chunk of a migration. */
typedef struct
{
    uint32 ChunkId;
    uint8  State; /* SKYMEM_MC_* (skymem_migrate.c) */
    uint8  Tries;
    uint64 DeadlineMs;
} SKYMEM_MigratedChunk_t;

/* A MIGRATE request being carried out. */
typedef struct
{
    bool                   Active;
    uint32                 JobId;
    skymem_route_t         ReplyRoute;
    uint16                 TargetPlane;
    uint16                 TargetSat;
    uint8                  BlockHash[SKYMEM_BLOCK_HASH_LEN];
    uint32                 NumChunks;
    uint32                 InFlight;
    uint32                 Moved;
    uint32                 Failed;
    SKYMEM_MigratedChunk_t Chunks[SKYMEM_MAX_GET_CHUNKS];
} SKYMEM_Migration_t;

/* One remembered eviction (so gossip is forwarded once). */
typedef struct
{
    uint8  BlockHash[SKYMEM_BLOCK_HASH_LEN];
    uint32 EvictId;
    bool   Used;
} SKYMEM_SeenEviction_t;

typedef struct
{
    /* Counters reported in housekeeping and STATS (wire layout: u32). */
    uint32 CmdCounter;
    uint32 ErrCounter;
    uint32 RxPackets;    /* data-plane requests addressed to this satellite */
    uint32 TxPackets;    /* replies and gossip published for the router */
    uint32 Invalid;      /* malformed data-plane packets */
    uint32 AuthFailures; /* data-plane requests refused: unsigned, forged or replayed (see skymem_auth_app.c) */
    uint32 MigratedIn;   /* chunks received with the MIGRATION flag */
    uint32 MigratedOut;  /* chunks handed over by MIGRATE (deleted here after the target's ACK) */

    SKYMEM_HkTlm_t HkTlm;

    uint32           RunStatus;
    CFE_SB_PipeId_t  CommandPipe;
    CFE_TBL_Handle_t TblHandle;

    /* Identity and configuration, from the constellation table and the cpuid. */
    uint16 Planes;
    uint16 SatsPerPlane;
    uint16 Plane;
    uint16 Sat;
    uint32 ChunkSize;
    uint64 BudgetBytes;
    uint32 AltitudeM;
    SKYMEM_TimeConfig_t Time;

    skymem_store_t *Store;
    uint16          SeqCount;
    osal_id_t       TxCreditSem; /* see SKYMEM_TX_CREDIT_SEM */
    uint32          TxCreditTimeouts;
    uint32          StartSeconds;

    SKYMEM_Job_t Jobs[SKYMEM_MAX_JOBS];
    uint32       NumJobs;

    SKYMEM_SeenEviction_t Seen[SKYMEM_GOSSIP_MEMORY];
    uint32                SeenNext;
    uint32                NextEvictId; /* for evictions this satellite starts (LRU) */

    SKYMEM_Migration_t Migrations[SKYMEM_MAX_MIGRATIONS];
    uint32             NextJobId;

    skymem_msg_t Msg;                       /* parsed request (too big for the stack) */
    uint8        Scratch[SKYMEM_MAX_PACKET]; /* packet being built */
} SKYMEM_Data_t;

extern SKYMEM_Data_t SKYMEM_Data;

void         SKYMEM_Main(void);
CFE_Status_t SKYMEM_Init(void);

#endif
