/* The ranks' colors for nccl-tests' split variables (split.h). */
#include "split.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int parse_number(const char *s, int base, long *out) {
    while (*s == ' ') s++;
    char *end;
    errno = 0;
    long v = strtol(s, &end, base);
    while (*end == ' ') end++;
    if (errno || end == s || *end || v < 0) return -1;
    *out = v;
    return 0;
}

int bench_split_color(int rank, int *color, char *said, size_t said_n, char *why, size_t why_n) {
    const char *mask = getenv("NCCL_TESTS_SPLIT_MASK"), *spec = getenv("NCCL_TESTS_SPLIT");
    long v;
    if (mask && *mask) {
        if (parse_number(mask, 16, &v)) {
            snprintf(why, why_n, "NCCL_TESTS_SPLIT_MASK=%s is not a hexadecimal mask", mask);
            return -1;
        }
        *color = rank & (int)v;
        snprintf(said, said_n, "NCCL_TESTS_SPLIT_MASK=%s", mask);
        return 0;
    }
    if (!spec || !*spec) return 1;
    static const struct {
        const char *word, *sign;
        char op;
    } ops[] = {{"AND", "&", '&'}, {"OR", "|", '|'}, {"MOD", "%", '%'}, {"DIV", "/", '/'}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        size_t wl = strlen(ops[i].word);
        const char *arg = strncasecmp(spec, ops[i].word, wl) == 0 ? spec + wl : spec[0] == ops[i].sign[0] ? spec + 1 : NULL;
        if (!arg) continue;
        if (parse_number(arg, 0, &v) || ((ops[i].op == '%' || ops[i].op == '/') && v == 0)) break;
        *color = ops[i].op == '&' ? rank & (int)v : ops[i].op == '|' ? rank | (int)v
                 : ops[i].op == '%' ? rank % (int)v : rank / (int)v;
        snprintf(said, said_n, "NCCL_TESTS_SPLIT=%s", spec);
        return 0;
    }
    snprintf(why, why_n, "NCCL_TESTS_SPLIT=%s: want AND n, OR n, MOD n or DIV n (or &n, |n, %%n, /n; n > 0 for MOD "
             "and DIV)", spec);
    return -1;
}
