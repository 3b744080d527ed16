/*
 * SKYMEM entry point, initialisation and main loop (same shape as
 * nasa/sample_app's sample_app.c).
 */
#include "skymem.h"
#include "skymem_auth_app.h"
#include "skymem_data.h"
#include "skymem_dispatch.h"
#include "skymem_eventids.h"
#include "skymem_utils.h"
#include "skymem_version.h"

void SKYMEM_Main(void)
{
    CFE_Status_t     status;
    CFE_SB_Buffer_t *SBBufPtr;
    int32            Timeout;

    CFE_ES_PerfLogEntry(SKYMEM_PERF_ID);

    status = SKYMEM_Init();
    if (status != CFE_SUCCESS)
    {
        SKYMEM_Data.RunStatus = CFE_ES_RunStatus_APP_ERROR;
    }

    while (CFE_ES_RunLoop(&SKYMEM_Data.RunStatus) == true)
    {
        CFE_ES_PerfLogExit(SKYMEM_PERF_ID);

        /* While GET_CHUNKS answers are pending, only poll the pipe between
         * bursts (the credit semaphore paces the bursts); otherwise sleep
         * until a message arrives. */
        if (SKYMEM_Data.Core.n_jobs > 0)
        {
            Timeout = CFE_SB_POLL;
        }
        else if (skymem_sat_migrations_active(&SKYMEM_Data.Core) > 0)
        {
            Timeout = SKYMEM_MIGRATE_TICK_MS; /* wake up to resend overdue chunks */
        }
        else
        {
            Timeout = CFE_SB_PEND_FOREVER;
        }
        status  = CFE_SB_ReceiveBuffer(&SBBufPtr, SKYMEM_Data.CommandPipe, Timeout);

        CFE_ES_PerfLogEntry(SKYMEM_PERF_ID);

        if (status == CFE_SUCCESS)
        {
            SKYMEM_TaskPipe(SBBufPtr);
        }
        else if (status != CFE_SB_TIME_OUT && status != CFE_SB_NO_MESSAGE)
        {
            CFE_EVS_SendEvent(SKYMEM_PIPE_ERR_EID, CFE_EVS_EventType_ERROR,
                              "SKYMEM: SB pipe read error 0x%08lX, app will exit", (unsigned long)status);
            SKYMEM_Data.RunStatus = CFE_ES_RunStatus_APP_ERROR;
        }

        (void)skymem_sat_run_jobs(&SKYMEM_Data.Core, SKYMEM_REPLY_BURST);
        skymem_sat_tick(&SKYMEM_Data.Core);
    }

    CFE_ES_PerfLogExit(SKYMEM_PERF_ID);

    if (SKYMEM_Data.Store != NULL)
    {
        skymem_store_destroy(SKYMEM_Data.Store);
        SKYMEM_Data.Store = NULL;
    }

    CFE_ES_ExitApp(SKYMEM_Data.RunStatus);
}

/* Subscribes with a message limit suited to bursts (cFE's default is 4). */
static CFE_Status_t SKYMEM_SubscribeMid(CFE_SB_MsgId_Atom_t Mid, uint16 MsgLimit)
{
    CFE_Status_t status;

    status = CFE_SB_SubscribeEx(CFE_SB_ValueToMsgId(Mid), SKYMEM_Data.CommandPipe, CFE_SB_DEFAULT_QOS, MsgLimit);
    if (status != CFE_SUCCESS)
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: error subscribing to MID 0x%04X, RC = 0x%08lX", (unsigned int)Mid,
                          (unsigned long)status);
    }
    return status;
}

CFE_Status_t SKYMEM_Init(void)
{
    CFE_Status_t status;

    memset(&SKYMEM_Data, 0, sizeof(SKYMEM_Data));
    SKYMEM_Data.RunStatus = CFE_ES_RunStatus_APP_RUN;

    status = CFE_EVS_Register(NULL, 0, CFE_EVS_EventFilter_BINARY);
    if (status != CFE_SUCCESS)
    {
        CFE_ES_WriteToSysLog("SKYMEM: error registering events, RC = 0x%08lX\n", (unsigned long)status);
        return status;
    }

    CFE_MSG_Init(CFE_MSG_PTR(SKYMEM_Data.HkTlm.TelemetryHeader), CFE_SB_ValueToMsgId(SKYMEM_HK_TLM_MID),
                 sizeof(SKYMEM_Data.HkTlm));

    status = CFE_SB_CreatePipe(&SKYMEM_Data.CommandPipe, SKYMEM_PIPE_DEPTH, SKYMEM_PIPE_NAME);
    if (status != CFE_SUCCESS)
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: error creating SB pipe, RC = 0x%08lX", (unsigned long)status);
        return status;
    }

    /* Control and housekeeping requests come one at a time; data-plane
     * requests (and replies addressed to this satellite) come in bursts. */
    status = SKYMEM_SubscribeMid(SKYMEM_SEND_HK_MID, 4);
    if (status == CFE_SUCCESS)
    {
        status = SKYMEM_SubscribeMid(SKYMEM_CMD_MID, 8);
    }
    if (status == CFE_SUCCESS)
    {
        status = SKYMEM_SubscribeMid(SKYMEM_DATA_CMD_MID, SKYMEM_DATA_MSG_LIMIT);
    }
    if (status == CFE_SUCCESS)
    {
        status = SKYMEM_SubscribeMid(SKYMEM_ISL_IN_MID, SKYMEM_DATA_MSG_LIMIT);
    }
    if (status != CFE_SUCCESS)
    {
        return status;
    }

    /* Constellation table -> identity, grid size, store budget. */
    status = SKYMEM_LoadConfig();
    if (status != CFE_SUCCESS)
    {
        return status;
    }

    SKYMEM_CoreSetup();

    /* Command authentication keys (optional file; see skymem_auth_app.h). */
    status = SKYMEM_AuthInit();
    if (status != CFE_SUCCESS)
    {
        return status;
    }

    status = SKYMEM_CreateStore(SKYMEM_Data.BudgetBytes, SKYMEM_Data.ChunkSize);
    if (status != CFE_SUCCESS)
    {
        return status;
    }

    /* Credits for packets handed to ISL_ROUTER. Created last: ISL_ROUTER waits for
     * this semaphore to exist before it reads the (by then final) table. */
    if (OS_CountSemCreate(&SKYMEM_Data.TxCreditSem, SKYMEM_TX_CREDIT_SEM, SKYMEM_TX_CREDITS, 0) != OS_SUCCESS)
    {
        CFE_EVS_SendEvent(SKYMEM_INIT_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: cannot create semaphore %s",
                          SKYMEM_TX_CREDIT_SEM);
        return CFE_STATUS_EXTERNAL_RESOURCE_FAIL;
    }

    SKYMEM_Data.StartSeconds = CFE_TIME_GetTime().Seconds;

    CFE_EVS_SendEvent(SKYMEM_INIT_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "SKYMEM Initialized. %s: satellite (plane %u, sat %u) of %ux%u, budget %lu KiB, chunk %lu B",
                      SKYMEM_VERSION, (unsigned int)SKYMEM_Data.Plane, (unsigned int)SKYMEM_Data.Sat,
                      (unsigned int)SKYMEM_Data.Planes, (unsigned int)SKYMEM_Data.SatsPerPlane,
                      (unsigned long)(SKYMEM_Data.BudgetBytes / 1024u), (unsigned long)SKYMEM_Data.ChunkSize);

    return CFE_SUCCESS;
}
