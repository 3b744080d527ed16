/* skymem_crc32c.c -- CRC32C (Castagnoli), software slice-by-8. */
#include "skymem_crc32c.h"

#include "skymem_crc32c_table.h"

uint32_t skymem_crc32c_update(uint32_t crc, const uint8_t *p, size_t len)
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

uint32_t skymem_crc32c(const uint8_t *data, size_t len) { return skymem_crc32c_update(0, data, len); }
