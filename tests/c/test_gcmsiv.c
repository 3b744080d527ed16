/* test_gcmsiv.c -- the tag (skymem_auth_mac) against libgcrypt's AES-128-GCM-SIV (RFC 8452), an independent
 * implementation of the same POLYVAL-then-AES construction, at thousands of random packet lengths with every
 * POLYVAL and AES implementation this CPU has; and the portable AES against libgcrypt's AES on random keys.
 *
 * How the two meet: GCM-SIV with no plaintext and the packet as additional data computes
 * S = POLYVAL(H, packet zero-padded || LE64(8 len) || LE64(0)), as the tag does, then its tag is
 * AES_Kenc((S xor nonce) with bit 127 cleared), H and Kenc derived from its key and the nonce. So H and Kenc
 * are derived here as RFC 8452 section 4 says (with libgcrypt's AES) and given to the tag as its keys (K2
 * random); then, with S = libgcrypt's AES_Kenc^-1 of the tag's first half:
 *   libgcrypt's GCM-SIV tag == AES_Kenc((S xor nonce) & ~bit127)  -- 127 bits of S, and AES_Kenc, agree;
 *   the tag's second half == libgcrypt's AES_K2(S).
 * Packets are generated with zeros where the tag takes a relay's bytes as zero (checksum, via, ttl, hops),
 * so the additional data is the packet as it is. Built only where libgcrypt (>= 1.10, GCM-SIV) is found. */
#include <gcrypt.h>
#include <string.h>

#include "check.h"
#include "skymem_aes.h"
#include "skymem_auth.h"
#include "skymem_codec.h"
#include "skymem_polyval.h"

#define MAX_LEN 9000u   /* most lengths are random up to this (a 6 KiB chunk's SET_CHUNK and more) */
#define PER_IMPL 6500u  /* random lengths per (POLYVAL, AES) pair: 4 pairs on x86 with PCLMULQDQ and AES-NI */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t rand32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

static void rand_bytes(uint8_t *p, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) p[i] = (uint8_t)rand32();
}

static void die_gcry(const char *what, gcry_error_t err)
{
    fprintf(stderr, "test_gcmsiv: libgcrypt %s: %s\n", what, gcry_strerror(err));
    exit(EXIT_FAILURE);
}

/* One AES-128 block with libgcrypt (ECB), encrypting or decrypting. */
static void gcry_aes(const uint8_t key[16], const uint8_t in[16], uint8_t out[16], int decrypt)
{
    gcry_cipher_hd_t h;
    gcry_error_t err = gcry_cipher_open(&h, GCRY_CIPHER_AES128, GCRY_CIPHER_MODE_ECB, 0);
    if (err) die_gcry("open AES-128 ECB", err);
    if ((err = gcry_cipher_setkey(h, key, 16))) die_gcry("setkey", err);
    err = decrypt ? gcry_cipher_decrypt(h, out, 16, in, 16) : gcry_cipher_encrypt(h, out, 16, in, 16);
    if (err) die_gcry("AES-128 block", err);
    gcry_cipher_close(h);
}

/* libgcrypt's AES-128-GCM-SIV tag of additional data `ad` with no plaintext. */
static void gcry_gcmsiv_tag(const uint8_t key[16], const uint8_t nonce[12], const uint8_t *ad, size_t len,
                            uint8_t tag[16])
{
    gcry_cipher_hd_t h;
    gcry_error_t err = gcry_cipher_open(&h, GCRY_CIPHER_AES128, GCRY_CIPHER_MODE_GCM_SIV, 0);
    if (err) die_gcry("open AES-128 GCM-SIV", err);
    if ((err = gcry_cipher_setkey(h, key, 16))) die_gcry("setkey", err);
    if ((err = gcry_cipher_setiv(h, nonce, 12))) die_gcry("setiv", err);
    if ((err = gcry_cipher_authenticate(h, ad, len))) die_gcry("authenticate", err);
    if ((err = gcry_cipher_final(h))) die_gcry("final", err);
    if ((err = gcry_cipher_encrypt(h, NULL, 0, NULL, 0))) die_gcry("encrypt (no plaintext)", err);
    if ((err = gcry_cipher_gettag(h, tag, 16))) die_gcry("gettag", err);
    gcry_cipher_close(h);
}

/* RFC 8452 section 4: the message-authentication key H and the message-encryption key of AES-128-GCM-SIV. */
static void derive_keys(const uint8_t key[16], const uint8_t nonce[12], uint8_t h[16], uint8_t kenc[16])
{
    uint8_t in[16], out[16];
    unsigned i;
    memcpy(in + 4, nonce, 12);
    for (i = 0; i < 4; i++) {
        memset(in, 0, 4);
        in[0] = (uint8_t)i; /* LE32(i) */
        gcry_aes(key, in, out, 0);
        memcpy(i < 2 ? h + 8 * i : kenc + 8 * (i - 2), out, 8);
    }
}

