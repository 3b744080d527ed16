/*
 * SKYMEM MIGRATE: move a range of chunks to another satellite over the ISL,
 * the same algorithm as the native node (docs/PROTOCOL.md "Migration").
 */
#ifndef SKYMEM_MIGRATE_H
#define SKYMEM_MIGRATE_H

#include "cfe.h"
#include "skymem_codec.h"

/* Starts a MIGRATE request (answered later, when every chunk is settled). */
void SKYMEM_MigrateStart(const skymem_msg_t *Msg, const skymem_route_t *Reply);

/* A reply addressed to this satellite (the target's ACK/NAK of a migrated chunk). */
void SKYMEM_MigrateOnReply(const skymem_msg_t *Msg);

/* Resends chunks whose ACK is overdue; call regularly while migrations run. */
void SKYMEM_MigrateTick(void);

/* Number of migrations in progress. */
uint32 SKYMEM_MigrationsActive(void);

#endif
