/*
 * skymem_aes.h -- AES-128 encryption of one block (FIPS 197): the pseudo-random function that
 * turns the authentication tag's POLYVAL value into the tag (skymem_auth.h), as AES-GCM-SIV
 * does with its POLYVAL value.
 *
 * C99, no allocation. Encryption only, one block at a time. Three implementations, chosen once
 * at run time: the x86 AES instructions (AES-NI), the 64-bit Arm ones (Linux, when the kernel
 * says the CPU has them), and portable C -- what flight processors run. All three take the same
 * time whatever the key and data: the portable code is bitsliced (the S-box a boolean circuit,
 * no table lookups, no branches on secrets; skymem_aes.c says how), so a program sharing the
 * CPU's caches learns nothing of the key from its timing.
 * Tested against FIPS 197 and NIST SP 800-38A / AESAVS known answers, against each other and
 * against libgcrypt (tests/c/test_aes.c, tests/c/test_gcmsiv.c).
 */
#ifndef SKYMEM_AES_H
#define SKYMEM_AES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SKYMEM_AES_BLOCK 16u
#define SKYMEM_AES128_KEY 16u
#define SKYMEM_AES128_ROUNDS 10u

typedef struct {
    uint8_t rk[SKYMEM_AES128_ROUNDS + 1][SKYMEM_AES_BLOCK]; /* round keys, in FIPS 197 byte order */
    uint32_t sk[SKYMEM_AES128_ROUNDS + 1][8];              /* the same, bitsliced (the portable code) */
} skymem_aes128_t;

void skymem_aes128_init(skymem_aes128_t *k, const uint8_t key[SKYMEM_AES128_KEY]);
/* out = AES-128_k(in); in and out may be the same buffer. */
void skymem_aes128_encrypt(const skymem_aes128_t *k, const uint8_t in[SKYMEM_AES_BLOCK], uint8_t out[SKYMEM_AES_BLOCK]);

/* The portable, constant-time implementation, whichever one skymem_aes128_encrypt runs (tests and
 * benchmarks call it directly). */
void skymem_aes128_encrypt_portable(const skymem_aes128_t *k, const uint8_t in[SKYMEM_AES_BLOCK],
                                    uint8_t out[SKYMEM_AES_BLOCK]);

/* Which implementation runs: "portable C, bitsliced", "x86 AES-NI" or "Arm AES". */
const char *skymem_aes_impl(void);
/* Use the CPU's AES instructions when on != 0 and it has them, else portable C (tests compare the
 * two; benchmarks measure both). Returns 1 when the instructions are now in use. */
int skymem_aes_use_accel(int on);

#ifdef __cplusplus
}
#endif

#endif /* SKYMEM_AES_H */
