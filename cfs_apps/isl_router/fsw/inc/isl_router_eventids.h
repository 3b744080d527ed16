/* ISL_ROUTER event IDs. */
#ifndef ISL_ROUTER_EVENTIDS_H
#define ISL_ROUTER_EVENTIDS_H

#define ISL_ROUTER_RESERVED_EID    0
#define ISL_ROUTER_INIT_INF_EID    1
#define ISL_ROUTER_CC_ERR_EID      2
#define ISL_ROUTER_NOOP_INF_EID    3
#define ISL_ROUTER_RESET_INF_EID   4
#define ISL_ROUTER_MID_ERR_EID     5
#define ISL_ROUTER_CMD_LEN_ERR_EID 6
#define ISL_ROUTER_PIPE_ERR_EID    7
#define ISL_ROUTER_INIT_ERR_EID    8
#define ISL_ROUTER_TABLE_ERR_EID   9
#define ISL_ROUTER_SOCKET_ERR_EID  10
#define ISL_ROUTER_INVALID_EID     11 /* datagram rejected by the codec (debug) */
#define ISL_ROUTER_DROP_EID        12 /* packet dropped: TTL, no route, unknown ground station (debug) */
#define ISL_ROUTER_SEND_ERR_EID    13
#define ISL_ROUTER_RX_TASK_INF_EID 14
#define ISL_ROUTER_ROUTE_DBG_EID   15 /* per-packet routing decision (debug) */
#define ISL_ROUTER_LEARN_EID       16 /* a ground station's address learnt, or not, from a verified request (debug) */

#endif
