/* skymem_aes.c -- AES-128 block encryption (FIPS 197): portable C, x86 AES-NI, Arm AES. */
#include <string.h>

#include "skymem_aes.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(SKYMEM_AES_PORTABLE_ONLY)
#define SKYMEM_HAVE_AESNI 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#if defined(__aarch64__) && defined(__linux__) && defined(__GNUC__) && !defined(SKYMEM_AES_PORTABLE_ONLY)
#define SKYMEM_HAVE_ARM_AES 1
#include <arm_neon.h>
#include <sys/auxv.h>
#ifndef HWCAP_AES
#define HWCAP_AES (1 << 3)
#endif
#endif

static const uint8_t SBOX[256] = {
    0x63, 0x7c, 0x77, 0x7b, 0xf2, 0x6b, 0x6f, 0xc5, 0x30, 0x01, 0x67, 0x2b, 0xfe, 0xd7, 0xab, 0x76,
    0xca, 0x82, 0xc9, 0x7d, 0xfa, 0x59, 0x47, 0xf0, 0xad, 0xd4, 0xa2, 0xaf, 0x9c, 0xa4, 0x72, 0xc0,
    0xb7, 0xfd, 0x93, 0x26, 0x36, 0x3f, 0xf7, 0xcc, 0x34, 0xa5, 0xe5, 0xf1, 0x71, 0xd8, 0x31, 0x15,
    0x04, 0xc7, 0x23, 0xc3, 0x18, 0x96, 0x05, 0x9a, 0x07, 0x12, 0x80, 0xe2, 0xeb, 0x27, 0xb2, 0x75,
    0x09, 0x83, 0x2c, 0x1a, 0x1b, 0x6e, 0x5a, 0xa0, 0x52, 0x3b, 0xd6, 0xb3, 0x29, 0xe3, 0x2f, 0x84,
    0x53, 0xd1, 0x00, 0xed, 0x20, 0xfc, 0xb1, 0x5b, 0x6a, 0xcb, 0xbe, 0x39, 0x4a, 0x4c, 0x58, 0xcf,
    0xd0, 0xef, 0xaa, 0xfb, 0x43, 0x4d, 0x33, 0x85, 0x45, 0xf9, 0x02, 0x7f, 0x50, 0x3c, 0x9f, 0xa8,
    0x51, 0xa3, 0x40, 0x8f, 0x92, 0x9d, 0x38, 0xf5, 0xbc, 0xb6, 0xda, 0x21, 0x10, 0xff, 0xf3, 0xd2,
    0xcd, 0x0c, 0x13, 0xec, 0x5f, 0x97, 0x44, 0x17, 0xc4, 0xa7, 0x7e, 0x3d, 0x64, 0x5d, 0x19, 0x73,
    0x60, 0x81, 0x4f, 0xdc, 0x22, 0x2a, 0x90, 0x88, 0x46, 0xee, 0xb8, 0x14, 0xde, 0x5e, 0x0b, 0xdb,
    0xe0, 0x32, 0x3a, 0x0a, 0x49, 0x06, 0x24, 0x5c, 0xc2, 0xd3, 0xac, 0x62, 0x91, 0x95, 0xe4, 0x79,
    0xe7, 0xc8, 0x37, 0x6d, 0x8d, 0xd5, 0x4e, 0xa9, 0x6c, 0x56, 0xf4, 0xea, 0x65, 0x7a, 0xae, 0x08,
    0xba, 0x78, 0x25, 0x2e, 0x1c, 0xa6, 0xb4, 0xc6, 0xe8, 0xdd, 0x74, 0x1f, 0x4b, 0xbd, 0x8b, 0x8a,
    0x70, 0x3e, 0xb5, 0x66, 0x48, 0x03, 0xf6, 0x0e, 0x61, 0x35, 0x57, 0xb9, 0x86, 0xc1, 0x1d, 0x9e,
    0xe1, 0xf8, 0x98, 0x11, 0x69, 0xd9, 0x8e, 0x94, 0x9b, 0x1e, 0x87, 0xe9, 0xce, 0x55, 0x28, 0xdf,
    0x8c, 0xa1, 0x89, 0x0d, 0xbf, 0xe6, 0x42, 0x68, 0x41, 0x99, 0x2d, 0x0f, 0xb0, 0x54, 0xbb, 0x16,
};

/* ---- key schedule (FIPS 197 section 5.2), shared by every implementation ---- */
void skymem_aes128_init(skymem_aes128_t *k, const uint8_t key[SKYMEM_AES128_KEY])
{
    uint8_t rcon = 0x01u;
    unsigned r, i;
    memcpy(k->rk[0], key, SKYMEM_AES128_KEY);
    for (r = 1; r <= SKYMEM_AES128_ROUNDS; r++) {
        const uint8_t *prev = k->rk[r - 1];
        uint8_t *cur = k->rk[r];
        /* first word: RotWord, SubWord, Rcon of the previous round key's last word */
        cur[0] = (uint8_t)(prev[0] ^ SBOX[prev[13]] ^ rcon);
        cur[1] = (uint8_t)(prev[1] ^ SBOX[prev[14]]);
        cur[2] = (uint8_t)(prev[2] ^ SBOX[prev[15]]);
        cur[3] = (uint8_t)(prev[3] ^ SBOX[prev[12]]);
        for (i = 4; i < SKYMEM_AES_BLOCK; i++) cur[i] = (uint8_t)(prev[i] ^ cur[i - 4]);
        rcon = (uint8_t)((rcon << 1) ^ ((rcon >> 7) * 0x1bu));
    }
}

