/* SKYMEM helpers: configuration, store, parameters, statistics, publishing. */
#include "skymem.h"
#include "skymem_config.h"
#include "skymem_eventids.h"
#include "skymem_utils.h"

#include "cfe_psp.h"

/* Range checks shared by the table validation and the identity check. */
static const char *SKYMEM_CheckTable(const SKYMEM_ConstellationTbl_t *Tbl)
{
    uint32 Count = (uint32)Tbl->Planes * (uint32)Tbl->SatsPerPlane;
    uint32 i;

    if (Tbl->Planes == 0 || Tbl->SatsPerPlane == 0)
    {
        return "planes and sats per plane must be >= 1";
    }
    if (Count >= SKYMEM_NO_SAT)
    {
        return "too many satellites";
    }
    if (Tbl->IslPortBase == 0 || (uint32)Tbl->IslPortBase + Count > 65536u || Tbl->GroundPortBase == 0 ||
        (uint32)Tbl->GroundPortBase + Count > 65536u)
    {
        return "port range does not fit below 65536";
    }
    if (Tbl->ChunkSize == 0 || Tbl->ChunkSize > SKYMEM_SB_MAX_CHUNK)
    {
        return "chunk size out of range";
    }
    if (Tbl->MemoryBudgetKB == 0)
    {
        return "memory budget is zero";
    }
    if (Tbl->FirstCpuId == 0)
    {
        return "first cpuid must be >= 1";
    }
    if (Tbl->HostCount == 0 || Tbl->HostCount > SKYMEM_MAX_HOSTS || Tbl->HostCount > Count)
    {
        return "host count must be 1..16 and at most one per satellite";
    }
    for (i = 0; i < Tbl->HostCount; i++)
    {
        if (memchr(Tbl->Hosts[i], 0, sizeof(Tbl->Hosts[i])) == NULL || Tbl->Hosts[i][0] == 0)
        {
            return "a host address is empty or not a terminated string";
        }
    }
    if (Tbl->InclinationMilliDeg > 180000u)
    {
        return "inclination above 180 degrees";
    }
    return NULL;
}

CFE_Status_t SKYMEM_TblValidationFunc(void *TblData)
{
    const char *Problem = SKYMEM_CheckTable((const SKYMEM_ConstellationTbl_t *)TblData);

    if (Problem != NULL)
    {
        CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: constellation table invalid: %s",
                          Problem);
        return CFE_STATUS_VALIDATION_FAILURE;
    }
    return CFE_SUCCESS;
}

CFE_Status_t SKYMEM_LoadConfig(void)
{
    CFE_Status_t               status;
    void                      *TblAddr = NULL;
    const SKYMEM_ConstellationTbl_t *Tbl;
    SKYMEM_ConstellationTbl_t  Local;
    bool                       Applied = false;
    uint32                     CpuId;
    uint32                     Index;

    status = CFE_TBL_Register(&SKYMEM_Data.TblHandle, SKYMEM_CONSTELLATION_TBL_NAME, sizeof(SKYMEM_ConstellationTbl_t),
                              CFE_TBL_OPT_DEFAULT, SKYMEM_TblValidationFunc);
    if (status != CFE_SUCCESS)
    {
        CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: error registering constellation table, RC = 0x%08lX", (unsigned long)status);
        return status;
    }

    status = CFE_TBL_Load(SKYMEM_Data.TblHandle, CFE_TBL_SRC_FILE, SKYMEM_CONSTELLATION_TBL_FILE);
    if (status != CFE_SUCCESS)
    {
        CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: error loading %s, RC = 0x%08lX", SKYMEM_CONSTELLATION_TBL_FILE,
                          (unsigned long)status);
        return status;
    }

    status = CFE_TBL_GetAddress(&TblAddr, SKYMEM_Data.TblHandle);
    if (status != CFE_SUCCESS && status != CFE_TBL_INFO_UPDATED)
    {
        CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: cannot read constellation table, RC = 0x%08lX", (unsigned long)status);
        return status;
    }
    Local = *(const SKYMEM_ConstellationTbl_t *)TblAddr;
    CFE_TBL_ReleaseAddress(SKYMEM_Data.TblHandle);
    Tbl = &Local;

    /* Optional per-satellite overrides (the launcher's skymemory.cfg), loaded
     * into the table itself so ISL_ROUTER, which shares it, agrees. */
    SKYMEM_Data.Time.TimeScale = 1.0;
    status = SKYMEM_ReadConfigFile(&Local, &SKYMEM_Data.Time, &Applied);
    if (status != CFE_SUCCESS)
    {
        return status;
    }
    if (Applied)
    {
        status = CFE_TBL_Load(SKYMEM_Data.TblHandle, CFE_TBL_SRC_ADDRESS, &Local);
        if (status != CFE_SUCCESS)
        {
            CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                              "SKYMEM: table image from %s rejected, RC = 0x%08lX", SKYMEM_CONFIG_FILE,
                              (unsigned long)status);
            return status;
        }
    }

    /* Identity: cpuid FirstCpuId + i is satellite index i, index = plane * sats + sat. */
    CpuId = CFE_PSP_GetProcessorId();
    Index = CpuId - Tbl->FirstCpuId;
    if (CpuId < Tbl->FirstCpuId || Index >= (uint32)Tbl->Planes * Tbl->SatsPerPlane)
    {
        CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: cpuid %lu is not a satellite of the %ux%u grid (cpuid must be %lu..%lu)",
                          (unsigned long)CpuId, (unsigned int)Tbl->Planes, (unsigned int)Tbl->SatsPerPlane,
                          (unsigned long)Tbl->FirstCpuId,
                          (unsigned long)(Tbl->FirstCpuId + (uint32)Tbl->Planes * Tbl->SatsPerPlane - 1u));
        return CFE_STATUS_VALIDATION_FAILURE;
    }

    SKYMEM_Data.Planes       = Tbl->Planes;
    SKYMEM_Data.SatsPerPlane = Tbl->SatsPerPlane;
    SKYMEM_Data.Plane        = (uint16)(Index / Tbl->SatsPerPlane);
    SKYMEM_Data.Sat          = (uint16)(Index % Tbl->SatsPerPlane);
    SKYMEM_Data.ChunkSize    = Tbl->ChunkSize;
    SKYMEM_Data.AltitudeM    = Tbl->AltitudeM;
    SKYMEM_Data.BudgetBytes  = (uint64)Tbl->MemoryBudgetKB * 1024u;
    return CFE_SUCCESS;
}

