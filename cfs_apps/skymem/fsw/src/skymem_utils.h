/* SKYMEM helpers: configuration, store, parameters, statistics, publishing. */
#ifndef SKYMEM_UTILS_H
#define SKYMEM_UTILS_H

#include "cfe.h"
#include "skymem_codec.h"

/* Largest chunk the app accepts: a DATA reply must fit one software-bus message. */
#define SKYMEM_SB_MAX_CHUNK                                                                              \
    ((CFE_MISSION_SB_MAX_SB_MSG_SIZE - (SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_REPLY_HDR_LEN + \
                                        SKYMEM_CHUNK_DESC_LEN)) < SKYMEM_MAX_CHUNK_DATA                    \
         ? (CFE_MISSION_SB_MAX_SB_MSG_SIZE -                                                               \
            (SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_REPLY_HDR_LEN + SKYMEM_CHUNK_DESC_LEN))    \
         : SKYMEM_MAX_CHUNK_DATA)

/* cFE table validation: returns CFE_SUCCESS or a negative code with an event. */
CFE_Status_t SKYMEM_TblValidationFunc(void *TblData);

/* Registers and loads the constellation table, derives (plane, sat) from the cpuid. */
CFE_Status_t SKYMEM_LoadConfig(void);

/* (Re)creates the chunk store with this budget and chunk size (keeps the old one on failure). */
CFE_Status_t SKYMEM_CreateStore(uint64 BudgetBytes, uint32 ChunkSize);

/* Applies SET_PARAM; returns 0 or the SKYMEM_NAK_* reason. */
uint8 SKYMEM_ApplyParam(uint16 ParamId, uint32 Value);

/* Publishes a finished reply (SKYMEM_REPLY_TLM_MID packet, time-stamped now)
 * for ISL_ROUTER to send. Length <= 0 is a builder error code. */
CFE_Status_t SKYMEM_Publish(const uint8 *Packet, int Length);

/* Publishes a data-plane command for another satellite, wrapped in
 * SKYMEM_ISL_OUT_MID, for ISL_ROUTER to send. */
CFE_Status_t SKYMEM_PublishToRouter(const uint8 *Packet, int Length);

/* Tells ISL_ROUTER that ground station StationId is at the address its request RequestId came from
 * (SKYMEM_ISL_OUT_LEARN_CC): sent only for a command verified here that came up this satellite's link. */
CFE_Status_t SKYMEM_PublishStationLearned(uint16 StationId, uint32 RequestId);

bool SKYMEM_IsMe(uint16 Plane, uint16 Sat);

#endif
