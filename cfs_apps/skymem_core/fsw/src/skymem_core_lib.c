/*
 * skymem_core_lib.c -- cFS library entry point for skymem_core.
 *
 * cFE calls SKYMEM_CORE_Init once when the startup script loads the library
 * (CFE_LIB line). The codec, store and router themselves keep no global state,
 * so the init only proves the loaded code is sane before any app uses it:
 * a known CRC32C check value and a round trip through the packet builder and
 * parser. A failure stops cFE from starting the apps that depend on it.
 *
 * This is the only core file that includes cFE headers; it is compiled only
 * in a cFS mission (see ../../CMakeLists.txt), never in the native build.
 */
#include "cfe.h"

#include "skymem_codec.h"
#include "skymem_crc32c.h"
#include "skymem_wire.h"

#define SKYMEM_CORE_LIB_VERSION "1.0.0"

int32 SKYMEM_CORE_Init(void)
{
    static const uint8_t check_input[] = "123456789";
    uint8_t              pkt[SKYMEM_CMD_HDR_LEN];
    skymem_msg_t         msg;
    int                  len;
    int                  rc;

    if (skymem_crc32c(check_input, sizeof(check_input) - 1u) != 0xE3069283u)
    {
        OS_printf("SKYMEM_CORE: CRC32C self-check failed\n");
        return CFE_STATUS_NOT_IMPLEMENTED;
    }

    /* A NOOP built by the codec must parse back as a NOOP of the right length. */
    len = skymem_build_cmd(pkt, sizeof(pkt), SKYMEM_CMD_MID, SKYMEM_NOOP_CC, 0, NULL, 0);
    rc  = (len == (int)SKYMEM_CMD_HDR_LEN) ? skymem_parse(pkt, (size_t)len, &msg) : len;
    if (rc != SKYMEM_OK || msg.mid != SKYMEM_CMD_MID || msg.cc != SKYMEM_NOOP_CC)
    {
        OS_printf("SKYMEM_CORE: codec self-check failed (%s)\n", skymem_strerror(rc));
        return CFE_STATUS_NOT_IMPLEMENTED;
    }

    OS_printf("SKYMEM_CORE Lib Initialized. Version %s (codec, chunk store, +GRID router)\n",
              SKYMEM_CORE_LIB_VERSION);
    return CFE_SUCCESS;
}
