/*
 * SKYMEM boot-time overrides: an optional "/cf/skymemory.cfg" of
 * "key = value" lines using the native node's option names (the launcher
 * writes one per satellite), folded into the constellation table image.
 */
#ifndef SKYMEM_CONFIG_H
#define SKYMEM_CONFIG_H

#include "cfe.h"
#include "skymem_tbl.h"

#define SKYMEM_CONFIG_FILE     "/cf/skymemory.cfg"
#define SKYMEM_CONFIG_MAX_SIZE 4096

/* Mission-time settings from the file (contract: mission_ms = epoch + scale * (now - epoch)). */
typedef struct
{
    bool   HaveEpoch;
    uint64 EpochMs;
    double TimeScale;
} SKYMEM_TimeConfig_t;

/*
 * Applies the file to *Tbl and *Time when the file exists. *Applied tells
 * whether it did. Returns CFE_SUCCESS (also when there is no file) or a
 * failure after an event naming the bad line.
 */
CFE_Status_t SKYMEM_ReadConfigFile(SKYMEM_ConstellationTbl_t *Tbl, SKYMEM_TimeConfig_t *Time, bool *Applied);

/* true if an optional file (a /cf path) is not there. Asked before opening it because OSAL's
 * open of a missing file prints "open(./cf/...): No such file or directory", which reads as a
 * failure where the file's absence is a normal case (first boot, no key file). */
bool SKYMEM_FileMissing(const char *Path);

/* Mission time in ms from the host clock and the time settings. */
uint64 SKYMEM_MissionTimeMs(const SKYMEM_TimeConfig_t *Time);

#endif
