/* ISL_ROUTER's link keys (isl_router_links.c): checking and signing what goes onto a link. */
#ifndef ISL_ROUTER_LINKS_H
#define ISL_ROUTER_LINKS_H

#include "cfe.h"

/* Loads this satellite's link keys from SKYMEM's key file when the constellation is keyed; refuses a file
 * that is not this satellite's or lacks a link's keys. */
CFE_Status_t ISL_ROUTER_LinksInit(void);

/* skymem_link_prepare under the router's lock (unkeyed: Len, unchanged). Returns the length to send or a
 * negative SKYMEM_AUTH_E_* (send nothing). */
int ISL_ROUTER_LinksPrepare(bool Relayed, uint16 NextPlane, uint16 NextSat, uint8 *Pkt, size_t Len, size_t Cap);

#endif
