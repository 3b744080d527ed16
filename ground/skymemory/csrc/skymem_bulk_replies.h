/*
 * skymem_bulk_replies.h -- which replies a fast-path call believes (internal to skymem_bulk*.c; the reply windows
 * themselves are public, in skymem_bulk.h).
 *
 * A reply answers a request only when it comes from the satellite asked (a route NAK: from where the request
 * stopped), was signed after the call began (keyed: above the satellite's reply_floor), and carries a right tag
 * and a fresh sequence under its source's DOWN key. Each refusal is counted in the opts' results, never silent.
 */
#ifndef SKYMEM_BULK_REPLIES_H
#define SKYMEM_BULK_REPLIES_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_bulk.h"
#include "skymem_codec.h"

/* 1 when m comes from s, or is a route NAK (from a relay or the entry satellite); else counted in wrong_source. */
int bulk_from_server(const skymem_msg_t *m, const skymem_bulk_server_t *s, skymem_bulk_opts_t *o);

/* 1 unless a keyed reply from s is signed at or below s->reply_floor (counted in replayed). */
int bulk_signed_after_floor(skymem_bulk_opts_t *o, const skymem_msg_t *m, const skymem_bulk_server_t *s,
                            const uint8_t *pkt, size_t len);

/* The DOWN key m's source is checked with (NULL: a source that is no server, refused). */
const skymem_mac_key_t *bulk_down_key(const skymem_msg_t *m, const skymem_bulk_server_t *asked,
                                      const skymem_bulk_server_t *servers, uint32_t n_servers);

/* 1 when the reply may answer: unkeyed, or signed with k and fresh; counts the others. */
int bulk_reply_authentic(skymem_bulk_opts_t *o, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len);

/* 1 when a DATA reply's chunk (`want` bytes at m->data) may land: its CRC and (keyed) its trailer; counts why not. */
int bulk_data_reply_ok(skymem_bulk_opts_t *o, const skymem_mac_key_t *k, const uint8_t *pkt, size_t len,
                       const skymem_msg_t *m, uint32_t want);

#endif /* SKYMEM_BULK_REPLIES_H */
