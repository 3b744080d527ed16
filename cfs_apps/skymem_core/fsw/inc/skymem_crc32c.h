/* skymem_crc32c.h -- CRC32C (Castagnoli, reflected poly 0x82F63B78), software slice-by-8. */
#ifndef SKYMEM_CRC32C_H
#define SKYMEM_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CRC32C of data; crc32c("123456789") == 0xE3069283. */
uint32_t skymem_crc32c(const uint8_t *data, size_t len);
/* Continue a running CRC: pass the previous result (0 to start). */
uint32_t skymem_crc32c_update(uint32_t crc, const uint8_t *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
