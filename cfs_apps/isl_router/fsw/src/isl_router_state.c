/*
 * ISL_ROUTER's global state (ISL_ROUTER_Data_t, isl_router.h), defined here alone: the command
 * handlers, the receive task and the forwarding code all use it, and none of them need the main
 * loop (isl_router.c) for that, so the app's files form no circle through it (as skymem_state.c
 * for SKYMEM; tests/test_module_cycles.py keeps it so).
 */
#include "isl_router.h"

ISL_ROUTER_Data_t ISL_ROUTER_Data;
