/*
 * SKYMEM command authentication on cFS: key file, checks and signing, all
 * delegated to skymem_core (skymem_auth.c, tested by ctest); this file only
 * reads the file through OSAL, counts, and raises events.
 *
 * Difference from the native node: the replay floor is 0 (cFE time is not Unix
 * time), so a satellite restart forgets which sequences it saw.
 */
#include <string.h>

#include "skymem.h"
#include "skymem_auth.h"
#include "skymem_auth_app.h"
#include "skymem_data.h"
#include "skymem_eventids.h"
#include "skymem_utils.h"

#define SKYMEM_AUTH_FILE_MAX 4096

static skymem_auth_t SKYMEM_Auth;
static bool          SKYMEM_AuthOn;

CFE_Status_t SKYMEM_AuthInit(void)
{
    static char Text[SKYMEM_AUTH_FILE_MAX + 1];
    char        Err[96];
    osal_id_t   Fd;
    int32       Len;
    int         rc;

    SKYMEM_AuthOn = false;
    skymem_auth_init(&SKYMEM_Auth, 0);
    if (OS_OpenCreate(&Fd, SKYMEM_AUTH_KEYS_FILE, OS_FILE_FLAG_NONE, OS_READ_ONLY) != OS_SUCCESS)
    {
        return CFE_SUCCESS; /* no key file: authentication off */
    }
    Len = OS_read(Fd, Text, SKYMEM_AUTH_FILE_MAX + 1);
    OS_close(Fd);
    if (Len < 0 || Len > SKYMEM_AUTH_FILE_MAX)
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: %s unreadable or over %u bytes",
                          SKYMEM_AUTH_KEYS_FILE, (unsigned int)SKYMEM_AUTH_FILE_MAX);
        return CFE_STATUS_VALIDATION_FAILURE;
    }
    rc = skymem_auth_load_text(&SKYMEM_Auth, Text, (size_t)Len, Err, sizeof(Err));
    if (rc == 0)
    {
        return CFE_SUCCESS; /* a file with no keys: authentication off */
    }
    if (rc < 0 || skymem_auth_find_key(&SKYMEM_Auth, SKYMEM_AUTH_CONSTELLATION_KEY) == NULL)
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: %s: %s", SKYMEM_AUTH_KEYS_FILE,
                          rc < 0 ? Err : "no key id 0 (the constellation key)");
        return CFE_STATUS_VALIDATION_FAILURE;
    }
    SKYMEM_AuthOn = true;
    CFE_EVS_SendEvent(SKYMEM_INIT_INF_EID, CFE_EVS_EventType_INFORMATION, "SKYMEM: command authentication on, %d keys",
                      rc);
    return CFE_SUCCESS;
}

bool SKYMEM_AuthRefuse(const uint8 *Packet, size_t Size, const skymem_msg_t *Msg)
{
    skymem_route_t Reply;
    int            rc;

    if (!SKYMEM_AuthOn)
    {
        if (Msg->auth == NULL)
        {
            return false;
        }
        rc = SKYMEM_AUTH_E_UNKNOWN_KEY; /* a trailer we cannot check: refuse rather than accept unchecked */
    }
    else if (Msg->auth == NULL)
    {
        if (!skymem_auth_required(Msg->cc))
        {
            return false;
        }
        rc = SKYMEM_AUTH_E_NO_TRAILER;
    }
    else
    {
        rc = skymem_auth_verify(&SKYMEM_Auth, Packet, Size);
        if (rc == SKYMEM_AUTH_OK)
        {
            return false;
        }
    }

    SKYMEM_Data.AuthFailures++;
    CFE_EVS_SendEvent(SKYMEM_DATA_NAK_EID, CFE_EVS_EventType_DEBUG, "SKYMEM: cc %u from (%u,%u) refused: %s",
                      (unsigned int)Msg->cc, (unsigned int)Msg->route.src_plane, (unsigned int)Msg->route.src_sat,
                      skymem_auth_strerror(rc));
    if (rc != SKYMEM_AUTH_E_REPLAY && !(Msg->route.flags & SKYMEM_RF_GOSSIP))
    {
        SKYMEM_ReplyRoute(&Msg->route, &Reply);
        SKYMEM_SendNak(&Reply, Msg->cc, SKYMEM_NAK_AUTH_FAILED, 0, Msg->has_block_hash ? Msg->block_hash : NULL);
    }
    return true;
}

bool SKYMEM_AuthRefuseControl(uint8 CommandCode)
{
    if (!SKYMEM_AuthOn || !skymem_auth_required(CommandCode))
    {
        return false;
    }
    SKYMEM_Data.AuthFailures++;
    CFE_EVS_SendEvent(SKYMEM_CC_ERR_EID, CFE_EVS_EventType_ERROR,
                      "SKYMEM: unauthenticated control command CC = %u refused (keys are configured)",
                      (unsigned int)CommandCode);
    return true;
}

int SKYMEM_AuthSign(uint8 *Packet, int Length, size_t Capacity)
{
    CFE_TIME_SysTime_t Now;
    uint64             Micros;

    if (!SKYMEM_AuthOn || Length <= 0)
    {
        return Length;
    }
    Now    = CFE_TIME_GetTime();
    Micros = (uint64)Now.Seconds * 1000000u + CFE_TIME_Sub2MicroSecs(Now.Subseconds);
    return skymem_auth_sign(&SKYMEM_Auth, SKYMEM_AUTH_CONSTELLATION_KEY, skymem_auth_next_seq(&SKYMEM_Auth, Micros),
                            Packet, (size_t)Length, Capacity);
}
