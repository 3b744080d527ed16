/* node_config.c -- parse and validate every skymem_node option. */
#include "node_config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skymem_options.h"
#include "skymem_wire.h"

static const char USAGE[] =
    "usage: skymem_node --plane P --sat S --planes N --sats M\n"
    "  [--altitude-km 550] [--inclination-deg 53] [--walker-phase 0]\n"
    "  [--bind 127.0.0.1] [--isl-port-base 20000] [--ground-port-base 40000]\n"
    "  [--addresses shared|per-satellite]  (per-satellite: satellite i on --bind + i, ports = the bases)\n"
    "  [--peers FILE]  (lines: plane sat host isl_port ground_port)\n"
    "  [--memory-budget BYTES] [--chunk-size BYTES]\n"
    "  [--epoch-ms MS] [--time-scale X] [--delay-scale X] [--ground-delay-ms X]\n"
    "  [--bandwidth-mbps X] [--loss P] [--dup P] [--reorder P] [--corrupt P] [--seed N]\n"
    "  [--config FILE] [--log-level error|warn|info|debug]\n"
    "  [--auth-keys FILE]  (lines: key_id hex_key; id 0 = constellation key; default $SKYMEM_AUTH_KEYS)\n"
    "  [--auth-floor FILE] (the replay floor kept across restarts; default: the key file + .floor.PLANE-SAT)\n"
    "  [--tlm-dest HOST:PORT]  (housekeeping of both apps goes there, as TO_LAB sends it on cFS)\n";

/* The value of integer option o, worded for the command line when it is not one. */
static int read_integer(const skymem_option_t *o, const char *v, uint64_t *out)
{
    int rc = skymem_option_integer(o, v, out);
    if (rc == SKYMEM_OPTION_NOT_A_VALUE)
        fprintf(stderr, "skymem_node: --%s: '%s' is not a non-negative integer\n", o->name, v ? v : "");
    else if (rc == SKYMEM_OPTION_OUT_OF_RANGE)
        fprintf(stderr, "skymem_node: --%s: %s out of range [%llu, %llu]\n", o->name, v, (unsigned long long)o->lo,
                (unsigned long long)o->hi);
    return rc == SKYMEM_OPTION_OK ? 0 : -1;
}

static int read_number(const skymem_option_t *o, const char *v, double *out)
{
    int rc = skymem_option_number(o, v, out);
    if (rc == SKYMEM_OPTION_NOT_A_VALUE)
        fprintf(stderr, "skymem_node: --%s: '%s' is not a number\n", o->name, v ? v : "");
    else if (rc == SKYMEM_OPTION_OUT_OF_RANGE)
        fprintf(stderr, "skymem_node: --%s: %s out of range [%g, %g]\n", o->name, v, o->min, o->max);
    return rc == SKYMEM_OPTION_OK ? 0 : -1;
}

static int parse_str(const char *key, const char *v, char *out, size_t cap)
{
    if (v == NULL || *v == '\0') {
        fprintf(stderr, "skymem_node: --%s needs a value\n", key);
        return -1;
    }
    if (strlen(v) >= cap) {
        fprintf(stderr, "skymem_node: --%s: value too long (max %zu)\n", key, cap - 1);
        return -1;
    }
    strcpy(out, v);
    return 0;
}

/* "a.b.c.d:port": where a cFS mission's TO_LAB would send this satellite's telemetry. */
static int parse_tlm_dest(const char *key, const char *v, node_config_t *cfg)
{
    const char *colon = v ? strrchr(v, ':') : NULL;
    struct in_addr a;
    size_t n;
    if (colon == NULL || colon == v || (n = (size_t)(colon - v)) >= sizeof cfg->tlm_host) {
        fprintf(stderr, "skymem_node: --%s wants IPV4:PORT, got '%s'\n", key, v ? v : "");
        return -1;
    }
    memcpy(cfg->tlm_host, v, n);
    cfg->tlm_host[n] = '\0';
    if (inet_pton(AF_INET, cfg->tlm_host, &a) != 1) {
        fprintf(stderr, "skymem_node: --%s: '%s' is not an IPv4 address\n", key, cfg->tlm_host);
        return -1;
    }
    {
        char *end = NULL;
        unsigned long port;
        errno = 0;
        port = strtoul(colon + 1, &end, 10);
        if (errno || end == colon + 1 || *end != '\0' || colon[1] < '0' || colon[1] > '9' || port < 1 ||
            port > 65535) {
            fprintf(stderr, "skymem_node: --%s: port '%s' is not 1..65535\n", key, colon + 1);
            return -1;
        }
        cfg->tlm_port = (uint32_t)port;
        return 0;
    }
}

static int parse_file(node_config_t *cfg, const char *path, int depth, int *seen);

/* Applies one key/value; *seen tracks the four required keys. Which keys exist, their kinds and ranges are the
 * core's (skymem_options.h), shared with SKYMEM on cFS; this says where each value goes. */
