/*
 * ISL_ROUTER function codes (skymem_wire.h): ISL_ROUTER_NOOP_CC 0,
 * ISL_ROUTER_RESET_COUNTERS_CC 1. ISL_ROUTER_SET_LINK_CC 2 (link emulation) is
 * a native-node feature; the cFS app rejects it as an invalid command code.
 */
#ifndef ISL_ROUTER_FCNCODES_H
#define ISL_ROUTER_FCNCODES_H

#include "skymem_wire.h"

#endif
