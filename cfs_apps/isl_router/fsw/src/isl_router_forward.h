/* ISL_ROUTER routing decision for one validated packet. */
#ifndef ISL_ROUTER_FORWARD_H
#define ISL_ROUTER_FORWARD_H

#include "cfe.h"
#include "isl_router.h"

/*
 * Routes a validated data-plane command or reply held in a writable buffer:
 *  - to a ground station: sent from our ground port if we hold its link (the
 *    route's "via" satellite), otherwise toward that satellite;
 *  - to this satellite: a command goes to SKYMEM on the software bus;
 *  - to another satellite: TTL and hop count updated, one +GRID hop on.
 * FromBus says the packet came from SKYMEM (not over a link); one addressed
 * to this satellite is then left alone rather than looped back.
 */
void ISL_ROUTER_RoutePacket(uint8 *Pkt, size_t Len, const skymem_msg_t *Msg, ISL_ROUTER_Counters_t *Counters,
                            bool FromBus);

/* Main task: sends on a packet SKYMEM published (reply, or wrapped gossip). */
void ISL_ROUTER_SendFromBus(const CFE_SB_Buffer_t *SBBufPtr);

#endif
