/*
 * skymem_seal.c -- sealed content with OpenSSL's AES-128-GCM (see skymem_seal.h).
 *
 * One EVP_CIPHER_CTX per context: the cipher is set up once, the key again only
 * when a chunk names another key id than the one loaded (or the direction
 * changes), and each chunk then costs a nonce, its associated data, the bytes
 * and the tag -- a key schedule and GHASH table per 6 KB chunk would be a
 * noticeable share of the work.
 */
#include "skymem_seal.h"

#if defined(__has_include)
#if !__has_include(<openssl/evp.h>)
#error "OpenSSL's headers (openssl/evp.h) are missing: apt-get install libssl-dev (the fast path seals chunks with libcrypto)"
#endif
#endif

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

_Static_assert(SKYMEM_SEAL_OVERHEAD == SKYMEM_SEAL_KEY_ID_LEN + SKYMEM_SEAL_NONCE_LEN + SKYMEM_SEAL_TAG_LEN,
               "a sealed chunk is key id | nonce | ciphertext | tag");

#define AAD_PREFIX     "skymemory seal v2" /* and its NUL: 18 bytes */
#define AAD_PREFIX_LEN 18u
#define AAD_LEN        (AAD_PREFIX_LEN + 32u + 4u + 4u + 8u + 4u + 3u * 4u)
#define HEAD_LEN       (SKYMEM_SEAL_KEY_ID_LEN + SKYMEM_SEAL_NONCE_LEN) /* before the ciphertext */

struct skymem_seal_ctx {
    EVP_CIPHER_CTX *evp;
    int loaded; /* index of the key in evp, -1: none (set up the cipher first) */
    int enc;    /* direction loaded: 1 seal, 0 open */
    skymem_seal_keys_t keys;
    uint8_t nonce_base[SKYMEM_SEAL_NONCE_LEN]; /* random, drawn once; chunk k's nonce adds k to its low 64 bits */
    uint64_t sealed;                           /* chunks sealed so far by this context */
};

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void make_aad(uint8_t aad[AAD_LEN], const uint8_t *hash, uint32_t chunk_id, uint32_t chunk_count,
                     uint64_t n_bytes, uint32_t key_id, const skymem_seal_layout_t *layout)
{
    uint8_t *p = aad;
    memcpy(p, AAD_PREFIX, AAD_PREFIX_LEN); /* the string literal's NUL included */
    p += AAD_PREFIX_LEN;
    memcpy(p, hash, 32);
    p += 32;
    put_u32(p, chunk_id);
    put_u32(p + 4, chunk_count);
    put_u32(p + 8, (uint32_t)(n_bytes >> 32));
    put_u32(p + 12, (uint32_t)n_bytes);
    put_u32(p + 16, key_id);
    put_u32(p + 20, layout->chunk_bytes);
    put_u32(p + 24, layout->stripe_k);
    put_u32(p + 28, layout->stripe_m);
}

int skymem_seal_keys_check(const skymem_seal_keys_t *keys)
{
    if (!keys || keys->n_keys == 0 || keys->n_keys > SKYMEM_SEAL_MAX_KEYS)
        return SKYMEM_SEAL_E_ARG;
    for (uint32_t i = 0; i < keys->n_keys; i++)
        for (uint32_t j = 0; j < i; j++)
            if (keys->keys[i].id == keys->keys[j].id)
                return SKYMEM_SEAL_E_ARG; /* which key would open a chunk naming it? */
    return SKYMEM_SEAL_OK;
}

skymem_seal_ctx_t *skymem_seal_ctx_new(const skymem_seal_keys_t *keys)
{
    if (skymem_seal_keys_check(keys) != SKYMEM_SEAL_OK)
        return NULL;
    skymem_seal_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->evp = EVP_CIPHER_CTX_new();
    if (!c->evp) {
        free(c);
        return NULL;
    }
    c->loaded = -1;
    c->keys = *keys;
    if (RAND_bytes(c->nonce_base, (int)sizeof c->nonce_base) != 1) {
        skymem_seal_ctx_free(c);
        return NULL;
    }
    return c;
}

/* The next nonce of this context: its base with the count of chunks sealed so far added to the low 64 bits. */
static void next_nonce(skymem_seal_ctx_t *c, uint8_t *nonce)
{
    uint64_t low = 0;
    for (int i = 4; i < 12; i++)
        low = low << 8 | c->nonce_base[i];
    low += c->sealed++;
    memcpy(nonce, c->nonce_base, 4);
    for (int i = 11; i >= 4; i--, low >>= 8)
        nonce[i] = (uint8_t)low;
}

void skymem_seal_ctx_free(skymem_seal_ctx_t *c)
{
    if (!c)
        return;
    EVP_CIPHER_CTX_free(c->evp); /* wipes the key schedule */
    OPENSSL_cleanse(&c->keys, sizeof c->keys);
    free(c);
}

uint32_t skymem_seal_chunk_count(uint64_t n_bytes, uint32_t chunk_bytes)
{
    if (chunk_bytes <= SKYMEM_SEAL_OVERHEAD)
        return 0;
    uint64_t plain = chunk_bytes - SKYMEM_SEAL_OVERHEAD;
    uint64_t n = n_bytes / plain + (n_bytes % plain != 0);
    return n == 0 ? 1u : n > UINT32_MAX ? 0u : (uint32_t)n;
}

