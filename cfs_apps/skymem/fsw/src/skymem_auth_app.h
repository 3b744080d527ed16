/*
 * SKYMEM command and reply authentication on cFS: the key file and the replay floor file.
 * The checks and the signing are skymem_core's (skymem_sat.c), the same as the native node's.
 *
 * Keys come from SKYMEM_AUTH_KEYS_FILE ("key_id hex_key" lines, id 0 = the
 * constellation key, required; the launcher writes it into every instance's /cf
 * unless --insecure). No file (or no keys in it): authentication off, and a request
 * that carries a trailer is refused (it cannot be checked). With keys: the
 * same rules as the native node (docs/RELIABILITY.md): every data-plane command
 * signed, every control command but SEND_HK refused, every reply signed, migration
 * ACKs checked. The replay floor survives a restart: it starts at the later of the
 * host clock (sequences are Unix microseconds) and the high-water mark kept in
 * SKYMEM_AUTH_FLOOR_FILE, which the core moves before it acts on a command past it.
 */
#ifndef SKYMEM_AUTH_APP_H
#define SKYMEM_AUTH_APP_H

#include "cfe.h"
#include "skymem_codec.h"
#include "skymem_floor.h"

#define SKYMEM_AUTH_KEYS_FILE  "/cf/skymem_auth.keys"
#define SKYMEM_AUTH_FLOOR_FILE "/cf/skymem_auth.floor"
/* written, then renamed over the file; a name of at most OS_MAX_FILE_NAME - 1 (19) characters, or OSAL refuses
 * it (OS_FS_ERR_NAME_TOO_LONG) and the floor is never kept */
#define SKYMEM_AUTH_FLOOR_TMP  "/cf/skymem_floor.tmp"

/* Loads the key file if there is one and turns the core's authentication on; an unreadable or
 * invalid file is an error. */
CFE_Status_t SKYMEM_AuthInit(void);
/* The core's io->persist_floor: the high-water mark and the windows refused ahead into SKYMEM_AUTH_FLOOR_FILE;
 * 0 when written. */
int SKYMEM_AuthPersistFloor(void *Ctx, const skymem_floor_t *Kept);

#endif
