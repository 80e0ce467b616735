/*
 * Where a step's copies and reductions run. Every buffer and slot has a
 * memory kind; a step hands its data work to the compute engine that
 * serves those kinds and commits only once that work has completed. The
 * host engine runs each job at submission (so it is complete when polled);
 * an engine that runs work asynchronously (a device stream) completes it
 * later, and the step stays in flight until `done` says so. Adding device
 * memory means a new memory kind and a new engine here, nothing above.
 */
#ifndef CCL_COMPUTE_H
#define CCL_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h"
#include "reduce/reduce.h"

enum ccl__mem_kind { CCL__MEM_HOST = 0, CCL__MEM_CUDA, CCL__NUM_MEM_KINDS };
const char *ccl__mem_kind_name(int kind);

struct ccl__compute;

/* Work submitted since the last fence; opaque to callers. */
struct ccl__compute_ticket {
    uint64_t seq;
};

struct ccl__compute {
    const char *name;
    /* A step's data work is handed over in pieces of at most this many
     * bytes (0: whole), so that the copies into the send slots re-read a
     * result that is still in the first-level cache (host). A device
     * engine wants whole steps: one launch each. */
    size_t piece_bytes;
    /* dst <- src (bytes). */
    void (*copy)(void *dst, const void *src, size_t bytes);
    /* The same, for a destination nobody reads again soon (the output of a
     * call larger than the caches): the host writes it past the caches. */
    void (*copy_streaming)(void *dst, const void *src, size_t bytes);
    /* dst <- a OP b over n elements (dst may alias a or b exactly). */
    void (*reduce)(ccl__reduce_fn fn, void *dst, const void *a, const void *b, size_t n);
    /* buf /= div (finishing CCL_AVG). */
    void (*divide)(void *buf, size_t n, ccl_dtype_t dtype, int div);
    /* Marks the work submitted so far; `done` tells when it has completed. */
    struct ccl__compute_ticket (*fence)(void);
    int (*done)(struct ccl__compute_ticket t);
};

/* The engine for a call on buffers of kind mem over connections whose
 * slots are of the kinds in slot_kinds (a bit per kind), or NULL when none
 * serves them all. */
const struct ccl__compute *ccl__compute_for(int mem, uint32_t slot_kinds);

#endif
