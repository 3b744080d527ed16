/* node_config.c -- parse and validate every skymem_node option. */
#include "node_config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int parse_u64(const char *key, const char *v, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    unsigned long long x;
    if (v == NULL || *v == '\0' || *v == '-' || *v == '+' || *v == ' ') {
        fprintf(stderr, "skymem_node: --%s needs a non-negative integer\n", key);
        return -1;
    }
    errno = 0;
    x = strtoull(v, &end, 10);
    if (errno || *end != '\0') {
        fprintf(stderr, "skymem_node: --%s: '%s' is not an integer\n", key, v);
        return -1;
    }
    if (x < lo || x > hi) {
        fprintf(stderr, "skymem_node: --%s: %llu out of range [%llu, %llu]\n", key, x, (unsigned long long)lo,
                (unsigned long long)hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_u32(const char *key, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t x;
    if (parse_u64(key, v, lo, hi, &x)) return -1;
    *out = (uint32_t)x;
    return 0;
}

static int parse_dbl(const char *key, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x;
    if (v == NULL || *v == '\0' || *v == ' ') {
        fprintf(stderr, "skymem_node: --%s needs a number\n", key);
        return -1;
    }
    errno = 0;
    x = strtod(v, &end);
    if (errno || *end != '\0' || !isfinite(x)) {
        fprintf(stderr, "skymem_node: --%s: '%s' is not a number\n", key, v);
        return -1;
    }
    if (x < lo || x > hi) {
        fprintf(stderr, "skymem_node: --%s: %g out of range [%g, %g]\n", key, x, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
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
    return parse_u32(key, colon + 1, 1, 65535, &cfg->tlm_port);
}

static int parse_file(node_config_t *cfg, const char *path, int depth, int *seen);

/* Applies one key/value; *seen tracks the four required keys. */
static int apply(node_config_t *cfg, const char *key, const char *v, int depth, int *seen)
{
    if (!strcmp(key, "plane")) { *seen |= 1; return parse_u32(key, v, 0, 65534, &cfg->plane); }
    if (!strcmp(key, "sat")) { *seen |= 2; return parse_u32(key, v, 0, 65534, &cfg->sat); }
    if (!strcmp(key, "planes")) { *seen |= 4; return parse_u32(key, v, 1, 65534, &cfg->planes); }
    if (!strcmp(key, "sats")) { *seen |= 8; return parse_u32(key, v, 1, 65534, &cfg->sats); }
    if (!strcmp(key, "altitude-km")) return parse_dbl(key, v, 100.0, 100000.0, &cfg->altitude_km);
    if (!strcmp(key, "inclination-deg")) return parse_dbl(key, v, 0.0, 180.0, &cfg->inclination_deg);
    if (!strcmp(key, "walker-phase")) return parse_u32(key, v, 0, 65535, &cfg->walker_phase);
    if (!strcmp(key, "bind")) { cfg->bind_given = 1; return parse_str(key, v, cfg->bind, sizeof cfg->bind); }
    if (!strcmp(key, "isl-port-base")) return parse_u32(key, v, 1, 65535, &cfg->isl_port_base);
    if (!strcmp(key, "ground-port-base")) return parse_u32(key, v, 1, 65535, &cfg->ground_port_base);
    if (!strcmp(key, "addresses")) {
        if (v && !strcmp(v, "shared")) cfg->per_satellite_addresses = 0;
        else if (v && !strcmp(v, "per-satellite")) cfg->per_satellite_addresses = 1;
        else {
            fprintf(stderr, "skymem_node: --addresses must be shared or per-satellite\n");
            return -1;
        }
        return 0;
    }
    if (!strcmp(key, "auth-keys")) return parse_str(key, v, cfg->auth_keys, sizeof cfg->auth_keys);
    if (!strcmp(key, "auth-floor")) return parse_str(key, v, cfg->auth_floor, sizeof cfg->auth_floor);
    if (!strcmp(key, "peers")) return parse_str(key, v, cfg->peers, sizeof cfg->peers);
    if (!strcmp(key, "tlm-dest")) return parse_tlm_dest(key, v, cfg);
    if (!strcmp(key, "memory-budget")) return parse_u64(key, v, 4096, 1ull << 40, &cfg->memory_budget);
    if (!strcmp(key, "chunk-size")) return parse_u32(key, v, 1, SKYMEM_MAX_CHUNK_DATA, &cfg->chunk_size);
    if (!strcmp(key, "epoch-ms")) { cfg->epoch_given = 1; return parse_u64(key, v, 0, 1ull << 53, &cfg->epoch_ms); }
    if (!strcmp(key, "time-scale")) {
        if (parse_dbl(key, v, 0.0, 1e6, &cfg->time_scale)) return -1;
        if (cfg->time_scale <= 0.0) {
            fprintf(stderr, "skymem_node: --time-scale must be > 0\n");
            return -1;
        }
        return 0;
    }
    if (!strcmp(key, "delay-scale")) return parse_dbl(key, v, 0.0, 1e6, &cfg->delay_scale);
    if (!strcmp(key, "ground-delay-ms")) return parse_dbl(key, v, 0.0, 600000.0, &cfg->ground_delay_ms);
    if (!strcmp(key, "bandwidth-mbps")) return parse_dbl(key, v, 0.0, 1e6, &cfg->bandwidth_mbps);
    if (!strcmp(key, "loss")) return parse_dbl(key, v, 0.0, 1.0, &cfg->loss);
    if (!strcmp(key, "dup")) return parse_dbl(key, v, 0.0, 1.0, &cfg->dup);
    if (!strcmp(key, "reorder")) return parse_dbl(key, v, 0.0, 1.0, &cfg->reorder);
    if (!strcmp(key, "corrupt")) return parse_dbl(key, v, 0.0, 1.0, &cfg->corrupt);
    if (!strcmp(key, "seed")) return parse_u64(key, v, 0, UINT64_MAX, &cfg->seed);
    if (!strcmp(key, "log-level")) {
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
    if (!strcmp(key, "config")) {
        if (v == NULL || *v == '\0') {
            fprintf(stderr, "skymem_node: --config needs a file name\n");
            return -1;
        }
        return parse_file(cfg, v, depth + 1, seen);
    }
    fprintf(stderr, "skymem_node: unknown option --%s\n", key);
    return -1;
}

static char *trim(char *s)
{
    char *e;
    while (*s == ' ' || *s == '\t') s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = '\0';
    return s;
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
        char *s, *eq, *key, *val;
        lineno++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            fprintf(stderr, "skymem_node: %s:%d: line too long\n", path, lineno);
            rc = -1;
            break;
        }
        s = trim(line);
        if (*s == '\0' || *s == '#') continue;
        eq = strchr(s, '=');
        if (eq == NULL) {
            fprintf(stderr, "skymem_node: %s:%d: expected 'key = value'\n", path, lineno);
            rc = -1;
            break;
        }
        *eq = '\0';
        key = trim(s);
        val = trim(eq + 1);
        if (!strncmp(key, "--", 2)) key += 2;
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
