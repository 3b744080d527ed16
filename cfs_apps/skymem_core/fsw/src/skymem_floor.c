/* skymem_floor.c -- the replay floor file's text (skymem_floor.h). */
#include "skymem_floor.h"

int skymem_floor_format(uint64_t mark, char *buf, size_t cap)
{
    char digits[20];
    int n = 0, i;
    if (buf == 0 || cap < SKYMEM_FLOOR_TEXT_MAX) return -1;
    do {
        digits[n++] = (char)('0' + mark % 10u);
        mark /= 10u;
    } while (mark != 0);
    for (i = 0; i < n; i++) buf[i] = digits[n - 1 - i];
    buf[n] = '\n';
    buf[n + 1] = '\0';
    return n + 1;
}

int skymem_floor_parse(const char *text, size_t len, uint64_t *mark)
{
    uint64_t v = 0;
    size_t i;
    if (text == 0 || mark == 0 || len < 2 || len > 21 || text[len - 1] != '\n') return -1;
    for (i = 0; i + 1 < len; i++) {
        uint64_t d;
        if (text[i] < '0' || text[i] > '9') return -1;
        d = (uint64_t)(text[i] - '0');
        if (v > (UINT64_MAX - d) / 10u) return -1; /* does not fit 64 bits */
        v = v * 10u + d;
    }
    *mark = v;
    return 0;
}
