/* skymem_polyval.c -- POLYVAL (RFC 8452): portable C, x86 PCLMULQDQ / AVX-512 VPCLMULQDQ (and, beside
 * the latter, a CRC32C in the same pass), Arm PMULL.
 *
 * A product of two field elements is a 256-bit carry-less product reduced by
 * Montgomery's method (dot multiplies by x^-128): twice, the low 64 bits W0 times
 * the polynomial's x^121 + x^126 + x^127 + x^128 terms are folded into the words
 * above, after which the low 128 bits are zero and the high 128 are the result.
 * Reduction is linear, so a group of m blocks is hashed as
 * (S xor X_1) * H^m + X_2 * H^(m-1) + ... + X_m * H, summed unreduced, then
 * reduced once (S is the running value; the powers carry their own x^-128s).
 */
#include <string.h>

#include "skymem_crc32c.h"
#include "skymem_polyval.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(SKYMEM_POLYVAL_PORTABLE_ONLY)
#define SKYMEM_HAVE_CLMUL 1
#include <cpuid.h>
#include <immintrin.h>
#endif

/* 64-bit Arm (a Jetson, say): PMULL, on Linux where the kernel says the CPU has it. */
#if defined(__aarch64__) && defined(__linux__) && defined(__GNUC__) && !defined(SKYMEM_POLYVAL_PORTABLE_ONLY)
#define SKYMEM_HAVE_PMULL 1
#include <arm_neon.h>
#include <sys/auxv.h>
#ifndef HWCAP_PMULL
#define HWCAP_PMULL (1 << 4)
#endif
#endif

typedef struct {
    uint64_t lo, hi; /* bytes 0-7 and 8-15, little-endian */
} fe_t;

static fe_t fe_load(const uint8_t *p)
{
    fe_t r = {0, 0};
    int i;
    for (i = 7; i >= 0; i--) {
        r.lo = (r.lo << 8) | p[i];
        r.hi = (r.hi << 8) | p[8 + i];
    }
    return r;
}

static void fe_store(uint8_t *p, fe_t a)
{
    int i;
    for (i = 0; i < 8; i++) {
        p[i] = (uint8_t)(a.lo >> (8 * i));
        p[8 + i] = (uint8_t)(a.hi >> (8 * i));
    }
}

/* ---- portable: constant-time carry-less multiply from integer multiplies ---------------------
 * Keeping every fourth bit of each operand leaves gaps wide enough that the integer products'
 * carries never reach the next kept bit (BearSSL's bmul64): the low 64 bits of x * y carry-less.
 * The high 64 are the low 64 of the bit-reversed operands' product, reversed back. */
static uint64_t bmul64(uint64_t x, uint64_t y)
{
    const uint64_t m0 = 0x1111111111111111u, m1 = 0x2222222222222222u, m2 = 0x4444444444444444u,
                   m3 = 0x8888888888888888u;
    uint64_t x0 = x & m0, x1 = x & m1, x2 = x & m2, x3 = x & m3;
    uint64_t y0 = y & m0, y1 = y & m1, y2 = y & m2, y3 = y & m3;
    uint64_t z0 = (x0 * y0) ^ (x1 * y3) ^ (x2 * y2) ^ (x3 * y1);
    uint64_t z1 = (x0 * y1) ^ (x1 * y0) ^ (x2 * y3) ^ (x3 * y2);
    uint64_t z2 = (x0 * y2) ^ (x1 * y1) ^ (x2 * y0) ^ (x3 * y3);
    uint64_t z3 = (x0 * y3) ^ (x1 * y2) ^ (x2 * y1) ^ (x3 * y0);
    return (z0 & m0) | (z1 & m1) | (z2 & m2) | (z3 & m3);
}

static uint64_t rev64(uint64_t x)
{
    x = ((x & 0x5555555555555555u) << 1) | ((x >> 1) & 0x5555555555555555u);
    x = ((x & 0x3333333333333333u) << 2) | ((x >> 2) & 0x3333333333333333u);
    x = ((x & 0x0F0F0F0F0F0F0F0Fu) << 4) | ((x >> 4) & 0x0F0F0F0F0F0F0F0Fu);
    x = ((x & 0x00FF00FF00FF00FFu) << 8) | ((x >> 8) & 0x00FF00FF00FF00FFu);
    x = ((x & 0x0000FFFF0000FFFFu) << 16) | ((x >> 16) & 0x0000FFFF0000FFFFu);
    return (x << 32) | (x >> 32);
}

