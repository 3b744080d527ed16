/* SKYMEM platform configuration. */
#ifndef SKYMEM_INTERNAL_CFG_H
#define SKYMEM_INTERNAL_CFG_H

/* Command pipe. OSAL caps a queue at OS_QUEUE_MAX_DEPTH (50 by default), and
 * Linux at fs.mqueue.msg_max. */
#define SKYMEM_PIPE_NAME  "SKYMEM_CMD_PIPE"
#define SKYMEM_PIPE_DEPTH 48

/* Data-plane packets of one MID that may wait in the pipe (the cFE default of 4
 * would drop bursts from the router). */
#define SKYMEM_DATA_MSG_LIMIT 40

/* GET_CHUNKS answers are emitted this many at a time between pipe polls, so
 * commands keep being served during a long request. (Flow control toward
 * ISL_ROUTER is the credit semaphore, see skymem_msgids.h.) */
#define SKYMEM_REPLY_BURST 8

/* How long a reply waits for ISL_ROUTER to free a credit before it is dropped
 * (the ground retries); only reached when ISL_ROUTER is stopped or stalled. */
#define SKYMEM_TX_CREDIT_WAIT_MS 200

/* GET_CHUNKS queue, gossip memory and MIGRATE limits are skymem_core's (skymem_sat.h:
 * SKYMEM_SAT_MAX_JOBS, SKYMEM_SAT_GOSSIP_MEMORY, SKYMEM_SAT_MAX_MIGRATIONS, ...), the same on
 * both runtimes. */
#define SKYMEM_MIGRATE_TICK_MS     100 /* pipe wait while migrations run */

#define SKYMEM_MAX_VERSION_STR_LEN 256

#endif
