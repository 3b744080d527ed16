/*
 * skymem_bulk_sealing.c -- sealed chunks in a fast-path call (skymem_bulk_sealing.h).
 *
 * Every seal binds how the block is cut (skymem_seal_layout_t: chunk size, k, m), so a chunk read back under
 * another layout never opens (S1 of issue 53).
 */
#include "skymem_bulk_sealing.h"

#include "skymem_bulk_replies.h"

static skymem_seal_layout_t seal_layout(const skymem_bulk_block_t *b)
{
    skymem_seal_layout_t l = {b->chunk_bytes, b->stripe_m ? b->stripe_k : 0, b->stripe_m}; /* uncoded: 0, 0 */
    return l;
}

int bulk_seal_send(skymem_seal_ctx_t *seal, const skymem_bulk_block_t *b, uint32_t cid, const uint8_t *plain,
                   uint32_t len, uint8_t *out)
{
    skymem_seal_layout_t lay = seal_layout(b);
    int sr = skymem_seal_chunk(seal, b->hash, cid, b->chunk_count, b->n_bytes, &lay, plain, len, out);
    return sr == SKYMEM_SEAL_OK ? 0 : SKYMEM_BULK_E_CRYPTO;
}

/* The seal first: a chunk that opens is the ground's own, in its place, and its CRC and trailer would prove nothing
 * more (docs/RELIABILITY.md, "Sealed content"). Only one that does not open is judged by them, to know whom to
 * blame: with CRC and trailer right the satellite keeps these bytes, and asking again would bring them back. */
int bulk_open_reply(skymem_seal_ctx_t *seal, skymem_bulk_opts_t *o, skymem_bulk_block_t *b, uint32_t cid,
                    const skymem_msg_t *m, const uint8_t *pkt, size_t len, const skymem_mac_key_t *down,
                    uint32_t want, uint8_t *dst)
{
    skymem_seal_layout_t lay = seal_layout(b);
    int sr = skymem_open_chunk(seal, b->hash, cid, b->chunk_count, b->n_bytes, &lay, m->data, want, dst);
    if (sr == SKYMEM_SEAL_E_CRYPTO || sr == SKYMEM_SEAL_E_ARG)
        return SKYMEM_BULK_E_CRYPTO;
    if (sr != SKYMEM_SEAL_OK && !bulk_data_reply_ok(o, down, pkt, len, m, want))
        return 0; /* forged or damaged on the way: as if lost, asked again after rto */
    b->status[cid] = sr == SKYMEM_SEAL_OK ? SKYMEM_BULK_OK : SKYMEM_BULK_SEAL_FAILED; /* failed: no content (zeros) */
    o->seal_failures += sr != SKYMEM_SEAL_OK;
    return 1;
}
