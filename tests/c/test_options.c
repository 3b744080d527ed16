/* test_options.c -- the satellite options both runtimes read (skymem_options.h): names, kinds, ranges, values
 * read strictly, and the config file's line syntax. */
#include <string.h>

#include "check.h"
#include "skymem_options.h"

static void integers(void)
{
    const skymem_option_t *planes = skymem_option_find("planes");
    const skymem_option_t *seed = skymem_option_find("--seed");
    uint64_t v = 7;
    CHECK(planes != NULL && planes->kind == SKYMEM_OPTION_INTEGER && planes->where == SKYMEM_OPTION_BOTH);
    CHECK(seed != NULL && seed->where == SKYMEM_OPTION_NODE);
    CHECK_EQ_INT(skymem_option_integer(planes, "19", &v), SKYMEM_OPTION_OK);
    CHECK_EQ_INT(v, 19);
    CHECK_EQ_INT(skymem_option_integer(planes, "0", &v), SKYMEM_OPTION_OUT_OF_RANGE);
    CHECK_EQ_INT(skymem_option_integer(planes, "65535", &v), SKYMEM_OPTION_OUT_OF_RANGE);
    /* digits only: no sign, blank, hex, fraction or trailing junk */
    CHECK_EQ_INT(skymem_option_integer(planes, "+3", &v), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_integer(planes, "-3", &v), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_integer(planes, " 3", &v), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_integer(planes, "0x3", &v), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_integer(planes, "3.0", &v), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_integer(planes, "3x", &v), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_integer(planes, "", &v), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(v, 19); /* untouched by a refusal */
    /* the whole 64 bits, and not one past */
    CHECK_EQ_INT(skymem_option_integer(seed, "18446744073709551615", &v), SKYMEM_OPTION_OK);
    CHECK(v == UINT64_MAX);
    CHECK_EQ_INT(skymem_option_integer(seed, "18446744073709551616", &v), SKYMEM_OPTION_OUT_OF_RANGE);
    /* a number option is not read as an integer */
    CHECK_EQ_INT(skymem_option_integer(skymem_option_find("loss"), "0", &v), SKYMEM_OPTION_NOT_A_VALUE);
}

static void numbers(void)
{
    const skymem_option_t *loss = skymem_option_find("loss");
    const skymem_option_t *scale = skymem_option_find("time-scale");
    double d = 0.5;
    CHECK_EQ_INT(skymem_option_number(loss, "0.25", &d), SKYMEM_OPTION_OK);
    CHECK(d == 0.25);
    CHECK_EQ_INT(skymem_option_number(loss, "1e-3", &d), SKYMEM_OPTION_OK);
    CHECK_EQ_INT(skymem_option_number(loss, "1.5", &d), SKYMEM_OPTION_OUT_OF_RANGE);
    CHECK_EQ_INT(skymem_option_number(loss, "-0.1", &d), SKYMEM_OPTION_OUT_OF_RANGE);
    CHECK_EQ_INT(skymem_option_number(loss, "nan", &d), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_number(loss, "inf", &d), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_number(loss, "0x1p-2", &d), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_number(loss, " 0.1", &d), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_number(loss, "0.1 ", &d), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_number(loss, "abc", &d), SKYMEM_OPTION_NOT_A_VALUE);
    CHECK_EQ_INT(skymem_option_number(loss, "", &d), SKYMEM_OPTION_NOT_A_VALUE);
    /* a stopped clock is not a time scale, on either runtime */
    CHECK_EQ_INT(skymem_option_number(scale, "0", &d), SKYMEM_OPTION_OUT_OF_RANGE);
    /* the altitude is a satellite's, on either runtime */
    CHECK_EQ_INT(skymem_option_number(skymem_option_find("altitude-km"), "1", &d), SKYMEM_OPTION_OUT_OF_RANGE);
    CHECK(d == 1e-3);
}

static void names(void)
{
    CHECK(skymem_option_find("plane") != NULL);
    CHECK(skymem_option_find("planez") == NULL);
    CHECK(skymem_option_find("") == NULL);
    CHECK(skymem_option_find(NULL) == NULL);
    CHECK(skymem_option_find("first-cpuid")->where == SKYMEM_OPTION_CFS);
    CHECK(skymem_option_find("hosts")->kind == SKYMEM_OPTION_TEXT);
}

static void lines(void)
{
    char a[] = "  --planes =  19 \r\n", b[] = "# a comment\n", c[] = "   \t\n", d[] = "planes 19\n";
    char e[] = " = 19\n", f[] = "bind=10.0.0.1";
    char *key = NULL, *value = NULL;
    CHECK_EQ_INT(skymem_config_line(a, &key, &value), SKYMEM_CONFIG_PAIR);
    CHECK(strcmp(key, "planes") == 0 && strcmp(value, "19") == 0);
    CHECK_EQ_INT(skymem_config_line(b, &key, &value), SKYMEM_CONFIG_BLANK);
    CHECK_EQ_INT(skymem_config_line(c, &key, &value), SKYMEM_CONFIG_BLANK);
    CHECK_EQ_INT(skymem_config_line(d, &key, &value), SKYMEM_CONFIG_MALFORMED);
    CHECK_EQ_INT(skymem_config_line(e, &key, &value), SKYMEM_CONFIG_MALFORMED);
    CHECK_EQ_INT(skymem_config_line(f, &key, &value), SKYMEM_CONFIG_PAIR);
    CHECK(strcmp(key, "bind") == 0 && strcmp(value, "10.0.0.1") == 0);
}

int main(void)
{
    integers();
    numbers();
    names();
    lines();
    return check_report("options");
}
