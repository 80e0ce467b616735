/*
 * FNV-1a over bytes: a fixed, fast mapping for names and lists that every
 * rank must hash alike (a trace path claimed once, a job secret's lanes
 * drawn from the launcher's ids, a group's member list). Not cryptography.
 */
#ifndef CCL_HASH_H
#define CCL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define CCL__FNV_OFFSET 1469598103934665603ull

/* h continued over n bytes at p (start from CCL__FNV_OFFSET). */
static inline uint64_t ccl__fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

#endif
