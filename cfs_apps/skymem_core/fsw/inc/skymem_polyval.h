/*
 * skymem_polyval.h -- POLYVAL (RFC 8452 section 3): the polynomial hash over GF(2^128) of
 * AES-GCM-SIV, here the universal hash of the authentication tag (skymem_auth.h).
 *
 * POLYVAL(H, X_1 .. X_n) = S_n, with S_0 = 0 and S_j = dot(S_{j-1} xor X_j, H), where
 * dot(a, b) = a * b * x^-128 modulo x^128 + x^127 + x^126 + x^121 + 1 and a 16-byte
 * string is a polynomial with bit i of byte j the coefficient of x^(8j + i).
 *
 * C99, no allocation. The implementations, chosen once at run time: portable C
 * (constant time, 64-bit integer multiplies), x86 PCLMULQDQ, x86 AVX-512
 * VPCLMULQDQ (four blocks per instruction) and 64-bit Arm PMULL (Linux). The
 * carry-less ones sum up to SKYMEM_POLYVAL_POWERS blocks times precomputed powers
 * of H before one reduction, so the only serial step is one multiply per
 * SKYMEM_POLYVAL_POWERS blocks. They are compiled with per-function target
 * attributes: the file needs no special flags and builds (portable only) for any
 * other CPU or compiler. Tested against RFC 8452's example, an independent Python
 * implementation and each other (tests/c/test_auth.c; `make test-arm64` for Arm).
 */
#ifndef SKYMEM_POLYVAL_H
#define SKYMEM_POLYVAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SKYMEM_POLYVAL_BLOCK 16u
#define SKYMEM_POLYVAL_POWERS 32u /* blocks summed per reduction */

typedef struct {
    /* pow[i] = H^(SKYMEM_POLYVAL_POWERS - i) in POLYVAL's form (the last is H, each one before it
     * dot(next, H)): descending, so the powers for the m blocks of a group are pow[POWERS - m ..] in order */
    uint8_t pow[SKYMEM_POLYVAL_POWERS][SKYMEM_POLYVAL_BLOCK];
} skymem_polyval_key_t;

void skymem_polyval_init(skymem_polyval_key_t *k, const uint8_t h[SKYMEM_POLYVAL_BLOCK]);

/* Continues the hash in acc (16 bytes, zero to start) over n whole 16-byte blocks at p. */
void skymem_polyval_blocks(const skymem_polyval_key_t *k, uint8_t acc[SKYMEM_POLYVAL_BLOCK], const uint8_t *p,
                           size_t n);

/* skymem_polyval_blocks and, in the same pass over memory, CRC32C of crc_len bytes at crc_data
 * (skymem_crc32c_update's convention: *crc is the running value, 0 to start): a receiver that
 * checks both a chunk's CRC and its packet's tag reads the chunk once. Fused on x86-64 with
 * AVX-512 VPCLMULQDQ and SSE4.2, where the CRC instruction's dependency chain leaves room for
 * the multiplies (skymem_polyval_crc32c_fused() says so); elsewhere one after the other, the
 * CRC in portable C. */
void skymem_polyval_blocks_crc32c(const skymem_polyval_key_t *k, uint8_t acc[SKYMEM_POLYVAL_BLOCK], const uint8_t *p,
                                  size_t n, const uint8_t *crc_data, size_t crc_len, uint32_t *crc);
int skymem_polyval_crc32c_fused(void);

/* Which implementation runs: "portable C", "x86 PCLMULQDQ", "x86 AVX-512 VPCLMULQDQ" or "Arm PMULL". */
const char *skymem_polyval_impl(void);
/* Caps the implementation (tests compare them; benchmarks measure each): 0 portable C,
 * 1 PCLMULQDQ or PMULL, 2 VPCLMULQDQ, each only when the CPU has it. Returns the level now in use. */
int skymem_polyval_use_accel(int level);

#ifdef __cplusplus
}
#endif

#endif /* SKYMEM_POLYVAL_H */
