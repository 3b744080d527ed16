/*
 * SKYMEM command and reply authentication on cFS: this file reads the key file and
 * reads and writes the replay floor file through OSAL, and raises events; the checks,
 * the counting and the signing are skymem_core's (skymem_sat.c, tested by ctest).
 *
 * Sequences are microseconds of the host clock (OS_GetLocalTime: Unix time on
 * Linux, as on the ground and the native node). The replay floor is the later of
 * that clock at start and the high-water mark the core keeps in
 * SKYMEM_AUTH_FLOOR_FILE (written through SKYMEM_AuthPersistFloor only before a
 * command signed ahead of the clock is acted on: one on the clock is below the
 * clock of any later start), so traffic recorded before a restart stays refused
 * after it, as long as the clock does not step back across the restart.
 */
#include <string.h>

#include "skymem.h"
#include "skymem_auth.h"
#include "skymem_auth_app.h"
#include "skymem_floor.h"
#include "skymem_link.h"
#include "skymem_data.h"
#include "skymem_eventids.h"
#include "skymem_utils.h"

#define SKYMEM_AUTH_FILE_MAX 4096

static skymem_auth_t SKYMEM_Auth;
static uint64        SKYMEM_PersistedHigh; /* the high-water mark SKYMEM_AUTH_FLOOR_FILE holds */
static skymem_floor_t SKYMEM_Kept;         /* what SKYMEM_AUTH_FLOOR_FILE held at start (skymem_floor.h) */

/* What a previous run kept (skymem_floor.h: the high-water mark, the replay windows refused ahead) into
 * *Kept, nothing (a mark of 0) when there is none. No file is the first boot with keys, said as such;
 * a file that is there but cannot be read is an error event. */
static void SKYMEM_ReadFloor(skymem_floor_t *Kept)
{
    char      Text[SKYMEM_FLOOR_TEXT_MAX + 1];
    osal_id_t Fd;
    int32     Status;
    int32     Len;

    Kept->mark    = 0;
    Kept->n_ahead = 0;
    if (SKYMEM_FileMissing(SKYMEM_AUTH_FLOOR_FILE))
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_INF_EID, CFE_EVS_EventType_INFORMATION,
                          "SKYMEM: no saved replay floor yet (first boot): starting from the clock");
        return;
    }
    Status = OS_OpenCreate(&Fd, SKYMEM_AUTH_FLOOR_FILE, OS_FILE_FLAG_NONE, OS_READ_ONLY);
    Len    = Status == OS_SUCCESS ? OS_read(Fd, Text, sizeof(Text) - 1) : Status;
    if (Status == OS_SUCCESS)
    {
        OS_close(Fd);
    }
    if (Len < 0)
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: reading %s failed (OSAL status %d): replay floor from the clock only",
                          SKYMEM_AUTH_FLOOR_FILE, (int)Len);
        return;
    }
    if (skymem_floor_parse(Text, (size_t)Len, Kept) != 0)
    {
        /* cut short by a crash while it was written (before the rename existed), or not ours: a smaller mark
         * read from it would lower the floor */
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: %s is not a replay floor (%d bytes): replay floor from the clock only",
                          SKYMEM_AUTH_FLOOR_FILE, (int)Len);
    }
}

