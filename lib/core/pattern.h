/* File names from patterns ("trace-%p.json"): the logs' CCL_DEBUG_FILE and
 * the traces' CCL_TRACE expand a few %-letters the same way, bounded. */
#ifndef CCL_CORE_PATTERN_H
#define CCL_CORE_PATTERN_H

#include <stddef.h>

/* Copies pattern into out (n bytes: PATH_MAX for a path), each "%x" whose letter is letters[i]
 * replaced by values[i]; any other character, "%" included, is copied.
 * Returns 0, or -1 when the result does not fit in n bytes: out is then
 * the empty string, never a truncated name, and nothing is written past
 * it. */
int ccl__pattern_expand(const char *pattern, const char *letters, const char *const *values, char *out, size_t n);

#endif
