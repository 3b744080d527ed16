/* skymem_aes.c -- AES-128 block encryption (FIPS 197): constant-time bitsliced portable C, x86 AES-NI,
 * Arm AES.
 *
 * The portable path is what flight processors run (they have no AES instructions), so it must not
 * leak the key through timing: no table indexed by a secret, no branch on one. It is bitsliced in
 * the manner of BearSSL's aes_ct (T. Pornin), written here afresh:
 *
 *   Layout: the state is eight 32-bit words q[0..7], slice q[i] holding bit i of every byte.
 *   A slice has room for two blocks: before slicing, q[2c + b] is column c of block b, read
 *   little-endian (row r in bits 8r..8r+7); the transposition (slice_transpose) then puts bit i of
 *   the byte at row r, column c of block b at bit 8r + 2c + b of q[i]. One block per call
 *   fills both slots with it.
 *   SubBytes: the 8 slices go through Boyar and Peralta's depth-16 circuit for the S-box
 *     (J. Boyar, R. Peralta, "A depth-16 circuit for the AES S-box", SEC 2012): 34 ANDs and 94
 *     XOR/XNORs computing the inversion in GF(2^8) and the affine map for 32 bytes at once.
 *   ShiftRows: a rotation inside each row's byte of every slice (masks and shifts).
 *   MixColumns: rows are the bytes of a slice, so "the next row" is a rotation by 8 and the
 *     GF(2^8) doubling moves slice i to i + 1, feeding slice 7 back into slices 0, 1, 3, 4 (0x1b).
 *   AddRoundKey: XOR of round keys kept ready in the same layout (skymem_aes128_t.sk).
 * Every operation is the same sequence of word instructions whatever the key and data.
 * Cost: one block is 10 rounds of 128 S-box gates, ~100 ShiftRows and ~60 MixColumns operations and
 * 8 key XORs, plus two transpositions -- about 3,000 word operations, the same for one block or two
 * (BENCHMARKS.md, "Constant-time portable AES"). The key schedule (once per key) uses the same
 * circuit for SubWord and keeps both the FIPS 197 byte round keys (the instruction paths) and the
 * sliced ones.
 */
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

static uint32_t load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* Exchanges the bits of *a selected by mask << shift with those of *b selected by mask. */
static void swap_bits(uint32_t *a, uint32_t *b, uint32_t mask, unsigned shift)
{
    uint32_t t = ((*a >> shift) ^ *b) & mask;
    *b ^= t;
    *a ^= t << shift;
}

/* In every byte position, transposes the 8x8 bit matrix (word index, bit index): bit j of byte r of
 * q[w] and bit w of byte r of q[j] trade places, one bit of the index at a time (d = 1, 2, 4).
 * Its own inverse: it slices and unslices. */
static void slice_transpose(uint32_t q[8])
{
    static const uint32_t low_half[3] = {0x55555555u, 0x33333333u, 0x0F0F0F0Fu};
    unsigned s, i;
    for (s = 0; s < 3; s++) {
        unsigned d = 1u << s;
        for (i = 0; i < 8; i++)
            if (!(i & d)) swap_bits(&q[i], &q[i + d], low_half[s], d);
    }
}

/* SubBytes on every byte of the slices: Boyar-Peralta's depth-16 circuit. U0 is the most
 * significant bit (slice 7), S0 the most significant output bit. */