static int apply(node_config_t *cfg, const char *key, const char *v, int depth, int *seen)
{
    const skymem_option_t *o = skymem_option_find(key);
    uint64_t u = 0;
    double d = 0.0;
    if (o == NULL) {
        fprintf(stderr, "skymem_node: unknown option --%s\n", key);
        return -1;
    }
    if (o->where == SKYMEM_OPTION_CFS) {
        fprintf(stderr, "skymem_node: --%s is an option of SKYMEM on cFS, not of skymem_node\n", key);
        return -1;
    }
    if (o->kind == SKYMEM_OPTION_INTEGER && read_integer(o, v, &u)) return -1;
    if (o->kind == SKYMEM_OPTION_NUMBER && read_number(o, v, &d)) return -1;
    if (!strcmp(o->name, "plane")) { *seen |= 1; cfg->plane = (uint32_t)u; return 0; }
    if (!strcmp(o->name, "sat")) { *seen |= 2; cfg->sat = (uint32_t)u; return 0; }
    if (!strcmp(o->name, "planes")) { *seen |= 4; cfg->planes = (uint32_t)u; return 0; }
    if (!strcmp(o->name, "sats")) { *seen |= 8; cfg->sats = (uint32_t)u; return 0; }
    if (!strcmp(o->name, "altitude-km")) { cfg->altitude_km = d; return 0; }
    if (!strcmp(o->name, "inclination-deg")) { cfg->inclination_deg = d; return 0; }
    if (!strcmp(o->name, "walker-phase")) { cfg->walker_phase = (uint32_t)u; return 0; }
    if (!strcmp(o->name, "bind")) { cfg->bind_given = 1; return parse_str(key, v, cfg->bind, sizeof cfg->bind); }
    if (!strcmp(o->name, "isl-port-base")) { cfg->isl_port_base = (uint32_t)u; return 0; }
    if (!strcmp(o->name, "ground-port-base")) { cfg->ground_port_base = (uint32_t)u; return 0; }
    if (!strcmp(o->name, "addresses")) {
        if (v && !strcmp(v, "shared")) cfg->per_satellite_addresses = 0;
        else if (v && !strcmp(v, "per-satellite")) cfg->per_satellite_addresses = 1;
        else {
            fprintf(stderr, "skymem_node: --addresses must be shared or per-satellite\n");
            return -1;
        }
        return 0;
    }
    if (!strcmp(o->name, "auth-keys")) return parse_str(key, v, cfg->auth_keys, sizeof cfg->auth_keys);
    if (!strcmp(o->name, "auth-floor")) return parse_str(key, v, cfg->auth_floor, sizeof cfg->auth_floor);
    if (!strcmp(o->name, "peers")) return parse_str(key, v, cfg->peers, sizeof cfg->peers);
    if (!strcmp(o->name, "tlm-dest")) return parse_tlm_dest(key, v, cfg);
    if (!strcmp(o->name, "memory-budget")) { cfg->memory_budget = u; return 0; }
    if (!strcmp(o->name, "chunk-size")) { cfg->chunk_size = (uint32_t)u; return 0; }
    if (!strcmp(o->name, "epoch-ms")) { cfg->epoch_given = 1; cfg->epoch_ms = u; return 0; }
    if (!strcmp(o->name, "time-scale")) { cfg->time_scale = d; return 0; }
    if (!strcmp(o->name, "delay-scale")) { cfg->delay_scale = d; return 0; }
    if (!strcmp(o->name, "ground-delay-ms")) { cfg->ground_delay_ms = d; return 0; }
    if (!strcmp(o->name, "bandwidth-mbps")) { cfg->bandwidth_mbps = d; return 0; }
    if (!strcmp(o->name, "loss")) { cfg->loss = d; return 0; }
    if (!strcmp(o->name, "dup")) { cfg->dup = d; return 0; }
    if (!strcmp(o->name, "reorder")) { cfg->reorder = d; return 0; }
    if (!strcmp(o->name, "corrupt")) { cfg->corrupt = d; return 0; }
    if (!strcmp(o->name, "seed")) { cfg->seed = u; return 0; }
    if (!strcmp(o->name, "log-level")) {
        static const char *names[] = {"error", "warn", "info", "debug"};
        int i;
        for (i = 0; i < 4; i++)
            if (v && !strcmp(v, names[i])) {
                cfg->log_level = i;
                return 0;
            }
        fprintf(stderr, "skymem_node: --log-level must be error, warn, info or debug\n");
        return -1;
    }
    if (!strcmp(o->name, "config")) {
        if (v == NULL || *v == '\0') {
            fprintf(stderr, "skymem_node: --config needs a file name\n");
            return -1;
        }
        return parse_file(cfg, v, depth + 1, seen);
    }
    /* a name in the core's table this runtime does not place: a programming error, said as such */
    fprintf(stderr, "skymem_node: option --%s is known but not handled (a bug)\n", key);
    return -1;
}

