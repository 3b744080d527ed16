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

int skymem_stripe_encoder(int k, int m, skymem_stripe_encoder_t *e)
{
    unsigned char a[MAX_N * MAX_N];

    if (e == NULL || !args_ok(k, m, 1))
        return -1;
    e->k = k;
    e->m = m;
    if (m > 0) {
        encoding_matrix(k, m, a);
        ec_init_tables(k, m, &a[k * k], e->tables);
    }
    return 0;
}

int skymem_stripe_encode_with(const skymem_stripe_encoder_t *e, size_t len, const uint8_t *const *data,
                              uint8_t *const *parity)
{
    if (e == NULL || !args_ok(e->k, e->m, len) || data == NULL || (e->m > 0 && parity == NULL))
        return -1;
    if (e->m > 0) /* ISA-L takes the pointer arrays as non-const; it only reads data[] */
        ec_encode_data((int)len, e->k, e->m, (unsigned char *)e->tables, (unsigned char **)data,
                       (unsigned char **)parity);
    return 0;
}

int skymem_stripe_encode(int k, int m, size_t len, const uint8_t *const *data, uint8_t *const *parity)
{
    skymem_stripe_encoder_t e;

    if (skymem_stripe_encoder(k, m, &e) != 0)
        return -1;
    return skymem_stripe_encode_with(&e, len, data, parity);
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

/* ================================================================ layout */

int skymem_stripe_layout(uint32_t k, uint32_t m, uint32_t data, skymem_stripe_layout_t *out)
{
    if (out == NULL || k < 1 || (uint64_t)k + m > MAX_N || data < 1)
        return -1;
    uint64_t stripes = data / k + (data % k != 0);
    if ((uint64_t)data + stripes * m > UINT32_MAX)
        return -1;
    out->k = k;
    out->m = m;
    out->n = k + m;
    out->data = data;
    out->stripes = (uint32_t)stripes;
    return 0;
}

uint32_t skymem_stripe_wire_chunks(const skymem_stripe_layout_t *l)
{
    return l->data + l->stripes * l->m;
}

uint32_t skymem_stripe_data_in(const skymem_stripe_layout_t *l, uint32_t s)
{
    uint64_t first = (uint64_t)s * l->k;
    return first >= l->data ? 0 : (l->data - first < l->k ? (uint32_t)(l->data - first) : l->k);
}

/* Stripe s's rotation: the position of its role-0 chunk. It steps by one n times over the block, so that every
 * satellite of the stripes holds parity in m n-ths of them and data in the rest (no satellite only parity, idle on
 * a healthy get), and in long runs of consecutive stripes (a get asks each satellite for few spans). */
static uint32_t shift_of(const skymem_stripe_layout_t *l, uint32_t s)
{
    return l->m == 0 ? 0 : (uint32_t)((uint64_t)s * l->n / l->stripes);
}

uint32_t skymem_stripe_member(const skymem_stripe_layout_t *l, uint32_t s, uint32_t role)
{
    uint32_t width = skymem_stripe_data_in(l, s) + l->m;
    return s * l->n + (role + shift_of(l, s)) % width;
}

uint32_t skymem_stripe_role(const skymem_stripe_layout_t *l, uint32_t cid)
{
    uint32_t s = cid / l->n, width = skymem_stripe_data_in(l, s) + l->m;
    return (cid % l->n + width - shift_of(l, s) % width) % width;
}

uint32_t skymem_stripe_data_index(const skymem_stripe_layout_t *l, uint32_t cid)
{
    uint32_t s = cid / l->n, role = skymem_stripe_role(l, cid);
    return role < skymem_stripe_data_in(l, s) ? s * l->k + role : SKYMEM_STRIPE_NO_DATA;
}

uint32_t skymem_stripe_wire_id(const skymem_stripe_layout_t *l, uint32_t d)
{
    return skymem_stripe_member(l, d / l->k, d % l->k);
}

void skymem_stripe_data_indexes(const skymem_stripe_layout_t *l, uint32_t *out)
{
    for (uint32_t s = 0; s < l->stripes; s++) {
        uint32_t r = skymem_stripe_data_in(l, s), width = r + l->m, pos = shift_of(l, s) % width;
        for (uint32_t role = 0; role < width; role++) { /* role i sits at position (i + shift) mod width */
            out[s * l->n + pos] = role < r ? s * l->k + role : SKYMEM_STRIPE_NO_DATA;
            pos = pos + 1 == width ? 0 : pos + 1;
        }
    }
}

int skymem_stripe_layout_wire(uint32_t k, uint32_t m, uint32_t wire, skymem_stripe_layout_t *out)
{
    if (k < 1 || (uint64_t)k + m > MAX_N)
        return -1;
    uint32_t n = k + m, full = wire / n, rest = wire % n;
    if (rest != 0 && rest <= m)
        return -1; /* a last stripe of parity only */
    uint64_t data = (uint64_t)full * k + (rest ? rest - m : 0);
    if (data > UINT32_MAX || skymem_stripe_layout(k, m, (uint32_t)data, out) != 0)
        return -1;
    return skymem_stripe_wire_chunks(out) == wire ? 0 : -1;
}
