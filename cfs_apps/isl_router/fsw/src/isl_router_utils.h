/* ISL_ROUTER helpers: configuration, sockets, addresses, ground stations, bus delivery. */
#ifndef ISL_ROUTER_UTILS_H
#define ISL_ROUTER_UTILS_H

#include "cfe.h"
#include "isl_router.h"

/* Shares SKYMEM's constellation table (waiting for SKYMEM to load it) and
 * derives (plane, sat) from the cpuid and this satellite's machine. */
CFE_Status_t ISL_ROUTER_LoadConfig(void);

/* Opens and binds the ISL and ground UDP sockets. */
CFE_Status_t ISL_ROUTER_OpenSockets(void);

uint32 ISL_ROUTER_SatIndex(uint16 Plane, uint16 Sat);
/* Address of the machine satellite Index runs on (the table's share rule). */
const char *ISL_ROUTER_HostOf(uint32 Index);
uint16 ISL_ROUTER_IslPort(uint16 Plane, uint16 Sat);
bool   ISL_ROUTER_IsMe(uint16 Plane, uint16 Sat);

/* Sends one datagram to a satellite's ISL port. true on success. */
bool ISL_ROUTER_SendToSat(uint16 Plane, uint16 Sat, const uint8 *Pkt, size_t Len);

/* Ground stations: remember a station's address; where each request from the ground came from (its
 * answers go back there); learn a station's address from one of its requests (SKYMEM verified it). */
void   ISL_ROUTER_RememberGroundStation(uint16 StationId, const OS_SockAddr_t *Addr);
void   ISL_ROUTER_RememberRequest(uint16 StationId, uint32 RequestId, const OS_SockAddr_t *Addr);
bool   ISL_ROUTER_LearnFromRequest(uint16 StationId, uint32 RequestId);
/* Sends an answer to request RequestId of station StationId. Relayed (from another satellite: an answer to a
 * command this satellite relayed): to where that request came from, else to the station's learned address;
 * SKYMEM's own: to the station's learned address. false (with an event) when none is known or the send failed. */
bool   ISL_ROUTER_SendToGroundStation(uint16 StationId, uint32 RequestId, bool Relayed, const uint8 *Pkt, size_t Len);
uint32 ISL_ROUTER_GroundStationCount(void);

/* Hands a packet addressed to this satellite to SKYMEM. true on success.
 * A command goes as it is (SKYMEM_DATA_CMD_MID); a reply is wrapped in
 * SKYMEM_ISL_IN_MID so it is not mistaken for one of SKYMEM's own. */
bool ISL_ROUTER_DeliverToBus(const uint8 *Pkt, size_t Len);

#endif
