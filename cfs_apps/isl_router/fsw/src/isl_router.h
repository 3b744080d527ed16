/*
 * ISL_ROUTER -- SkyMemory's inter-satellite link router as a cFS application.
 *
 * Owns this satellite's two UDP sockets (through OSAL): the ISL port, where
 * neighbour satellites send, and the ground port, where ground stations send
 * (port = base + index, index = plane * sats + sat = cpuid - FirstCpuId of
 * the constellation table), bound on its machine's address. A receive
 * task validates every datagram with the skymem_core codec and either hands
 * it to SKYMEM on the software bus (addressed to this satellite) or forwards
 * it one +GRID hop toward its destination. The main task sends on what SKYMEM
 * publishes for other satellites and for the ground (replies, gossip).
 */
#ifndef ISL_ROUTER_H
#define ISL_ROUTER_H

#include "cfe.h"

#include "isl_router_internal_cfg.h"
#include "isl_router_msg.h"
#include "isl_router_msgids.h"
#include "isl_router_perfids.h"

#include "skymem_codec.h"
#include "skymem_returns.h"
#include "skymem_stations.h"
#include "skymem_tbl.h" /* SKYMEM's constellation table type, shared by name */

/* Packet counters. The receive task and the main task each own one set (no
 * locking on the hot path); housekeeping reports their sum. */
typedef struct
{
    uint32 RxIsl;
    uint32 RxGround;
    uint32 TxIsl;
    uint32 TxGround;
    uint32 Forwarded;
    uint32 Delivered;
    uint32 Dropped;
    uint32 Invalid;
} ISL_ROUTER_Counters_t;


typedef struct
{
    uint32 CmdCounter;
    uint32 ErrCounter;

    ISL_ROUTER_Counters_t MainCounters; /* written by the main task only */
    ISL_ROUTER_Counters_t RxCounters;   /* written by the receive task only */

    ISL_ROUTER_HkTlm_t HkTlm;

    uint32           RunStatus;
    CFE_SB_PipeId_t  Pipe;
    CFE_TBL_Handle_t TblHandle;

    /* Identity and links, from SKYMEM's constellation table and the cpuid. */
    uint16 Planes;
    uint16 SatsPerPlane;
    uint16 Plane;
    uint16 Sat;
    uint16 IslPortBase;
    uint16 GroundPortBase;
    uint16 HostCount;
    char   Hosts[SKYMEM_MAX_HOSTS][SKYMEM_HOST_STR_LEN]; /* machine of each share of the satellites */
    char   Host[SKYMEM_HOST_STR_LEN];                    /* this satellite's machine: its sockets bind here */

    osal_id_t       TxCreditSem; /* SKYMEM's credit semaphore, given back per packet sent */
    osal_id_t       IslSock;
    osal_id_t       GroundSock;
    CFE_ES_TaskId_t RxTaskId;

    osal_id_t                  GroundMutex; /* guards Ground[] and Returns[] (both tasks use them) */
    /* where a ground station's replies go: the address of its latest request that SKYMEM verified (keyed), or
     * of its latest request (unkeyed); skymem_stations.h chooses the entry */
    skymem_station_t           Ground[ISL_ROUTER_MAX_GROUND_STATIONS];
    OS_SockAddr_t              GroundAddr[ISL_ROUTER_MAX_GROUND_STATIONS];
    skymem_return_t            Returns[ISL_ROUTER_RETURN_SLOTS]; /* where a request's answers go: skymem_returns.h */
    OS_SockAddr_t              ReturnAddr[ISL_ROUTER_RETURN_SLOTS];

    /* One packet buffer and parse result per task (too big for the stack). */
    uint8        RxBuf[SKYMEM_MAX_PACKET];
    skymem_msg_t RxMsg;
    uint8        TxBuf[SKYMEM_MAX_PACKET];
    skymem_msg_t TxMsg;
    uint8        NakBuf[SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_REPLY_HDR_LEN]; /* receive task */
    skymem_msg_t NakMsg;
    uint16       NakSeq;
    bool         Keyed; /* SKYMEM's key file is there (ISL_ROUTER_Init): the links are signed (isl_router_links.c),
                         * relayed commands are not NAKed, a station's address is learned only from what SKYMEM
                         * verified, and no satellite's packet is taken from the ground port */
    osal_id_t    LinkMutex; /* guards the link keys' ring (isl_router_links.c) */
} ISL_ROUTER_Data_t;

extern ISL_ROUTER_Data_t ISL_ROUTER_Data;

void         ISL_ROUTER_Main(void);
CFE_Status_t ISL_ROUTER_Init(void);

#endif
