/* ISL_ROUTER platform configuration. */
#ifndef ISL_ROUTER_INTERNAL_CFG_H
#define ISL_ROUTER_INTERNAL_CFG_H

#define ISL_ROUTER_PIPE_NAME  "ISL_ROUTER_PIPE"
#define ISL_ROUTER_PIPE_DEPTH 48 /* at most OS_QUEUE_MAX_DEPTH (50) and fs.mqueue.msg_max */

/* SKYMEM packets of one MID that may wait in the pipe (cFE's default is 4). */
#define ISL_ROUTER_DATA_MSG_LIMIT 40

/* Receive task: waits on both sockets at once; the timeout bounds how long it
 * takes to notice that the app is being stopped. */
#define ISL_ROUTER_RX_TASK_NAME     "ISL_ROUTER_RX"
#define ISL_ROUTER_RX_TASK_STACK    16384
#define ISL_ROUTER_RX_TASK_PRIORITY 50
#define ISL_ROUTER_RX_SELECT_MS     500

/* Datagrams read from one socket per wakeup. OSAL reads one datagram per OS_SocketRecvFrom (a
 * select and a recvfrom each, no recvmmsg), so a burst saves only the outer OS_SelectMultiple per
 * datagram; the bound keeps one busy socket from starving the other. */
#define ISL_ROUTER_RX_BURST 64

/* Ground stations whose return address is remembered (from their requests). */
#define ISL_ROUTER_MAX_GROUND_STATIONS 64

/* Requests from the ground whose answers go back to the address each came from: one slot per
 * (station, request id) hash, held by the first request to claim it until it expires (the native node's
 * 1024 serve a whole process; a satellite's link holds fewer requests in flight). */
#define ISL_ROUTER_RETURN_SLOTS 256
#define ISL_ROUTER_RETURN_TTL_S 30

/* SKYMEM's key file (SKYMEM_AUTH_KEYS_FILE): when it is there the constellation is keyed. ISL_ROUTER then
 * checks and signs what satellites send each other with its links' keys (isl_router_links.c); a ground
 * command it relays it cannot verify (its destination's UP key made the tag), so it NAKs none of them
 * (PROTOCOL.md §5). */
#define ISL_ROUTER_AUTH_KEYS_FILE "/cf/skymem_auth.keys"
#define ISL_ROUTER_KEY_FILE_MAX   8192

/* How long init waits for SKYMEM to publish its constellation table. */
#define ISL_ROUTER_TABLE_WAIT_MS  5000
#define ISL_ROUTER_TABLE_RETRY_MS 100

#endif
