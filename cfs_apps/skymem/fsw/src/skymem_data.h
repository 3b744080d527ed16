/* SKYMEM data-plane service: requests that ISL_ROUTER delivered on SKYMEM_DATA_CMD_MID. */
#ifndef SKYMEM_DATA_H
#define SKYMEM_DATA_H

#include "cfe.h"
#include "skymem_codec.h"
#include "skymem_store.h"

/* Validates the packet with the core codec and serves it if it is addressed to this satellite. */
void SKYMEM_ProcessDataPacket(const CFE_SB_Buffer_t *SBBufPtr);

/* A reply for this satellite, wrapped by ISL_ROUTER in SKYMEM_ISL_IN_MID (migration ACKs). */
void SKYMEM_ProcessInboundReply(const CFE_SB_Buffer_t *SBBufPtr);

/* Answers with ACK / NAK (counting them as accepted / rejected commands). */
void SKYMEM_SendAck(const skymem_route_t *Route, uint8 Cc, uint32 ChunkId, uint32 Value, const uint8 *Hash);
void SKYMEM_SendNak(const skymem_route_t *Route, uint8 Cc, uint8 Reason, uint32 ChunkId, const uint8 *Hash);
void SKYMEM_SendNakValue(const skymem_route_t *Route, uint8 Cc, uint8 Reason, uint32 Value, const uint8 *Hash);

/* Sends up to Budget pending GET_CHUNKS answers. */
void SKYMEM_RunJobs(uint32 Budget);

/* Store callback: an LRU eviction purged a block; tell the ground station that set it. */
void SKYMEM_OnEviction(void *Ctx, const uint8_t BlockHash[SKYMEM_BLOCK_HASH_LEN], const skymem_chunk_meta_t *Victim,
                       uint32_t Purged);

#endif
