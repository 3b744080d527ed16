/*
 * SKYMEM boot-time overrides from /cf/skymemory.cfg (read through OSAL).
 *
 * The cFE table stays the single source of truth: SKYMEM folds the file into
 * the table image and loads that image, so ISL_ROUTER (which shares the table)
 * sees the same values. Keys are the native node's option names; the
 * link-emulation ones (delay-scale, loss, ...) have no effect on cFS and are
 * only counted.
 */
#include "skymem.h"
#include "skymem_config.h"
#include "skymem_eventids.h"

#include "cfe_psp.h"

#include <stdlib.h>

static char *SKYMEM_Trim(char *s)
{
    char *end;

    while (*s == ' ' || *s == '\t')
    {
        s++;
    }
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
    {
        *--end = 0;
    }
    return s;
}

/* Whole-string unsigned number within [Min, Max]. */
static bool SKYMEM_ParseU64(const char *Text, uint64 Min, uint64 Max, uint64 *Out)
{
    char              *End = NULL;
    unsigned long long v;

    if (*Text == 0 || *Text == '-')
    {
        return false;
    }
    v = strtoull(Text, &End, 10);
    if (*End != 0 || v < Min || v > Max)
    {
        return false;
    }
    *Out = v;
    return true;
}

static bool SKYMEM_ParseDouble(const char *Text, double Min, double Max, double *Out)
{
    char  *End = NULL;
    double v;

    if (*Text == 0)
    {
        return false;
    }
    v = strtod(Text, &End);
    if (*End != 0 || !(v >= Min && v <= Max))
    {
        return false;
    }
    *Out = v;
    return true;
}

/* One "key = value" line. Returns false for a bad value of a known key. */
static bool SKYMEM_ApplyOption(const char *Key, const char *Value, SKYMEM_ConstellationTbl_t *Tbl,
                               SKYMEM_TimeConfig_t *Time, uint64 *Plane, uint64 *Sat, uint32 *Ignored)
{
    uint64 u;
    double d;

    if (strcmp(Key, "planes") == 0 && SKYMEM_ParseU64(Value, 1, 65534, &u))
    {
        Tbl->Planes = (uint16)u;
    }
    else if (strcmp(Key, "sats") == 0 && SKYMEM_ParseU64(Value, 1, 65534, &u))
    {
        Tbl->SatsPerPlane = (uint16)u;
    }
    else if (strcmp(Key, "plane") == 0 && SKYMEM_ParseU64(Value, 0, 65534, &u))
    {
        *Plane = u;
    }
    else if (strcmp(Key, "sat") == 0 && SKYMEM_ParseU64(Value, 0, 65534, &u))
    {
        *Sat = u;
    }
    else if (strcmp(Key, "altitude-km") == 0 && SKYMEM_ParseDouble(Value, 1.0, 100000.0, &d))
    {
        Tbl->AltitudeM = (uint32)(d * 1000.0 + 0.5);
    }
    else if (strcmp(Key, "inclination-deg") == 0 && SKYMEM_ParseDouble(Value, 0.0, 180.0, &d))
    {
        Tbl->InclinationMilliDeg = (uint32)(d * 1000.0 + 0.5);
    }
    else if (strcmp(Key, "memory-budget") == 0 && SKYMEM_ParseU64(Value, 1024, (uint64)0xFFFFFFFFu * 1024u, &u))
    {
        Tbl->MemoryBudgetKB = (uint32)(u / 1024u); /* the table counts KiB */
    }
    else if (strcmp(Key, "chunk-size") == 0 && SKYMEM_ParseU64(Value, 1, SKYMEM_MAX_CHUNK_DATA, &u))
    {
        Tbl->ChunkSize = (uint32)u;
    }
    else if (strcmp(Key, "isl-port-base") == 0 && SKYMEM_ParseU64(Value, 1, 65535, &u))
    {
        Tbl->IslPortBase = (uint16)u;
    }
    else if (strcmp(Key, "ground-port-base") == 0 && SKYMEM_ParseU64(Value, 1, 65535, &u))
    {
        Tbl->GroundPortBase = (uint16)u;
    }
    else if (strcmp(Key, "bind") == 0 && strlen(Value) > 0 && strlen(Value) < sizeof(Tbl->Host))
    {
        memset(Tbl->Host, 0, sizeof(Tbl->Host));
        memcpy(Tbl->Host, Value, strlen(Value));
    }
    else if (strcmp(Key, "epoch-ms") == 0 && SKYMEM_ParseU64(Value, 0, (uint64)1 << 62, &u))
    {
        Time->EpochMs   = u;
        Time->HaveEpoch = true;
    }
    else if (strcmp(Key, "time-scale") == 0 && SKYMEM_ParseDouble(Value, 0.0, 1.0e6, &d))
    {
        Time->TimeScale = d;
    }
    else if (strcmp(Key, "planes") == 0 || strcmp(Key, "sats") == 0 || strcmp(Key, "plane") == 0 ||
             strcmp(Key, "sat") == 0 || strcmp(Key, "altitude-km") == 0 || strcmp(Key, "inclination-deg") == 0 ||
             strcmp(Key, "memory-budget") == 0 || strcmp(Key, "chunk-size") == 0 ||
             strcmp(Key, "isl-port-base") == 0 || strcmp(Key, "ground-port-base") == 0 || strcmp(Key, "bind") == 0 ||
             strcmp(Key, "epoch-ms") == 0 || strcmp(Key, "time-scale") == 0)
    {
        return false; /* a known key with a value out of range */
    }
    else
    {
        (*Ignored)++; /* native-node option without meaning here (link emulation, logging, peers) */
    }
    return true;
}

