/*
 * skymem_sat_internal.h -- what the core's command-handling files share and no runtime uses.
 *
 * The three files form layers, each using only those below it (no circle):
 *   skymem_sat.c          commands: authentication, handlers, gossip, GET_CHUNKS; starts migrations
 *   skymem_sat_migrate.c  the MIGRATE state machine
 *   skymem_sat_reply.c    log lines, signing, building and sending replies
 * The public face for the runtimes stays skymem_sat.h.
 */
#ifndef SKYMEM_SAT_INTERNAL_H
#define SKYMEM_SAT_INTERNAL_H

#include "skymem_sat.h"

/* ---- skymem_sat_reply.c ---- */

/* Formats a line for io->log (none when the runtime gave no log). */
void skymem_sat_logf(const skymem_sat_t *s, int level, int about, const char *fmt, ...);

/* The route of an answer to a request with route req: back to its source, through its via. */
skymem_route_t skymem_sat_reply_route(const skymem_sat_t *s, const skymem_route_t *req);

/* Signs (keys on) and sends a reply of len bytes built in s->buf (len <= 0: a build error, logged). */
void skymem_sat_send_reply(skymem_sat_t *s, int len, const skymem_route_t *route);

/* skymem_sat_reply with any body (body_len bytes); a NAK counts in err_count. */
void skymem_sat_reply_body(skymem_sat_t *s, const skymem_route_t *req, uint8_t kind, uint8_t cc, uint8_t status,
                           uint32_t chunk_id, uint32_t value, const uint8_t *body, size_t body_len);

/* ---- skymem_sat_migrate.c ---- */

/* MIGRATE_CC from a station: start a job (or NAK it). */
void skymem_sat_migrate_start(skymem_sat_t *s, const skymem_msg_t *m);

/* An authenticated reply addressed here: the target's ACK/NAK of a migrated chunk. */
void skymem_sat_migrate_on_reply(skymem_sat_t *s, const skymem_msg_t *m);

#endif /* SKYMEM_SAT_INTERNAL_H */
