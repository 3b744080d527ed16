/* SKYMEM data plane: the cFS adapter of skymem_core's command handling (skymem_sat.h). */
#ifndef SKYMEM_DATA_H
#define SKYMEM_DATA_H

#include "cfe.h"
#include "skymem_codec.h"

/* Gives the core its identity, store and the app's io (software bus, OSAL clock, events). */
void SKYMEM_CoreSetup(void);

/* Validates a packet ISL_ROUTER delivered (SKYMEM_DATA_CMD_MID) and hands it to the core. */
void SKYMEM_ProcessDataPacket(const CFE_SB_Buffer_t *SBBufPtr);

/* A reply for this satellite, wrapped by ISL_ROUTER in SKYMEM_ISL_IN_MID (migration ACKs). */
void SKYMEM_ProcessInboundReply(const CFE_SB_Buffer_t *SBBufPtr);

#endif
