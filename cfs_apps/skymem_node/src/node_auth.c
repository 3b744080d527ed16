/* node_auth.c -- authenticated commands on the native node (skymem_auth.h).
 *
 * Off unless keys are given (--auth-keys FILE or the SKYMEM_AUTH_KEYS
 * environment variable). When on:
 *  - SET_CHUNK, EVICT_BLOCK, MIGRATE, SET_PARAM and RESET_COUNTERS addressed to
 *    this satellite must carry a valid, fresh trailer. A forged or unsigned one
 *    is answered NAK AUTH_FAILED; a replay (valid tag, sequence already seen) is
 *    dropped silently -- the original was already handled and answered. Both
 *    count in auth_failures.
 *  - Any other command that carries a trailer is checked the same way.
 *  - Control-MID SET_PARAM / RESET_COUNTERS (no route header, so no trailer)
 *    are refused and counted.
 *  - What this satellite sends other satellites (gossip EVICT_BLOCK, migration
 *    SET_CHUNK) is signed with the constellation key, id 0, which the key file
 *    must therefore contain.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "node.h"

static uint64_t unix_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

int node_auth_setup(node_t *n)
{
    const char *path = n->cfg.auth_keys[0] ? n->cfg.auth_keys : getenv("SKYMEM_AUTH_KEYS");
    FILE *f;
    char text[8192], err[128];
    size_t len;
    int rc;
    if (path == NULL || path[0] == '\0') return 0; /* auth off */
    f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "skymem_node: cannot open auth key file %s: %s\n", path, strerror(errno));
        return -1;
    }
    len = fread(text, 1, sizeof text, f);
    if (!feof(f)) {
        fprintf(stderr, "skymem_node: auth key file %s is larger than %zu bytes\n", path, sizeof text - 1);
        fclose(f);
        return -1;
    }
    fclose(f);
    n->auth = (skymem_auth_t *)calloc(1, sizeof *n->auth);
    if (n->auth == NULL) return -1;
    /* sequences signed before we started cannot be fresh: the floor is our start time */
    skymem_auth_init(n->auth, unix_us());
    rc = skymem_auth_load_text(n->auth, text, len, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "skymem_node: auth key file %s: %s\n", path, err);
        return -1;
    }
    if (skymem_auth_find_key(n->auth, SKYMEM_AUTH_CONSTELLATION_KEY) == NULL) {
        fprintf(stderr, "skymem_node: auth key file %s has no key id 0 (the constellation key)\n", path);
        return -1;
    }
    node_log(n, NODE_LOG_INFO, "command authentication on: %d keys", rc);
    return 0;
}

void node_auth_teardown(node_t *n)
{
    free(n->auth);
    n->auth = NULL;
}

int node_auth_refuse_control(node_t *n, const skymem_msg_t *m)
{
    if (n->auth == NULL || !skymem_auth_required(m->cc)) return 0;
    n->c.auth_failures++;
    node_log(n, NODE_LOG_WARN, "unauthenticated control command cc %u refused", m->cc);
    return 1;
}

int node_auth_refuse(node_t *n, const skymem_msg_t *m, const uint8_t *pkt, size_t len, const skymem_route_t *r)
{
    int rc;
    if (n->auth == NULL) return 0;
    if (m->auth == NULL) {
        if (!skymem_auth_required(m->cc)) return 0;
        rc = SKYMEM_AUTH_E_NO_TRAILER;
    } else {
        rc = skymem_auth_verify(n->auth, pkt, len);
        if (rc == SKYMEM_AUTH_OK) return 0;
    }
    n->c.auth_failures++;
    node_log(n, NODE_LOG_DEBUG, "cc %u from (%u,%u) refused: %s", m->cc, r->src_plane, r->src_sat,
             skymem_auth_strerror(rc));
    if (rc != SKYMEM_AUTH_E_REPLAY && !(r->flags & SKYMEM_RF_GOSSIP))
        node_reply(n, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_AUTH_FAILED, m->chunk_id, 0,
                   m->has_block_hash ? m->block_hash : NULL, m->has_block_hash ? SKYMEM_BLOCK_HASH_LEN : 0);
    return 1;
}

size_t node_auth_sign(node_t *n, skymem_route_t *r, uint8_t *pkt, size_t len, size_t cap)
{
    int rc;
    if (n->auth == NULL) return len;
    rc = skymem_auth_sign(n->auth, SKYMEM_AUTH_CONSTELLATION_KEY, skymem_auth_next_seq(n->auth, unix_us()), pkt, len, cap);
    if (rc < 0) {
        node_log(n, NODE_LOG_ERROR, "cannot sign a %zu-byte command: %s", len, skymem_auth_strerror(rc));
        return 0;
    }
    r->flags |= SKYMEM_RF_AUTH;
    return (size_t)rc;
}
