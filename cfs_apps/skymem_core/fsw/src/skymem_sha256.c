/* skymem_sha256.c -- SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104).
 *
 * The compression function has two implementations: portable C99, and on x86 the
 * CPU's SHA extensions (SHA-NI: sha256rnds2 / sha256msg1 / sha256msg2), about ten
 * times faster, chosen once at run time when CPUID says the CPU has them. The
 * SHA-NI code is compiled with a per-function target attribute, so the file needs
 * no special flags and still builds (portable only) for any other CPU or compiler.
 * Tested against the FIPS 180-2 examples and RFC 4231 in tests/c/test_auth.c, both
 * implementations, and against each other on random input.
 */
#include <string.h>

#include "skymem_sha256.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(SKYMEM_SHA256_PORTABLE_ONLY)
#define SKYMEM_HAVE_SHANI 1
#include <cpuid.h>
#include <immintrin.h>
#endif

static const uint32_t K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void compress_portable(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, hh, t1, t2;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = ((uint32_t)p[4 * i] << 24) | ((uint32_t)p[4 * i + 1] << 16) | ((uint32_t)p[4 * i + 2] << 8) | p[4 * i + 3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = h[0]; b = h[1]; c = h[2]; d = h[3]; e = h[4]; f = h[5]; g = h[6]; hh = h[7];
    for (i = 0; i < 64; i++) {
        t1 = hh + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

static void blocks_portable(uint32_t h[8], const uint8_t *p, size_t n)
{
    for (; n; n--, p += SKYMEM_SHA256_BLOCK) compress_portable(h, p);
}

#ifdef SKYMEM_HAVE_SHANI
/* Four rounds per step on the state held as ABEF / CDGH; the message schedule four words at a time:
 * W[i] = msg2(msg1(W[i-4], W[i-3]) + (W[i-1]:W[i-2] >> 4 bytes), W[i-1]). */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_shani(uint32_t h[8], const uint8_t *p, size_t n)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i abef, cdgh, tmp, w[4], msg, abef0, cdgh0;
    int i;
    tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xB1);  /* C D A B */
    cdgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1B); /* E F G H */
    abef = _mm_alignr_epi8(tmp, cdgh, 8);                                      /* A B E F */
    cdgh = _mm_blend_epi16(cdgh, tmp, 0xF0);                                   /* C D G H */
    for (; n; n--, p += SKYMEM_SHA256_BLOCK) {
        abef0 = abef;
        cdgh0 = cdgh;
        for (i = 0; i < 16; i++) {
            if (i < 4) {
                w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
            } else {
                __m128i next = _mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]);
                next = _mm_add_epi32(next, _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
                w[i & 3] = _mm_sha256msg2_epu32(next, w[(i + 3) & 3]);
            }
            msg = _mm_add_epi32(w[i & 3], _mm_loadu_si128((const __m128i *)&K[4 * i]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, msg);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(msg, 0x0E));
        }
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    tmp = _mm_shuffle_epi32(abef, 0x1B);             /* F E B A */
    cdgh = _mm_shuffle_epi32(cdgh, 0xB1);            /* D C H G */
    abef = _mm_blend_epi16(tmp, cdgh, 0xF0);         /* D C B A */
    cdgh = _mm_alignr_epi8(cdgh, tmp, 8);            /* H G F E */
    _mm_storeu_si128((__m128i *)&h[0], abef);
    _mm_storeu_si128((__m128i *)&h[4], cdgh);
}

static int cpu_has_shani(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 9)) || !(c & (1u << 19))) return 0; /* SSSE3, SSE4.1 */
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return (b >> 29) & 1u; /* SHA */
}
#endif

/* The implementation in use: chosen on first use (or by skymem_sha256_use_accel). */
static void (*blocks_fn)(uint32_t h[8], const uint8_t *p, size_t n);

int skymem_sha256_use_accel(int on)
{
    blocks_fn = blocks_portable;
#ifdef SKYMEM_HAVE_SHANI
    if (on && cpu_has_shani()) blocks_fn = blocks_shani;
#else
    (void)on;
#endif
    return blocks_fn != blocks_portable;
}

const char *skymem_sha256_impl(void)
{
    if (blocks_fn == NULL) skymem_sha256_use_accel(1);
    return blocks_fn == blocks_portable ? "portable C" : "x86 SHA extensions";
}

