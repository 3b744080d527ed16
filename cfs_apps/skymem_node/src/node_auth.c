/* node_auth.c -- the native node's key file and replay floor file; the checks themselves are
 * skymem_core's (skymem_sat.c: one authentication step for both runtimes).
 *
 * Off unless keys are given (--auth-keys FILE or the SKYMEM_AUTH_KEYS environment variable; the
 * launcher gives every node its own key file unless --insecure). The key file must be this
 * satellite's ("skymem-keys 4 satellite PLANE SAT", skymem_auth.h): the keys of its links to its
 * neighbours, which the satellites sign what they send each other with, hop by hop (skymem_link.h),
 * and its UP and DOWN keys per ground key.
 *
 * The replay floor survives a restart as on the cFS app (/cf/skymem_auth.floor beside
 * /cf/skymem_auth.keys): the core writes its high-water mark, and the replay windows it refused ahead of
 * its clock (skymem_floor.h), through node_auth_persist_floor to --auth-floor FILE, by default the key file's
 * path + ".floor.<plane>-<sat>", before it acts on a command past the mark or once it refused one ahead, and
 * reads them back here at start. A floor file that cannot be written is said once, at
 * start, and the node runs on (a restart then falls back to the clock, as before).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "skymem_floor.h"

static char floor_path[600];

/* What a previous run kept into *kept (nothing: a mark of 0, said when the file is there but unreadable or cut
 * short). */
static void read_floor(node_t *n, skymem_floor_t *kept)
{
    FILE *f = fopen(floor_path, "r");
    char text[SKYMEM_FLOOR_TEXT_MAX + 1];
    size_t len;
    kept->mark = 0;
    kept->n_ahead = 0;
    if (f == NULL) return; /* first start with keys */
    len = fread(text, 1, sizeof text, f);
    fclose(f);
    if (skymem_floor_parse(text, len, kept) != 0)
        node_log(n, NODE_LOG_WARN, "replay floor file %s unreadable: starting from the clock", floor_path);
}

int node_auth_persist_floor(void *ctx, const skymem_floor_t *kept)
{
    char tmp[sizeof floor_path + 8], text[SKYMEM_FLOOR_TEXT_MAX];
    int len = skymem_floor_format(kept, text, sizeof text), ok;
    FILE *f;
    (void)ctx;
    if (len < 0) return -1;
    /* written beside and renamed over, so a crash leaves the old mark or the new one, never half */
    snprintf(tmp, sizeof tmp, "%s.tmp", floor_path);
    f = fopen(tmp, "w");
    if (f == NULL) return -1;
    ok = fwrite(text, 1, (size_t)len, f) == (size_t)len;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, floor_path) != 0) return -1;
    return 0;
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
    skymem_auth_init(n->auth, 0);
    rc = skymem_auth_load_text(n->auth, text, len, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "skymem_node: auth key file %s: %s\n", path, err);
        return -1;
    }
    if (rc == 0) {
        fprintf(stderr, "skymem_node: auth key file %s holds no keys\n", path);
        return -1;
    }
    if (n->auth->owner_plane != n->plane || n->auth->owner_sat != n->sat) {
        fprintf(stderr, "skymem_node: auth key file %s holds the keys of satellite (%u,%u), this is (%u,%u)\n", path,
                n->auth->owner_plane, n->auth->owner_sat, n->plane, n->sat);
        return -1;
    }
    if (!skymem_link_keys_complete(n->auth, (uint16_t)n->planes, (uint16_t)n->sats)) {
        fprintf(stderr, "skymem_node: auth key file %s lacks this satellite's ground keys (up/down) or the keys of its "
                "links to its neighbours (link-in/link-out): launch again to make new keys\n", path);
        return -1;
    }
    if (n->cfg.auth_floor[0])
        snprintf(floor_path, sizeof floor_path, "%s", n->cfg.auth_floor);
    else
        snprintf(floor_path, sizeof floor_path, "%s.floor.%u-%u", path, n->plane, n->sat);
    {
        skymem_floor_t kept;
        read_floor(n, &kept);
        skymem_sat_auth_on(&n->core, n->auth, &kept);
    }
    node_log(n, NODE_LOG_INFO, "command authentication on: %d keys, replay floor kept in %s", rc, floor_path);
    return 0;
}

void node_auth_teardown(node_t *n)
{
    free(n->auth);
    n->auth = NULL;
}
