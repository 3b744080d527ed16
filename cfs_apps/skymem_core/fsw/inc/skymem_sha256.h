/*
 * skymem_sha256.h -- SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104).
 *
 * C99, no allocation: used by the satellites and the ground to sign and check
 * the authentication trailer (skymem_auth.h). Incremental: init, update any
 * number of times, final. On x86 CPUs with the SHA extensions the compression
 * runs on them (chosen at run time); elsewhere, portable C.
 */
#ifndef SKYMEM_SHA256_H
#define SKYMEM_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SKYMEM_SHA256_LEN 32u
#define SKYMEM_SHA256_BLOCK 64u

typedef struct {
    uint32_t h[8];
    uint64_t total;                 /* bytes hashed so far */
    uint8_t buf[SKYMEM_SHA256_BLOCK];
    size_t used;                    /* bytes waiting in buf */
} skymem_sha256_t;

/* Which compression runs: "x86 SHA extensions" or "portable C". */
const char *skymem_sha256_impl(void);
/* Use the SHA extensions when on != 0 and the CPU has them, else portable C (tests compare the
 * two; benchmarks measure both). Returns 1 when the extensions are now in use. */
int skymem_sha256_use_accel(int on);

void skymem_sha256_init(skymem_sha256_t *c);
void skymem_sha256_update(skymem_sha256_t *c, const uint8_t *data, size_t len);
void skymem_sha256_final(skymem_sha256_t *c, uint8_t out[SKYMEM_SHA256_LEN]);
void skymem_sha256(const uint8_t *data, size_t len, uint8_t out[SKYMEM_SHA256_LEN]);

/* HMAC-SHA256. Keys longer than the 64-byte block are hashed first (RFC 2104). A context
 * just initialised holds both padded-key blocks already hashed, so a copy of it is a keyed
 * HMAC ready for a message. */
typedef struct {
    skymem_sha256_t inner; /* after key XOR ipad */
    skymem_sha256_t outer; /* after key XOR opad */
} skymem_hmac_t;

void skymem_hmac_init(skymem_hmac_t *c, const uint8_t *key, size_t key_len);
void skymem_hmac_update(skymem_hmac_t *c, const uint8_t *data, size_t len);
void skymem_hmac_final(skymem_hmac_t *c, uint8_t out[SKYMEM_SHA256_LEN]);
void skymem_hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *data, size_t len,
                        uint8_t out[SKYMEM_SHA256_LEN]);

#ifdef __cplusplus
}
#endif

#endif /* SKYMEM_SHA256_H */
