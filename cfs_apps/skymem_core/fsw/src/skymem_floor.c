/* skymem_floor.c -- the replay floor file's text (skymem_floor.h). */
#include "skymem_floor.h"

static int put_u64(uint64_t v, char *buf)
{
    char digits[20];
    int n = 0, i;
    do {
        digits[n++] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v != 0);
    for (i = 0; i < n; i++) buf[i] = digits[n - 1 - i];
    return n;
}

int skymem_floor_format(const skymem_floor_t *f, char *buf, size_t cap)
{
    static const char word[] = "ahead ";
    uint32_t i, k;
    int n;
    if (f == 0 || buf == 0 || cap < SKYMEM_FLOOR_TEXT_MAX || f->n_ahead > SKYMEM_FLOOR_AHEAD_MAX) return -1;
    n = put_u64(f->mark, buf);
    buf[n++] = '\n';
    for (i = 0; i < f->n_ahead; i++) {
        const skymem_floor_ahead_t *e = &f->ahead[i];
        for (k = 0; word[k]; k++) buf[n++] = word[k];
        n += put_u64(e->key_id, buf + n);
        buf[n++] = ' ';
        n += put_u64(e->src_plane, buf + n);
        buf[n++] = ' ';
        n += put_u64(e->src_sat, buf + n);
        buf[n++] = ' ';
        n += put_u64(e->seq, buf + n);
        buf[n++] = '\n';
    }
    buf[n] = '\0';
    return n;
}

/* A decimal number of at most max at text[*at..len) ending at the byte end; -1 for anything else. */
static int get_u64(const char *text, size_t len, size_t *at, char end, uint64_t max, uint64_t *v)
{
    size_t i = *at;
    uint64_t x = 0;
    if (i >= len || text[i] < '0' || text[i] > '9') return -1;
    for (; i < len && text[i] >= '0' && text[i] <= '9'; i++) {
        uint64_t d = (uint64_t)(text[i] - '0');
        if (x > (max - d) / 10u) return -1; /* does not fit */
        x = x * 10u + d;
    }
    if (i >= len || text[i] != end) return -1;
    *at = i + 1;
    *v = x;
    return 0;
}

int skymem_floor_parse(const char *text, size_t len, skymem_floor_t *f)
{
    static const char word[] = "ahead ";
    skymem_floor_t g;
    size_t at = 0, k;
    uint64_t key, plane, sat;
    if (text == 0 || f == 0) return -1;
    g.n_ahead = 0;
    if (get_u64(text, len, &at, '\n', UINT64_MAX, &g.mark) != 0) return -1;
    while (at < len) {
        skymem_floor_ahead_t *e;
        if (g.n_ahead == SKYMEM_FLOOR_AHEAD_MAX) return -1;
        for (k = 0; word[k]; k++, at++)
            if (at >= len || text[at] != word[k]) return -1;
        e = &g.ahead[g.n_ahead];
        if (get_u64(text, len, &at, ' ', UINT32_MAX, &key) != 0 || get_u64(text, len, &at, ' ', UINT16_MAX, &plane) != 0 ||
            get_u64(text, len, &at, ' ', UINT16_MAX, &sat) != 0 || get_u64(text, len, &at, '\n', UINT64_MAX, &e->seq) != 0)
            return -1;
        e->key_id = (uint32_t)key;
        e->src_plane = (uint16_t)plane;
        e->src_sat = (uint16_t)sat;
        g.n_ahead++;
    }
    *f = g;
    return 0;
}