CFE_Status_t SKYMEM_CreateStore(uint64 BudgetBytes, uint32 ChunkSize)
{
    int rc;

    if (SKYMEM_Data.Store == NULL)
    {
        rc = skymem_store_create(&SKYMEM_Data.Store, BudgetBytes, ChunkSize, skymem_sat_store_evicted,
                                 &SKYMEM_Data.Core);
    }
    else
    {
        /* Moves the contents over, newest kept; the old store stays on failure. */
        rc = skymem_store_resize(&SKYMEM_Data.Store, BudgetBytes, ChunkSize);
    }

    if (rc != SKYMEM_STORE_OK)
    {
        CFE_EVS_SendEvent(SKYMEM_STORE_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: cannot create a chunk store of %lu bytes with %lu-byte chunks (error %d)",
                          (unsigned long)BudgetBytes, (unsigned long)ChunkSize, rc);
        return CFE_STATUS_EXTERNAL_RESOURCE_FAIL;
    }

    SKYMEM_Data.BudgetBytes = BudgetBytes;
    SKYMEM_Data.ChunkSize   = ChunkSize;
    SKYMEM_Data.Core.store  = SKYMEM_Data.Store; /* a resize makes a new store */
    return CFE_SUCCESS;
}

uint8 SKYMEM_ApplyParam(uint16 ParamId, uint32 Value)
{
    CFE_Status_t status;

    switch (ParamId)
    {
        case SKYMEM_PARAM_MEMORY_BUDGET_KB:
            if (Value == 0)
            {
                return SKYMEM_NAK_BAD_PARAM;
            }
            status = SKYMEM_CreateStore((uint64)Value * 1024u, SKYMEM_Data.ChunkSize);
            break;

        case SKYMEM_PARAM_CHUNK_SIZE:
            if (Value == 0 || Value > SKYMEM_SB_MAX_CHUNK)
            {
                return SKYMEM_NAK_BAD_PARAM;
            }
            status = SKYMEM_CreateStore(SKYMEM_Data.BudgetBytes, Value);
            break;

        default:
            /* Delay scale and loss are link emulation of the native node; the
             * cFS apps send at the real link's pace and do not emulate loss. */
            return SKYMEM_NAK_BAD_PARAM;
    }

    if (status != CFE_SUCCESS)
    {
        return SKYMEM_NAK_BAD_PARAM;
    }

    CFE_EVS_SendEvent(SKYMEM_SET_PARAM_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "SKYMEM: SET_PARAM id %u = %lu (budget %lu KiB, chunk %lu B)", (unsigned int)ParamId,
                      (unsigned long)Value, (unsigned long)(SKYMEM_Data.BudgetBytes / 1024u),
                      (unsigned long)SKYMEM_Data.ChunkSize);
    return 0;
}