/* (hi, lo) = x * y carry-less */
static void clmul64(uint64_t x, uint64_t y, uint64_t *lo, uint64_t *hi)
{
    *lo = bmul64(x, y);
    *hi = rev64(bmul64(rev64(x), rev64(y))) >> 1;
}

static fe_t dot_portable(fe_t a, fe_t b)
{
    uint64_t w0, w1, w2, w3, m0, m1;
    fe_t r;
    clmul64(a.lo, b.lo, &w0, &w1);
    clmul64(a.hi, b.hi, &w2, &w3);
    clmul64(a.lo ^ a.hi, b.lo ^ b.hi, &m0, &m1); /* Karatsuba: the middle term from three products */
    m0 ^= w0 ^ w2;
    m1 ^= w1 ^ w3;
    w1 ^= m0;
    w2 ^= m1;
    w1 ^= (w0 << 57) ^ (w0 << 62) ^ (w0 << 63); /* fold W0, then W1 */
    w2 ^= w0 ^ (w0 >> 7) ^ (w0 >> 2) ^ (w0 >> 1);
    w2 ^= (w1 << 57) ^ (w1 << 62) ^ (w1 << 63);
    w3 ^= w1 ^ (w1 >> 7) ^ (w1 >> 2) ^ (w1 >> 1);
    r.lo = w2;
    r.hi = w3;
    return r;
}

static void blocks_portable(const skymem_polyval_key_t *k, uint8_t acc[16], const uint8_t *p, size_t n)
{
    fe_t s = fe_load(acc), h = fe_load(k->pow[SKYMEM_POLYVAL_POWERS - 1]);
    for (; n; n--, p += SKYMEM_POLYVAL_BLOCK) {
        fe_t x = fe_load(p);
        x.lo ^= s.lo;
        x.hi ^= s.hi;
        s = dot_portable(x, h);
    }
    fe_store(acc, s);
}

#ifdef SKYMEM_HAVE_CLMUL
#define CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))
#define VCLMUL_TARGET __attribute__((target("pclmul,sse4.1,avx2,avx512f,vpclmulqdq")))

/* hi xor (lo times x^-128), lo and hi the two halves of an unreduced product sum */
CLMUL_TARGET static __m128i reduce(__m128i lo, __m128i hi)
{
    const __m128i poly = _mm_set_epi64x((long long)0xc200000000000000ull, 1); /* x^57 + x^62 + x^63 */
    lo = _mm_xor_si128(_mm_shuffle_epi32(lo, 0x4E), _mm_clmulepi64_si128(lo, poly, 0x10));
    lo = _mm_xor_si128(_mm_shuffle_epi32(lo, 0x4E), _mm_clmulepi64_si128(lo, poly, 0x10));
    return _mm_xor_si128(hi, lo);
}

/* The sums lo, mid, hi of the partial products of one group, reduced. */
CLMUL_TARGET static __m128i finish(__m128i lo, __m128i mid, __m128i hi)
{
    lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
    hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
    return reduce(lo, hi);
}

/* One group of m <= SKYMEM_POLYVAL_POWERS blocks, one block per step. */
CLMUL_TARGET static __m128i group_clmul(const skymem_polyval_key_t *k, __m128i s, const uint8_t *p, size_t m)
{
    const uint8_t *pow = k->pow[SKYMEM_POLYVAL_POWERS - m];
    __m128i lo = _mm_setzero_si128(), mid = lo, hi = lo;
    size_t j;
    for (j = 0; j < m; j++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(p + 16 * j));
        __m128i h = _mm_loadu_si128((const __m128i *)(pow + 16 * j));
        if (j == 0) x = _mm_xor_si128(x, s);
        lo = _mm_xor_si128(lo, _mm_clmulepi64_si128(x, h, 0x00));
        hi = _mm_xor_si128(hi, _mm_clmulepi64_si128(x, h, 0x11));
        mid = _mm_xor_si128(mid, _mm_clmulepi64_si128(x, h, 0x01));
        mid = _mm_xor_si128(mid, _mm_clmulepi64_si128(x, h, 0x10));
    }
    return finish(lo, mid, hi);
}

