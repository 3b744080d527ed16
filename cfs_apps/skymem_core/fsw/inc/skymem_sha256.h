/*
 * skymem_sha256.h -- portable SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104).
 *
 * Plain C99, no allocation, no platform calls: used by the satellites to check
 * the authentication trailer of commands (skymem_auth.h). Incremental: init,
 * update any number of times, final.
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

void skymem_sha256_init(skymem_sha256_t *c);
void skymem_sha256_update(skymem_sha256_t *c, const uint8_t *data, size_t len);
void skymem_sha256_final(skymem_sha256_t *c, uint8_t out[SKYMEM_SHA256_LEN]);
void skymem_sha256(const uint8_t *data, size_t len, uint8_t out[SKYMEM_SHA256_LEN]);

/* HMAC-SHA256. Keys longer than the 64-byte block are hashed first (RFC 2104). */
typedef struct {
    skymem_sha256_t inner;
    uint8_t okey[SKYMEM_SHA256_BLOCK]; /* key XOR opad, for the outer hash */
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
