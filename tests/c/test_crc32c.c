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

int main(void)
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
    return check_report("crc32c");
}
