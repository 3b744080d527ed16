/*
 * SKYMEM boot-time overrides from /cf/skymemory.cfg (read through OSAL).
 *
 * The cFE table stays the single source of truth: SKYMEM folds the file into
 * the table image and loads that image, so ISL_ROUTER (which shares the table)
 * sees the same values. Keys are the native node's option names; the
 * link-emulation ones (delay-scale, loss, ...) have no effect on cFS and are
 * only counted. Two keys exist for cFS only: `first-cpuid` (the cpuid of
 * satellite index 0) and `hosts` (the machines of a constellation spread
 * over several, comma-separated, in share order). Which keys exist, their
 * kinds and ranges, and the line syntax are the core's (skymem_options.h),
 * shared with the native node: a key neither knows is refused here too.
 */
#include "skymem.h"
#include "skymem_config.h"
#include "skymem_eventids.h"
#include "skymem_utils.h"
#include "skymem_options.h"

#include "cfe_psp.h"


/* What the file said about this satellite itself; checked once every line is read. */
typedef struct
{
    uint64 Plane; /* SKYMEM_NO_SAT unless given */
    uint64 Sat;
    char   Bind[SKYMEM_HOST_STR_LEN]; /* empty unless given */
    bool   HaveHosts;
    uint32 Ignored; /* native-node options without meaning here */
} SKYMEM_ConfigSeen_t;

/* A dotted IPv4 address short enough for the table: digits and dots only. */
static bool SKYMEM_IsAddress(const char *Text, size_t Len)
{
    size_t i;

    if (Len == 0 || Len >= SKYMEM_HOST_STR_LEN)
    {
        return false;
    }
    for (i = 0; i < Len; i++)
    {
        if (Text[i] != '.' && (Text[i] < '0' || Text[i] > '9'))
        {
            return false;
        }
    }
    return true;
}

/* "a,b,c" into Tbl->Hosts / HostCount. */
static bool SKYMEM_ParseHosts(const char *Value, SKYMEM_ConstellationTbl_t *Tbl)
{
    const char *Start = Value;
    const char *Comma;
    size_t      Len;
    uint16      Count = 0;

    memset(Tbl->Hosts, 0, sizeof(Tbl->Hosts));
    while (Start != NULL)
    {
        Comma = strchr(Start, ',');
        Len   = (Comma != NULL) ? (size_t)(Comma - Start) : strlen(Start);
        while (Len > 0 && *Start == ' ')
        {
            Start++;
            Len--;
        }
        while (Len > 0 && Start[Len - 1] == ' ')
        {
            Len--;
        }
        if (Count >= SKYMEM_MAX_HOSTS || !SKYMEM_IsAddress(Start, Len))
        {
            return false;
        }
        memcpy(Tbl->Hosts[Count], Start, Len);
        Count++;
        Start = (Comma != NULL) ? Comma + 1 : NULL;
    }
    Tbl->HostCount = Count;
    return true;
}

/* One "key = value" line: NULL when applied (or counted, for a native-node option), else why not. */
static const char *SKYMEM_ApplyOption(const char *Key, const char *Value, SKYMEM_ConstellationTbl_t *Tbl,
                                      SKYMEM_TimeConfig_t *Time, SKYMEM_ConfigSeen_t *Seen)
{
    const skymem_option_t *Option = skymem_option_find(Key);
    uint64_t               u      = 0;
    double                 d      = 0.0;
    int                    Rc     = SKYMEM_OPTION_OK;

    if (Option == NULL)
    {
        return "no such option";
    }
    if (Option->where == SKYMEM_OPTION_NODE)
    {
        Seen->Ignored++; /* native-node option without meaning here (link emulation, logging, peers) */
        return NULL;
    }
    if (Option->kind == SKYMEM_OPTION_INTEGER)
    {
        Rc = skymem_option_integer(Option, Value, &u);
    }
    else if (Option->kind == SKYMEM_OPTION_NUMBER)
    {
        Rc = skymem_option_number(Option, Value, &d);
    }
    if (Rc != SKYMEM_OPTION_OK)
    {
        return Rc == SKYMEM_OPTION_OUT_OF_RANGE ? "value out of range" : "not a value of its kind";
    }

    if (strcmp(Option->name, "planes") == 0)
    {
        Tbl->Planes = (uint16)u;
    }
    else if (strcmp(Option->name, "sats") == 0)
    {
        Tbl->SatsPerPlane = (uint16)u;
    }
    else if (strcmp(Option->name, "plane") == 0)
    {
        Seen->Plane = u;
    }
    else if (strcmp(Option->name, "sat") == 0)
    {
        Seen->Sat = u;
    }
    else if (strcmp(Option->name, "first-cpuid") == 0)
    {
        Tbl->FirstCpuId = (uint16)u;
    }
    else if (strcmp(Option->name, "hosts") == 0)
    {
        if (!SKYMEM_ParseHosts(Value, Tbl))
        {
            return "not a comma-separated list of IPv4 addresses, or more than SKYMEM_MAX_HOSTS";
        }
        Seen->HaveHosts = true;
    }
    else if (strcmp(Option->name, "altitude-km") == 0)
    {
        Tbl->AltitudeM = (uint32)(d * 1000.0 + 0.5);
    }
    else if (strcmp(Option->name, "inclination-deg") == 0)
    {
        Tbl->InclinationMilliDeg = (uint32)(d * 1000.0 + 0.5);
    }
    else if (strcmp(Option->name, "memory-budget") == 0)
    {
        Tbl->MemoryBudgetKB = (uint32)(u / 1024u); /* the table counts KiB */
    }
    else if (strcmp(Option->name, "chunk-size") == 0)
    {
        Tbl->ChunkSize = (uint32)u;
    }
    else if (strcmp(Option->name, "isl-port-base") == 0)
    {
        Tbl->IslPortBase = (uint16)u;
    }
    else if (strcmp(Option->name, "ground-port-base") == 0)
    {
        Tbl->GroundPortBase = (uint16)u;
    }
    else if (strcmp(Option->name, "bind") == 0)
    {
        if (!SKYMEM_IsAddress(Value, strlen(Value)))
        {
            return "not an IPv4 address";
        }
        memset(Seen->Bind, 0, sizeof(Seen->Bind));
        memcpy(Seen->Bind, Value, strlen(Value));
    }
    else if (strcmp(Option->name, "epoch-ms") == 0)
    {
        Time->EpochMs   = u;
        Time->HaveEpoch = true;
    }
    else if (strcmp(Option->name, "time-scale") == 0)
    {
        Time->TimeScale = d;
    }
    else
    {
        return "known to the core but not placed by SKYMEM (a bug)";
    }
    return NULL;
}

