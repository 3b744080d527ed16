/*
 * SKYMEM command and reply authentication (cFS glue around skymem_core's skymem_auth.h).
 *
 * Keys come from SKYMEM_AUTH_KEYS_FILE ("key_id hex_key" lines, id 0 = the
 * constellation key, required; the launcher writes it into every instance's /cf
 * unless --insecure). No file (or no keys in it): authentication off, and a request
 * that carries a trailer is refused (it cannot be checked). With keys: the
 * same rules as the native node (docs/RELIABILITY.md): every data-plane command
 * signed, every control command but SEND_HK refused, every reply signed, migration
 * ACKs checked. The replay floor survives a restart: it starts at the later of the
 * host clock (sequences are Unix microseconds) and the high-water mark kept in
 * SKYMEM_AUTH_FLOOR_FILE, rewritten on each housekeeping request when it moved.
 */
#ifndef SKYMEM_AUTH_APP_H
#define SKYMEM_AUTH_APP_H

#include "cfe.h"
#include "skymem_codec.h"

#define SKYMEM_AUTH_KEYS_FILE  "/cf/skymem_auth.keys"
#define SKYMEM_AUTH_FLOOR_FILE "/cf/skymem_auth.floor"

/* Loads the key file if there is one; an unreadable or invalid file is an error. */
CFE_Status_t SKYMEM_AuthInit(void);
/* true if this data-plane request must not be served (counted; NAKed unless a replay). */
bool SKYMEM_AuthRefuse(const uint8 *Packet, size_t Size, const skymem_msg_t *Msg);
/* true if a control-MID command must be refused (keys on: it has no trailer). */
bool SKYMEM_AuthRefuseControl(uint8 CommandCode);
/* true if a reply addressed to this satellite (a migration's ACK/NAK) must be ignored (counted). */
bool SKYMEM_AuthRefuseReply(const uint8 *Packet, size_t Size, const skymem_msg_t *Msg);
/* Signs a command this satellite sends (key 0) in place; returns the new length
 * (Length unchanged when auth is off, <= 0 on failure). */
int SKYMEM_AuthSign(uint8 *Packet, int Length, size_t Capacity);
/* Signs a reply in place: to the ground with the key of the latest verified ground command,
 * to a satellite with key 0. Same return convention. */
int SKYMEM_AuthSignReply(uint8 *Packet, int Length, size_t Capacity, const skymem_route_t *Route);
/* Keeps the replay high-water mark in SKYMEM_AUTH_FLOOR_FILE when it moved (called with housekeeping). */
void SKYMEM_AuthPersist(void);

#endif
