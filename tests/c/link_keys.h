/* link_keys.h -- version 4 key files for tests: a satellite's own UP and DOWN keys and the keys of its
 * links, as the launcher writes them (skymem_auth.h, "A satellite's key file"). The key of the link
 * (fp,fs) -> (tp,ts) is made from its two ends, so (fp,fs)'s link-out for (tp,ts) is (tp,ts)'s link-in
 * for (fp,fs), and every other link's key differs. */
#ifndef SKYMEM_TEST_LINK_KEYS_H
#define SKYMEM_TEST_LINK_KEYS_H
#include <stdio.h>
#include <string.h>

#include "skymem_auth.h"
#include "skymem_router.h"

/* 16 bytes in hex (32 digits) for the link from (fp,fs) to (tp,ts). */
static inline void link_key_hex(char out[33], unsigned fp, unsigned fs, unsigned tp, unsigned ts)
{
    snprintf(out, 33, "%04x%04x%04x%04x5a5a5a5a5a5a5a5a", fp & 0xFFFFu, fs & 0xFFFFu, tp & 0xFFFFu, ts & 0xFFFFu);
}

/* Satellite (plane, sat)'s key file in a planes x sats torus: a link-in and a link-out line for each
 * distinct neighbour, then `up 1 UP_HEX` and `down 1 DOWN_HEX`. Returns its length; *n_keys: how many
 * keys it holds (what skymem_auth_load_text returns). */
static inline size_t sat_key_file(char *buf, size_t cap, unsigned planes, unsigned sats, unsigned plane,
                                  unsigned sat, const char *up_hex, const char *down_hex, int *n_keys)
{
    uint32_t seen[4][2];
    int n_seen = 0, d, k, keys = 0;
    size_t len = (size_t)snprintf(buf, cap, "skymem-keys 4 satellite %u %u\n", plane, sat);
    for (d = SKYMEM_DIR_NORTH; d <= SKYMEM_DIR_EAST; d++) {
        uint32_t np, ns;
        char in[33], out[33];
        int dup = 0;
        skymem_neighbour(planes, sats, plane, sat, (skymem_dir_t)d, &np, &ns);
        if (np == plane && ns == sat) continue; /* a ring one wide */
        for (k = 0; k < n_seen; k++)
            if (seen[k][0] == np && seen[k][1] == ns) dup = 1; /* a ring two wide: north == south */
        if (dup) continue;
        seen[n_seen][0] = np, seen[n_seen][1] = ns, n_seen++;
        link_key_hex(in, np, ns, plane, sat);
        link_key_hex(out, plane, sat, np, ns);
        len += (size_t)snprintf(buf + len, cap - len, "link-in %u %u %s\nlink-out %u %u %s\n", (unsigned)np,
                                (unsigned)ns, in, (unsigned)np, (unsigned)ns, out);
        keys += 2;
    }
    len += (size_t)snprintf(buf + len, cap - len, "up 1 %s\ndown 1 %s\n", up_hex, down_hex);
    if (n_keys != NULL) *n_keys = keys + 2;
    return len;
}

/* Loads that file into a (initialised with floor); returns skymem_auth_load_text's result, 0 on a mismatch
 * with the count expected. */
static inline int load_sat_keys(skymem_auth_t *a, uint64_t floor, unsigned planes, unsigned sats, unsigned plane,
                                unsigned sat, const char *up_hex, const char *down_hex)
{
    static char text[2048];
    char err[128];
    int want, rc;
    size_t len = sat_key_file(text, sizeof text, planes, sats, plane, sat, up_hex, down_hex, &want);
    skymem_auth_init(a, floor);
    rc = skymem_auth_load_text(a, text, len, err, sizeof err);
    if (rc != want) fprintf(stderr, "load_sat_keys (%u,%u): %d keys (%s), wanted %d\n", plane, sat, rc, err, want);
    return rc == want ? rc : 0;
}
#endif