/* ---- portable: the textbook rounds on a column-major 4x4 byte state ---- */
static uint8_t xtime(uint8_t x) { return (uint8_t)((x << 1) ^ ((x >> 7) * 0x1bu)); }

static void encrypt_portable(const skymem_aes128_t *k, const uint8_t in[16], uint8_t out[16])
{
    uint8_t s[16], t[16];
    unsigned r, i, c;
    for (i = 0; i < 16; i++) s[i] = (uint8_t)(in[i] ^ k->rk[0][i]);
    for (r = 1; r <= SKYMEM_AES128_ROUNDS; r++) {
        for (c = 0; c < 4; c++) /* SubBytes and ShiftRows: row i of column c comes from column c + i */
            for (i = 0; i < 4; i++) t[4 * c + i] = SBOX[s[4 * ((c + i) % 4) + i]];
        if (r < SKYMEM_AES128_ROUNDS) {
            for (c = 0; c < 4; c++) { /* MixColumns */
                uint8_t *col = t + 4 * c, a0 = col[0], a1 = col[1], a2 = col[2], a3 = col[3];
                uint8_t all = (uint8_t)(a0 ^ a1 ^ a2 ^ a3);
                col[0] = (uint8_t)(a0 ^ all ^ xtime((uint8_t)(a0 ^ a1)));
                col[1] = (uint8_t)(a1 ^ all ^ xtime((uint8_t)(a1 ^ a2)));
                col[2] = (uint8_t)(a2 ^ all ^ xtime((uint8_t)(a2 ^ a3)));
                col[3] = (uint8_t)(a3 ^ all ^ xtime((uint8_t)(a3 ^ a0)));
            }
        }
        for (i = 0; i < 16; i++) s[i] = (uint8_t)(t[i] ^ k->rk[r][i]);
    }
    memcpy(out, s, 16);
}

#ifdef SKYMEM_HAVE_AESNI
__attribute__((target("aes,sse2"))) static void encrypt_aesni(const skymem_aes128_t *k, const uint8_t in[16],
                                                              uint8_t out[16])
{
    __m128i s = _mm_xor_si128(_mm_loadu_si128((const __m128i *)in), _mm_loadu_si128((const __m128i *)k->rk[0]));
    unsigned r;
    for (r = 1; r < SKYMEM_AES128_ROUNDS; r++) s = _mm_aesenc_si128(s, _mm_loadu_si128((const __m128i *)k->rk[r]));
    s = _mm_aesenclast_si128(s, _mm_loadu_si128((const __m128i *)k->rk[SKYMEM_AES128_ROUNDS]));
    _mm_storeu_si128((__m128i *)out, s);
}

static int cpu_has_aesni(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 25)); /* AES */
}
#endif

#ifdef SKYMEM_HAVE_ARM_AES
/* AESE = AddRoundKey, SubBytes, ShiftRows; AESMC = MixColumns: so the key goes in first */
__attribute__((target("+crypto"))) static void encrypt_arm(const skymem_aes128_t *k, const uint8_t in[16],
                                                           uint8_t out[16])
{
    uint8x16_t s = vld1q_u8(in);
    unsigned r;
    for (r = 0; r + 1 < SKYMEM_AES128_ROUNDS; r++) s = vaesmcq_u8(vaeseq_u8(s, vld1q_u8(k->rk[r])));
    s = vaeseq_u8(s, vld1q_u8(k->rk[SKYMEM_AES128_ROUNDS - 1]));
    vst1q_u8(out, veorq_u8(s, vld1q_u8(k->rk[SKYMEM_AES128_ROUNDS])));
}
#endif

typedef void (*encrypt_fn_t)(const skymem_aes128_t *k, const uint8_t in[16], uint8_t out[16]);
static encrypt_fn_t encrypt_fn; /* chosen on first use, or by skymem_aes_use_accel */

int skymem_aes_use_accel(int on)
{
    encrypt_fn = encrypt_portable;
#ifdef SKYMEM_HAVE_AESNI
    if (on && cpu_has_aesni()) encrypt_fn = encrypt_aesni;
#endif
#ifdef SKYMEM_HAVE_ARM_AES
    if (on && (getauxval(AT_HWCAP) & HWCAP_AES)) encrypt_fn = encrypt_arm;
#endif
    (void)on;
    return encrypt_fn != encrypt_portable;
}

const char *skymem_aes_impl(void)
{
    if (encrypt_fn == NULL) skymem_aes_use_accel(1);
    if (encrypt_fn == encrypt_portable) return "portable C";
#ifdef SKYMEM_HAVE_ARM_AES
    return "Arm AES";
#else
    return "x86 AES-NI";
#endif
}

void skymem_aes128_encrypt(const skymem_aes128_t *k, const uint8_t in[16], uint8_t out[16])
{
    if (encrypt_fn == NULL) skymem_aes_use_accel(1); /* a race here only picks the same function twice */
    encrypt_fn(k, in, out);
}