static void sub_bytes(uint32_t q[8])
{
    uint32_t U0 = q[7], U1 = q[6], U2 = q[5], U3 = q[4], U4 = q[3], U5 = q[2], U6 = q[1], U7 = q[0];
    uint32_t T1, T2, T3, T4, T5, T6, T7, T8, T9, T10, T11, T12, T13, T14, T15, T16, T17, T18, T19, T20, T21,
        T22, T23, T24, T25, T26, T27;
    uint32_t M1, M2, M3, M4, M5, M6, M7, M8, M9, M10, M11, M12, M13, M14, M15, M16, M17, M18, M19, M20, M21,
        M22, M23, M24, M25, M26, M27, M28, M29, M30, M31, M32, M33, M34, M35, M36, M37, M38, M39, M40, M41,
        M42, M43, M44, M45, M46, M47, M48, M49, M50, M51, M52, M53, M54, M55, M56, M57, M58, M59, M60, M61,
        M62, M63;
    uint32_t L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12, L13, L14, L15, L16, L17, L18, L19, L20,
        L21, L22, L23, L24, L25, L26, L27, L28, L29;

    /* top linear layer: 27 sums of input bits */
    T1 = U0 ^ U3;   T2 = U0 ^ U5;   T3 = U0 ^ U6;   T4 = U3 ^ U5;   T5 = U4 ^ U6;
    T6 = T1 ^ T5;   T7 = U1 ^ U2;   T8 = U7 ^ T6;   T9 = U7 ^ T7;   T10 = T6 ^ T7;
    T11 = U1 ^ U5;  T12 = U2 ^ U5;  T13 = T3 ^ T4;  T14 = T6 ^ T11; T15 = T5 ^ T11;
    T16 = T5 ^ T12; T17 = T9 ^ T16; T18 = U3 ^ U7;  T19 = T7 ^ T18; T20 = T1 ^ T19;
    T21 = U6 ^ U7;  T22 = T7 ^ T21; T23 = T2 ^ T22; T24 = T2 ^ T10; T25 = T20 ^ T17;
    T26 = T3 ^ T16; T27 = T1 ^ T12;

    /* middle, non-linear: the inversion in GF(2^8) by way of GF(2^4) */
    M1 = T13 & T6;   M2 = T23 & T8;   M3 = T14 ^ M1;   M4 = T19 & U7;   M5 = M4 ^ M1;
    M6 = T3 & T16;   M7 = T22 & T9;   M8 = T26 ^ M6;   M9 = T20 & T17;  M10 = M9 ^ M6;
    M11 = T1 & T15;  M12 = T4 & T27;  M13 = M12 ^ M11; M14 = T2 & T10;  M15 = M14 ^ M11;
    M16 = M3 ^ M2;   M17 = M5 ^ T24;  M18 = M8 ^ M7;   M19 = M10 ^ M15; M20 = M16 ^ M13;
    M21 = M17 ^ M15; M22 = M18 ^ M13; M23 = M19 ^ T25; M24 = M22 ^ M23; M25 = M22 & M20;
    M26 = M21 ^ M25; M27 = M20 ^ M21; M28 = M23 ^ M25; M29 = M28 & M27; M30 = M26 & M24;
    M31 = M20 & M23; M32 = M27 & M31; M33 = M27 ^ M25; M34 = M21 & M22; M35 = M24 & M34;
    M36 = M24 ^ M25; M37 = M21 ^ M29; M38 = M32 ^ M33; M39 = M23 ^ M30; M40 = M35 ^ M36;
    M41 = M38 ^ M40; M42 = M37 ^ M39; M43 = M37 ^ M38; M44 = M39 ^ M40; M45 = M42 ^ M41;
    M46 = M44 & T6;  M47 = M40 & T8;  M48 = M39 & U7;  M49 = M43 & T16; M50 = M38 & T9;
    M51 = M37 & T17; M52 = M42 & T15; M53 = M45 & T27; M54 = M41 & T10; M55 = M44 & T13;
    M56 = M40 & T23; M57 = M39 & T19; M58 = M43 & T3;  M59 = M38 & T22; M60 = M37 & T20;
    M61 = M42 & T1;  M62 = M45 & T4;  M63 = M41 & T2;

    /* bottom linear layer, with the affine map's constant 0x63 as the four complements */
    L0 = M61 ^ M62;  L1 = M50 ^ M56;  L2 = M46 ^ M48;  L3 = M47 ^ M55;  L4 = M54 ^ M58;
    L5 = M49 ^ M61;  L6 = M62 ^ L5;   L7 = M46 ^ L3;   L8 = M51 ^ M59;  L9 = M52 ^ M53;
    L10 = M53 ^ L4;  L11 = M60 ^ L2;  L12 = M48 ^ M51; L13 = M50 ^ L0;  L14 = M52 ^ M61;
    L15 = M55 ^ L1;  L16 = M56 ^ L0;  L17 = M57 ^ L1;  L18 = M58 ^ L8;  L19 = M63 ^ L4;
    L20 = L0 ^ L1;   L21 = L1 ^ L7;   L22 = L3 ^ L12;  L23 = L18 ^ L2;  L24 = L15 ^ L9;
    L25 = L6 ^ L10;  L26 = L7 ^ L9;   L27 = L8 ^ L10;  L28 = L11 ^ L14; L29 = L11 ^ L17;
    q[7] = L6 ^ L24;    /* S0 */
    q[6] = ~(L16 ^ L26); /* S1 */
    q[5] = ~(L19 ^ L28); /* S2 */
    q[4] = L6 ^ L21;    /* S3 */
    q[3] = L20 ^ L22;   /* S4 */
    q[2] = L25 ^ L29;   /* S5 */
    q[1] = ~(L13 ^ L27); /* S6 */
    q[0] = ~(L6 ^ L23);  /* S7 */
}

/* Row r is byte r of each slice, its bit 2c + b column c of block b: row r moves left by r columns,
 * so that byte rotates right by 2r bits. */
static void shift_rows(uint32_t q[8])
{
    unsigned i;
    for (i = 0; i < 8; i++) {
        uint32_t x = q[i];
        q[i] = (x & 0x000000FFu) | ((x >> 2) & 0x00003F00u) | ((x << 6) & 0x0000C000u) |
               ((x >> 4) & 0x000F0000u) | ((x << 4) & 0x00F00000u) | ((x >> 6) & 0x03000000u) |
               ((x << 2) & 0xFC000000u);
    }
}

static uint32_t rotr32(uint32_t x, unsigned n) { return (x >> n) | (x << (32u - n)); }

/* Row r of a column becomes 2 a_r + 3 a_(r+1) + a_(r+2) + a_(r+3)
 *                         = 2 (a_r + a_(r+1)) + a_(r+1) + (a_(r+2) + a_(r+3)).
 * With n = the state rotated by one row (a_(r+1)) and t = a + n, that is 2t + n + t rotated by two
 * rows; doubling shifts slice i into slice i + 1 and feeds slice 7 back into slices 0, 1, 3, 4. */