static int parse_file(node_config_t *cfg, const char *path, int depth, int *seen)
{
    FILE *f;
    char line[1024];
    int lineno = 0, rc = 0;
    if (depth > 4) {
        fprintf(stderr, "skymem_node: --config files nested too deeply\n");
        return -1;
    }
    f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "skymem_node: cannot open config file %s: %s\n", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && fgets(line, sizeof line, f)) {
        char *key, *val;
        int kind;
        lineno++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            fprintf(stderr, "skymem_node: %s:%d: line too long\n", path, lineno);
            rc = -1;
            break;
        }
        kind = skymem_config_line(line, &key, &val);
        if (kind == SKYMEM_CONFIG_BLANK) continue;
        if (kind == SKYMEM_CONFIG_MALFORMED) {
            fprintf(stderr, "skymem_node: %s:%d: expected 'key = value'\n", path, lineno);
            rc = -1;
            break;
        }
        rc = apply(cfg, key, val, depth, seen);
        if (rc) fprintf(stderr, "skymem_node: (in %s line %d)\n", path, lineno);
    }
    fclose(f);
    return rc;
}

int node_config_parse(node_config_t *cfg, int argc, char **argv)
{
    int i, seen = 0;
    memset(cfg, 0, sizeof(*cfg));
    cfg->altitude_km = 550.0;
    cfg->inclination_deg = 53.0;
    strcpy(cfg->bind, "127.0.0.1");
    cfg->isl_port_base = 20000;
    cfg->ground_port_base = 40000;
    cfg->memory_budget = 64ull << 20;
    cfg->chunk_size = SKYMEM_DEFAULT_CHUNK_DATA;
    cfg->time_scale = 1.0;
    cfg->delay_scale = 1.0;
    cfg->log_level = NODE_LOG_INFO;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        char key[64];
        const char *eq;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            fprintf(stderr, "skymem_node: unexpected argument '%s'\n%s", a, USAGE);
            return -1;
        }
        eq = strchr(a, '=');
        if (eq) { /* --key=value */
            size_t n = (size_t)(eq - a - 2);
            if (n >= sizeof key) n = sizeof key - 1;
            memcpy(key, a + 2, n);
            key[n] = '\0';
            v = eq + 1;
        } else {
            if (strlen(a + 2) >= sizeof key) {
                fprintf(stderr, "skymem_node: unknown option %s\n", a);
                return -1;
            }
            strcpy(key, a + 2);
            if (i + 1 >= argc) {
                fprintf(stderr, "skymem_node: %s needs a value\n", a);
                return -1;
            }
            v = argv[++i];
        }
        if (apply(cfg, key, v, 0, &seen)) return -1;
    }
    if ((seen & 15) != 15) {
        fprintf(stderr, "skymem_node: --plane, --sat, --planes and --sats are required\n%s", USAGE);
        return -1;
    }
    if (cfg->plane >= cfg->planes || cfg->sat >= cfg->sats) {
        fprintf(stderr, "skymem_node: satellite (%u,%u) is outside a %u x %u grid\n", cfg->plane, cfg->sat,
                cfg->planes, cfg->sats);
        return -1;
    }
    if ((uint64_t)cfg->planes * cfg->sats > 65535u) {
        fprintf(stderr, "skymem_node: planes x sats must be at most 65535\n");
        return -1;
    }
    if (cfg->per_satellite_addresses) {
        uint64_t n = (uint64_t)cfg->planes * cfg->sats;
        struct in_addr first;
        if (cfg->peers[0]) {
            fprintf(stderr, "skymem_node: --addresses per-satellite and --peers exclude each other\n");
            return -1;
        }
        if (inet_pton(AF_INET, cfg->bind, &first) != 1) {
            fprintf(stderr, "skymem_node: --bind: '%s' is not an IPv4 address\n", cfg->bind);
            return -1;
        }
        if ((uint64_t)ntohl(first.s_addr) + n - 1 > 0xFFFFFFFFull) {
            fprintf(stderr, "skymem_node: --bind %s + %llu satellites runs past 255.255.255.255\n", cfg->bind,
                    (unsigned long long)n);
            return -1;
        }
        if (cfg->isl_port_base == cfg->ground_port_base) {
            fprintf(stderr, "skymem_node: --isl-port-base and --ground-port-base must differ\n");
            return -1;
        }
    } else if (cfg->peers[0] == '\0') {
        uint64_t n = (uint64_t)cfg->planes * cfg->sats;
        if (cfg->isl_port_base + n - 1 > 65535u || cfg->ground_port_base + n - 1 > 65535u) {
            fprintf(stderr, "skymem_node: port base + %llu satellites exceeds 65535\n", (unsigned long long)n);
            return -1;
        }
    }
    return 0;
}
