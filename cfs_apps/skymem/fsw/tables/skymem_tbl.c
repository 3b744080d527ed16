/*
 * Default SKYMEM constellation table: the paper's 19 planes x 5 satellites at
 * 550 km, 53 degrees, on loopback with the project's default ports
 * (docs/CONTRACTS.md). A mission edits this file (or loads another image with
 * the cFE table services) to describe its constellation.
 */
#include "cfe_tbl_filedef.h"
#include "skymem_tbl.h"

SKYMEM_ConstellationTbl_t SKYMEM_Constellation = {
    .Planes              = 19,
    .SatsPerPlane        = 5,
    .AltitudeM           = 550000,
    .InclinationMilliDeg = 53000,
    .IslPortBase         = 20000,
    .GroundPortBase      = 40000,
    .MemoryBudgetKB      = 16384, /* 16 MiB per satellite; pages are touched only when used */
    .ChunkSize           = 6144,  /* the paper's 6 KB chunks */
    .FirstCpuId          = 1,     /* cpuid 1 is satellite (0,0) */
    .HostCount           = 1,     /* every satellite on one machine ... */
    .Hosts               = {"127.0.0.1"}, /* ... on loopback */
};

/* The table name prefix must equal the app name in the startup script (SKYMEM). */
CFE_TBL_FILEDEF(SKYMEM_Constellation, SKYMEM.Constellation, SkyMemory constellation,
                skymem_tbl.tbl)
