/* test_floor.c -- the replay floor file's text (skymem_floor.h): written and read back, and everything else refused,
 * a file cut short above all (it would read as a smaller mark, or fewer windows refused ahead). */
#include <string.h>

#include "check.h"
#include "skymem_floor.h"

static void round_trip(const skymem_floor_t *f)
{
    char buf[SKYMEM_FLOOR_TEXT_MAX];
    skymem_floor_t back;
    uint32_t i;
    int n = skymem_floor_format(f, buf, sizeof buf);
    CHECK(n > 1);
    CHECK_EQ_INT((long long)strlen(buf), n);
    memset(&back, 0xA5, sizeof back);
    CHECK_EQ_INT(skymem_floor_parse(buf, (size_t)n, &back), 0);
    CHECK(back.mark == f->mark && back.n_ahead == f->n_ahead);
    for (i = 0; i < f->n_ahead && i < back.n_ahead; i++)
        CHECK(back.ahead[i].key_id == f->ahead[i].key_id && back.ahead[i].src_plane == f->ahead[i].src_plane &&
              back.ahead[i].src_sat == f->ahead[i].src_sat && back.ahead[i].seq == f->ahead[i].seq);
    /* every prefix of it but itself is refused: a file cut short is never read as less */
    for (i = 0; i < (uint32_t)n; i++) {
        uint32_t at = i;
        if (at > 0 && buf[at - 1] == '\n') continue; /* whole lines: a shorter file of its own */
        CHECK_EQ_INT(skymem_floor_parse(buf, at, &back), -1);
    }
}

static void mark_only(uint64_t mark)
{
    skymem_floor_t f;
    memset(&f, 0, sizeof f);
    f.mark = mark;
    round_trip(&f);
}

int main(void)
{
    char buf[SKYMEM_FLOOR_TEXT_MAX];
    skymem_floor_t f, v;
    uint32_t i;
    mark_only(0);
    mark_only(1);
    mark_only(106337781234567ull);
    mark_only(UINT64_MAX);
    /* the most windows, each field at its largest */
    memset(&f, 0, sizeof f);
    f.mark = UINT64_MAX;
    f.n_ahead = SKYMEM_FLOOR_AHEAD_MAX;
    for (i = 0; i < f.n_ahead; i++) {
        f.ahead[i].key_id = i == 0 ? UINT32_MAX : 0x80000000u + i;
        f.ahead[i].src_plane = i == 0 ? UINT16_MAX : (uint16_t)i;
        f.ahead[i].src_sat = i == 0 ? UINT16_MAX : (uint16_t)(i * 7u);
        f.ahead[i].seq = i == 0 ? UINT64_MAX : 106337781234567ull + i;
    }
    round_trip(&f);
    f.n_ahead = 1;
    round_trip(&f);
    f.n_ahead = SKYMEM_FLOOR_AHEAD_MAX + 1u;
    CHECK_EQ_INT(skymem_floor_format(&f, buf, sizeof buf), -1);
    f.n_ahead = 0;
    CHECK_EQ_INT(skymem_floor_format(&f, buf, SKYMEM_FLOOR_TEXT_MAX - 1), -1);
    CHECK_EQ_INT(skymem_floor_format(&f, NULL, 64), -1);
    CHECK_EQ_INT(skymem_floor_format(NULL, buf, sizeof buf), -1);
    /* cut short: no newline, or nothing at all */
    memset(&v, 0, sizeof v);
    v.mark = 7;
    CHECK_EQ_INT(skymem_floor_parse("1063377812", 10, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("", 0, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("\n", 1, &v), -1);
    /* not digits, or more than their field holds, or anything else on a line */
    CHECK_EQ_INT(skymem_floor_parse("12a4\n", 5, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("-5\n", 3, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("18446744073709551616\n", 21, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("123\n\n", 5, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("5\nahead 1 2 3 4 \n", 17, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("5\nahead 1 65536 3 4\n", 20, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("5\nahead 4294967296 1 3 4\n", 25, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("5\nahead  1 2 3 4\n", 17, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("5\nbehind 1 2 3\n", 15, &v), -1);
    CHECK(v.mark == 7); /* untouched by a refusal */
    CHECK_EQ_INT(skymem_floor_parse("18446744073709551615\n", 21, &v), 0);
    CHECK(v.mark == UINT64_MAX && v.n_ahead == 0);
    CHECK_EQ_INT(skymem_floor_parse("5\nahead 1 65535 3 4\n", 20, &v), 0);
    CHECK(v.mark == 5 && v.n_ahead == 1 && v.ahead[0].src_plane == 65535 && v.ahead[0].seq == 4);
    return check_report("floor");
}