CFE_Status_t SKYMEM_AuthInit(void)
{
    static char Text[SKYMEM_AUTH_FILE_MAX + 1];
    char        Err[96];
    osal_id_t   Fd;
    int32       Len;
    int         rc;

    SKYMEM_Data.Core.auth = NULL; /* off until a key file turns it on */
    skymem_auth_init(&SKYMEM_Auth, 0);
    if (SKYMEM_FileMissing(SKYMEM_AUTH_KEYS_FILE))
    {
        return CFE_SUCCESS; /* no key file: authentication off */
    }
    /* a key file that is there but cannot be opened must not turn authentication off */
    Len = OS_OpenCreate(&Fd, SKYMEM_AUTH_KEYS_FILE, OS_FILE_FLAG_NONE, OS_READ_ONLY);
    if (Len == OS_SUCCESS)
    {
        Len = OS_read(Fd, Text, SKYMEM_AUTH_FILE_MAX + 1);
        OS_close(Fd);
    }
    if (Len < 0 || Len > SKYMEM_AUTH_FILE_MAX)
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: %s unreadable or over %u bytes",
                          SKYMEM_AUTH_KEYS_FILE, (unsigned int)SKYMEM_AUTH_FILE_MAX);
        return CFE_STATUS_VALIDATION_FAILURE;
    }
    rc = skymem_auth_load_text(&SKYMEM_Auth, Text, (size_t)Len, Err, sizeof(Err));
    /* A file that is there turns authentication on or stops the app: one holding no keys, or not all of this
     * satellite's, must not leave it running unauthenticated (or deaf to a neighbour) without a word. */
    if (rc <= 0 || !skymem_link_keys_complete(&SKYMEM_Auth, SKYMEM_Data.Core.planes, SKYMEM_Data.Core.sats))
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: %s: %s", SKYMEM_AUTH_KEYS_FILE,
                          rc < 0 ? Err
                                 : "holds no keys, or lacks this satellite's up/down keys or its links' "
                                   "link-in/link-out keys: launch again to make new keys");
        return CFE_STATUS_VALIDATION_FAILURE;
    }
    if (SKYMEM_Auth.owner_plane != SKYMEM_Data.Core.plane || SKYMEM_Auth.owner_sat != SKYMEM_Data.Core.sat)
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: %s holds the keys of satellite (%u,%u), this is (%u,%u)", SKYMEM_AUTH_KEYS_FILE,
                          (unsigned int)SKYMEM_Auth.owner_plane, (unsigned int)SKYMEM_Auth.owner_sat,
                          (unsigned int)SKYMEM_Data.Core.plane, (unsigned int)SKYMEM_Data.Core.sat);
        return CFE_STATUS_VALIDATION_FAILURE;
    }
    SKYMEM_ReadFloor(&SKYMEM_Kept);
    SKYMEM_PersistedHigh = SKYMEM_Kept.mark;
    /* nothing accepted before the restart is fresh after it, nor anything signed before now, nor what it refused
     * as signed too far ahead */
    skymem_sat_auth_on(&SKYMEM_Data.Core, &SKYMEM_Auth, &SKYMEM_Kept);
    CFE_EVS_SendEvent(SKYMEM_INIT_INF_EID, CFE_EVS_EventType_INFORMATION, "SKYMEM: command authentication on, %d keys",
                      rc);
    return CFE_SUCCESS;
}

int SKYMEM_AuthPersistFloor(void *Ctx, const skymem_floor_t *Kept)
{
    static char Text[SKYMEM_FLOOR_TEXT_MAX];
    osal_id_t   Fd;
    int         Len = skymem_floor_format(Kept, Text, sizeof(Text));
    int         rc  = -1;

    (void)Ctx;
    if (Len < 0)
    {
        return -1;
    }
    /* written beside and renamed over, so a crash leaves the old mark or the new one, never half (the native
     * node does the same) */
    if (OS_OpenCreate(&Fd, SKYMEM_AUTH_FLOOR_TMP, OS_FILE_FLAG_CREATE | OS_FILE_FLAG_TRUNCATE, OS_WRITE_ONLY) ==
        OS_SUCCESS)
    {
        rc = OS_write(Fd, Text, (size_t)Len) == Len ? 0 : -1;
        OS_close(Fd);
        if (rc == 0 && OS_rename(SKYMEM_AUTH_FLOOR_TMP, SKYMEM_AUTH_FLOOR_FILE) != OS_SUCCESS)
        {
            rc = -1;
        }
    }
    if (rc == 0)
    {
        SKYMEM_PersistedHigh = Kept->mark;
    }
    return rc;
}
