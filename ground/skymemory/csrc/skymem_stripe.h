/*
 * skymem_stripe.h -- coded stripes: k data chunks and m parity chunks, any k of which
 * give the data back (Reed-Solomon over GF(2^8), Intel ISA-L's erasure code).
 *
 * A stripe's n = k + m chunks go to n distinct satellites, so that m of them dead, slow
 * or lying (a chunk that does not check or open is absent) cost nothing but their share.
 * The code is ISA-L's Cauchy matrix (gf_gen_cauchy1_matrix: its top k rows are the
 * identity, so the data chunks are sent as they are, and every k x k submatrix is
 * invertible, so any k chunks decode); the arithmetic is ISA-L's (ec_init_tables,
 * ec_encode_data: SIMD tables), nothing hand-written. Every chunk of a stripe is `len`
 * bytes: a caller with a shorter last data chunk pads it with zeros, and a shortened
 * stripe (fewer than k data chunks) passes zero chunks, marked present, for the rest.
 *
 * Parity is computed over the content before it is sealed (skymem_seal.h), and each
 * parity chunk is sealed as any chunk is: a reader opens (authenticates) every chunk it
 * decodes from, so what a decode rebuilds is as authentic as what it was made from.
 * Ground-only, like skymem_bulk.h: satellites store parity chunks as ordinary chunks.
 */
#ifndef SKYMEM_STRIPE_H
#define SKYMEM_STRIPE_H

#include <stddef.h>
#include <stdint.h>

#define SKYMEM_STRIPE_MAX_CHUNKS 32u /* k + m at most: one chunk per satellite of a stripe */

/* parity[0..m) of data[0..k), each len bytes. 0, or -1 for arguments out of range. */
int skymem_stripe_encode(int k, int m, size_t len, const uint8_t *const *data, uint8_t *const *parity);

/* The same, its tables made once for many stripes (a block's): ISA-L's tables cost about as much to make as
 * coding a stripe of small chunks. */
typedef struct {
    int k, m;
    unsigned char tables[SKYMEM_STRIPE_MAX_CHUNKS * SKYMEM_STRIPE_MAX_CHUNKS * 32];
} skymem_stripe_encoder_t;
int skymem_stripe_encoder(int k, int m, skymem_stripe_encoder_t *e); /* 0, or -1 for k, m out of range */
int skymem_stripe_encode_with(const skymem_stripe_encoder_t *e, size_t len, const uint8_t *const *data,
                              uint8_t *const *parity);

/* chunks[0..k+m): the data chunks, then the parity ones, len bytes each; present[i] != 0
 * where chunk i is intact. Every data chunk that is not present is rebuilt in place from
 * the first k that are (absent parity chunks are left as they are: encode again to
 * rebuild them). 0; -1 for arguments out of range; -2 when fewer than k are present. */
int skymem_stripe_decode(int k, int m, size_t len, uint8_t *const *chunks, const uint8_t *present);

/* Where a block's chunks go on the wire (protocol/stripes.py says the same in Python): a block of
 * `data` data chunks in stripes of k data + m parity; stripe s holds the chunk ids s*n ..
 * s*n + w - 1 (n = k + m; w = r_s + m, r_s = its data chunks: k, or fewer in the last). A stripe's chunks have
 * roles: 0 .. r_s - 1 its data, in order, then r_s .. w - 1 its parity. Role i is at position (i + shift) mod w,
 * where shift = floor(s * n / stripes) steps by one n times over the block: parity rotates over the positions
 * (so over the satellites, chunk c going to server c mod n) as RAID 5 rotates it, in long runs of stripes.
 * m = 0: no parity, chunk id = data index. */
typedef struct {
    uint32_t k, m, n;    /* n = k + m */
    uint32_t data;       /* data chunks of the block */
    uint32_t stripes;    /* ceil(data / k) */
} skymem_stripe_layout_t;

#define SKYMEM_STRIPE_NO_DATA 0xFFFFFFFFu /* skymem_stripe_data_index of a parity chunk */

/* 0, or -1 when k, m or data are out of range (k >= 1, k + m <= SKYMEM_STRIPE_MAX_CHUNKS, data >= 1) or the
 * wire's chunk count would not fit 32 bits. */
int skymem_stripe_layout(uint32_t k, uint32_t m, uint32_t data, skymem_stripe_layout_t *out);
/* The layout of a block the satellites hold as `wire` chunks (protocol/stripes.py's Stripes.from_wire): 0, or -1
 * when no block in stripes of k + m has that many. */
int skymem_stripe_layout_wire(uint32_t k, uint32_t m, uint32_t wire, skymem_stripe_layout_t *out);
/* Chunks the satellites hold: data + stripes * m. */
uint32_t skymem_stripe_wire_chunks(const skymem_stripe_layout_t *l);
/* Data chunks in stripe s (k, or fewer in the last). */
uint32_t skymem_stripe_data_in(const skymem_stripe_layout_t *l, uint32_t s);
/* The wire id of the chunk with role `role` (0 .. r_s - 1: data, then parity) in stripe s. */
uint32_t skymem_stripe_member(const skymem_stripe_layout_t *l, uint32_t s, uint32_t role);
/* The role of wire chunk `cid` in its stripe (cid / n). */
uint32_t skymem_stripe_role(const skymem_stripe_layout_t *l, uint32_t cid);
/* The data index of wire chunk `cid`, or SKYMEM_STRIPE_NO_DATA for a parity chunk. */
uint32_t skymem_stripe_data_index(const skymem_stripe_layout_t *l, uint32_t cid);
/* The wire id of data chunk d. */
uint32_t skymem_stripe_wire_id(const skymem_stripe_layout_t *l, uint32_t d);
/* skymem_stripe_data_index of every wire chunk at once, into out[0 .. wire chunks): one pass over the stripes, no
 * division per chunk (a get classifies each chunk several times, and the per-chunk form divides five times). */
void skymem_stripe_data_indexes(const skymem_stripe_layout_t *l, uint32_t *out);

#endif
