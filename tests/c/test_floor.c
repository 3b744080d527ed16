/* test_floor.c -- the replay floor file's text (skymem_floor.h): written and read back, and everything else refused,
 * a file cut short above all (it would read as a smaller mark). */
#include <string.h>

#include "check.h"
#include "skymem_floor.h"

static void round_trip(uint64_t mark)
{
    char buf[SKYMEM_FLOOR_TEXT_MAX];
    uint64_t back = 1;
    int n = skymem_floor_format(mark, buf, sizeof buf);
    CHECK(n > 1);
    CHECK_EQ_INT((long long)strlen(buf), n);
    CHECK_EQ_INT(skymem_floor_parse(buf, (size_t)n, &back), 0);
    CHECK(back == mark);
}

int main(void)
{
    char buf[SKYMEM_FLOOR_TEXT_MAX];
    uint64_t v = 7;
    round_trip(0);
    round_trip(1);
    round_trip(106337781234567ull);
    round_trip(UINT64_MAX);
    CHECK_EQ_INT(skymem_floor_format(5, buf, SKYMEM_FLOOR_TEXT_MAX - 1), -1);
    CHECK_EQ_INT(skymem_floor_format(5, NULL, 64), -1);
    /* cut short: no newline, or nothing at all */
    CHECK_EQ_INT(skymem_floor_parse("1063377812", 10, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("", 0, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("\n", 1, &v), -1);
    /* not digits, or more than 64 bits */
    CHECK_EQ_INT(skymem_floor_parse("12a4\n", 5, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("-5\n", 3, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("18446744073709551616\n", 21, &v), -1);
    CHECK_EQ_INT(skymem_floor_parse("123\n\n", 5, &v), -1);
    CHECK_EQ_INT(v, 7); /* untouched by a refusal */
    CHECK_EQ_INT(skymem_floor_parse("18446744073709551615\n", 21, &v), 0);
    CHECK(v == UINT64_MAX);
    return check_report("floor");
}
