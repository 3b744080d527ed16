/*
 * SKYMEM command and reply authentication on cFS: key file, checks and signing,
 * all delegated to skymem_core (skymem_auth.c, tested by ctest); this file only
 * reads and writes files through OSAL, counts, and raises events.
 *
 * Sequences are microseconds of the host clock (OS_GetLocalTime: Unix time on
 * Linux, as on the ground and the native node). The replay floor is the later of
 * that clock at start and the high-water mark persisted in SKYMEM_AUTH_FLOOR_FILE,
 * so traffic recorded before a restart stays refused after it, also on a platform
 * whose clock restarts with the software.
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
static uint32        SKYMEM_ReplyKeyId;   /* ground key of the latest verified ground command */
static uint64        SKYMEM_PersistedHigh; /* the high-water mark SKYMEM_AUTH_FLOOR_FILE holds */

static uint64 SKYMEM_ClockMicros(void)
{
    OS_time_t Now;

    OS_GetLocalTime(&Now);
    return (uint64)OS_TimeGetTotalMicroseconds(Now);
}

/* The persisted high-water mark (decimal microseconds), 0 when there is none. No file is the
 * first boot with keys (the file is written at the first housekeeping request), said as such;
 * a file that is there but cannot be read is an error event. */
static uint64 SKYMEM_ReadFloor(void)
{
    char      Text[32];
    osal_id_t Fd;
    int32     Status;
    int32     Len;
    uint64    Value = 0;
    int32     i;

    if (SKYMEM_FileMissing(SKYMEM_AUTH_FLOOR_FILE))
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_INF_EID, CFE_EVS_EventType_INFORMATION,
                          "SKYMEM: no saved replay floor yet (first boot): starting from the clock");
        return 0;
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
        return 0;
    }
    for (i = 0; i < Len && Text[i] >= '0' && Text[i] <= '9'; i++)
    {
        Value = Value * 10u + (uint64)(Text[i] - '0');
    }
    return Value;
}

CFE_Status_t SKYMEM_AuthInit(void)
{
    static char Text[SKYMEM_AUTH_FILE_MAX + 1];
    char        Err[96];
    osal_id_t   Fd;
    int32       Len;
    int         rc;
    uint32      i;

    SKYMEM_AuthOn = false;
    skymem_auth_init(&SKYMEM_Auth, skymem_auth_seq_at(SKYMEM_ClockMicros()));
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
    SKYMEM_PersistedHigh = SKYMEM_ReadFloor();
    if (SKYMEM_PersistedHigh > SKYMEM_Auth.floor)
    {
        SKYMEM_Auth.floor = SKYMEM_PersistedHigh; /* nothing accepted before the restart is fresh after it */
    }
    SKYMEM_AuthOn     = true;
    SKYMEM_ReplyKeyId = 0; /* until a ground station speaks: the lowest ground key */
    for (i = 0; i < SKYMEM_Auth.n_keys; i++)
    {
        uint32 Id = SKYMEM_Auth.keys[i].id;
        if (Id != SKYMEM_AUTH_CONSTELLATION_KEY && (SKYMEM_ReplyKeyId == 0 || Id < SKYMEM_ReplyKeyId))
        {
            SKYMEM_ReplyKeyId = Id;
        }
    }
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
            if (Msg->route.src_plane == SKYMEM_GROUND_PLANE)
            {
                SKYMEM_ReplyKeyId = skymem_get_u32(Msg->auth + SKYMEM_AT_KEY_ID);
            }
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

bool SKYMEM_AuthRefuseReply(const uint8 *Packet, size_t Size, const skymem_msg_t *Msg)
{
    int rc;

    if (!SKYMEM_AuthOn)
    {
        return false;
    }
    rc = Msg->auth == NULL ? SKYMEM_AUTH_E_NO_TRAILER : skymem_auth_verify(&SKYMEM_Auth, Packet, Size);
    if (rc == SKYMEM_AUTH_OK)
    {
        return false;
    }
    SKYMEM_Data.AuthFailures++;
    CFE_EVS_SendEvent(SKYMEM_DATA_NAK_EID, CFE_EVS_EventType_DEBUG,
                      "SKYMEM: reply from (%u,%u) to request %lu ignored: %s", (unsigned int)Msg->route.src_plane,
                      (unsigned int)Msg->route.src_sat, (unsigned long)Msg->route.request_id, skymem_auth_strerror(rc));
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

static int SKYMEM_SignWith(uint32 KeyId, uint8 *Packet, int Length, size_t Capacity)
{
    if (!SKYMEM_AuthOn || Length <= 0)
    {
        return Length;
    }
    return skymem_auth_sign(&SKYMEM_Auth, KeyId, skymem_auth_next_seq(&SKYMEM_Auth, SKYMEM_ClockMicros()), Packet,
                            (size_t)Length, Capacity);
}

int SKYMEM_AuthSign(uint8 *Packet, int Length, size_t Capacity)
{
    return SKYMEM_SignWith(SKYMEM_AUTH_CONSTELLATION_KEY, Packet, Length, Capacity);
}

int SKYMEM_AuthSignReply(uint8 *Packet, int Length, size_t Capacity, const skymem_route_t *Route)
{
    return SKYMEM_SignWith(Route->dst_plane == SKYMEM_GROUND_PLANE ? SKYMEM_ReplyKeyId : SKYMEM_AUTH_CONSTELLATION_KEY,
                           Packet, Length, Capacity);
}

void SKYMEM_AuthPersist(void)
{
    char      Text[24];
    osal_id_t Fd;
    uint64    High = skymem_auth_high(&SKYMEM_Auth);
    int       n    = 0;
    int       i;
    char      Digits[24];

    if (!SKYMEM_AuthOn || High == SKYMEM_PersistedHigh)
    {
        return;
    }
    do
    {
        Digits[n++] = (char)('0' + High % 10u);
        High /= 10u;
    } while (High && n < (int)sizeof(Digits));
    for (i = 0; i < n; i++)
    {
        Text[i] = Digits[n - 1 - i];
    }
    Text[n] = '\n';
    if (OS_OpenCreate(&Fd, SKYMEM_AUTH_FLOOR_FILE, OS_FILE_FLAG_CREATE | OS_FILE_FLAG_TRUNCATE, OS_WRITE_ONLY) ==
        OS_SUCCESS)
    {
        if (OS_write(Fd, Text, (size_t)n + 1) == n + 1)
        {
            SKYMEM_PersistedHigh = skymem_auth_high(&SKYMEM_Auth);
        }
        OS_close(Fd);
    }
}
