/*
 * SKYMEM's global state (SKYMEM_Data_t, skymem.h), defined here alone: every file of the app
 * reads and writes it, and none of them need the main loop (skymem.c) for that. With the
 * definition beside the main loop, each file depended on skymem.c and skymem.c on each of them,
 * a circle through every file of the app; now skymem.c sits on top and this file at the bottom,
 * depending on nothing (tests/test_module_cycles.py keeps it so).
 */
#include "skymem.h"

SKYMEM_Data_t SKYMEM_Data;