/* A command or a reply of `len` bytes, random but for its message id and the bytes the tag zeroes. */
static void random_packet(uint8_t *pkt, size_t len, int reply)
{
    size_t r = reply ? SKYMEM_TLM_HDR_LEN : SKYMEM_CMD_HDR_LEN;
    rand_bytes(pkt, len);
    skymem_put_u16(pkt, reply ? SKYMEM_REPLY_TLM_MID : SKYMEM_DATA_CMD_MID);
    if (!reply) pkt[7] = 0; /* a command's checksum */
    memset(pkt + r + SKYMEM_ROUTE_VIA_PLANE, 0, 4);
    memset(pkt + r + SKYMEM_ROUTE_TTL, 0, 2); /* ttl and hops */
}

/* RFC 8452 Appendix C.1's first AES-128-GCM-SIV example: this test drives libgcrypt right. */
static void test_libgcrypt_known_answer(void)
{
    static const uint8_t key[16] = {1}, nonce[12] = {3};
    static const uint8_t want[16] = {0xdc, 0x20, 0xe2, 0xd8, 0x3f, 0x25, 0x70, 0x5b,
                                     0xb4, 0x9e, 0x43, 0x9e, 0xca, 0x56, 0xde, 0x25};
    uint8_t tag[16];
    gcry_gcmsiv_tag(key, nonce, NULL, 0, tag);
    CHECK(memcmp(tag, want, 16) == 0);
}

/* The portable AES against libgcrypt's on random keys and blocks. */
static void test_portable_aes(void)
{
    static skymem_aes128_t k;
    uint8_t key[16], in[16], a[16], b[16];
    unsigned n, differ = 0;
    for (n = 0; n < 5000; n++) {
        rand_bytes(key, 16);
        rand_bytes(in, 16);
        skymem_aes128_init(&k, key);
        skymem_aes128_encrypt_portable(&k, in, a);
        gcry_aes(key, in, b, 0);
        differ += memcmp(a, b, 16) != 0;
    }
    CHECK_EQ_INT(differ, 0);
    printf("gcmsiv: portable AES-128 = libgcrypt's on %u random keys and blocks\n", n);
}

static unsigned tags_compared;

/* The tag of `n_len` random packets against GCM-SIV with the POLYVAL level and AES now selected. */
static void compare_tags(unsigned n_len)
{
    static skymem_mac_key_t mk;
    static uint8_t pkt[65536];
    uint8_t key[16], nonce[12], h[16], kenc[16], k2[16], tag[32], siv[16], s[16], want[16];
    unsigned i, j, wrong = 0;
    for (i = 0; i < n_len; i++) {
        int reply = (int)(rand32() & 1u);
        size_t min = (reply ? SKYMEM_TLM_HDR_LEN : SKYMEM_CMD_HDR_LEN) + SKYMEM_ROUTE_HDR_LEN;
        /* mostly up to MAX_LEN, every 64th up to a 64 KiB datagram */
        size_t len = min + rand32() % ((i % 64u ? MAX_LEN : sizeof pkt) - min + 1u);
        random_packet(pkt, len, reply);
        rand_bytes(key, 16);
        rand_bytes(nonce, 12);
        rand_bytes(k2, 16);
        derive_keys(key, nonce, h, kenc);
        skymem_polyval_init(&mk.hash, h);
        skymem_aes128_init(&mk.tag[0], kenc);
        skymem_aes128_init(&mk.tag[1], k2);
        skymem_auth_mac(&mk, pkt, len, tag);

        gcry_gcmsiv_tag(key, nonce, pkt, len, siv);
        gcry_aes(kenc, tag, s, 1); /* S, if the tag's AES is right */
        memcpy(want, s, 16);
        for (j = 0; j < 12; j++) want[j] ^= nonce[j];
        want[15] &= 0x7fu;
        gcry_aes(kenc, want, want, 0);
        wrong += memcmp(want, siv, 16) != 0;
        gcry_aes(k2, s, want, 0);
        wrong += memcmp(want, tag + 16, 16) != 0;
        if (wrong && wrong <= 2) fprintf(stderr, "test_gcmsiv: tag differs at length %zu (%s)\n", len,
                                         reply ? "reply" : "command");
    }
    CHECK_EQ_INT(wrong, 0);
    tags_compared += n_len;
}

int main(void)
{
    int level, top, aes, have_aes;
    if (!gcry_check_version("1.10.0")) {
        fprintf(stderr, "test_gcmsiv: libgcrypt %s is older than 1.10 (no GCM-SIV)\n", gcry_check_version(NULL));
        return EXIT_FAILURE;
    }
    gcry_control(GCRYCTL_DISABLE_SECMEM, 0);
    gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
    printf("gcmsiv: libgcrypt %s\n", gcry_check_version(NULL));
    test_libgcrypt_known_answer();
    test_portable_aes();
    top = skymem_polyval_use_accel(2);
    have_aes = skymem_aes_use_accel(1);
    for (level = 0; level <= top; level++)
        for (aes = 0; aes <= have_aes; aes++) {
            skymem_polyval_use_accel(level);
            skymem_aes_use_accel(aes);
            compare_tags(PER_IMPL);
            printf("gcmsiv: POLYVAL %s + AES-128 %s: %u random lengths\n", skymem_polyval_impl(), skymem_aes_impl(),
                   PER_IMPL);
        }
    printf("gcmsiv: the tag = libgcrypt's AES-128-GCM-SIV at %u random lengths\n", tags_compared);
    return check_report("gcmsiv");
}
