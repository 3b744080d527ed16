/*
 * skymem_seal.h -- sealed content: the ground's fast path seals every chunk it
 * stores and opens every chunk it fetches with AES-128-GCM, under a tenant key
 * no satellite is given, so a satellite keeps and serves bytes it can neither
 * read nor alter nor swap for others unnoticed.
 *
 * The format is skymemory/protocol/seal.py's, byte for byte (that module derives
 * the keys, and seals and opens the chunks Python handles; either side opens what
 * the other sealed). A sealed chunk on the wire:
 *
 *     key id u32 BE | nonce (12 random bytes) | ciphertext (as long as the content) | GCM tag (16)
 *
 * and its associated data, binding the bytes to what they are (another block's
 * chunk, another position, a block of another size, another tenant's, the same
 * block cut or striped another way: none opens):
 *
 *     "skymemory seal v2\0" | block hash (32) | chunk id u32 BE | chunk count u32 BE
 *     | block size u64 BE (content bytes of the whole block) | key id u32 BE
 *     | chunk bytes u32 BE | stripe k u32 BE | stripe m u32 BE
 *
 * The layout (skymem_seal_layout_t) is in it because two layouts can give one block
 * the same chunk count (7 data chunks: one stripe of 7 + 2 parity, or stripes of 4 + 1
 * and 3 + 1, are 9 on the wire either way):
 * without it, a chunk that is data in one layout opens as parity in the other.
 *
 * So a chunk of chunk_bytes on the wire carries plain = chunk_bytes - SKYMEM_SEAL_OVERHEAD
 * bytes of content, and a block of n content bytes is max(1, ceil(n / plain)) chunks,
 * chunk i holding content [i * plain, min((i + 1) * plain, n)).
 *
 * The cipher is OpenSSL's libcrypto (EVP): AES and GHASH on the CPU's AES and
 * carry-less multiply instructions, the tag compared in constant time, nothing
 * hand-written. The nonce is never derived from the block (two encodings of one
 * block, by two engines, must not share one): a context draws a random 96-bit
 * base once (RAND_bytes) and seals its k-th chunk under the base with k added to
 * its low 64 bits, so nonces never repeat within a context, and two contexts'
 * runs meet only if their random bases fall within a call's length of each
 * other (a call seals millions of chunks at most: below 2^-60). Drawing 12 random
 * bytes per chunk instead cost a third of the seal. Ground-only, like
 * skymem_bulk.h: the satellites never see a content key.
 */
#ifndef SKYMEM_SEAL_H
#define SKYMEM_SEAL_H

#include <stddef.h>
#include <stdint.h>

#define SKYMEM_SEAL_KEY_ID_LEN 4u
#define SKYMEM_SEAL_NONCE_LEN  12u
#define SKYMEM_SEAL_TAG_LEN    16u
#define SKYMEM_SEAL_OVERHEAD   32u /* key id + nonce + tag: what a sealed chunk adds to its content */
#define SKYMEM_SEAL_KEY_LEN    16u /* AES-128 */
#define SKYMEM_SEAL_MAX_KEYS   16u /* key ids a table holds (the ground retires old ones: `skymemory keys retire`) */

/* One tenant's keys by id (seal.py's Sealer.c_keys()): keys[0] seals, a chunk opens under the entry its
 * key id names. Ids are distinct; n_keys is 1..SKYMEM_SEAL_MAX_KEYS. */
typedef struct {
    uint32_t id;
    uint8_t key[SKYMEM_SEAL_KEY_LEN];
} skymem_seal_key_t;

typedef struct {
    uint32_t n_keys;
    skymem_seal_key_t keys[SKYMEM_SEAL_MAX_KEYS];
} skymem_seal_keys_t;

/* How a block is cut into chunks, bound into every chunk's seal (seal.py's SealLayout). chunk_bytes: every
 * chunk but the last on the wire (0: a record sealed as one chunk on its own, whatever its length); stripe_k,
 * stripe_m: data and parity chunks a stripe (0, 0: uncoded). */
typedef struct {
    uint32_t chunk_bytes, stripe_k, stripe_m;
} skymem_seal_layout_t;

/* Return values. */
#define SKYMEM_SEAL_OK        0
#define SKYMEM_SEAL_E_SHORT  -1 /* shorter than SKYMEM_SEAL_OVERHEAD: not a sealed chunk */
#define SKYMEM_SEAL_E_KEY    -2 /* names a key id the table does not hold (retired, another ground's) */
#define SKYMEM_SEAL_E_TAG    -3 /* the tag does not match: altered, or not this chunk of this block */
#define SKYMEM_SEAL_E_CRYPTO -4 /* libcrypto failed (no randomness, out of memory): nothing about the chunk */
#define SKYMEM_SEAL_E_ARG    -5

/* A table's copy and one cipher context (EVP_CIPHER_CTX), reused chunk after chunk: the key is loaded
 * again only when a chunk names another id. One thread at a time. */
typedef struct skymem_seal_ctx skymem_seal_ctx_t;

/* NULL when the table is not valid (no key, too many, an id twice) or out of memory. */
skymem_seal_ctx_t *skymem_seal_ctx_new(const skymem_seal_keys_t *keys);
/* Wipes the keys' copy. NULL is fine. */
void skymem_seal_ctx_free(skymem_seal_ctx_t *c);
/* SKYMEM_SEAL_OK when the table is usable (see skymem_seal_keys_t), SKYMEM_SEAL_E_ARG otherwise. */
int skymem_seal_keys_check(const skymem_seal_keys_t *keys);

/* Chunks of a block of n_bytes content sealed into chunks of chunk_bytes on the wire:
 * max(1, ceil(n_bytes / (chunk_bytes - SKYMEM_SEAL_OVERHEAD))); 0 when chunk_bytes <= SKYMEM_SEAL_OVERHEAD
 * or the count does not fit 32 bits. */
uint32_t skymem_seal_chunk_count(uint64_t n_bytes, uint32_t chunk_bytes);

/* Seals plain_len content bytes as chunk `chunk_id` of `chunk_count` of the block (hash: 32 bytes, n_bytes:
 * the block's content size, cut as `layout` says) under keys[0], with the context's next nonce; out (not
 * overlapping plain) receives plain_len + SKYMEM_SEAL_OVERHEAD bytes. SKYMEM_SEAL_OK, SKYMEM_SEAL_E_CRYPTO or
 * SKYMEM_SEAL_E_ARG. */
int skymem_seal_chunk(skymem_seal_ctx_t *c, const uint8_t *hash, uint32_t chunk_id, uint32_t chunk_count,
                      uint64_t n_bytes, const skymem_seal_layout_t *layout, const uint8_t *plain, size_t plain_len,
                      uint8_t *out);

/* Opens a sealed chunk (sealed_len bytes) claimed to be chunk `chunk_id` of `chunk_count` of that block, cut
 * as `layout` says, into out (sealed_len - SKYMEM_SEAL_OVERHEAD bytes, not overlapping sealed). SKYMEM_SEAL_OK, or
 * SKYMEM_SEAL_E_SHORT / _E_KEY / _E_TAG / _E_CRYPTO / _E_ARG. After _E_KEY, _E_TAG or _E_CRYPTO out holds
 * zeros: never content that did not authenticate (GCM decrypts before the tag is checked). */
int skymem_open_chunk(skymem_seal_ctx_t *c, const uint8_t *hash, uint32_t chunk_id, uint32_t chunk_count,
                      uint64_t n_bytes, const skymem_seal_layout_t *layout, const uint8_t *sealed, size_t sealed_len,
                      uint8_t *out);

#endif /* SKYMEM_SEAL_H */
