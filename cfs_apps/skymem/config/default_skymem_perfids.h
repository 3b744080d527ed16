/* SKYMEM performance IDs. */
#ifndef SKYMEM_PERFIDS_H
#define SKYMEM_PERFIDS_H

#define SKYMEM_PERF_ID 90

#endif
