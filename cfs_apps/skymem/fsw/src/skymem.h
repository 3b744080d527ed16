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
 * semaphore paces both (see skymem_msgids.h). What a command does is
 * skymem_core's (skymem_sat.h), shared with the native node; this app is its
 * cFS adapter: software bus, OSAL files and clock, events, the table, HK.
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
#include "skymem_sat.h"
#include "skymem_store.h"

typedef struct
{
    /* The app's own counters, reported in housekeeping and STATS beside the core's (Core.c: commands,
     * errors, auth failures, migrated chunks). */
    uint32 RxPackets;    /* data-plane requests addressed to this satellite */
    uint32 TxPackets;    /* replies and gossip published for the router */
    uint32 Invalid;      /* malformed data-plane packets */

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
    osal_id_t       TxCreditSem; /* see SKYMEM_TX_CREDIT_SEM */
    uint32          TxCreditTimeouts;
    uint32          StartSeconds;

    skymem_msg_t Msg;  /* parsed request (too big for the stack) */
    skymem_sat_t Core; /* what the app does with a command: skymem_core's skymem_sat.c (last: large) */
} SKYMEM_Data_t;

extern SKYMEM_Data_t SKYMEM_Data;

void         SKYMEM_Main(void);
CFE_Status_t SKYMEM_Init(void);

#endif