/* The identity is the cpuid: a file naming another satellite, or a bind address
 * that is not this satellite's machine, is a launch mistake. A bind address
 * without a hosts list puts every satellite on that one machine. */
static bool SKYMEM_CheckIdentity(SKYMEM_ConstellationTbl_t *Tbl, const SKYMEM_ConfigSeen_t *Seen)
{
    uint32 CpuId = CFE_PSP_GetProcessorId();
    uint32 Count = (uint32)Tbl->Planes * Tbl->SatsPerPlane;
    uint32 Index = CpuId - Tbl->FirstCpuId;
    uint32 Host;

    if ((Seen->Plane != SKYMEM_NO_SAT || Seen->Sat != SKYMEM_NO_SAT) &&
        (Seen->Plane * Tbl->SatsPerPlane + Seen->Sat != Index || Seen->Sat >= Tbl->SatsPerPlane))
    {
        CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                          "SKYMEM: %s names satellite (%lu,%lu) but cpuid %lu is index %lu", SKYMEM_CONFIG_FILE,
                          (unsigned long)Seen->Plane, (unsigned long)Seen->Sat, (unsigned long)CpuId,
                          (unsigned long)Index);
        return false;
    }
    if (Seen->Bind[0] != 0 && !Seen->HaveHosts)
    {
        memset(Tbl->Hosts, 0, sizeof(Tbl->Hosts));
        memcpy(Tbl->Hosts[0], Seen->Bind, sizeof(Seen->Bind));
        Tbl->HostCount = 1;
    }
    else if (Seen->Bind[0] != 0 && Index < Count && Tbl->HostCount > 0 && Tbl->HostCount <= SKYMEM_MAX_HOSTS)
    {
        Host = SKYMEM_HOST_OF(Index, Count, Tbl->HostCount);
        if (strcmp(Tbl->Hosts[Host], Seen->Bind) != 0)
        {
            CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                              "SKYMEM: %s binds %s but satellite index %lu belongs to host %lu (%s)",
                              SKYMEM_CONFIG_FILE, Seen->Bind, (unsigned long)Index, (unsigned long)Host,
                              Tbl->Hosts[Host]);
            return false;
        }
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
    char       *Key;
    char       *Value;
    const char *Problem;
    int         Kind;
    uint32              LineNo = 0;
    SKYMEM_ConfigSeen_t Seen;

    memset(&Seen, 0, sizeof(Seen));
    Seen.Plane = SKYMEM_NO_SAT;
    Seen.Sat   = SKYMEM_NO_SAT;

    *Applied = false;
    if (SKYMEM_FileMissing(SKYMEM_CONFIG_FILE))
    {
        return CFE_SUCCESS; /* no file: the table as loaded */
    }
    Len = OS_OpenCreate(&Fd, SKYMEM_CONFIG_FILE, OS_FILE_FLAG_NONE, OS_READ_ONLY);
    if (Len == OS_SUCCESS) /* else Len < 0: the error below */
    {
        Len = OS_read(Fd, Text, SKYMEM_CONFIG_MAX_SIZE + 1);
        OS_close(Fd);
    }
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
        Kind = skymem_config_line(Line, &Key, &Value);
        if (Kind == SKYMEM_CONFIG_BLANK)
        {
            continue;
        }
        if (Kind == SKYMEM_CONFIG_MALFORMED)
        {
            CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR,
                              "SKYMEM: %s line %lu is not 'key = value'", SKYMEM_CONFIG_FILE, (unsigned long)LineNo);
            return CFE_STATUS_VALIDATION_FAILURE;
        }
        Problem = SKYMEM_ApplyOption(Key, Value, Tbl, Time, &Seen);
        if (Problem != NULL)
        {
            CFE_EVS_SendEvent(SKYMEM_TABLE_ERR_EID, CFE_EVS_EventType_ERROR, "SKYMEM: %s line %lu: '%s': %s",
                              SKYMEM_CONFIG_FILE, (unsigned long)LineNo, Key, Problem);
            return CFE_STATUS_VALIDATION_FAILURE;
        }
    }

    if (!SKYMEM_CheckIdentity(Tbl, &Seen))
    {
        return CFE_STATUS_VALIDATION_FAILURE;
    }

    CFE_EVS_SendEvent(SKYMEM_TABLE_INF_EID, CFE_EVS_EventType_INFORMATION,
                      "SKYMEM: applied %s (%lu native-node options without effect on cFS ignored)",
                      SKYMEM_CONFIG_FILE, (unsigned long)Seen.Ignored);
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

/* Here, with the config file it is first asked about, so skymem_utils.c (which reads the config) and this
 * file do not call each other. */
bool SKYMEM_FileMissing(const char *Path)
{
    os_fstat_t Stat;

    return OS_stat(Path, &Stat) != OS_SUCCESS;
}
