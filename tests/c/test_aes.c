/* test_aes.c -- AES-128 (skymem_aes.h): the portable bitsliced code called directly, whatever the CPU has,
 * against FIPS 197, NIST SP 800-38A and AESAVS known answers and the S-box's algebraic definition at all
 * 256 inputs; then against the CPU's AES instructions on random keys and blocks, where it has them.
 *
 * `test_aes --secrets-undefined` is the constant-time check, meant to run under valgrind (ctest
 * aes_constant_time): the key, the block and the tag's keys are marked undefined, so memcheck reports any
 * branch or memory address that depends on them ("Conditional jump or move depends on uninitialised
 * value", "Use of uninitialised value") -- what a table S-box does at every byte. */
#include <string.h>

#include "check.h"
#include "skymem_aes.h"
#include "skymem_auth.h"
#include "skymem_codec.h"
#include "skymem_polyval.h"

#ifdef SKYMEM_HAVE_MEMCHECK
#include <valgrind/memcheck.h>
#define SECRET(p, n) VALGRIND_MAKE_MEM_UNDEFINED((p), (n))
#define PUBLIC(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#else
#define SECRET(p, n) ((void)(p), (void)(n))
#define PUBLIC(p, n) ((void)(p), (void)(n))
#endif

static uint32_t rng = 20250101u;
static uint8_t rand_byte(void)
{
    rng = rng * 1103515245u + 12345u;
    return (uint8_t)(rng >> 16);
}

/* AES-128_key(plain) == cipher through the portable code, in place too. */
static int portable_gives(const char *key_hex, const char *plain_hex, const char *cipher_hex)
{
    static skymem_aes128_t k;
    uint8_t key[16], block[16], want[16], out[16];
    unhex(key_hex, key);
    unhex(plain_hex, block);
    unhex(cipher_hex, want);
    skymem_aes128_init(&k, key);
    skymem_aes128_encrypt_portable(&k, block, out);
    skymem_aes128_encrypt_portable(&k, block, block);
    return memcmp(out, want, 16) == 0 && memcmp(block, want, 16) == 0;
}

static void test_known_answers(void)
{
    static skymem_aes128_t k;
    uint8_t key[16], want[16];
    /* FIPS 197 Appendix B (the worked example) and Appendix C.1 */
    CHECK(portable_gives("2b7e151628aed2a6abf7158809cf4f3c", "3243f6a8885a308d313198a2e0370734",
                         "3925841d02dc09fbdc118597196a0b32"));
    CHECK(portable_gives("000102030405060708090a0b0c0d0e0f", "00112233445566778899aabbccddeeff",
                         "69c4e0d86a7b0430d8cdb78070b4c55a"));
    /* FIPS 197 Appendix A.1: the last round key of the key expansion */
    unhex("2b7e151628aed2a6abf7158809cf4f3c", key);
    unhex("d014f9a8c9ee2589e13f0cc8b6630ca6", want);
    skymem_aes128_init(&k, key);
    CHECK(memcmp(k.rk[SKYMEM_AES128_ROUNDS], want, 16) == 0);
    /* NIST SP 800-38A F.1.1, ECB-AES128 */
    CHECK(portable_gives("2b7e151628aed2a6abf7158809cf4f3c", "6bc1bee22e409f96e93d7e117393172a",
                         "3ad77bb40d7a3660a89ecaf32466ef97"));
    CHECK(portable_gives("2b7e151628aed2a6abf7158809cf4f3c", "ae2d8a571e03ac9c9eb76fac45af8e51",
                         "f5d3d58503b9699de785895a96fdbaaf"));
    CHECK(portable_gives("2b7e151628aed2a6abf7158809cf4f3c", "30c81c46a35ce411e5fbc1191a0a52ef",
                         "43b1cd7f598ece23881b00e3ed030688"));
    CHECK(portable_gives("2b7e151628aed2a6abf7158809cf4f3c", "f69f2445df4f9b17ad2b417be66c3710",
                         "7b0c785e27e8ad3f8223207104725dd4"));
    /* AESAVS (NIST's AES validation suite), AES-128: GFSbox, KeySbox, VarTxt and VarKey, first entries */
    CHECK(portable_gives("00000000000000000000000000000000", "f34481ec3cc627bacd5dc3fb08f273e6",
                         "0336763e966d92595a567cc9ce537f5e"));
    CHECK(portable_gives("10a58869d74be5a374cf867cfb473859", "00000000000000000000000000000000",
                         "6d251e6944b051e04eaa6fb4dbf78465"));
    CHECK(portable_gives("00000000000000000000000000000000", "80000000000000000000000000000000",
                         "3ad78e726c1ec02b7ebfe92b23d9ec34"));
    CHECK(portable_gives("80000000000000000000000000000000", "00000000000000000000000000000000",
                         "0edd33d3c621e546455bd8ba1418bec8"));
}

static uint8_t gf_mul(uint8_t a, uint8_t b)
{
    uint8_t p = 0;
    while (b) {
        if (b & 1u) p ^= a;
        a = (uint8_t)((a << 1) ^ ((a >> 7) * 0x1bu));
        b >>= 1;
    }
    return p;
}

