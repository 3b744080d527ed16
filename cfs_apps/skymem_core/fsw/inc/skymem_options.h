/*
 * skymem_options.h -- the satellite options both runtimes read, and the config file's line syntax.
 *
 * The native node takes them as `--name value` or in a `--config` file; SKYMEM on cFS reads the same names from
 * /cf/skymemory.cfg into its constellation table. One table says which names exist, what kind of value each
 * takes and its range, and where it means something; one parser reads a value and one reads a line. Each
 * runtime only says where a value goes and words its own error (stderr or an EVS event). Before this, each had
 * its own copy and they had drifted (a 1 km altitude on cFS, 100 km on the node; a zero time scale taken on
 * cFS, refused on the node; a misspelt key ignored on cFS).
 */
#ifndef SKYMEM_OPTIONS_H
#define SKYMEM_OPTIONS_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SKYMEM_OPTION_INTEGER, /* decimal digits only, within [lo, hi] */
    SKYMEM_OPTION_NUMBER,  /* a finite decimal number within [min, max] */
    SKYMEM_OPTION_TEXT     /* anything non-empty; the runtime checks its form */
} skymem_option_kind_t;

typedef enum {
    SKYMEM_OPTION_BOTH, /* the satellite itself: both runtimes apply it */
    SKYMEM_OPTION_NODE, /* the native node's host side (link emulation, sockets, logging): cFS counts it, ignored */
    SKYMEM_OPTION_CFS   /* the cFS launch only (cpuids, machines): the node refuses it */
} skymem_option_where_t;

typedef struct {
    const char *name; /* as on the node's command line, without "--" */
    skymem_option_kind_t kind;
    skymem_option_where_t where;
    uint64_t lo, hi;  /* an integer's range */
    double min, max;  /* a number's range */
} skymem_option_t;

/* What reading a value or a line found. */
#define SKYMEM_OPTION_OK           0
#define SKYMEM_OPTION_NOT_A_VALUE  (-1) /* not an integer / not a number / empty */
#define SKYMEM_OPTION_OUT_OF_RANGE (-2)

/* The option called name (a leading "--" allowed), or NULL when there is none. */
const skymem_option_t *skymem_option_find(const char *name);
/* The whole of text as an integer of o's range (o->kind INTEGER): SKYMEM_OPTION_OK and *out set, or an error. */
int skymem_option_integer(const skymem_option_t *o, const char *text, uint64_t *out);
/* The whole of text as a number of o's range (o->kind NUMBER). */
int skymem_option_number(const skymem_option_t *o, const char *text, double *out);

/* One line of a config file, edited in place: blanks around the key and the value trimmed, a leading "--" of
 * the key dropped, *key and *value pointed at them. */
#define SKYMEM_CONFIG_PAIR      1 /* "key = value" */
#define SKYMEM_CONFIG_BLANK     0 /* empty or a '#' comment */
#define SKYMEM_CONFIG_MALFORMED (-1) /* no '=', or no key */
int skymem_config_line(char *line, char **key, char **value);

#ifdef __cplusplus
}
#endif
#endif /* SKYMEM_OPTIONS_H */
