/*
 * SKYMEM command authentication (cFS glue around skymem_core's skymem_auth.h).
 *
 * Keys come from SKYMEM_AUTH_KEYS_FILE ("key_id hex_key" lines, id 0 = the
 * constellation key, required). No file (or no keys in it): authentication off, and a request
 * that carries a trailer is refused (it cannot be checked). With keys: the
 * same rules as the native node (docs/RELIABILITY.md).
 */
#ifndef SKYMEM_AUTH_APP_H
#define SKYMEM_AUTH_APP_H

#include "cfe.h"
#include "skymem_codec.h"

#define SKYMEM_AUTH_KEYS_FILE "/cf/skymem_auth.keys"

/* Loads the key file if there is one; an unreadable or invalid file is an error. */
CFE_Status_t SKYMEM_AuthInit(void);
/* true if this data-plane request must not be served (counted; NAKed unless a replay). */
bool SKYMEM_AuthRefuse(const uint8 *Packet, size_t Size, const skymem_msg_t *Msg);
/* true if a control-MID command must be refused (keys on and it changes state). */
bool SKYMEM_AuthRefuseControl(uint8 CommandCode);
/* Signs a command this satellite sends (key 0) in place; returns the new length
 * (Length unchanged when auth is off, <= 0 on failure). */
int SKYMEM_AuthSign(uint8 *Packet, int Length, size_t Capacity);

#endif
