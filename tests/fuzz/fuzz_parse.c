/* fuzz_parse.c -- libFuzzer target for the packet parser.
 *
 * Needs clang (Debian/Ubuntu: apt-get install -y clang):
 *   CC=clang cmake -S . -B build-fuzz -DSKYMEM_FUZZ=ON && cmake --build build-fuzz --target fuzz_parse
 *   mkdir -p /tmp/fuzz-work
 *   build-fuzz/fuzz_parse /tmp/fuzz-work tests/fuzz/corpus -max_total_time=120 -max_len=8192
 * (libFuzzer writes new inputs into the FIRST directory: keep the checked-in seed
 * corpus second so it stays small. Regenerate it with `skymem_replay --write-corpus DIR`.) */
#include <stdlib.h>
#include <string.h>

#include "skymem_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    skymem_msg_t m;
    uint8_t *copy;
    if (skymem_parse(data, size, &m) != SKYMEM_OK) return 0;
    /* accepted packets must point only inside the input */
    if (m.payload < data || m.payload + m.payload_len > data + size) abort();
    if (m.data && m.data + m.desc.data_len > data + size) abort();
    if (m.auth && m.auth + SKYMEM_AUTH_TRAILER_LEN > data + size) abort();
    /* forwarding rewrites the route header in place: the result must still parse */
    if (m.has_route) {
        skymem_route_t r = m.route;
        copy = (uint8_t *)malloc(size);
        if (copy == NULL) return 0;
        memcpy(copy, data, size);
        if (r.ttl) r.ttl--;
        r.hops++;
        if (skymem_rewrite_route(copy, size, &r) != SKYMEM_OK || skymem_parse(copy, size, &m) != SKYMEM_OK) abort();
        free(copy);
    }
    return 0;
}
