/* skymem_crc32c.h -- CRC32C (Castagnoli, reflected poly 0x82F63B78): the x86-64 or 64-bit
 * Arm CRC32C instructions where the CPU has them, else software slice-by-8; and the algebra
 * that joins the CRCs of consecutive pieces without their bytes. */
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

/* Which implementation runs: "portable C", "x86 SSE4.2" or "Arm CRC32". */
const char *skymem_crc32c_impl(void);
/* Use the instruction when on != 0 and the CPU has it, else slice-by-8 (tests compare the two).
 * Returns 1 when the instruction is now in use. */
int skymem_crc32c_use_accel(int on);

/* CRC32C of A followed by B, from crc(A), crc(B) and the length of B alone
 * (no bytes are read; zlib's crc32_combine for this polynomial). About a
 * thousand bit operations, whatever len_b is. */
uint32_t skymem_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* CRC32C of a whole block from the CRCs of its chunks, in order: chunk i is
 * bytes [i * chunk_bytes, min((i + 1) * chunk_bytes, total_len)). A receiver
 * that checked every chunk's CRC thus knows the CRC of the block it holds
 * without reading the block again. count must be ceil(total_len / chunk_bytes)
 * (at least 1); returns 0 for inconsistent arguments. */
uint32_t skymem_crc32c_fold(const uint32_t *chunk_crcs, uint32_t count, uint32_t chunk_bytes, uint64_t total_len);

#ifdef __cplusplus
}
#endif
#endif
