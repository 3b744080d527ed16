/* skymem_options.c -- the satellite options both runtimes read (skymem_options.h). */
#include "skymem_options.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "skymem_wire.h"

#define INTEGER(name, where, lo, hi) {name, SKYMEM_OPTION_INTEGER, where, lo, hi, 0.0, 0.0}
#define NUMBER(name, where, min, max) {name, SKYMEM_OPTION_NUMBER, where, 0, 0, min, max}
#define TEXT(name, where) {name, SKYMEM_OPTION_TEXT, where, 0, 0, 0.0, 0.0}

static const skymem_option_t OPTIONS[] = {
    /* which satellite of which grid: plane/sat index it (the cFS table keeps planes x sats within 16 bits) */
    INTEGER("plane", SKYMEM_OPTION_BOTH, 0, 65534),
    INTEGER("sat", SKYMEM_OPTION_BOTH, 0, 65534),
    INTEGER("planes", SKYMEM_OPTION_BOTH, 1, 65534),
    INTEGER("sats", SKYMEM_OPTION_BOTH, 1, 65534),
    NUMBER("altitude-km", SKYMEM_OPTION_BOTH, 100.0, 100000.0),
    NUMBER("inclination-deg", SKYMEM_OPTION_BOTH, 0.0, 180.0),
    INTEGER("walker-phase", SKYMEM_OPTION_NODE, 0, 65535),
    /* the store: at most 1 TiB (the cFS table counts KiB in 32 bits) */
    INTEGER("memory-budget", SKYMEM_OPTION_BOTH, 4096, (uint64_t)1 << 40),
    INTEGER("chunk-size", SKYMEM_OPTION_BOTH, 1, SKYMEM_MAX_CHUNK_DATA),
    /* addresses and ports */
    TEXT("bind", SKYMEM_OPTION_BOTH),
    INTEGER("isl-port-base", SKYMEM_OPTION_BOTH, 1, 65535),
    INTEGER("ground-port-base", SKYMEM_OPTION_BOTH, 1, 65535),
    TEXT("addresses", SKYMEM_OPTION_NODE),
    TEXT("peers", SKYMEM_OPTION_NODE),
    TEXT("tlm-dest", SKYMEM_OPTION_NODE), /* on cFS, TO_LAB's own command sets it */
    TEXT("hosts", SKYMEM_OPTION_CFS),
    INTEGER("first-cpuid", SKYMEM_OPTION_CFS, 1, 65535),
    /* mission time: 2^53 ms keeps the epoch exact in a double; a scale of 0 would stop the clock */
    INTEGER("epoch-ms", SKYMEM_OPTION_BOTH, 0, (uint64_t)1 << 53),
    NUMBER("time-scale", SKYMEM_OPTION_BOTH, 1e-6, 1e6),
    /* the native node's link emulation (cFS links are the platform's own) */
    NUMBER("delay-scale", SKYMEM_OPTION_NODE, 0.0, 1e6),
    NUMBER("ground-delay-ms", SKYMEM_OPTION_NODE, 0.0, 600000.0),
    NUMBER("bandwidth-mbps", SKYMEM_OPTION_NODE, 0.0, 1e6),
    NUMBER("loss", SKYMEM_OPTION_NODE, 0.0, 1.0),
    NUMBER("dup", SKYMEM_OPTION_NODE, 0.0, 1.0),
    NUMBER("reorder", SKYMEM_OPTION_NODE, 0.0, 1.0),
    NUMBER("corrupt", SKYMEM_OPTION_NODE, 0.0, 1.0),
    INTEGER("seed", SKYMEM_OPTION_NODE, 0, UINT64_MAX),
    /* the node's files and logging (cFS has /cf/skymem_auth.keys and EVS) */
    TEXT("auth-keys", SKYMEM_OPTION_NODE),
    TEXT("auth-floor", SKYMEM_OPTION_NODE),
    TEXT("log-level", SKYMEM_OPTION_NODE),
    TEXT("config", SKYMEM_OPTION_NODE),
};

const skymem_option_t *skymem_option_find(const char *name)
{
    size_t i;
    if (name == 0) return 0;
    if (name[0] == '-' && name[1] == '-') name += 2;
    for (i = 0; i < sizeof OPTIONS / sizeof OPTIONS[0]; i++)
        if (strcmp(OPTIONS[i].name, name) == 0) return &OPTIONS[i];
    return 0;
}

int skymem_option_integer(const skymem_option_t *o, const char *text, uint64_t *out)
{
    uint64_t v = 0;
    const char *p;
    if (o == 0 || text == 0 || out == 0 || o->kind != SKYMEM_OPTION_INTEGER || *text == '\0')
        return SKYMEM_OPTION_NOT_A_VALUE;
    for (p = text; *p; p++) {
        uint64_t d;
        if (*p < '0' || *p > '9') return SKYMEM_OPTION_NOT_A_VALUE; /* no sign, no blank, no hex */
        d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10u) return SKYMEM_OPTION_OUT_OF_RANGE; /* past 64 bits */
        v = v * 10u + d;
    }
    if (v < o->lo || v > o->hi) return SKYMEM_OPTION_OUT_OF_RANGE;
    *out = v;
    return SKYMEM_OPTION_OK;
}

int skymem_option_number(const skymem_option_t *o, const char *text, double *out)
{
    char *end = 0;
    double v;
    /* strtod would skip leading blanks and read "nan", "inf" and hex: a value is what a person writes */
    if (o == 0 || text == 0 || out == 0 || o->kind != SKYMEM_OPTION_NUMBER || *text == '\0' ||
        strchr("+-.0123456789", *text) == 0 || strpbrk(text, "xXnN") != 0)
        return SKYMEM_OPTION_NOT_A_VALUE;
    v = strtod(text, &end);
    if (end == text || *end != '\0') return SKYMEM_OPTION_NOT_A_VALUE;
    if (!isfinite(v) || v < o->min || v > o->max) return SKYMEM_OPTION_OUT_OF_RANGE;
    *out = v;
    return SKYMEM_OPTION_OK;
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static char *trim(char *s)
{
    char *e;
    while (is_blank(*s)) s++;
    e = s + strlen(s);
    while (e > s && is_blank(e[-1])) *--e = '\0';
    return s;
}

int skymem_config_line(char *line, char **key, char **value)
{
    char *s, *eq;
    if (line == 0 || key == 0 || value == 0) return SKYMEM_CONFIG_MALFORMED;
    s = trim(line);
    if (*s == '\0' || *s == '#') return SKYMEM_CONFIG_BLANK;
    eq = strchr(s, '=');
    if (eq == 0) return SKYMEM_CONFIG_MALFORMED;
    *eq = '\0';
    *key = trim(s);
    if ((*key)[0] == '-' && (*key)[1] == '-') *key += 2;
    *value = trim(eq + 1);
    return **key == '\0' ? SKYMEM_CONFIG_MALFORMED : SKYMEM_CONFIG_PAIR;
}
