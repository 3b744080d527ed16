/*
 * skymem_bulk_sealing.h -- sealed chunks in a fast-path call (internal to skymem_bulk*.c; the cipher is
 * skymem_seal.h's).
 *
 * A sealed chunk is chunk_bytes on the wire and carries SKYMEM_SEAL_OVERHEAD bytes less content, so where a
 * chunk's content lies in a block's buffer depends on sealing: plain_bytes and content_len say it for every file.
 * A set seals each send as it leaves (resends too, each under a nonce of its own); a get opens each chunk straight
 * into its place, and judges a chunk by its CRC and trailer only when it does not open.
 */
#ifndef SKYMEM_BULK_SEALING_H
#define SKYMEM_BULK_SEALING_H

#include <stddef.h>
#include <stdint.h>

#include "skymem_bulk.h"
#include "skymem_codec.h"
#include "skymem_seal.h"

/* Content bytes a chunk carries at most (sealed: less the seal's key id, nonce and tag). */
static inline uint32_t bulk_plain_bytes(const skymem_bulk_block_t *b, int sealed)
{
    return sealed ? b->chunk_bytes - SKYMEM_SEAL_OVERHEAD : b->chunk_bytes;
}

/* Content bytes of data chunk d (at buf + d * bulk_plain_bytes). */
static inline uint32_t bulk_content_len(const skymem_bulk_block_t *b, uint32_t d, int sealed)
{
    uint32_t per = bulk_plain_bytes(b, sealed);
    uint64_t start = (uint64_t)d * per;
    uint64_t left = b->n_bytes > start ? b->n_bytes - start : 0;
    return (uint32_t)(left < per ? left : per);
}

/* Seals chunk cid of b (len bytes of content at plain) into out (chunk_bytes of room). 0, or SKYMEM_BULK_E_CRYPTO. */
int bulk_seal_send(skymem_seal_ctx_t *seal, const skymem_bulk_block_t *b, uint32_t cid, const uint8_t *plain,
                   uint32_t len, uint8_t *out);

/* A sealed DATA reply m for chunk cid of b (want bytes on the wire), opened into dst: 1 when it is answered (status
 * OK, or SEAL_FAILED: the satellite keeps bytes that do not open), 0 when it is as if lost (damaged or forged on the
 * way: asked again), SKYMEM_BULK_E_CRYPTO when libcrypto fails. down: the key its trailer is checked with. */
int bulk_open_reply(skymem_seal_ctx_t *seal, skymem_bulk_opts_t *o, skymem_bulk_block_t *b, uint32_t cid,
                    const skymem_msg_t *m, const uint8_t *pkt, size_t len, const skymem_mac_key_t *down,
                    uint32_t want, uint8_t *dst);

#endif /* SKYMEM_BULK_SEALING_H */
