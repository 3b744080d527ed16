/*
 * skymem_stripe.c -- coded stripes over ISA-L's Reed-Solomon (skymem_stripe.h).
 */
#include "skymem_stripe.h"

#include <isa-l/erasure_code.h>
#include <limits.h>
#include <string.h>

#define MAX_N SKYMEM_STRIPE_MAX_CHUNKS

static int args_ok(int k, int m, size_t len)
{
    return k >= 1 && m >= 0 && (unsigned)(k + m) <= MAX_N && len > 0 && len <= (size_t)INT_MAX;
}

/* The (k + m) x k encoding matrix: identity on top (the data as it is), Cauchy rows under it. */
static void encoding_matrix(int k, int m, unsigned char *a)
{
    gf_gen_cauchy1_matrix(a, k + m, k);
}

int skymem_stripe_encode(int k, int m, size_t len, const uint8_t *const *data, uint8_t *const *parity)
{
    unsigned char a[MAX_N * MAX_N];
    unsigned char tables[MAX_N * MAX_N * 32];

    if (!args_ok(k, m, len) || data == NULL || (m > 0 && parity == NULL))
        return -1;
    if (m == 0)
        return 0;
    encoding_matrix(k, m, a);
    ec_init_tables(k, m, &a[k * k], tables);
    /* ISA-L takes the pointer arrays as non-const; it only reads data[] */
    ec_encode_data((int)len, k, m, tables, (unsigned char **)data, (unsigned char **)parity);
    return 0;
}

int skymem_stripe_decode(int k, int m, size_t len, uint8_t *const *chunks, const uint8_t *present)
{
    unsigned char a[MAX_N * MAX_N];
    unsigned char chosen[MAX_N * MAX_N]; /* the rows of a of the k chunks decoded from */
    unsigned char inverse[MAX_N * MAX_N];
    unsigned char rows[MAX_N * MAX_N]; /* the rows of inverse that give the missing data chunks */
    unsigned char tables[MAX_N * MAX_N * 32];
    unsigned char *sources[MAX_N];
    unsigned char *missing[MAX_N];
    int n = k + m, used = 0, lost = 0;

    if (!args_ok(k, m, len) || chunks == NULL || present == NULL)
        return -1;
    for (int i = 0; i < k; i++)
        if (!present[i])
            lost++;
    if (lost == 0)
        return 0;
    encoding_matrix(k, m, a);
    for (int i = 0; i < n && used < k; i++) {
        if (!present[i])
            continue;
        memcpy(&chosen[used * k], &a[i * k], (size_t)k);
        sources[used++] = chunks[i];
    }
    if (used < k)
        return -2;
    if (gf_invert_matrix(chosen, inverse, k) != 0)
        return -1; /* cannot happen for a Cauchy matrix: any k rows are independent */
    lost = 0;
    for (int i = 0; i < k; i++) {
        if (present[i])
            continue;
        memcpy(&rows[lost * k], &inverse[i * k], (size_t)k); /* data chunk i = row i of the inverse . sources */
        missing[lost++] = chunks[i];
    }
    ec_init_tables(k, lost, rows, tables);
    ec_encode_data((int)len, k, lost, tables, sources, missing);
    return 0;
}
