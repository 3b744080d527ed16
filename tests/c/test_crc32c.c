/* test_crc32c.c -- CRC32C known answers and the generated tables. */
#include <string.h>

#include "check.h"
#include "skymem_crc32c.h"

/* Bitwise reference: the definition, no tables. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    size_t i;
    int k;
    for (i = 0; i < n; i++) {
        c ^= p[i];
        for (k = 0; k < 8; k++) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static void known_answers(void)
{
    uint8_t buf[1000];
    size_t i, n;
    uint8_t zeros[32], ones[32];
    memset(zeros, 0, sizeof zeros);
    memset(ones, 0xFF, sizeof ones);
    CHECK_EQ_INT(skymem_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
    /* RFC 3720 (iSCSI) B.4 test vectors */
    CHECK_EQ_INT(skymem_crc32c(zeros, 32), 0x8A9136AAu);
    CHECK_EQ_INT(skymem_crc32c(ones, 32), 0x62A8AB43u);
    CHECK_EQ_INT(skymem_crc32c(NULL, 0), 0u);
    for (i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 131u + 7u);
    for (n = 0; n <= sizeof buf; n += 37) CHECK_EQ_INT(skymem_crc32c(buf, n), crc_bitwise(buf, n));
    /* incremental == one shot, split at every offset of a short buffer */
    for (n = 0; n <= 40; n++)
        CHECK_EQ_INT(skymem_crc32c_update(skymem_crc32c(buf, n), buf + n, 40 - n), skymem_crc32c(buf, 40));
    /* combination: crc(A || B) from crc(A), crc(B), |B|, at every split of the buffer */
    for (n = 0; n <= sizeof buf; n += 23)
        CHECK_EQ_INT(skymem_crc32c_combine(skymem_crc32c(buf, n), skymem_crc32c(buf + n, sizeof buf - n),
                                           sizeof buf - n),
                     skymem_crc32c(buf, sizeof buf));
    CHECK_EQ_INT(skymem_crc32c_combine(0x12345678u, 0u, 0), 0x12345678u); /* appending nothing */
    /* fold: the block's CRC from its chunks' CRCs, for chunk sizes that do and do not divide it */
    {
        uint32_t crcs[1000];
        size_t chunk;
        for (chunk = 1; chunk <= 300; chunk = chunk * 3 + 1) {
            uint32_t count = (uint32_t)((sizeof buf + chunk - 1) / chunk);
            for (i = 0; i < count; i++) {
                size_t len = (i + 1) * chunk <= sizeof buf ? chunk : sizeof buf - i * chunk;
                crcs[i] = skymem_crc32c(buf + i * chunk, len);
            }
            CHECK_EQ_INT(skymem_crc32c_fold(crcs, count, (uint32_t)chunk, sizeof buf), skymem_crc32c(buf, sizeof buf));
            CHECK_EQ_INT(skymem_crc32c_fold(crcs, count + 1u, (uint32_t)chunk, sizeof buf), 0u); /* wrong count */
        }
        crcs[0] = skymem_crc32c(buf, 0);
        CHECK_EQ_INT(skymem_crc32c_fold(crcs, 1, 6144, 0), 0u); /* the empty block */
        CHECK_EQ_INT(skymem_crc32c_fold(NULL, 1, 6144, 10), 0u);
    }
}

/* every check with the CRC32 instruction (where this CPU has it) and with slice-by-8 */
int main(void)
{
    int accel = skymem_crc32c_use_accel(1);
    printf("crc32c: %s\n", skymem_crc32c_impl());
    known_answers();
    skymem_crc32c_use_accel(0);
    known_answers();
    skymem_crc32c_use_accel(accel);
    return check_report("crc32c");
}
