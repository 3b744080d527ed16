/*
 * ISL_ROUTER's link keys: what it puts on an ISL link is checked and signed by skymem_core's link layer
 * (skymem_link.h), hop by hop, with the keys of this satellite's own links from SKYMEM's key file.
 *
 * Both tasks send on the links (the main task SKYMEM's own packets, the receive task what it relays),
 * so the one ring -- its replay windows and the sequence this satellite signs with -- is used under
 * LinkMutex: two rings would each count sequences of their own, and a neighbour would refuse the second
 * of two equal ones as a replay.
 */
#include <string.h>

#include "isl_router.h"
#include "isl_router_eventids.h"
#include "isl_router_links.h"

#include "skymem_link.h"

static skymem_auth_t ISL_ROUTER_Links; /* this satellite's keys: only its links' are used here */
static char          ISL_ROUTER_KeyText[ISL_ROUTER_KEY_FILE_MAX + 1];

CFE_Status_t ISL_ROUTER_LinksInit(void)
{
    char      Err[96];
    osal_id_t Fd;
    int32     Len;
    int       rc;

    if (!ISL_ROUTER_Data.Keyed)
    {
        return CFE_SUCCESS; /* no key file: an unkeyed constellation, links unsigned */
    }
    if (OS_MutSemCreate(&ISL_ROUTER_Data.LinkMutex, "ISL_ROUTER_LK", 0) != OS_SUCCESS)
    {
        return CFE_STATUS_EXTERNAL_RESOURCE_FAIL;
    }
    Len = OS_OpenCreate(&Fd, ISL_ROUTER_AUTH_KEYS_FILE, OS_FILE_FLAG_NONE, OS_READ_ONLY);
    if (Len == OS_SUCCESS)
    {
        Len = OS_read(Fd, ISL_ROUTER_KeyText, ISL_ROUTER_KEY_FILE_MAX + 1);
        OS_close(Fd);
    }
    if (Len < 0 || Len > ISL_ROUTER_KEY_FILE_MAX)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_INIT_ERR_EID, CFE_EVS_EventType_ERROR, "ISL_ROUTER: %s unreadable or over %u bytes",
                          ISL_ROUTER_AUTH_KEYS_FILE, (unsigned int)ISL_ROUTER_KEY_FILE_MAX);
        return CFE_STATUS_VALIDATION_FAILURE;
    }
    skymem_auth_init(&ISL_ROUTER_Links, 0);
    rc = skymem_auth_load_text(&ISL_ROUTER_Links, ISL_ROUTER_KeyText, (size_t)Len, Err, sizeof(Err));
    memset(ISL_ROUTER_KeyText, 0, sizeof(ISL_ROUTER_KeyText));
    if (rc <= 0 || ISL_ROUTER_Links.owner_plane != ISL_ROUTER_Data.Plane ||
        ISL_ROUTER_Links.owner_sat != ISL_ROUTER_Data.Sat ||
        !skymem_link_keys_complete(&ISL_ROUTER_Links, ISL_ROUTER_Data.Planes, ISL_ROUTER_Data.SatsPerPlane))
    {
        CFE_EVS_SendEvent(ISL_ROUTER_INIT_ERR_EID, CFE_EVS_EventType_ERROR, "ISL_ROUTER: %s: %s",
                          ISL_ROUTER_AUTH_KEYS_FILE,
                          rc < 0 ? Err : "not this satellite's keys, or lacks its links' link-in/link-out keys");
        return CFE_STATUS_VALIDATION_FAILURE;
    }
    return CFE_SUCCESS;
}

int ISL_ROUTER_LinksPrepare(bool Relayed, uint16 NextPlane, uint16 NextSat, uint8 *Pkt, size_t Len, size_t Cap)
{
    OS_time_t Now;
    uint64    NowUs;
    int       rc;

    if (!ISL_ROUTER_Data.Keyed)
    {
        return (int)Len;
    }
    OS_GetLocalTime(&Now);
    NowUs = (uint64)OS_TimeGetTotalMicroseconds(Now);
    OS_MutSemTake(ISL_ROUTER_Data.LinkMutex);
    rc = skymem_link_prepare(&ISL_ROUTER_Links, Relayed, NextPlane, NextSat, NowUs, Pkt, Len, Cap);
    OS_MutSemGive(ISL_ROUTER_Data.LinkMutex);
    return rc;
}
