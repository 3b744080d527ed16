/* test_auth.c -- SHA-256 (FIPS 180-2 examples), HMAC-SHA256 (RFC 4231), POLYVAL (RFC 8452), AES-128 (FIPS 197),
 * the tag (known answers from the independent Python code), and the command authentication
 * trailer: sign, verify, forgery, replay windows, key files. */
#include <string.h>

#include "check.h"
#include "skymem_auth.h"
#include "skymem_codec.h"
#include "skymem_crc32c.h"
#include "skymem_polyval.h"

static int digest_is(const uint8_t *d, const char *hex, size_t n)
{
    uint8_t want[32];
    unhex(hex, want);
    return memcmp(d, want, n) == 0;
}

static void test_sha256(void)
{
    static const char *abc_448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    uint8_t d[32], d2[32], big[1000];
    skymem_sha256_t c;
    size_t i, split;
    skymem_sha256((const uint8_t *)"", 0, d);
    CHECK(digest_is(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", 32));
    skymem_sha256((const uint8_t *)"abc", 3, d);
    CHECK(digest_is(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", 32));
    skymem_sha256((const uint8_t *)abc_448, strlen(abc_448), d);
    CHECK(digest_is(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", 32));
    /* one million 'a', fed 1000 at a time */
    memset(big, 'a', sizeof big);
    skymem_sha256_init(&c);
    for (i = 0; i < 1000; i++) skymem_sha256_update(&c, big, sizeof big);
    skymem_sha256_final(&c, d);
    CHECK(digest_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", 32));
    /* any split of the input gives the same digest (block boundaries, padding at 55/56/64) */
    for (i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 31u + 7u);
    for (i = 0; i < 200; i++) {
        skymem_sha256(big, i, d);
        for (split = 0; split <= i; split += 13) {
            skymem_sha256_init(&c);
            skymem_sha256_update(&c, big, split);
            skymem_sha256_update(&c, big + split, i - split);
            skymem_sha256_final(&c, d2);
            CHECK(memcmp(d, d2, 32) == 0);
        }
    }
}

static void test_hmac_rfc4231(void)
{
    uint8_t key[131], data[160], d[32];
    /* 1 */
    memset(key, 0x0b, 20);
    skymem_hmac_sha256(key, 20, (const uint8_t *)"Hi There", 8, d);
    CHECK(digest_is(d, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32));
    /* 2 */
    skymem_hmac_sha256((const uint8_t *)"Jefe", 4, (const uint8_t *)"what do ya want for nothing?", 28, d);
    CHECK(digest_is(d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32));
    /* 3 */
    memset(key, 0xaa, 20);
    memset(data, 0xdd, 50);
    skymem_hmac_sha256(key, 20, data, 50, d);
    CHECK(digest_is(d, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 32));
    /* 4 */
    unhex("0102030405060708090a0b0c0d0e0f10111213141516171819", key);
    memset(data, 0xcd, 50);
    skymem_hmac_sha256(key, 25, data, 50, d);
    CHECK(digest_is(d, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 32));
    /* 5 (truncated to 128 bits) */
    memset(key, 0x0c, 20);
    skymem_hmac_sha256(key, 20, (const uint8_t *)"Test With Truncation", 20, d);
    CHECK(digest_is(d, "a3b6167473100ee06e0c796c2955552b", 16));
    /* 6, 7: key longer than a block is hashed first */
    memset(key, 0xaa, 131);
    skymem_hmac_sha256(key, 131, (const uint8_t *)"Test Using Larger Than Block-Size Key - Hash Key First", 54, d);
    CHECK(digest_is(d, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32));
    {
        const char *m = "This is a test using a larger than block-size key and a larger than block-size data. "
                        "The key needs to be hashed before being used by the HMAC algorithm.";
        skymem_hmac_sha256(key, 131, (const uint8_t *)m, strlen(m), d);
        CHECK(digest_is(d, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 32));
    }
}

static skymem_route_t ground_route(uint16_t station)
{
    skymem_route_t r;
    memset(&r, 0, sizeof r);
    r.dst_plane = 1;
    r.dst_sat = 2;
    r.src_plane = SKYMEM_GROUND_PLANE;
    r.src_sat = station;
    r.via_plane = SKYMEM_NO_SAT;
    r.via_sat = SKYMEM_NO_SAT;
    r.request_id = 77;
    r.ttl = SKYMEM_DEFAULT_TTL;
    return r;
}

/* Builds an EVICT_BLOCK from ground station `station`, signed with key_id / seq. */
static int signed_evict(const skymem_auth_t *a, uint8_t *buf, size_t cap, uint16_t station, uint32_t key_id, uint64_t seq)
{
    skymem_route_t r = ground_route(station);
    uint8_t hash[32];
    int len;
    memset(hash, 0x42, sizeof hash);
    len = skymem_build_evict(buf, cap, 5, &r, hash, 9, 1);
    if (len < 0) return len;
    return skymem_auth_sign(a, key_id, seq, buf, (size_t)len, cap);
}

static void test_sign_verify(void)
{
    static skymem_auth_t ground, sat;
    uint8_t key1[32], keyl[32], buf[256], copy[256];
    const uint32_t link = skymem_auth_link_id(0, 2); /* a neighbour's link id: a link key */
    int len, i;
    skymem_msg_t m;
    skymem_route_t r;
    memset(key1, 0x11, sizeof key1);
    memset(keyl, 0x22, sizeof keyl);
    skymem_auth_init(&ground, 0);
    CHECK_EQ_INT(skymem_auth_add_key(&ground, 1, key1, sizeof key1), SKYMEM_AUTH_OK);
    CHECK_EQ_INT(skymem_auth_add_key(&ground, 1, key1, sizeof key1), SKYMEM_AUTH_E_ARG); /* duplicate */
    CHECK_EQ_INT(skymem_auth_add_key(&ground, 2, key1, 8), SKYMEM_AUTH_E_ARG);           /* too short */
    skymem_auth_init(&sat, 1000);
    skymem_auth_add_key(&sat, 1, key1, sizeof key1);
    skymem_auth_add_key(&sat, link, keyl, sizeof keyl);

    len = signed_evict(&ground, buf, sizeof buf, 7, 1, 5000);
    CHECK_EQ_INT(len, SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + SKYMEM_EVICT_LEN + SKYMEM_AUTH_TRAILER_LEN);
    /* still a valid packet for the parser, trailer split off; the checksum updated, not recomputed,
     * is the one a full pass gives */
    CHECK_EQ_INT(skymem_parse(buf, (size_t)len, &m), SKYMEM_OK);
    CHECK(skymem_cmd_checksum_ok(buf, (size_t)len));
    CHECK_EQ_INT(buf[7], skymem_cmd_checksum(buf, (size_t)len));
    CHECK(m.auth == buf + len - SKYMEM_AUTH_TRAILER_LEN);
    CHECK(m.route.flags & SKYMEM_RF_AUTH);
    CHECK_EQ_INT(m.radius, 1);
    /* a relay rewriting via, ttl, hops (and so the checksum) keeps it valid */
    memcpy(copy, buf, (size_t)len);
    r = m.route;
    r.via_plane = 3;
    r.via_sat = 4;
    r.ttl = 60;
    r.hops = 4;
    CHECK_EQ_INT(skymem_rewrite_route(copy, (size_t)len, &r), SKYMEM_OK);
    CHECK_EQ_INT(skymem_auth_verify(&sat, copy, (size_t)len), SKYMEM_AUTH_OK);
    /* the same packet again: replay */
    CHECK_EQ_INT(skymem_auth_verify(&sat, buf, (size_t)len), SKYMEM_AUTH_E_REPLAY);
    /* every other byte is covered: flip one bit anywhere else and the MAC fails */
    for (i = 0; i < len; i++) {
        int off = i - (int)SKYMEM_CMD_HDR_LEN;
        if (i == 7 || (off >= 8 && off < 12) || off == 16 || off == 17) continue; /* checksum, via, ttl, hops */
        if (off == (int)SKYMEM_ROUTE_FLAGS) continue; /* clearing AUTH makes it unsigned: checked below */
        memcpy(copy, buf, (size_t)len);
        copy[i] ^= 0x01u;
        if ((i >= len - (int)SKYMEM_AUTH_TRAILER_LEN && i < len - (int)SKYMEM_AUTH_TAG_LEN - 8) || i < 2 ||
            off == 4 || off == 5) {
            /* key id, message id or source plane changed: refused before the MAC (unknown key, scope, not a command) */
            CHECK(skymem_auth_verify(&sat, copy, (size_t)len) < 0);
            continue;
        }
        CHECK_EQ_INT(skymem_auth_verify(&sat, copy, (size_t)len), SKYMEM_AUTH_E_BAD_MAC);
    }
    memcpy(copy, buf, (size_t)len);
    copy[SKYMEM_CMD_HDR_LEN + SKYMEM_ROUTE_FLAGS] &= (uint8_t)~SKYMEM_RF_AUTH;
    CHECK_EQ_INT(skymem_auth_verify(&sat, copy, (size_t)len), SKYMEM_AUTH_E_NO_TRAILER);
    /* unknown key */
    skymem_auth_add_key(&ground, 9, key1, sizeof key1);
    len = signed_evict(&ground, buf, sizeof buf, 7, 9, 6000);
    CHECK_EQ_INT(skymem_auth_verify(&sat, buf, (size_t)len), SKYMEM_AUTH_E_UNKNOWN_KEY);
    /* a link key on a command from the ground: refused, even by a ring that holds it for every use */
    skymem_auth_add_key(&ground, link, keyl, sizeof keyl);
    len = signed_evict(&ground, buf, sizeof buf, 7, link, 6001);
    CHECK_EQ_INT(skymem_auth_verify(&sat, buf, (size_t)len), SKYMEM_AUTH_E_KEY_SCOPE);
    /* a forged key (right id, wrong bytes) */
    {
        static skymem_auth_t forger;
        uint8_t bad[32];
        memset(bad, 0x12, sizeof bad);
        skymem_auth_init(&forger, 0);
        skymem_auth_add_key(&forger, 1, bad, sizeof bad);
        len = signed_evict(&forger, buf, sizeof buf, 7, 1, 7000);
        CHECK_EQ_INT(skymem_auth_verify(&sat, buf, (size_t)len), SKYMEM_AUTH_E_BAD_MAC);
    }
    /* at or below the floor (the receiver's start): refused even if never seen */
    len = signed_evict(&ground, buf, sizeof buf, 8, 1, 1000);
    CHECK_EQ_INT(skymem_auth_verify(&sat, buf, (size_t)len), SKYMEM_AUTH_E_REPLAY);
    /* cap too small, already signed */
    len = signed_evict(&ground, buf, 100, 7, 1, 7001);
    CHECK_EQ_INT(len, SKYMEM_AUTH_E_ARG);
    len = signed_evict(&ground, buf, sizeof buf, 7, 1, 7002);
    CHECK_EQ_INT(skymem_auth_sign(&ground, 1, 7003, buf, (size_t)len, sizeof buf), SKYMEM_AUTH_E_ARG);
}

static void test_replay_window(void)
{
    static skymem_auth_t ground, sat;
    uint8_t key[16], buf[256];
    uint64_t base = 1000000, s;
    int len, accepted;
    memset(key, 0x33, sizeof key);
    memset(sat.bits, 0xFF, sizeof sat.bits); /* init leaves the bitmaps alone: a window clears its own when taken */
    skymem_auth_init(&ground, 0);
    skymem_auth_init(&sat, 10);
    skymem_auth_add_key(&ground, 4, key, sizeof key);
    skymem_auth_add_key(&sat, 4, key, sizeof key);
#define TRY(station, seq) (len = signed_evict(&ground, buf, sizeof buf, (station), 4, (seq)), skymem_auth_verify(&sat, buf, (size_t)len))
    CHECK_EQ_INT(TRY(1, base + 100), SKYMEM_AUTH_OK);
    CHECK_EQ_INT(TRY(1, base + 50), SKYMEM_AUTH_OK);     /* late but inside the window */
    CHECK_EQ_INT(TRY(1, base + 50), SKYMEM_AUTH_E_REPLAY);
    CHECK_EQ_INT(TRY(1, base + 100), SKYMEM_AUTH_E_REPLAY);
    CHECK_EQ_INT(TRY(1, base + 101), SKYMEM_AUTH_OK);
    CHECK_EQ_INT(TRY(1, base + 100 - SKYMEM_AUTH_WINDOW), SKYMEM_AUTH_E_REPLAY); /* too old */
    /* another source with the same key has its own window */
    CHECK_EQ_INT(TRY(2, base + 50), SKYMEM_AUTH_OK);
    /* slide by every amount up to past the window; earlier ones stay refused while inside it */
    for (s = 1; s <= SKYMEM_AUTH_WINDOW + 70; s += 37) {
        uint64_t top = base + 1000 * s;
        CHECK_EQ_INT(TRY(3, top), SKYMEM_AUTH_OK);
        CHECK_EQ_INT(TRY(3, top + s), SKYMEM_AUTH_OK);
        CHECK_EQ_INT(TRY(3, top), s < SKYMEM_AUTH_WINDOW ? SKYMEM_AUTH_E_REPLAY : SKYMEM_AUTH_E_REPLAY);
        if (s < SKYMEM_AUTH_WINDOW) CHECK_EQ_INT(TRY(3, top + s - 1), s == 1 ? SKYMEM_AUTH_E_REPLAY : SKYMEM_AUTH_OK);
    }
    /* a shuffled burst: each sequence accepted exactly once */
    accepted = 0;
    for (s = 0; s < 500; s++) {
        uint64_t q = base + 10000000 + (s * 7919u) % 500u;
        if (TRY(4, q) == SKYMEM_AUTH_OK) accepted++;
        if (TRY(4, q) == SKYMEM_AUTH_OK) accepted += 1000; /* the copy must not pass */
    }
    CHECK_EQ_INT(accepted, 500);
    /* more sources than windows: recycling raises the floor, so old traffic stays refused */
    for (s = 0; s < SKYMEM_AUTH_SOURCES + 5; s++) CHECK_EQ_INT(TRY((uint16_t)(100 + s), base + 100000000 + s), SKYMEM_AUTH_OK);
    CHECK(sat.floor >= base + 100000000);
    CHECK_EQ_INT(TRY(1, base + 102), SKYMEM_AUTH_E_REPLAY);
#undef TRY
}

/* 1 when k signs like a key made from these hex bytes (a packet's tag compared: the derived
 * contexts hold padding that need not match) */
static int same_key(const skymem_mac_key_t *k, const char *hex)
{
    static skymem_mac_key_t want;
    uint8_t key[64], pkt[100], t1[32], t2[32];
    size_t i, n = strlen(hex) / 2;
    unhex(hex, key);
    skymem_mac_key_init(&want, key, n);
    for (i = 0; i < sizeof pkt; i++) pkt[i] = (uint8_t)i;
    skymem_put_u16(pkt, SKYMEM_DATA_CMD_MID);
    skymem_auth_mac(k, pkt, sizeof pkt, t1);
    skymem_auth_mac(&want, pkt, sizeof pkt, t2);
    return memcmp(t1, t2, 32) == 0;
}

static void test_key_file(void)
{
    static skymem_auth_t a;
    char err[128];
    const uint32_t in_id = skymem_auth_link_id(2, 4);
    const char *good = "# keys\n\nskymem-keys 4 satellite 2 5 # mine\n"
                       "link-in 2 4 000102030405060708090a0b0c0d0e0f\n"
                       "link-out 2 4\t0f0e0d0c0b0a09080706050403020100 # what we sign for (2,4)\n"
                       "link-in 3 5 202122232425262728292a2b2c2d2e2f\n"
                       "  up 7\tFFEEDDCCBBAA99887766554433221100ffee # gs 7\r\ndown 7 101112131415161718191a1b1c1d1e1f\n";
    uint16_t p, q;
    /* link ids: the top bit, then plane and sat; ground ids are below it */
    CHECK(in_id == 0x80020004u);
    CHECK(skymem_auth_link_id(0x7FFF, 0xFFFE) == 0xFFFFFFFEu);
    CHECK(skymem_auth_link_of(in_id, &p, &q) == 1 && p == 2 && q == 4);
    CHECK(skymem_auth_link_of(0xFFFFFFFEu, &p, &q) == 1 && p == 0x7FFF && q == 0xFFFE);
    CHECK(skymem_auth_link_of(7, NULL, NULL) == 0 && skymem_auth_link_of(0x7FFFFFFFu, NULL, NULL) == 0);
    CHECK(skymem_auth_link_of(skymem_auth_link_id(0, 0), NULL, NULL) == 1);
    skymem_auth_init(&a, 0);
    CHECK_EQ_INT(skymem_auth_load_text(&a, good, strlen(good), err, sizeof err), 5);
    CHECK(a.owner_plane == 2 && a.owner_sat == 5);
    CHECK(skymem_auth_find_key_for(&a, in_id, SKYMEM_KEY_LINK_IN) != NULL &&
          skymem_auth_find_key_for(&a, in_id, SKYMEM_KEY_LINK_OUT) != NULL &&
          skymem_auth_find_key_for(&a, skymem_auth_link_id(3, 5), SKYMEM_KEY_LINK_IN) != NULL &&
          skymem_auth_find_key_for(&a, 7, SKYMEM_KEY_UP) != NULL);
    /* each key for its own direction only */
    CHECK(skymem_auth_find_key_for(&a, in_id, SKYMEM_KEY_UP) == NULL);
    CHECK(skymem_auth_find_key_for(&a, in_id, SKYMEM_KEY_DOWN) == NULL);
    CHECK(skymem_auth_find_key_for(&a, skymem_auth_link_id(3, 5), SKYMEM_KEY_LINK_OUT) == NULL);
    CHECK(skymem_auth_find_key_for(&a, 7, SKYMEM_KEY_LINK_IN) == NULL);
    CHECK(skymem_auth_find_key_for(&a, skymem_auth_link_id(2, 5), SKYMEM_KEY_ANY) == NULL); /* none of its own */
    CHECK(same_key(&skymem_auth_find_key_for(&a, in_id, SKYMEM_KEY_LINK_IN)->mac, "000102030405060708090a0b0c0d0e0f"));
    CHECK(same_key(&skymem_auth_find_key_for(&a, in_id, SKYMEM_KEY_LINK_OUT)->mac, "0f0e0d0c0b0a09080706050403020100"));
    CHECK(same_key(&skymem_auth_find_key_for(&a, 7, SKYMEM_KEY_UP)->mac, "FFEEDDCCBBAA99887766554433221100ffee"));
    CHECK(same_key(&skymem_auth_find_key_for(&a, 7, SKYMEM_KEY_DOWN)->mac, "101112131415161718191a1b1c1d1e1f"));
    CHECK(!same_key(&skymem_auth_find_key_for(&a, 7, SKYMEM_KEY_UP)->mac, "FFEEDDCCBBAA99887766554433221100ff"));
#define BAD(text, msg)                                                                            \
    do {                                                                                          \
        skymem_auth_init(&a, 0);                                                                  \
        err[0] = 0;                                                                               \
        CHECK_EQ_INT(skymem_auth_load_text(&a, text, strlen(text), err, sizeof err), SKYMEM_AUTH_E_ARG); \
        if (strstr(err, msg) == NULL) fprintf(stderr, "  got \"%s\", wanted \"%s\"\n", err, msg);      \
        CHECK(strstr(err, msg) != NULL);                                                          \
    } while (0)
#define SAT "skymem-keys 4 satellite 0 1\n"
#define K " 000102030405060708090a0b0c0d0e0f\n"
    /* an old file (one key for both directions), a version 3 one (the shared ISL key) and the ground's are
     * refused, each saying what to do */
    BAD("# keys\n0 000102030405060708090a0b0c0d0e0f\n", "line 2: an old key file (one key for both directions");
    BAD("skymem-keys 3 satellite 0 1\nisl 0" K "up 1" K "down 1" K, "line 1: a version 3 key file (one ISL key");
    BAD("skymem-keys 3 satellite 0 1\n", "launch again to make per-link keys");
    BAD("skymem-keys 4 ground\nmaster 1" K, "line 1: the ground's key file");
    BAD("skymem-keys 2 satellite 0 1\n", "version is not 4");
    BAD("skymem-keys 5 satellite 0 1\n", "version is not 4");
    BAD("keys 4 satellite 0 1\n", "expected \"skymem-keys 4 satellite PLANE SAT\"");
    BAD("skymem-keys 4 satellite 32768 1\n", "PLANE is not a number below 32768");
    BAD("skymem-keys 4 satellite 0\n", "SAT is not");
    BAD("skymem-keys 4 satellite 0 1 2\n", "unexpected text after the header");
    /* master keys, ground or link: the ground's alone */
    BAD(SAT "master 1" K, "line 2: a ground master key");
    BAD(SAT "link-master" K, "line 2: a ground master key");
    /* the shared ISL key is no more */
    BAD(SAT "isl 0" K, "line 2: expected \"link-in|link-out PLANE SAT HEX\"");
    /* a link from this satellite to itself, either way */
    BAD(SAT "link-in 0 1" K, "line 2: a link from this satellite to itself");
    BAD(SAT "up 1" K "link-out 0 1" K, "line 3: a link from this satellite to itself");
    BAD(SAT "link-in 32768 1" K, "link PLANE is not a number below 32768");
    BAD(SAT "link-in 0 x" K, "link SAT is not a number");
    BAD(SAT "link-in 0 2" K "link-in 0 2" K, "line 3: duplicate");
    /* ground key ids: 1 .. 2^31 - 1; an id with the link bit, or 0, is refused */
    BAD(SAT "up 2147483648" K, "line 2: a ground key id is 1..2147483647");
    BAD(SAT "down 4294967295" K, "a ground key id is 1..2147483647");
    BAD(SAT "up 0" K, "a ground key id is 1..2147483647");
    BAD(SAT "up 99999999999" K, "a ground key id is 1..2147483647");
    BAD(SAT "up 1 0011\n", "line 2: key shorter than 16 bytes");
    BAD(SAT "\nup 1 000102030405060708090a0b0c0d0e0\n", "line 3: key is not an even number");
    BAD(SAT "x 1" K, "expected");
    BAD(SAT "up 1 000102030405060708090a0b0c0d0e0g\n", "hex");
    BAD(SAT "up 1" K "up 1" K, "line 3: duplicate");
    BAD(SAT "up 1 000102030405060708090a0b0c0d0e0f extra\n", "unexpected");
#undef K
#undef SAT
#undef BAD
    { /* the largest ground id and a link to (32767, 65534) are fine */
        const char *edge = "skymem-keys 4 satellite 0 1\nup 2147483647 000102030405060708090a0b0c0d0e0f\n"
                           "link-out 32767 65534 000102030405060708090a0b0c0d0e0f\n";
        skymem_auth_init(&a, 0);
        CHECK_EQ_INT(skymem_auth_load_text(&a, edge, strlen(edge), err, sizeof err), 2);
        CHECK(skymem_auth_find_key_for(&a, 0x7FFFFFFFu, SKYMEM_KEY_UP) != NULL);
        CHECK(skymem_auth_find_key_for(&a, 0xFFFFFFFEu, SKYMEM_KEY_LINK_OUT) != NULL);
    }
    CHECK(skymem_auth_required(SKYMEM_SET_CHUNK_CC) && skymem_auth_required(SKYMEM_EVICT_BLOCK_CC) &&
          skymem_auth_required(SKYMEM_MIGRATE_CC) && skymem_auth_required(SKYMEM_SET_PARAM_CC) &&
          skymem_auth_required(SKYMEM_RESET_COUNTERS_CC));
    /* reads too: with keys, nothing unsigned moves a counter or the LRU order */
    CHECK(skymem_auth_required(SKYMEM_GET_CHUNK_CC) && skymem_auth_required(SKYMEM_STATS_CC) &&
          skymem_auth_required(SKYMEM_NOOP_CC) && skymem_auth_required(SKYMEM_PROBE_CC) &&
          skymem_auth_required(SKYMEM_GET_CHUNKS_CC));
}

/* Replies are signed like commands (issue 15): a satellite signs what it sends the ground with
 * the station's key, and what it sends a satellite (a migration ACK) goes out under the key of the
 * link between them (its LINK_OUT key, its own link id in the trailer); the ground checks the tag of
 * its own key, a satellite checks tag and freshness. */
static void test_replies(void)
{
    static skymem_auth_t sat, peer;
    static skymem_mac_key_t mk1, mk0;
    uint8_t key1[32], key0[32], buf[256], copy[256], hash[32];
    const uint32_t sat_link = skymem_auth_link_id(1, 2); /* what (1,2)'s link trailers carry */
    skymem_route_t r, r2;
    skymem_msg_t m;
    int len, i;
    memset(key1, 0x11, sizeof key1);
    memset(key0, 0x22, sizeof key0);
    memset(hash, 0x33, sizeof hash);
    /* satellite (1,2): key 1 for the ground, key0 on its link to (0,0) (what it signs for (0,0)) */
    skymem_auth_init(&sat, 0);
    sat.owner_plane = 1, sat.owner_sat = 2;
    skymem_auth_add_key(&sat, 1, key1, sizeof key1);
    CHECK_EQ_INT(skymem_auth_add_key_for(&sat, skymem_auth_link_id(0, 0), SKYMEM_KEY_LINK_OUT, key0, sizeof key0),
                 SKYMEM_AUTH_OK);
    /* satellite (0,0): the same link's key, as what (1,2) signs for it */
    skymem_auth_init(&peer, 0);
    peer.owner_plane = 0, peer.owner_sat = 0;
    skymem_auth_add_key(&peer, 1, key1, sizeof key1);
    CHECK_EQ_INT(skymem_auth_add_key_for(&peer, sat_link, SKYMEM_KEY_LINK_IN, key0, sizeof key0), SKYMEM_AUTH_OK);
    skymem_mac_key_init(&mk1, key1, sizeof key1);
    skymem_mac_key_init(&mk0, key0, sizeof key0);
    /* satellite (1,2) to ground station 7 through (1,1): an ACK signed with the station's key 1 */
    memset(&r, 0, sizeof r);
    r.dst_plane = SKYMEM_GROUND_PLANE;
    r.dst_sat = 7;
    r.src_plane = 1;
    r.src_sat = 2;
    r.via_plane = 1;
    r.via_sat = 1;
    r.request_id = 99;
    r.ttl = SKYMEM_DEFAULT_TTL;
    len = skymem_build_reply(buf, sizeof buf, 0, 10, 20, &r, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 3, 1, hash, 32);
    len = skymem_auth_sign(&sat, 1, 5000, buf, (size_t)len, sizeof buf);
    CHECK(len > 0);
    CHECK_EQ_INT(skymem_parse(buf, (size_t)len, &m), SKYMEM_OK);
    CHECK(m.auth != NULL && m.reply_kind == SKYMEM_REPLY_ACK && m.has_block_hash);
    CHECK_EQ_INT(skymem_auth_check_reply(&mk1, 1, buf, (size_t)len), SKYMEM_AUTH_OK);
    CHECK_EQ_INT(skymem_auth_check_reply(&mk1, 2, buf, (size_t)len), SKYMEM_AUTH_E_UNKNOWN_KEY);
    CHECK_EQ_INT(skymem_auth_check_reply(&mk0, 1, buf, (size_t)len), SKYMEM_AUTH_E_BAD_MAC);
    /* relays rewrite ttl and hops on the way down: still valid */
    memcpy(copy, buf, (size_t)len);
    r2 = m.route;
    r2.ttl = 60;
    r2.hops = 4;
    CHECK_EQ_INT(skymem_rewrite_route(copy, (size_t)len, &r2), SKYMEM_OK);
    CHECK_EQ_INT(skymem_auth_check_reply(&mk1, 1, copy, (size_t)len), SKYMEM_AUTH_OK);
    /* any other bit: refused (kind, status, value, hash, time, request id, source...) */
    for (i = 0; i < len - (int)SKYMEM_AUTH_TAG_LEN - 12; i++) {
        int off = i - (int)SKYMEM_TLM_HDR_LEN;
        if ((off >= 8 && off < 12) || off == 16 || off == 17) continue; /* via, ttl, hops */
        if (off == (int)SKYMEM_ROUTE_FLAGS || i < 2) continue; /* unsigned or not a reply: checked below */
        memcpy(copy, buf, (size_t)len);
        copy[i] ^= 0x01u;
        CHECK(skymem_auth_check_reply(&mk1, 1, copy, (size_t)len) != SKYMEM_AUTH_OK);
    }
    { /* the same check with a CRC of the body in the same pass */
        uint32_t crc = 1;
        size_t at = SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_HDR_LEN + 12u;
        CHECK_EQ_INT(skymem_auth_check_reply_crc(&mk1, 1, buf, (size_t)len, at, 32, &crc), SKYMEM_AUTH_OK);
        CHECK(crc == skymem_crc32c(buf + at, 32));
        memcpy(copy, buf, (size_t)len);
        copy[at + 5] ^= 0x40u;
        CHECK_EQ_INT(skymem_auth_check_reply_crc(&mk1, 1, copy, (size_t)len, at, 32, &crc), SKYMEM_AUTH_E_BAD_MAC);
        CHECK(crc == skymem_crc32c(copy + at, 32));
        CHECK_EQ_INT(skymem_auth_check_reply_crc(&mk1, 1, buf, (size_t)len, at, (size_t)len, &crc), SKYMEM_AUTH_E_ARG);
        CHECK_EQ_INT(skymem_auth_check_reply_crc(&mk1, 1, buf, (size_t)len, 8, 4, &crc), SKYMEM_AUTH_E_ARG);
    }
    memcpy(copy, buf, (size_t)len);
    copy[SKYMEM_TLM_HDR_LEN + SKYMEM_ROUTE_FLAGS] &= (uint8_t)~SKYMEM_RF_AUTH;
    CHECK_EQ_INT(skymem_auth_check_reply(&mk1, 1, copy, (size_t)len), SKYMEM_AUTH_E_NO_TRAILER);
    /* key scope: a ground-bound reply under a link id is refused by a satellite, even one holding that
     * id's key for every use (a tool's ring) */
    {
        static skymem_auth_t both;
        skymem_auth_init(&both, 0);
        skymem_auth_add_key(&both, sat_link, key0, sizeof key0);
        len = skymem_build_reply(buf, sizeof buf, 0, 10, 20, &r, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 3, 1, hash, 32);
        len = skymem_auth_sign_with(&mk0, sat_link, 5001, buf, (size_t)len, sizeof buf);
        CHECK_EQ_INT(skymem_auth_verify(&both, buf, (size_t)len), SKYMEM_AUTH_E_KEY_SCOPE);
        /* and the ground's check of its own key: the link id is not it */
        CHECK_EQ_INT(skymem_auth_check_reply(&mk1, 1, buf, (size_t)len), SKYMEM_AUTH_E_UNKNOWN_KEY);
        /* a satellite's own ring holds (1,2)'s link key for LINK_IN only: not for a reply to the ground */
        CHECK_EQ_INT(skymem_auth_verify(&peer, buf, (size_t)len), SKYMEM_AUTH_E_UNKNOWN_KEY);
    }
    /* a migration ACK, satellite (1,2) to satellite (0,0) under their link's key: fresh once, then a replay */
    r.dst_plane = 0;
    r.dst_sat = 0;
    len = skymem_build_reply(buf, sizeof buf, 0, 10, 20, &r, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 3, 1, hash, 32);
    CHECK_EQ_INT(skymem_auth_sign(&sat, skymem_auth_link_id(0, 0), 6000, buf, (size_t)len, sizeof buf),
                 SKYMEM_AUTH_E_UNKNOWN_KEY); /* the ring keys a link by its neighbour: no LINK_IN key for (0,0) */
    len = skymem_auth_sign_with(&skymem_auth_find_key_for(&sat, skymem_auth_link_id(0, 0), SKYMEM_KEY_LINK_OUT)->mac,
                                sat_link, 6000, buf, (size_t)len, sizeof buf);
    CHECK(len > 0);
    CHECK_EQ_INT(skymem_get_u32(buf + len - SKYMEM_AUTH_TRAILER_LEN + SKYMEM_AT_KEY_ID), sat_link);
    CHECK_EQ_INT(skymem_auth_verify(&peer, buf, (size_t)len), SKYMEM_AUTH_OK);
    CHECK_EQ_INT(skymem_auth_verify(&peer, buf, (size_t)len), SKYMEM_AUTH_E_REPLAY);
    CHECK(skymem_auth_high(&peer) == 6000);
    /* after a restart with the persisted high-water mark as the floor, still a replay */
    skymem_auth_init(&peer, skymem_auth_high(&peer));
    skymem_auth_add_key_for(&peer, sat_link, SKYMEM_KEY_LINK_IN, key0, sizeof key0);
    CHECK_EQ_INT(skymem_auth_verify(&peer, buf, (size_t)len), SKYMEM_AUTH_E_REPLAY);
    /* the same ACK under ground key 1 between satellites: out of scope (a ring with key 1 for every use) */
    skymem_auth_add_key(&peer, 1, key1, sizeof key1);
    len = skymem_build_reply(buf, sizeof buf, 0, 10, 20, &r, SKYMEM_REPLY_ACK, SKYMEM_SET_CHUNK_CC, 0, 3, 1, hash, 32);
    len = skymem_auth_sign(&sat, 1, 6001, buf, (size_t)len, sizeof buf);
    CHECK_EQ_INT(skymem_auth_verify(&peer, buf, (size_t)len), SKYMEM_AUTH_E_KEY_SCOPE);
}

/* The SHA-extensions compression and the portable one agree on every length around block edges
 * and on random data (when this CPU has the extensions; otherwise both runs are portable). */
static void test_sha256_implementations_agree(void)
{
    static uint8_t data[5000];
    uint8_t a[32], b[32];
    uint32_t x = 12345u;
    size_t len, i;
    int accel = skymem_sha256_use_accel(1);
    printf("sha256: %s\n", skymem_sha256_impl());
    for (i = 0; i < sizeof data; i++) {
        x = x * 1103515245u + 12345u;
        data[i] = (uint8_t)(x >> 16);
    }
    for (len = 0; len < sizeof data; len += (len < 200 ? 1 : 61)) {
        skymem_sha256_use_accel(0);
        skymem_sha256(data, len, a);
        skymem_sha256_use_accel(1);
        skymem_sha256(data, len, b);
        CHECK(memcmp(a, b, 32) == 0);
    }
    skymem_sha256_use_accel(accel);
}

/* RFC 8452 Appendix A's POLYVAL example, then every implementation this CPU has against the
 * portable one: lengths around the 32-block groups and any split of the input. */
static void test_polyval(void)
{
    static uint8_t data[16 * 200];
    static skymem_polyval_key_t k;
    uint8_t h[16], x[32], want[16], acc[16], ref[16];
    uint32_t r = 777u;
    size_t n, cut, i;
    int level, top = skymem_polyval_use_accel(2);
    unhex("25629347589242761d31f826ba4b757b", h);
    unhex("4f4f95668c83dfb6401762bb2d01a262d1a24ddd2721d006bbe45f20d3c9f362", x);
    unhex("f7a3b47b846119fae5b7866cf5e5b77e", want);
    skymem_polyval_init(&k, h);
    for (i = 0; i < sizeof data; i++) {
        r = r * 1103515245u + 12345u;
        data[i] = (uint8_t)(r >> 16);
    }
    printf("polyval: %s\n", skymem_polyval_impl());
    for (level = 0; level <= top; level++) {
        CHECK_EQ_INT(skymem_polyval_use_accel(level), level);
        memset(acc, 0, sizeof acc);
        skymem_polyval_blocks(&k, acc, x, 2);
        CHECK(memcmp(acc, want, 16) == 0);
        for (n = 0; n <= 200; n += (n < 70 ? 1 : 13)) {
            skymem_polyval_use_accel(0);
            memset(ref, 0, sizeof ref);
            skymem_polyval_blocks(&k, ref, data, n);
            skymem_polyval_use_accel(level);
            for (cut = 0; cut <= n; cut += 1 + n / 5) {
                memset(acc, 0, sizeof acc);
                skymem_polyval_blocks(&k, acc, data, cut);
                skymem_polyval_blocks(&k, acc, data + 16 * cut, n - cut);
                CHECK(memcmp(acc, ref, 16) == 0);
            }
        }
    }
    /* hashing with a CRC beside it (fused where the CPU can): the same hash, the CRC of its own range */
    printf("polyval + crc32c in one pass: %s\n", skymem_polyval_crc32c_fused() ? "yes" : "no");
    for (n = 0; n <= 200; n += (n < 40 ? 1 : 23)) {
        size_t off, clen;
        for (off = 0; off < 40; off += 13)
            for (clen = 0; off + clen <= sizeof data; clen += (clen < 20 ? 1 : 997)) {
                uint32_t crc = 0;
                memset(ref, 0, sizeof ref);
                skymem_polyval_blocks(&k, ref, data, n);
                memset(acc, 0, sizeof acc);
                skymem_polyval_blocks_crc32c(&k, acc, data, n, data + off, clen, &crc);
                CHECK(memcmp(acc, ref, 16) == 0);
                CHECK(crc == skymem_crc32c(data + off, clen));
            }
    }
    skymem_polyval_use_accel(top);
}

/* FIPS 197 Appendix C.1 with each AES implementation this CPU has, and the instructions against the
 * portable code on a chain of blocks under changing keys. */
static void test_aes(void)
{
    static skymem_aes128_t k;
    uint8_t key[16], block[16], want[16], a[16], b[16];
    int i, accel = skymem_aes_use_accel(1);
    printf("aes: %s\n", skymem_aes_impl());
    unhex("000102030405060708090a0b0c0d0e0f", key);
    unhex("00112233445566778899aabbccddeeff", block);
    unhex("69c4e0d86a7b0430d8cdb78070b4c55a", want);
    skymem_aes128_init(&k, key);
    skymem_aes_use_accel(0);
    skymem_aes128_encrypt(&k, block, a);
    CHECK(memcmp(a, want, 16) == 0);
    skymem_aes_use_accel(1);
    skymem_aes128_encrypt(&k, block, b);
    CHECK(memcmp(b, want, 16) == 0);
    for (i = 0; i < 200; i++) { /* the ciphertext becomes the next key and block */
        skymem_aes128_init(&k, a);
        skymem_aes_use_accel(0);
        skymem_aes128_encrypt(&k, a, a);
        skymem_aes_use_accel(1);
        skymem_aes128_encrypt(&k, b, b);
        CHECK(memcmp(a, b, 16) == 0);
        memcpy(b, a, 16);
    }
    skymem_aes_use_accel(accel);
}

/* The whole tag against answers computed by skymemory.protocol.mac.tag_py (pure Python, its
 * own POLYVAL and AES), with every POLYVAL implementation (and AES, portable with the portable
 * POLYVAL): a 77-byte command, a 1000-byte reply. */
static void test_tag_known_answers(void)
{
    static skymem_mac_key_t k;
    uint8_t key[32], pkt[1000], tag[32];
    size_t i;
    int level, top = skymem_polyval_use_accel(2);
    for (i = 0; i < sizeof key; i++) key[i] = (uint8_t)i;
    for (i = 0; i < sizeof pkt; i++) pkt[i] = (uint8_t)(i * 7u + 3u);
    skymem_mac_key_init(&k, key, sizeof key);
    for (level = 0; level <= top; level++) {
        skymem_polyval_use_accel(level);
        skymem_aes_use_accel(level > 0);
        skymem_put_u16(pkt, SKYMEM_DATA_CMD_MID);
        skymem_auth_mac(&k, pkt, 77, tag);
        CHECK(digest_is(tag, "e6f7cb2dc728d45fe141270da4bf6c3a947366aa6defe0dd920008ca8e9dd481", 32));
        skymem_put_u16(pkt, SKYMEM_REPLY_TLM_MID);
        skymem_auth_mac(&k, pkt, 1000, tag);
        CHECK(digest_is(tag, "81c1ce9373ceb7541b2991e823328685ef6072ba41e0862ec00a1a4b40d68a1b", 32));
    }
    skymem_polyval_use_accel(top);
    skymem_aes_use_accel(1);
}

int main(void)
{
    test_sha256();
    test_hmac_rfc4231();
    skymem_sha256_use_accel(0); /* the same known answers from the portable code */
    test_sha256();
    test_hmac_rfc4231();
    skymem_sha256_use_accel(1);
    test_sha256_implementations_agree();
    test_polyval();
    test_aes();
    test_tag_known_answers();
    test_sign_verify();
    test_replay_window();
    test_key_file();
    test_replies();
    return check_report("auth");
}