static void compress_blocks(uint32_t h[8], const uint8_t *p, size_t n)
{
    if (blocks_fn == NULL) skymem_sha256_use_accel(1); /* a race here only picks the same function twice */
    blocks_fn(h, p, n);
}

void skymem_sha256_init(skymem_sha256_t *c)
{
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(c->h, iv, sizeof iv);
    c->total = 0;
    c->used = 0;
}

void skymem_sha256_update(skymem_sha256_t *c, const uint8_t *data, size_t len)
{
    c->total += len;
    if (c->used) { /* top up the partial block first */
        size_t take = SKYMEM_SHA256_BLOCK - c->used;
        if (take > len) take = len;
        memcpy(c->buf + c->used, data, take);
        c->used += take;
        data += take;
        len -= take;
        if (c->used < SKYMEM_SHA256_BLOCK) return;
        compress_blocks(c->h, c->buf, 1);
        c->used = 0;
    }
    if (len >= SKYMEM_SHA256_BLOCK) {
        size_t n = len / SKYMEM_SHA256_BLOCK;
        compress_blocks(c->h, data, n);
        data += n * SKYMEM_SHA256_BLOCK;
        len -= n * SKYMEM_SHA256_BLOCK;
    }
    if (len) {
        memcpy(c->buf, data, len);
        c->used = len;
    }
}

void skymem_sha256_final(skymem_sha256_t *c, uint8_t out[SKYMEM_SHA256_LEN])
{
    uint64_t bits = c->total * 8u;
    int i;
    c->buf[c->used++] = 0x80u;
    if (c->used > 56) { /* no room for the length: pad out this block */
        memset(c->buf + c->used, 0, SKYMEM_SHA256_BLOCK - c->used);
        compress_blocks(c->h, c->buf, 1);
        c->used = 0;
    }
    memset(c->buf + c->used, 0, 56 - c->used);
    for (i = 0; i < 8; i++) c->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress_blocks(c->h, c->buf, 1);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)c->h[i];
    }
}

void skymem_sha256(const uint8_t *data, size_t len, uint8_t out[SKYMEM_SHA256_LEN])
{
    skymem_sha256_t c;
    skymem_sha256_init(&c);
    skymem_sha256_update(&c, data, len);
    skymem_sha256_final(&c, out);
}

void skymem_hmac_init(skymem_hmac_t *c, const uint8_t *key, size_t key_len)
{
    uint8_t k[SKYMEM_SHA256_BLOCK], ikey[SKYMEM_SHA256_BLOCK], okey[SKYMEM_SHA256_BLOCK];
    size_t i;
    memset(k, 0, sizeof k);
    if (key_len > SKYMEM_SHA256_BLOCK) skymem_sha256(key, key_len, k);
    else if (key_len) memcpy(k, key, key_len);
    for (i = 0; i < SKYMEM_SHA256_BLOCK; i++) {
        ikey[i] = (uint8_t)(k[i] ^ 0x36u);
        okey[i] = (uint8_t)(k[i] ^ 0x5cu);
    }
    skymem_sha256_init(&c->inner);
    skymem_sha256_update(&c->inner, ikey, sizeof ikey);
    skymem_sha256_init(&c->outer);
    skymem_sha256_update(&c->outer, okey, sizeof okey);
}

void skymem_hmac_update(skymem_hmac_t *c, const uint8_t *data, size_t len) { skymem_sha256_update(&c->inner, data, len); }

void skymem_hmac_final(skymem_hmac_t *c, uint8_t out[SKYMEM_SHA256_LEN])
{
    uint8_t ih[SKYMEM_SHA256_LEN];
    skymem_sha256_final(&c->inner, ih);
    skymem_sha256_update(&c->outer, ih, sizeof ih);
    skymem_sha256_final(&c->outer, out);
}

void skymem_hmac_sha256(const uint8_t *key, size_t key_len, const uint8_t *data, size_t len,
                        uint8_t out[SKYMEM_SHA256_LEN])
{
    skymem_hmac_t c;
    skymem_hmac_init(&c, key, key_len);
    skymem_hmac_update(&c, data, len);
    skymem_hmac_final(&c, out);
}
