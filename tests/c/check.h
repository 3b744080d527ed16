/* check.h -- minimal test assertions: count failures, keep going, exit non-zero. */
#ifndef SKYMEM_CHECK_H
#define SKYMEM_CHECK_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        check_count++;                                                               \
        if (!(cond)) {                                                               \
            check_failures++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                              \
    do {                                                                                                \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                           \
        check_count++;                                                                                  \
        if (va_ != vb_) {                                                                               \
            check_failures++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__, #a, #b, \
                    va_, vb_);                                                                          \
        }                                                                                               \
    } while (0)

/* Known-answer vectors are written in hex: "2b7e15..." -> bytes (no checks: the vectors are ours). */
static inline void unhex(const char *h, uint8_t *out)
{
    size_t i;
    for (i = 0; h[2 * i]; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

static int check_report(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
    return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
#endif
