/*
 * SKYMEM function codes.
 *
 * Control (SKYMEM_CMD_MID): SKYMEM_NOOP_CC 0, SKYMEM_RESET_COUNTERS_CC 1,
 * SKYMEM_SET_PARAM_CC 2. Data plane (SKYMEM_DATA_CMD_MID): all SKYMEM_*_CC
 * codes 0..9. The numbers are fixed by the wire format (skymem_wire.h).
 */
#ifndef SKYMEM_FCNCODES_H
#define SKYMEM_FCNCODES_H

#include "skymem_wire.h"

#endif
