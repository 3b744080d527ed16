/* ISL_ROUTER entry point, initialisation and main loop (shape of nasa/sample_app). */
#include "isl_router.h"
#include "isl_router_dispatch.h"
#include "isl_router_eventids.h"
#include "isl_router_links.h"
#include "isl_router_rx.h"
#include "isl_router_utils.h"
#include "isl_router_version.h"

void ISL_ROUTER_Main(void)
{
    CFE_Status_t     status;
    CFE_SB_Buffer_t *SBBufPtr;

    CFE_ES_PerfLogEntry(ISL_ROUTER_PERF_ID);

    status = ISL_ROUTER_Init();
    if (status != CFE_SUCCESS)
    {
        ISL_ROUTER_Data.RunStatus = CFE_ES_RunStatus_APP_ERROR;
    }

    while (CFE_ES_RunLoop(&ISL_ROUTER_Data.RunStatus) == true)
    {
        CFE_ES_PerfLogExit(ISL_ROUTER_PERF_ID);

        status = CFE_SB_ReceiveBuffer(&SBBufPtr, ISL_ROUTER_Data.Pipe, CFE_SB_PEND_FOREVER);

        CFE_ES_PerfLogEntry(ISL_ROUTER_PERF_ID);

        if (status == CFE_SUCCESS)
        {
            ISL_ROUTER_TaskPipe(SBBufPtr);
        }
        else
        {
            CFE_EVS_SendEvent(ISL_ROUTER_PIPE_ERR_EID, CFE_EVS_EventType_ERROR,
                              "ISL_ROUTER: SB pipe read error 0x%08lX, app will exit", (unsigned long)status);
            ISL_ROUTER_Data.RunStatus = CFE_ES_RunStatus_APP_ERROR;
        }
    }

    CFE_ES_PerfLogExit(ISL_ROUTER_PERF_ID);

    /* cFE releases the app's child task, sockets and mutex when it exits. */
    CFE_ES_ExitApp(ISL_ROUTER_Data.RunStatus);
}

static CFE_Status_t ISL_ROUTER_SubscribeMid(CFE_SB_MsgId_Atom_t Mid, uint16 MsgLimit)
{
    CFE_Status_t status;

    status = CFE_SB_SubscribeEx(CFE_SB_ValueToMsgId(Mid), ISL_ROUTER_Data.Pipe, CFE_SB_DEFAULT_QOS, MsgLimit);
    if (status != CFE_SUCCESS)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_INIT_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: error subscribing to MID 0x%04X, RC = 0x%08lX", (unsigned int)Mid,
                          (unsigned long)status);
    }
    return status;
}

CFE_Status_t ISL_ROUTER_Init(void)
{
    CFE_Status_t status;
    int32        OsStatus;

    memset(&ISL_ROUTER_Data, 0, sizeof(ISL_ROUTER_Data));
    ISL_ROUTER_Data.RunStatus = CFE_ES_RunStatus_APP_RUN;

    status = CFE_EVS_Register(NULL, 0, CFE_EVS_EventFilter_BINARY);
    if (status != CFE_SUCCESS)
    {
        CFE_ES_WriteToSysLog("ISL_ROUTER: error registering events, RC = 0x%08lX\n", (unsigned long)status);
        return status;
    }

    CFE_MSG_Init(CFE_MSG_PTR(ISL_ROUTER_Data.HkTlm.TelemetryHeader), CFE_SB_ValueToMsgId(ISL_ROUTER_HK_TLM_MID),
                 sizeof(ISL_ROUTER_Data.HkTlm));

    status = CFE_SB_CreatePipe(&ISL_ROUTER_Data.Pipe, ISL_ROUTER_PIPE_DEPTH, ISL_ROUTER_PIPE_NAME);
    if (status != CFE_SUCCESS)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_INIT_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: error creating SB pipe, RC = 0x%08lX", (unsigned long)status);
        return status;
    }

    status = ISL_ROUTER_SubscribeMid(ISL_ROUTER_SEND_HK_MID, 4);
    if (status == CFE_SUCCESS)
    {
        status = ISL_ROUTER_SubscribeMid(ISL_ROUTER_CMD_MID, 8);
    }
    if (status == CFE_SUCCESS)
    {
        status = ISL_ROUTER_SubscribeMid(SKYMEM_REPLY_TLM_MID, ISL_ROUTER_DATA_MSG_LIMIT);
    }
    if (status == CFE_SUCCESS)
    {
        status = ISL_ROUTER_SubscribeMid(SKYMEM_ISL_OUT_MID, ISL_ROUTER_DATA_MSG_LIMIT);
    }
    if (status != CFE_SUCCESS)
    {
        return status;
    }

    OsStatus = OS_MutSemCreate(&ISL_ROUTER_Data.GroundMutex, "ISL_ROUTER_GS", 0);
    if (OsStatus != OS_SUCCESS)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_INIT_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: cannot create mutex, RC = %ld", (long)OsStatus);
        return CFE_STATUS_EXTERNAL_RESOURCE_FAIL;
    }

    {
        os_fstat_t Stat;
        ISL_ROUTER_Data.Keyed = OS_stat(ISL_ROUTER_AUTH_KEYS_FILE, &Stat) == OS_SUCCESS;
    }

    /* Grid, identity and ports come from SKYMEM's table. */
    status = ISL_ROUTER_LoadConfig();
    if (status != CFE_SUCCESS)
    {
        return status;
    }

    status = ISL_ROUTER_LinksInit();
    if (status != CFE_SUCCESS)
    {
        return status;
    }

    status = ISL_ROUTER_OpenSockets();
    if (status != CFE_SUCCESS)
    {
        return status;
    }

    status = CFE_ES_CreateChildTask(&ISL_ROUTER_Data.RxTaskId, ISL_ROUTER_RX_TASK_NAME, ISL_ROUTER_RxTask, NULL,
                                    ISL_ROUTER_RX_TASK_STACK, ISL_ROUTER_RX_TASK_PRIORITY, 0);
    if (status != CFE_SUCCESS)
    {
        CFE_EVS_SendEvent(ISL_ROUTER_INIT_ERR_EID, CFE_EVS_EventType_ERROR,
                          "ISL_ROUTER: cannot create receive task, RC = 0x%08lX", (unsigned long)status);
        return status;
    }

    CFE_EVS_SendEvent(ISL_ROUTER_INIT_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "ISL_ROUTER Initialized. %s: satellite (plane %u, sat %u), ISL %s:%u, ground %s:%u",
                      ISL_ROUTER_VERSION, (unsigned int)ISL_ROUTER_Data.Plane, (unsigned int)ISL_ROUTER_Data.Sat,
                      ISL_ROUTER_Data.Host, (unsigned int)ISL_ROUTER_IslPort(ISL_ROUTER_Data.Plane, ISL_ROUTER_Data.Sat),
                      ISL_ROUTER_Data.Host,
                      (unsigned int)(ISL_ROUTER_Data.GroundPortBase + ISL_ROUTER_SatIndex(ISL_ROUTER_Data.Plane,
                                                                                           ISL_ROUTER_Data.Sat)));
    return CFE_SUCCESS;
}