CLMUL_TARGET static void blocks_clmul(const skymem_polyval_key_t *k, uint8_t acc[16], const uint8_t *p, size_t n)
{
    __m128i s = _mm_loadu_si128((const __m128i *)acc);
    while (n) {
        size_t m = n < SKYMEM_POLYVAL_POWERS ? n : SKYMEM_POLYVAL_POWERS;
        s = group_clmul(k, s, p, m);
        p += 16 * m;
        n -= m;
    }
    _mm_storeu_si128((__m128i *)acc, s);
}

/* The four 128-bit lanes of v xored together. */
VCLMUL_TARGET static __m128i lanes_xor(__m512i v)
{
    __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* One whole group of 32 blocks, four at a time (eight 64-byte vectors). The products that do not
 * wait for s come first, so they overlap the previous group's reduction. */
VCLMUL_TARGET static inline __m128i group_vclmul(const __m512i pw[SKYMEM_POLYVAL_POWERS / 4], __m128i s,
                                                 const uint8_t *p)
{
    __m512i x = _mm512_loadu_si512(p + 64), lo, mid, hi;
    int r;
    lo = _mm512_clmulepi64_epi128(x, pw[1], 0x00);
    hi = _mm512_clmulepi64_epi128(x, pw[1], 0x11);
    mid = _mm512_xor_si512(_mm512_clmulepi64_epi128(x, pw[1], 0x01), _mm512_clmulepi64_epi128(x, pw[1], 0x10));
    for (r = 2; r <= (int)(SKYMEM_POLYVAL_POWERS / 4); r++) {
        int i = r % (int)(SKYMEM_POLYVAL_POWERS / 4); /* the last round is vector 0, with s */
        x = _mm512_loadu_si512(p + 64 * i);
        if (i == 0) x = _mm512_xor_si512(x, _mm512_zextsi128_si512(s));
        lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(x, pw[i], 0x00));
        hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(x, pw[i], 0x11));
        mid = _mm512_ternarylogic_epi64(mid, _mm512_clmulepi64_epi128(x, pw[i], 0x01),
                                        _mm512_clmulepi64_epi128(x, pw[i], 0x10), 0x96); /* a^b^c */
    }
    return finish(lanes_xor(lo), lanes_xor(mid), lanes_xor(hi));
}

VCLMUL_TARGET static void load_powers(const skymem_polyval_key_t *k, __m512i pw[SKYMEM_POLYVAL_POWERS / 4])
{
    int r;
    for (r = 0; r < (int)(SKYMEM_POLYVAL_POWERS / 4); r++) pw[r] = _mm512_loadu_si512(k->pow[4 * r]);
}

/* Whole groups with group_vclmul, the rest as blocks_clmul. */
VCLMUL_TARGET static void blocks_vclmul(const skymem_polyval_key_t *k, uint8_t acc[16], const uint8_t *p, size_t n)
{
    __m128i s = _mm_loadu_si128((const __m128i *)acc);
    __m512i pw[SKYMEM_POLYVAL_POWERS / 4];
    load_powers(k, pw);
    for (; n >= SKYMEM_POLYVAL_POWERS; n -= SKYMEM_POLYVAL_POWERS, p += 16 * SKYMEM_POLYVAL_POWERS)
        s = group_vclmul(pw, s, p);
    _mm256_zeroupper(); /* the rest is SSE code: leaving the upper halves dirty would slow every instruction */
    if (n) s = group_clmul(k, s, p, n);
    _mm_storeu_si128((__m128i *)acc, s);
}

#ifdef __x86_64__
#define SKYMEM_HAVE_FUSED_CRC 1
#define FUSED_TARGET __attribute__((target("pclmul,sse4.1,sse4.2,avx2,avx512f,vpclmulqdq")))

/* Up to `qwords` steps of the CRC instruction's chain over *cp (8 bytes each). */
FUSED_TARGET static uint64_t crc_steps(uint64_t c, const uint8_t **cp, size_t *clen, size_t qwords)
{
    for (; qwords && *clen >= 8u; qwords--, *cp += 8, *clen -= 8u) {
        uint64_t v;
        memcpy(&v, *cp, 8u);
        c = _mm_crc32_u64(c, v);
    }
    return c;
}

