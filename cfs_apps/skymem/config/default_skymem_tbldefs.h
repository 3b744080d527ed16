/*
 * SKYMEM constellation table: who the satellites are and how they reach each
 * other. ISL_ROUTER reads the same table (CFE_TBL_Share of
 * "SKYMEM.Constellation"), so both apps always agree on the grid and the ports.
 */
#ifndef SKYMEM_TBLDEFS_H
#define SKYMEM_TBLDEFS_H

#include "common_types.h"

#define SKYMEM_HOST_STR_LEN 16 /* dotted IPv4 address plus terminator */
#define SKYMEM_MAX_HOSTS    16 /* machines one constellation may be spread over */

/* Satellite Index of Count runs on host Index * HostCount / Count: contiguous
 * shares, the rule of the launcher's --hosts (19 per machine for 19x5 on 5). */
#define SKYMEM_HOST_OF(Index, Count, HostCount) ((uint32)(((uint64)(Index) * (uint64)(HostCount)) / (uint64)(Count)))

typedef struct
{
    uint16 Planes;              /**< orbital planes (grid rows), >= 1 */
    uint16 SatsPerPlane;        /**< satellites per plane (grid columns), >= 1 */
    uint32 AltitudeM;           /**< orbit altitude, metres */
    uint32 InclinationMilliDeg; /**< inclination, 1/1000 degree */
    uint16 IslPortBase;         /**< ISL UDP port of satellite index i = base + i */
    uint16 GroundPortBase;      /**< ground UDP port of satellite index i = base + i */
    uint32 MemoryBudgetKB;      /**< chunk store budget, KiB */
    uint32 ChunkSize;           /**< largest chunk data accepted, bytes */
    uint16 FirstCpuId;          /**< cpuid (PSP --cpuid) of satellite index 0; index = cpuid - FirstCpuId */
    uint16 HostCount;           /**< machines the satellites run on, 1..SKYMEM_MAX_HOSTS (SKYMEM_HOST_OF) */
    char   Hosts[SKYMEM_MAX_HOSTS][SKYMEM_HOST_STR_LEN]; /**< IPv4 address of each machine; satellites bind it */
} SKYMEM_ConstellationTbl_t;

#endif