/* FIPS 197 5.1.1: the inverse in GF(2^8) (0 for 0), then the affine map b + rotl(b,1..4) + 0x63. */
static uint8_t sbox_by_definition(uint8_t x)
{
    uint8_t inv = 0, s;
    unsigned i;
    for (i = 1; i < 256 && x; i++)
        if (gf_mul(x, (uint8_t)i) == 1) inv = (uint8_t)i;
    s = inv;
    for (i = 1; i <= 4; i++) s ^= (uint8_t)((inv << i) | (inv >> (8 - i)));
    return (uint8_t)(s ^ 0x63u);
}

/* Every S-box input through the circuit: the key expansion's first byte is key[0] ^ S(key[13]) ^ 1. */
static void test_sbox_all_inputs(void)
{
    static skymem_aes128_t k;
    uint8_t key[16];
    unsigned v, wrong = 0;
    memset(key, 0, sizeof key);
    for (v = 0; v < 256; v++) {
        key[13] = (uint8_t)v;
        skymem_aes128_init(&k, key);
        wrong += (uint8_t)(k.rk[1][0] ^ 0x01u) != sbox_by_definition((uint8_t)v);
    }
    CHECK_EQ_INT(wrong, 0);
}

/* The portable code and the CPU's instructions on random keys and blocks, in place and not. */
static void test_portable_matches_instructions(void)
{
    static skymem_aes128_t k;
    uint8_t key[16], in[16], a[16], b[16];
    unsigned n, i, j, differ = 0;
    int accel = skymem_aes_use_accel(1);
    if (!accel) {
        printf("aes: this CPU has no AES instructions: the portable code only\n");
        return;
    }
    for (n = 0; n < 4000; n++) {
        for (i = 0; i < 16; i++) key[i] = rand_byte();
        skymem_aes128_init(&k, key);
        for (j = 0; j < 8; j++) {
            for (i = 0; i < 16; i++) in[i] = rand_byte();
            skymem_aes128_encrypt_portable(&k, in, a);
            skymem_aes128_encrypt(&k, in, b);
            differ += memcmp(a, b, 16) != 0;
        }
    }
    CHECK_EQ_INT(differ, 0);
    printf("aes: portable C and %s agree on %u random blocks under %u keys\n", skymem_aes_impl(), 8 * n, n);
}

/* Under valgrind: nothing in the portable AES, nor in the tag computed with it and the portable POLYVAL,
 * branches on or indexes memory with the key or the block. Returns the number of wrong answers. */
static int secrets_undefined(void)
{
    static skymem_aes128_t k;
    static skymem_mac_key_t mk;
    uint8_t key[16], block[16], out[16], h[16], k1[16], k2[16], pkt[300], tag[32], want[32];
    unsigned i;
    int wrong = 0;
    skymem_polyval_use_accel(0);
    skymem_aes_use_accel(0);
    /* FIPS 197 C.1 with a secret key and block */
    unhex("000102030405060708090a0b0c0d0e0f", key);
    unhex("00112233445566778899aabbccddeeff", block);
    SECRET(key, sizeof key);
    SECRET(block, sizeof block);
    skymem_aes128_init(&k, key);
    skymem_aes128_encrypt_portable(&k, block, out);
    PUBLIC(out, sizeof out);
    unhex("69c4e0d86a7b0430d8cdb78070b4c55a", block);
    wrong += memcmp(out, block, 16) != 0;
    /* the tag of a 300-byte command: its answer first with public keys, then with secret ones */
    for (i = 0; i < 16; i++) h[i] = rand_byte(), k1[i] = rand_byte(), k2[i] = rand_byte();
    for (i = 0; i < sizeof pkt; i++) pkt[i] = rand_byte();
    skymem_put_u16(pkt, SKYMEM_DATA_CMD_MID);
    skymem_polyval_init(&mk.hash, h);
    skymem_aes128_init(&mk.tag[0], k1);
    skymem_aes128_init(&mk.tag[1], k2);
    skymem_auth_mac(&mk, pkt, sizeof pkt, want);
    SECRET(h, sizeof h);
    SECRET(k1, sizeof k1);
    SECRET(k2, sizeof k2);
    skymem_polyval_init(&mk.hash, h);
    skymem_aes128_init(&mk.tag[0], k1);
    skymem_aes128_init(&mk.tag[1], k2);
    skymem_auth_mac(&mk, pkt, sizeof pkt, tag);
    PUBLIC(tag, sizeof tag);
    wrong += memcmp(tag, want, 32) != 0;
#ifdef SKYMEM_HAVE_MEMCHECK
    printf("aes: secrets marked undefined for memcheck%s\n", RUNNING_ON_VALGRIND ? "" : " (not under valgrind)");
#else
    printf("aes: built without valgrind/memcheck.h: nothing marked undefined\n");
#endif
    return wrong;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--secrets-undefined") == 0) {
        CHECK_EQ_INT(secrets_undefined(), 0);
        return check_report("aes (secrets undefined)");
    }
    printf("aes: %s; known answers and the S-box through the portable code\n", skymem_aes_impl());
    test_known_answers();
    test_sbox_all_inputs();
    test_portable_matches_instructions();
    return check_report("aes");
}
