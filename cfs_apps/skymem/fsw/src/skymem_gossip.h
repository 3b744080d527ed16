/* SKYMEM eviction gossip: pass EVICT_BLOCK on to the four +GRID neighbours, once. */
#ifndef SKYMEM_GOSSIP_H
#define SKYMEM_GOSSIP_H

#include "cfe.h"
#include "skymem_wire.h"

/* true the first time (block, evict_id) is seen; remembers it. */
bool SKYMEM_GossipFirstSeen(const uint8 Hash[SKYMEM_BLOCK_HASH_LEN], uint32 EvictId);

/* Publishes EVICT_BLOCK (flag GOSSIP, given radius) to each distinct neighbour. */
void SKYMEM_GossipForward(const uint8 Hash[SKYMEM_BLOCK_HASH_LEN], uint32 EvictId, uint8 Radius);

#endif