CFE_Status_t SKYMEM_ReadConfigFile(SKYMEM_ConstellationTbl_t *Tbl, SKYMEM_TimeConfig_t *Time, bool *Applied)
{
    static char Text[SKYMEM_CONFIG_MAX_SIZE + 1];
    osal_id_t   Fd;
    int32       Len;
    char       *Line;
    char       *Next;
    char       *Eq;
    uint32      LineNo  = 0;
    uint32      Ignored = 0;
    uint64      Plane   = SKYMEM_NO_SAT;
    uint64      Sat     = SKYMEM_NO_SAT;
    uint32      Index   = CFE_PSP_GetProcessorId() - 1u;

    *Applied = false;
    if (OS_OpenCreate(&Fd, SKYMEM_CONFIG_FILE, OS_FILE_FLAG_NONE, OS_READ_ONLY) != OS_SUCCESS)
    {
        return CFE_SUCCESS; /* no file: the table as loaded */
    }
    Len = OS_read(Fd, Text, SKYMEM_CONFIG_MAX_SIZE + 1);
    OS_close(Fd);
    if (Len < 0 || Len > SKYMEM_CONFIG_MAX_SIZE)
    {
        CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: %s unreadable or over %u bytes",
                          SKYMEM_CONFIG_FILE, (unsigned int)SKYMEM_CONFIG_MAX_SIZE);
        return CFE_STATUS_VALIDATION_FAILURE;
    }
    Text[Len] = 0;

    for (Line = Text; Line != NULL; Line = Next)
    {
        LineNo++;
        Next = strchr(Line, '\n');
        if (Next != NULL)
        {
            *Next++ = 0;
        }
        Line = SKYMEM_Trim(Line);
        if (*Line == 0 || *Line == '#')
        {
            continue;
        }
        Eq = strchr(Line, '=');
        if (Eq == NULL)
        {
            CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: %s line %lu has no '='",
                              SKYMEM_CONFIG_FILE, (unsigned long)LineNo);
            return CFE_STATUS_VALIDATION_FAILURE;
        }
        *Eq = 0;
        if (!SKYMEM_ApplyOption(SKYMEM_Trim(Line), SKYMEM_Trim(Eq + 1), Tbl, Time, &Plane, &Sat, &Ignored))
        {
            CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                              "SKYMEM: %s line %lu: bad value for '%s'", SKYMEM_CONFIG_FILE, (unsigned long)LineNo,
                              SKYMEM_Trim(Line));
            return CFE_STATUS_VALIDATION_FAILURE;
        }
    }

    /* The identity is the cpuid; a file naming another satellite is a launch mistake. */
    if ((Plane != SKYMEM_NO_SAT || Sat != SKYMEM_NO_SAT) &&
        (Plane * Tbl->SatsPerPlane + Sat != Index || Sat >= Tbl->SatsPerPlane))
    {
        CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: %s names satellite (%lu,%lu) but cpuid %lu is index %lu", SKYMEM_CONFIG_FILE,
                          (unsigned long)Plane, (unsigned long)Sat, (unsigned long)(Index + 1u), (unsigned long)Index);
        return CFE_STATUS_VALIDATION_FAILURE;
    }

    CFE_EVS_SendEvent(SKYMEM_TABLE_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "SKYMEM: applied %s (%lu native-node options without effect on cFS ignored)",
                      SKYMEM_CONFIG_FILE, (unsigned long)Ignored);
    *Applied = true;
    return CFE_SUCCESS;
}

uint64 SKYMEM_MissionTimeMs(const SKYMEM_TimeConfig_t *Time)
{
    OS_time_t Now;
    int64     NowMs;

    OS_GetLocalTime(&Now);
    NowMs = OS_TimeGetTotalMilliseconds(Now);
    if (!Time->HaveEpoch || NowMs < (int64)Time->EpochMs)
    {
        return (uint64)NowMs;
    }
    return Time->EpochMs + (uint64)(Time->TimeScale * (double)((uint64)NowMs - Time->EpochMs));
}