/* blocks_vclmul with the CRC's steps for a group's worth of bytes before each group: the CRC chain
 * (3 cycles a step) sets the pace and the multiplies, independent of it, run in its shadow. */
FUSED_TARGET static void blocks_vclmul_crc(const skymem_polyval_key_t *k, uint8_t acc[16], const uint8_t *p,
                                           size_t n, const uint8_t *cp, size_t clen, uint32_t *crc)
{
    __m128i s = _mm_loadu_si128((const __m128i *)acc);
    __m512i pw[SKYMEM_POLYVAL_POWERS / 4];
    uint64_t c = (uint32_t)~*crc;
    load_powers(k, pw);
    for (; n >= SKYMEM_POLYVAL_POWERS; n -= SKYMEM_POLYVAL_POWERS, p += 16 * SKYMEM_POLYVAL_POWERS) {
        c = crc_steps(c, &cp, &clen, 2 * SKYMEM_POLYVAL_POWERS);
        s = group_vclmul(pw, s, p);
    }
    _mm256_zeroupper();
    if (n) s = group_clmul(k, s, p, n);
    _mm_storeu_si128((__m128i *)acc, s);
    c = crc_steps(c, &cp, &clen, (size_t)-1);
    *crc = skymem_crc32c_update(~(uint32_t)c, cp, clen); /* the last bytes, under 8 (it inverts in and out) */
}
#endif

static int cpu_clmul_level(void)
{
    unsigned a, b, c, d, xcr0_lo, xcr0_hi;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 1)) || !(c & (1u << 19))) return 0; /* PCLMULQDQ, SSE4.1 */
    if (!(c & (1u << 27)) || __get_cpuid_max(0, NULL) < 7) return 1; /* no OSXSAVE: no AVX state */
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 0xE6u) != 0xE6u) return 1; /* the OS does not save the ZMM registers */
    __cpuid_count(7, 0, a, b, c, d);
    /* AVX2 (ebx 5), AVX-512F (ebx 16), VPCLMULQDQ (ecx 10) */
    return ((b >> 5) & 1u) && ((b >> 16) & 1u) && ((c >> 10) & 1u) ? 2 : 1;
}
#endif

#ifdef SKYMEM_HAVE_PMULL
#define PMULL_TARGET __attribute__((target("+crypto")))

PMULL_TARGET static uint64x2_t pmull_lo(uint64x2_t a, uint64x2_t b)
{
    return vreinterpretq_u64_p128(vmull_p64((poly64_t)vgetq_lane_u64(a, 0), (poly64_t)vgetq_lane_u64(b, 0)));
}

PMULL_TARGET static uint64x2_t pmull_hi(uint64x2_t a, uint64x2_t b)
{
    return vreinterpretq_u64_p128(vmull_p64((poly64_t)vgetq_lane_u64(a, 1), (poly64_t)vgetq_lane_u64(b, 1)));
}

static uint64x2_t swap_halves(uint64x2_t a) { return vextq_u64(a, a, 1); }

/* As group_clmul: m <= SKYMEM_POLYVAL_POWERS blocks times descending powers, one reduction. */
PMULL_TARGET static uint64x2_t group_pmull(const skymem_polyval_key_t *k, uint64x2_t s, const uint8_t *p, size_t m)
{
    const uint8_t *pow = k->pow[SKYMEM_POLYVAL_POWERS - m];
    const uint64x2_t poly = vcombine_u64(vcreate_u64(0xc200000000000000ull), vcreate_u64(0)); /* x^57+x^62+x^63 */
    const uint64x2_t zero = vdupq_n_u64(0);
    uint64x2_t lo = zero, mid = zero, hi = zero;
    size_t j;
    for (j = 0; j < m; j++) {
        uint64x2_t x = vreinterpretq_u64_u8(vld1q_u8(p + 16 * j)), h = vreinterpretq_u64_u8(vld1q_u8(pow + 16 * j));
        if (j == 0) x = veorq_u64(x, s);
        lo = veorq_u64(lo, pmull_lo(x, h));
        hi = veorq_u64(hi, pmull_hi(x, h));
        h = swap_halves(h);
        mid = veorq_u64(mid, veorq_u64(pmull_lo(x, h), pmull_hi(x, h)));
    }
    lo = veorq_u64(lo, vextq_u64(zero, mid, 1)); /* mid's low half up into lo's high half */
    hi = veorq_u64(hi, vextq_u64(mid, zero, 1)); /* mid's high half down into hi's low half */
    lo = veorq_u64(swap_halves(lo), pmull_lo(lo, poly));
    lo = veorq_u64(swap_halves(lo), pmull_lo(lo, poly));
    return veorq_u64(hi, lo);
}

