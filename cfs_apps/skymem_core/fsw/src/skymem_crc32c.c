/* skymem_crc32c.c -- CRC32C (Castagnoli): the CRC32C instructions of x86-64 (SSE4.2) or 64-bit
 * Arm (the CRC extension, on Linux) where the CPU has them, chosen at run time, else software
 * slice-by-8; and CRC combination.
 *
 * Combination: a CRC is linear over GF(2), so crc(A || B) = crc(A) * x^(8|B|) + crc(B)
 * (mod the polynomial; the pre- and post-inversion cancel out). Polynomials are held
 * reflected like the CRC itself: bit 31 is x^0, bit 0 is x^31. */
#include "skymem_crc32c.h"

#include "skymem_crc32c_table.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(SKYMEM_CRC32C_PORTABLE_ONLY)
#define SKYMEM_HAVE_CRC32_INSN 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#if defined(__aarch64__) && defined(__linux__) && defined(__GNUC__) && !defined(SKYMEM_CRC32C_PORTABLE_ONLY)
#define SKYMEM_HAVE_ARM_CRC32 1
#include <arm_acle.h>
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#endif

static uint32_t update_portable(uint32_t crc, const uint8_t *p, size_t len)
{
    crc = ~crc;
    if (p == NULL) return ~crc;
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFFu] ^ crc_table[6][(lo >> 8) & 0xFFu] ^ crc_table[5][(lo >> 16) & 0xFFu] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFFu] ^ crc_table[2][(hi >> 8) & 0xFFu] ^
              crc_table[1][(hi >> 16) & 0xFFu] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--) crc = crc_table[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

#ifdef SKYMEM_HAVE_CRC32_INSN
/* The instruction computes this very CRC, eight bytes a step (about five times slice-by-8). */
__attribute__((target("sse4.2"))) static uint32_t update_sse42(uint32_t crc, const uint8_t *p, size_t len)
{
    uint64_t c = (uint32_t)~crc;
    uint32_t c32;
    if (p == NULL) return crc;
    for (; len >= 8u; p += 8, len -= 8u) {
        uint64_t v;
        memcpy(&v, p, 8u);
        c = _mm_crc32_u64(c, v);
    }
    c32 = (uint32_t)c;
    while (len--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

static int cpu_has_sse42(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 20));
}
#endif

#ifdef SKYMEM_HAVE_ARM_CRC32
/* The same eight bytes a step with Arm's CRC32CX (a Jetson's cores have it). */
__attribute__((target("+crc"))) static uint32_t update_arm(uint32_t crc, const uint8_t *p, size_t len)
{
    uint32_t c = ~crc;
    if (p == NULL) return crc;
    for (; len >= 8u; p += 8, len -= 8u) {
        uint64_t v;
        memcpy(&v, p, 8u);
        c = __crc32cd(c, v);
    }
    while (len--) c = __crc32cb(c, *p++);
    return ~c;
}
#endif

static uint32_t (*update_fn)(uint32_t crc, const uint8_t *p, size_t len); /* chosen on first use */

int skymem_crc32c_use_accel(int on)
{
    update_fn = update_portable;
#ifdef SKYMEM_HAVE_CRC32_INSN
    if (on && cpu_has_sse42()) update_fn = update_sse42;
#endif
#ifdef SKYMEM_HAVE_ARM_CRC32
    if (on && (getauxval(AT_HWCAP) & HWCAP_CRC32)) update_fn = update_arm;
#endif
    (void)on;
    return update_fn != update_portable;
}

const char *skymem_crc32c_impl(void)
{
    if (update_fn == NULL) skymem_crc32c_use_accel(1);
#ifdef SKYMEM_HAVE_ARM_CRC32
    return update_fn == update_portable ? "portable C" : "Arm CRC32";
#else
    return update_fn == update_portable ? "portable C" : "x86 SSE4.2";
#endif
}

uint32_t skymem_crc32c_update(uint32_t crc, const uint8_t *p, size_t len)
{
    if (update_fn == NULL) skymem_crc32c_use_accel(1); /* a race here only picks the same function twice */
    return update_fn(crc, p, len);
}

uint32_t skymem_crc32c(const uint8_t *data, size_t len) { return skymem_crc32c_update(0, data, len); }

#define CRC32C_POLY 0x82F63B78u

/* a * b modulo the CRC polynomial (both reflected). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    while (m != 0 && a != 0) {
        if (a & m) {
            p ^= b;
            a ^= m;
        }
        m >>= 1;
        b = (b & 1u) ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x^(8n) modulo the polynomial: the operator that appends n zero bytes. */
static uint32_t x8n(uint64_t n)
{
    uint32_t result = 1u << 31; /* x^0 */
    uint32_t square = 1u << 23; /* x^8 */
    while (n) {
        if (n & 1u) result = multmodp(square, result);
        square = multmodp(square, square);
        n >>= 1;
    }
    return result;
}

uint32_t skymem_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    return multmodp(x8n(len_b), crc_a) ^ crc_b;
}

uint32_t skymem_crc32c_fold(const uint32_t *chunk_crcs, uint32_t count, uint32_t chunk_bytes, uint64_t total_len)
{
    uint32_t i, crc, step;
    uint64_t last;
    if (chunk_crcs == NULL || chunk_bytes == 0) return 0;
    if (count != (total_len == 0 ? 1u : (total_len + chunk_bytes - 1u) / chunk_bytes)) return 0;
    crc = chunk_crcs[0];
    step = x8n(chunk_bytes); /* every chunk but the last has the same length: one operator */
    for (i = 1; i + 1 < count; i++) crc = multmodp(step, crc) ^ chunk_crcs[i];
    if (count > 1) {
        last = total_len - (uint64_t)(count - 1u) * chunk_bytes;
        crc = skymem_crc32c_combine(crc, chunk_crcs[count - 1u], last);
    }
    return crc;
}
