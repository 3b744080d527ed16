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

#include "skymem_auth.h"
#include "skymem_codec.h"
#include "skymem_link.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The trailer check runs on whatever arrives (it reads the key id, sequence
 * and source before any MAC): it must stay inside the datagram, and whatever it
 * accepts (the corpus has packets signed with ground key 1) must be a replay the
 * second time. The ring holds a ground key (1) and a link key (the link id of
 * neighbour (0,2)), as a satellite's does; and the link layer's check-strip-sign
 * (skymem_link_prepare) of the same input must stay inside it too, and never put
 * out more than it was given room for. */
static void fuzz_auth(const uint8_t *data, size_t size)
{
    static skymem_auth_t ring;
    static uint8_t copy[SKYMEM_MAX_PACKET + SKYMEM_AUTH_TRAILER_LEN];
    static int ready;
    int rc;
    if (!ready) {
        static const uint8_t kl[16] = {1}, k1[16] = {2};
        skymem_auth_init(&ring, 0);
        ring.owner_plane = 0;
        ring.owner_sat = 1;
        skymem_auth_add_key(&ring, skymem_auth_link_id(0, 2), kl, sizeof kl);
        skymem_auth_add_key(&ring, 1, k1, sizeof k1);
        ready = 1;
    }
    rc = skymem_auth_verify(&ring, data, size);
    if (rc == SKYMEM_AUTH_OK && skymem_auth_verify(&ring, data, size) != SKYMEM_AUTH_E_REPLAY) abort();
    if (size <= SKYMEM_MAX_PACKET) {
        int relayed;
        for (relayed = 0; relayed < 2; relayed++) {
            memcpy(copy, data, size);
            rc = skymem_link_prepare(&ring, relayed, 0, 2, 1700000000000000ull, copy, size, sizeof copy);
            if (rc > (int)sizeof copy) abort();
        }
        ring.ahead_limit = 0; /* the clock prepare set: verify above stays clockless */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    skymem_msg_t m;
    uint8_t *copy;
    fuzz_auth(data, size);
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