PMULL_TARGET static void blocks_pmull(const skymem_polyval_key_t *k, uint8_t acc[16], const uint8_t *p, size_t n)
{
    uint64x2_t s = vreinterpretq_u64_u8(vld1q_u8(acc));
    while (n) {
        size_t m = n < SKYMEM_POLYVAL_POWERS ? n : SKYMEM_POLYVAL_POWERS;
        s = group_pmull(k, s, p, m);
        p += 16 * m;
        n -= m;
    }
    vst1q_u8(acc, vreinterpretq_u8_u64(s));
}
#endif

static int fused_crc; /* blocks_vclmul_crc usable: level 2 in use and SSE4.2 */

typedef void (*blocks_fn_t)(const skymem_polyval_key_t *k, uint8_t acc[16], const uint8_t *p, size_t n);
static blocks_fn_t blocks_fn; /* chosen on first use, or by skymem_polyval_use_accel */
static int level_in_use;

int skymem_polyval_use_accel(int level)
{
    int have = 0;
#ifdef SKYMEM_HAVE_CLMUL
    have = cpu_clmul_level();
#endif
#ifdef SKYMEM_HAVE_PMULL
    have = (getauxval(AT_HWCAP) & HWCAP_PMULL) ? 1 : 0;
#endif
    level_in_use = level < have ? level : have;
    if (level_in_use < 0) level_in_use = 0;
    blocks_fn = blocks_portable;
    fused_crc = 0;
#ifdef SKYMEM_HAVE_CLMUL
    if (level_in_use == 1) blocks_fn = blocks_clmul;
    if (level_in_use == 2) blocks_fn = blocks_vclmul;
#endif
#ifdef SKYMEM_HAVE_FUSED_CRC
    {
        unsigned a, b, c, d;
        fused_crc = level_in_use == 2 && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 20)); /* SSE4.2 */
    }
#endif
#ifdef SKYMEM_HAVE_PMULL
    if (level_in_use == 1) blocks_fn = blocks_pmull;
#endif
    return level_in_use;
}

const char *skymem_polyval_impl(void)
{
#ifdef SKYMEM_HAVE_PMULL
    static const char *const names[] = {"portable C", "Arm PMULL", "Arm PMULL"};
#else
    static const char *const names[] = {"portable C", "x86 PCLMULQDQ", "x86 AVX-512 VPCLMULQDQ"};
#endif
    if (blocks_fn == NULL) skymem_polyval_use_accel(2);
    return names[level_in_use];
}

void skymem_polyval_blocks(const skymem_polyval_key_t *k, uint8_t acc[16], const uint8_t *p, size_t n)
{
    if (blocks_fn == NULL) skymem_polyval_use_accel(2); /* a race here only picks the same function twice */
    blocks_fn(k, acc, p, n);
}

int skymem_polyval_crc32c_fused(void)
{
    if (blocks_fn == NULL) skymem_polyval_use_accel(2);
    return fused_crc;
}

void skymem_polyval_blocks_crc32c(const skymem_polyval_key_t *k, uint8_t acc[16], const uint8_t *p, size_t n,
                                  const uint8_t *crc_data, size_t crc_len, uint32_t *crc)
{
#ifdef SKYMEM_HAVE_FUSED_CRC
    if (skymem_polyval_crc32c_fused()) {
        blocks_vclmul_crc(k, acc, p, n, crc_data, crc_len, crc);
        return;
    }
#endif
    skymem_polyval_blocks(k, acc, p, n);
    *crc = skymem_crc32c_update(*crc, crc_data, crc_len);
}

void skymem_polyval_init(skymem_polyval_key_t *k, const uint8_t h[16])
{
    fe_t hh = fe_load(h), pw = hh;
    int i;
    fe_store(k->pow[SKYMEM_POLYVAL_POWERS - 1], hh);
    for (i = (int)SKYMEM_POLYVAL_POWERS - 2; i >= 0; i--) {
        pw = dot_portable(pw, hh);
        fe_store(k->pow[i], pw);
    }
}
