#include "core/pattern.h"

#include <string.h>

int ccl__pattern_expand(const char *pattern, const char *letters, const char *const *values, char *out, size_t n) {
    size_t o = 0;
    if (n == 0) return -1;
    for (const char *p = pattern; *p; p++) {
        const char *with = NULL;
        if (p[0] == '%' && p[1]) {
            const char *at = strchr(letters, p[1]);
            if (at) with = values[at - letters], p++;
        }
        size_t len = with ? strlen(with) : 1;
        if (len >= n - o) { /* the NUL needs a byte too */
            out[0] = 0;
            return -1;
        }
        memcpy(out + o, with ? with : p, len);
        o += len;
    }
    out[o] = 0;
    return 0;
}
