/* SKYMEM event IDs. */
#ifndef SKYMEM_EVENTIDS_H
#define SKYMEM_EVENTIDS_H

#define SKYMEM_RESERVED_EID      0
#define SKYMEM_INIT_INF_EID      1
#define SKYMEM_CC_ERR_EID        2
#define SKYMEM_NOOP_INF_EID      3
#define SKYMEM_RESET_INF_EID     4
#define SKYMEM_MID_ERR_EID       5
#define SKYMEM_CMD_LEN_ERR_EID   6
#define SKYMEM_PIPE_ERR_EID      7
#define SKYMEM_SET_PARAM_INF_EID 8
#define SKYMEM_SET_PARAM_ERR_EID 9
#define SKYMEM_TABLE_ERR_EID     10
#define SKYMEM_TABLE_INF_EID     11
#define SKYMEM_STORE_ERR_EID     12
#define SKYMEM_INIT_ERR_EID      13
#define SKYMEM_DATA_ERR_EID      14 /* malformed data-plane packet */
#define SKYMEM_DATA_NAK_EID      15 /* data-plane request answered with NAK (debug) */
#define SKYMEM_DATA_DBG_EID      16 /* data-plane request served (debug) */
#define SKYMEM_EVICT_INF_EID     17 /* block purged by LRU or EVICT_BLOCK */
#define SKYMEM_SEND_ERR_EID      18 /* could not publish a reply on the software bus */
#define SKYMEM_BUSY_ERR_EID      19 /* GET_CHUNKS queue full */
#define SKYMEM_MIGRATE_INF_EID   20 /* migration started / finished */

#endif