/* Readies the context for one chunk under key `idx`, direction `enc`, nonce `iv`. */
static int load(skymem_seal_ctx_t *c, int idx, int enc, const uint8_t *iv)
{
    if (c->loaded == idx && c->enc == enc) /* same key: only the nonce is new */
        return EVP_CipherInit_ex(c->evp, NULL, NULL, NULL, iv, enc) == 1 ? SKYMEM_SEAL_OK : SKYMEM_SEAL_E_CRYPTO;
    if (c->loaded < 0 && (EVP_CipherInit_ex(c->evp, EVP_aes_128_gcm(), NULL, NULL, NULL, enc) != 1 ||
                          EVP_CIPHER_CTX_ctrl(c->evp, EVP_CTRL_GCM_SET_IVLEN, (int)SKYMEM_SEAL_NONCE_LEN, NULL) != 1))
        return SKYMEM_SEAL_E_CRYPTO;
    if (EVP_CipherInit_ex(c->evp, NULL, NULL, c->keys.keys[idx].key, iv, enc) != 1) {
        c->loaded = -1;
        return SKYMEM_SEAL_E_CRYPTO;
    }
    c->loaded = idx;
    c->enc = enc;
    return SKYMEM_SEAL_OK;
}

int skymem_seal_chunk(skymem_seal_ctx_t *c, const uint8_t *hash, uint32_t chunk_id, uint32_t chunk_count,
                      uint64_t n_bytes, const skymem_seal_layout_t *layout, const uint8_t *plain, size_t plain_len,
                      uint8_t *out)
{
    if (!c || !hash || !layout || !out || (!plain && plain_len) || plain_len > (size_t)INT_MAX - SKYMEM_SEAL_OVERHEAD)
        return SKYMEM_SEAL_E_ARG;
    const skymem_seal_key_t *k = &c->keys.keys[0];
    uint8_t aad[AAD_LEN], fin[16];
    uint8_t *ct = out + HEAD_LEN, *tag = ct + plain_len;
    int n;
    put_u32(out, k->id);
    next_nonce(c, out + SKYMEM_SEAL_KEY_ID_LEN);
    make_aad(aad, hash, chunk_id, chunk_count, n_bytes, k->id, layout);
    if (load(c, 0, 1, out + SKYMEM_SEAL_KEY_ID_LEN) != SKYMEM_SEAL_OK ||
        EVP_EncryptUpdate(c->evp, NULL, &n, aad, (int)AAD_LEN) != 1 ||
        (plain_len && EVP_EncryptUpdate(c->evp, ct, &n, plain, (int)plain_len) != 1) ||
        EVP_EncryptFinal_ex(c->evp, fin, &n) != 1 || /* GCM writes nothing there */
        EVP_CIPHER_CTX_ctrl(c->evp, EVP_CTRL_GCM_GET_TAG, (int)SKYMEM_SEAL_TAG_LEN, tag) != 1) {
        c->loaded = -1; /* start over next time */
        return SKYMEM_SEAL_E_CRYPTO;
    }
    return SKYMEM_SEAL_OK;
}

int skymem_open_chunk(skymem_seal_ctx_t *c, const uint8_t *hash, uint32_t chunk_id, uint32_t chunk_count,
                      uint64_t n_bytes, const skymem_seal_layout_t *layout, const uint8_t *sealed, size_t sealed_len,
                      uint8_t *out)
{
    if (!c || !hash || !layout || (!sealed && sealed_len) || sealed_len > (size_t)INT_MAX)
        return SKYMEM_SEAL_E_ARG;
    if (sealed_len < SKYMEM_SEAL_OVERHEAD)
        return SKYMEM_SEAL_E_SHORT;
    size_t plain_len = sealed_len - SKYMEM_SEAL_OVERHEAD;
    if (!out && plain_len)
        return SKYMEM_SEAL_E_ARG;
    uint32_t key_id = get_u32(sealed);
    int idx = -1;
    for (uint32_t i = 0; i < c->keys.n_keys; i++) /* the id is public: it travels in the clear */
        if (c->keys.keys[i].id == key_id)
            idx = (int)i;
    if (idx < 0) {
        if (plain_len)
            memset(out, 0, plain_len);
        return SKYMEM_SEAL_E_KEY;
    }
    uint8_t aad[AAD_LEN], tag[SKYMEM_SEAL_TAG_LEN], fin[16];
    int n, rc = SKYMEM_SEAL_OK;
    memcpy(tag, sealed + HEAD_LEN + plain_len, sizeof tag); /* SET_TAG takes a non-const pointer */
    make_aad(aad, hash, chunk_id, chunk_count, n_bytes, key_id, layout);
    if (load(c, idx, 0, sealed + SKYMEM_SEAL_KEY_ID_LEN) != SKYMEM_SEAL_OK ||
        EVP_DecryptUpdate(c->evp, NULL, &n, aad, (int)AAD_LEN) != 1 ||
        (plain_len && EVP_DecryptUpdate(c->evp, out, &n, sealed + HEAD_LEN, (int)plain_len) != 1) ||
        EVP_CIPHER_CTX_ctrl(c->evp, EVP_CTRL_GCM_SET_TAG, (int)SKYMEM_SEAL_TAG_LEN, tag) != 1) {
        c->loaded = -1;
        rc = SKYMEM_SEAL_E_CRYPTO;
    } else if (EVP_DecryptFinal_ex(c->evp, fin, &n) != 1) { /* the tag, compared in constant time */
        rc = SKYMEM_SEAL_E_TAG;
    }
    if (rc != SKYMEM_SEAL_OK && plain_len)
        OPENSSL_cleanse(out, plain_len); /* GCM wrote the content before the tag was checked: none of it leaves */
    return rc;
}