/* Waits for ISL_ROUTER to have room for one more packet. */
static bool SKYMEM_TakeTxCredit(void)
{
    if (OS_CountSemTimedWait(SKYMEM_Data.TxCreditSem, SKYMEM_TX_CREDIT_WAIT_MS) == OS_SUCCESS)
    {
        return true;
    }
    SKYMEM_Data.TxCreditTimeouts++;
    CFE_EVS_SendEvent(SKYMEM_SEND_ERR_EID, CFE_EVS_EventType_ERROR,
                      "SKYMEM: ISL_ROUTER took no packet for %u ms, packet dropped (%lu so far)",
                      (unsigned int)SKYMEM_TX_CREDIT_WAIT_MS, (unsigned long)SKYMEM_Data.TxCreditTimeouts);
    return false;
}

/* Sends Length bytes at Packet as one SB message; with a non-zero WrapMid the
 * bytes become the payload of a command with that MID and function code. */
static CFE_Status_t SKYMEM_Transmit(CFE_SB_MsgId_Atom_t WrapMid, CFE_MSG_FcnCode_t FcnCode, const uint8 *Packet,
                                    int Length)
{
    size_t           Offset = (WrapMid != 0) ? sizeof(CFE_MSG_CommandHeader_t) : 0;
    CFE_SB_Buffer_t *Buf;
    CFE_Status_t     status;

    if (Length <= 0)
    {
        CFE_EVS_SendEvent(SKYMEM_SEND_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: cannot build packet (%s)",
                          skymem_strerror(Length));
        return CFE_STATUS_EXTERNAL_RESOURCE_FAIL;
    }
    if (!SKYMEM_TakeTxCredit())
    {
        return CFE_STATUS_EXTERNAL_RESOURCE_FAIL;
    }

    Buf = CFE_SB_AllocateMessageBuffer(Offset + (size_t)Length);
    if (Buf == NULL)
    {
        OS_CountSemGive(SKYMEM_Data.TxCreditSem);
        CFE_EVS_SendEvent(SKYMEM_SEND_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: no software-bus buffer for a %d-byte packet", Length);
        return CFE_SB_BUF_ALOC_ERR;
    }

    if (WrapMid != 0)
    {
        CFE_MSG_Init(&Buf->Msg, CFE_SB_ValueToMsgId(WrapMid), Offset + (size_t)Length);
        CFE_MSG_SetFcnCode(&Buf->Msg, FcnCode);
        memcpy((uint8 *)Buf + Offset, Packet, (size_t)Length);
    }
    else
    {
        memcpy(Buf, Packet, (size_t)Length); /* a reply, stamped when built (a signed one's tag covers its time) */
    }

    /* Not an origination: the SkyMemory packet keeps the sequence count we gave it. */
    status = CFE_SB_TransmitBuffer(Buf, false);
    if (status != CFE_SUCCESS)
    {
        CFE_SB_ReleaseMessageBuffer(Buf);
        OS_CountSemGive(SKYMEM_Data.TxCreditSem);
        CFE_EVS_SendEvent(SKYMEM_SEND_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: software-bus transmit failed, RC = 0x%08lX", (unsigned long)status);
        return status;
    }

    if (WrapMid != SKYMEM_ISL_OUT_MID || FcnCode != SKYMEM_ISL_OUT_LEARN_CC)
    {
        SKYMEM_Data.TxPackets++; /* a word to ISL_ROUTER is no packet sent */
    }
    return CFE_SUCCESS;
}

CFE_Status_t SKYMEM_Publish(const uint8 *Packet, int Length)
{
    return SKYMEM_Transmit(0, 0, Packet, Length);
}

CFE_Status_t SKYMEM_PublishToRouter(const uint8 *Packet, int Length)
{
    return SKYMEM_Transmit(SKYMEM_ISL_OUT_MID, SKYMEM_ISL_OUT_SEND_CC, Packet, Length);
}

CFE_Status_t SKYMEM_PublishStationLearned(uint16 StationId, uint32 RequestId)
{
    uint8 Payload[SKYMEM_ISL_LEARN_PAYLOAD_LEN];

    skymem_put_u16(Payload + SKYMEM_ISL_LEARN_STATION, StationId);
    skymem_put_u32(Payload + SKYMEM_ISL_LEARN_REQUEST, RequestId);
    return SKYMEM_Transmit(SKYMEM_ISL_OUT_MID, SKYMEM_ISL_OUT_LEARN_CC, Payload, (int)sizeof(Payload));
}

bool SKYMEM_IsMe(uint16 Plane, uint16 Sat)
{
    return Plane == SKYMEM_Data.Plane && Sat == SKYMEM_Data.Sat;
}
