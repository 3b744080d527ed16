/* node_auth.c -- authenticated commands and replies on the native node (skymem_auth.h).
 *
 * Off unless keys are given (--auth-keys FILE or the SKYMEM_AUTH_KEYS
 * environment variable; the launcher gives every node its constellation's key
 * file unless --insecure). When on:
 *  - every data-plane command addressed to this satellite must carry a valid,
 *    fresh trailer. A forged or unsigned one is answered NAK AUTH_FAILED; a
 *    replay (valid tag, sequence already seen or older than this node's start)
 *    is dropped silently -- the original was already handled and answered. Both
 *    count in auth_failures and change nothing else.
 *  - Control-MID commands and ISL_ROUTER's own commands (no route header, so no
 *    trailer) are refused and counted; SEND_HK (read-only) is still answered.
 *  - Every reply this satellite sends is signed: to the ground with the key of
 *    the latest verified ground command, to a satellite (a migration's ACK) with
 *    the constellation key. Replies addressed to this satellite must be signed
 *    and fresh, so a forged or replayed migration ACK deletes nothing.
 *  - What this satellite sends other satellites (gossip EVICT_BLOCK, migration
 *    SET_CHUNK, ACKs) is signed with the constellation key, id 0, which the key
 *    file must therefore contain.
 * The replay floor is the node's start time (Unix microseconds; ground and
 * satellites share the clock, as mission time already assumes), so traffic
 * recorded before a restart stays refused after it.
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
    skymem_auth_init(n->auth, skymem_auth_seq_at(unix_us()));
    rc = skymem_auth_load_text(n->auth, text, len, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "skymem_node: auth key file %s: %s\n", path, err);
        return -1;
    }
    if (skymem_auth_find_key(n->auth, SKYMEM_AUTH_CONSTELLATION_KEY) == NULL) {
        fprintf(stderr, "skymem_node: auth key file %s has no key id 0 (the constellation key)\n", path);
        return -1;
    }
    { /* until a ground station speaks, replies to the ground are signed with the lowest ground key */
        uint32_t i;
        n->reply_key_id = 0;
        for (i = 0; i < n->auth->n_keys; i++) {
            uint32_t id = n->auth->keys[i].id;
            if (id != SKYMEM_AUTH_CONSTELLATION_KEY && (n->reply_key_id == 0 || id < n->reply_key_id))
                n->reply_key_id = id;
        }
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
    if (n->auth == NULL) return 0;
    n->c.auth_failures++;
    node_log(n, NODE_LOG_WARN, "unauthenticated control command (message id %04x, cc %u) refused", m->mid, m->cc);
    return 1;
}

int node_auth_refuse(node_t *n, const skymem_msg_t *m, const uint8_t *pkt, size_t len, const skymem_route_t *r,
                     const struct sockaddr_in *answer_to)
{
    int rc;
    if (n->auth == NULL) return 0;
    if (m->auth == NULL) {
        if (!skymem_auth_required(m->cc)) return 0;
        rc = SKYMEM_AUTH_E_NO_TRAILER;
    } else {
        if (m->cc == SKYMEM_SET_CHUNK_CC && m->data != NULL) { /* the tag and the chunk's CRC in one pass */
            rc = skymem_auth_verify_crc(n->auth, pkt, len, (size_t)(m->data - pkt), m->desc.data_len, &n->set_crc);
            n->set_crc_of = rc == SKYMEM_AUTH_OK ? m->data : NULL;
        } else {
            rc = skymem_auth_verify(n->auth, pkt, len);
        }
        if (rc == SKYMEM_AUTH_OK) {
            if (r->src_plane == SKYMEM_GROUND_PLANE) n->reply_key_id = skymem_get_u32(m->auth + SKYMEM_AT_KEY_ID);
            return 0;
        }
    }
    n->c.auth_failures++;
    node_log(n, NODE_LOG_DEBUG, "cc %u from (%u,%u) refused: %s", m->cc, r->src_plane, r->src_sat,
             skymem_auth_strerror(rc));
    if (rc != SKYMEM_AUTH_E_REPLAY && !(r->flags & SKYMEM_RF_GOSSIP))
        node_reply_to(n, answer_to, r, SKYMEM_REPLY_NAK, m->cc, SKYMEM_NAK_AUTH_FAILED, m->chunk_id, 0,
                      m->has_block_hash ? m->block_hash : NULL, m->has_block_hash ? SKYMEM_BLOCK_HASH_LEN : 0);
    return 1;
}

static size_t sign_with(node_t *n, uint32_t key_id, skymem_route_t *r, uint8_t *pkt, size_t len, size_t cap)
{
    int rc;
    if (n->auth == NULL) return len;
    rc = skymem_auth_sign(n->auth, key_id, skymem_auth_next_seq(n->auth, unix_us()), pkt, len, cap);
    if (rc < 0) {
        node_log(n, NODE_LOG_ERROR, "cannot sign a %zu-byte packet with key %u: %s", len, key_id, skymem_auth_strerror(rc));
        return 0;
    }
    r->flags |= SKYMEM_RF_AUTH;
    return (size_t)rc;
}

size_t node_auth_sign(node_t *n, skymem_route_t *r, uint8_t *pkt, size_t len, size_t cap)
{
    return sign_with(n, SKYMEM_AUTH_CONSTELLATION_KEY, r, pkt, len, cap);
}

size_t node_auth_sign_reply(node_t *n, skymem_route_t *r, uint8_t *pkt, size_t len, size_t cap)
{
    return sign_with(n, r->dst_plane == SKYMEM_GROUND_PLANE ? n->reply_key_id : SKYMEM_AUTH_CONSTELLATION_KEY, r, pkt,
                     len, cap);
}

int node_auth_refuse_reply(node_t *n, const skymem_msg_t *m, const uint8_t *pkt, size_t len)
{
    int rc;
    if (n->auth == NULL) return 0;
    rc = m->auth == NULL ? SKYMEM_AUTH_E_NO_TRAILER : skymem_auth_verify(n->auth, pkt, len);
    if (rc == SKYMEM_AUTH_OK) return 0;
    n->c.auth_failures++;
    node_log(n, NODE_LOG_DEBUG, "reply from (%u,%u), request %u, ignored: %s", m->route.src_plane, m->route.src_sat,
             m->route.request_id, skymem_auth_strerror(rc));
    return 1;
}
