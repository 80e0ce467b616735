/* The host compute engine: copies and reductions on the calling thread,
 * complete as soon as they return. */
#include "prims/compute.h"

#include <string.h>

const char *ccl__mem_kind_name(int kind) {
    return kind == CCL__MEM_HOST ? "host" : kind == CCL__MEM_CUDA ? "cuda" : "?";
}

static int host_serves(int kind) { return kind == CCL__MEM_HOST; }

static void host_copy(void *dst, const void *src, size_t bytes) {
    if (dst != src && bytes) memcpy(dst, src, bytes);
}

static void host_reduce(ccl__reduce_fn fn, void *dst, const void *a, const void *b, size_t n) { fn(dst, a, b, n); }

static struct ccl__compute_ticket host_fence(void) { return (struct ccl__compute_ticket){0}; }

static int host_done(struct ccl__compute_ticket t) {
    (void)t;
    return 1;
}

static const struct ccl__compute ccl__compute_host = {
    .name = "host",
    /* Half of a 32 KiB L1: the piece's result stays there between the
     * reduction and the copies (on this 2-core EPYC, 2-rank all-reduce at
     * 1-4 MiB 2-6% faster than whole 128 KiB steps). */
    .piece_bytes = 16 << 10,
    .serves = host_serves,
    .copy = host_copy,
    .reduce = host_reduce,
    .divide = ccl__reduce_div,
    .fence = host_fence,
    .done = host_done,
};

static const struct ccl__compute *const engines[] = {&ccl__compute_host};

const struct ccl__compute *ccl__compute_for(int mem, uint32_t slot_kinds) {
    /* Host buffers with host slots, every call's case but a device's,
     * need no search. */
    if (mem == CCL__MEM_HOST && slot_kinds == 1u << CCL__MEM_HOST) return &ccl__compute_host;
    int kinds[CCL__NUM_MEM_KINDS + 1] = {mem}, n = 1;
    for (int k = 0; k < CCL__NUM_MEM_KINDS; k++)
        if (slot_kinds & (1u << k)) kinds[n++] = k;
    for (size_t e = 0; e < sizeof engines / sizeof engines[0]; e++) {
        int ok = 1;
        for (int i = 0; i < n && ok; i++) ok = kinds[i] >= 0 && kinds[i] < CCL__NUM_MEM_KINDS && engines[e]->serves(kinds[i]);
        if (ok) return engines[e];
    }
    return NULL;
}
