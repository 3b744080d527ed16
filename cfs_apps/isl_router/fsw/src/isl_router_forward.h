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
 * OwnPacket says the packet originated on this satellite (SKYMEM's, or a NAK
 * of the router's own) rather than arriving over a link: it is not counted as
 * relayed, never NAKed, and one addressed to this satellite is not looped back.
 * A relayed command that cannot go on (TTL spent, no such satellite) is
 * answered with NAK TTL_EXPIRED / NO_ROUTE, as the native node does.
 */
void ISL_ROUTER_RoutePacket(uint8 *Pkt, size_t Len, const skymem_msg_t *Msg, ISL_ROUTER_Counters_t *Counters,
                            bool OwnPacket);

/* Main task: sends on a packet SKYMEM published (reply, or wrapped gossip). */
void ISL_ROUTER_SendFromBus(const CFE_SB_Buffer_t *SBBufPtr);

#endif
