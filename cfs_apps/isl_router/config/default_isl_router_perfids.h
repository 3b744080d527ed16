/* ISL_ROUTER performance IDs. */
#ifndef ISL_ROUTER_PERFIDS_H
#define ISL_ROUTER_PERFIDS_H

#define ISL_ROUTER_PERF_ID    91
#define ISL_ROUTER_RX_PERF_ID 92

#endif