static void mix_columns(uint32_t q[8])
{
    uint32_t n[8], t[8];
    unsigned i;
    for (i = 0; i < 8; i++) {
        n[i] = rotr32(q[i], 8);
        t[i] = q[i] ^ n[i];
    }
    q[0] = t[7] ^ n[0] ^ rotr32(t[0], 16);
    q[1] = t[0] ^ t[7] ^ n[1] ^ rotr32(t[1], 16);
    q[2] = t[1] ^ n[2] ^ rotr32(t[2], 16);
    q[3] = t[2] ^ t[7] ^ n[3] ^ rotr32(t[3], 16);
    q[4] = t[3] ^ t[7] ^ n[4] ^ rotr32(t[4], 16);
    q[5] = t[4] ^ n[5] ^ rotr32(t[5], 16);
    q[6] = t[5] ^ n[6] ^ rotr32(t[6], 16);
    q[7] = t[6] ^ n[7] ^ rotr32(t[7], 16);
}

static void add_round_key(uint32_t q[8], const uint32_t sk[8])
{
    unsigned i;
    for (i = 0; i < 8; i++) q[i] ^= sk[i];
}

/* One 16-byte block into the slices, in both slots (the second computes the same block, unused). */
static void slice_block(uint32_t q[8], const uint8_t in[16])
{
    unsigned c;
    for (c = 0; c < 4; c++) q[2 * c] = q[2 * c + 1] = load_le32(in + 4 * c);
    slice_transpose(q);
}

/* SubWord of FIPS 197's key expansion: the word's 4 bytes through the same circuit. */
static void sub_word(uint8_t w[4])
{
    uint32_t q[8];
    unsigned i;
    for (i = 0; i < 8; i++) q[i] = load_le32(w); /* every column of both blocks: byte r lands in row r */
    slice_transpose(q);
    sub_bytes(q);
    slice_transpose(q);
    store_le32(w, q[0]);
}

/* ---- key schedule (FIPS 197 section 5.2), shared by every implementation ---- */
void skymem_aes128_init(skymem_aes128_t *k, const uint8_t key[SKYMEM_AES128_KEY])
{
    uint8_t rcon = 0x01u, w[4];
    unsigned r, i;
    memcpy(k->rk[0], key, SKYMEM_AES128_KEY);
    for (r = 1; r <= SKYMEM_AES128_ROUNDS; r++) {
        const uint8_t *prev = k->rk[r - 1];
        uint8_t *cur = k->rk[r];
        /* first word: RotWord, SubWord, Rcon of the previous round key's last word */
        w[0] = prev[13], w[1] = prev[14], w[2] = prev[15], w[3] = prev[12];
        sub_word(w);
        w[0] ^= rcon;
        for (i = 0; i < 4; i++) cur[i] = (uint8_t)(prev[i] ^ w[i]);
        for (i = 4; i < SKYMEM_AES_BLOCK; i++) cur[i] = (uint8_t)(prev[i] ^ cur[i - 4]);
        rcon = (uint8_t)((rcon << 1) ^ ((rcon >> 7) * 0x1bu)); /* public: the round number only */
    }
    for (r = 0; r <= SKYMEM_AES128_ROUNDS; r++) slice_block(k->sk[r], k->rk[r]);
    memset(w, 0, sizeof w);
}

/* ---- portable: bitsliced, constant time ---- */
void skymem_aes128_encrypt_portable(const skymem_aes128_t *k, const uint8_t in[SKYMEM_AES_BLOCK],
                                    uint8_t out[SKYMEM_AES_BLOCK])
{
    uint32_t q[8];
    unsigned r, c;
    slice_block(q, in);
    add_round_key(q, k->sk[0]);
    for (r = 1; r < SKYMEM_AES128_ROUNDS; r++) {
        sub_bytes(q);
        shift_rows(q);
        mix_columns(q);
        add_round_key(q, k->sk[r]);
    }
    sub_bytes(q);
    shift_rows(q);
    add_round_key(q, k->sk[SKYMEM_AES128_ROUNDS]);
    slice_transpose(q);
    for (c = 0; c < 4; c++) store_le32(out + 4 * c, q[2 * c]);
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
    encrypt_fn = skymem_aes128_encrypt_portable;
#ifdef SKYMEM_HAVE_AESNI
    if (on && cpu_has_aesni()) encrypt_fn = encrypt_aesni;
#endif
#ifdef SKYMEM_HAVE_ARM_AES
    if (on && (getauxval(AT_HWCAP) & HWCAP_AES)) encrypt_fn = encrypt_arm;
#endif
    (void)on;
    return encrypt_fn != skymem_aes128_encrypt_portable;
}

const char *skymem_aes_impl(void)
{
    if (encrypt_fn == NULL) skymem_aes_use_accel(1);
    if (encrypt_fn == skymem_aes128_encrypt_portable) return "portable C, bitsliced";
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
