/*
 * What each collective means to the benchmark: its names, whether it has a
 * reduction operator, a root and an in-place form, its bus-bandwidth factor,
 * and how a size in bytes becomes buffers and a count.
 */
#ifndef BENCH_COLLS_H
#define BENCH_COLLS_H

#include <stddef.h>

#include "bench.h"

struct bench_coll_info {
    const char *name; /* "all_reduce": the op field of CSV and JSON */
    const char *prog; /* "all_reduce_perf" */
    int has_redop, has_root, has_in_place, moves_data;
    /* Messages that follow one another in a call (a ping-pong's two): the
     * time reported is per message, the one-way latency that osu_latency
     * and perftest report. */
    int legs;
};

const struct bench_coll_info *bench_coll_info(enum bench_coll coll);

/* busbw = algbw * factor (nccl-tests' PERFORMANCE.md). */
double bench_bus_factor(enum bench_coll coll, int nranks);

/* One size of the sweep, for one rank. Sizes mean what they mean in
 * nccl-tests: bytes is the largest buffer of the call (the full nranks *
 * count buffer of all_gather, reduce_scatter and all_to_all); count is the
 * call's count argument. Offsets are in elements within one buffer that an
 * in-place call shares. */
struct bench_layout {
    size_t count;                        /* 0: this size is too small for this collective */
    size_t bytes;                        /* printed size, after rounding down to whole elements */
    size_t send_elems, recv_elems;       /* what an out-of-place call reads and writes */
    size_t in_place_elems;               /* the one buffer of an in-place call */
    size_t in_place_send, in_place_recv; /* where send and recv start in it */
};

struct bench_layout bench_layout_for(enum bench_coll coll, size_t size_bytes, size_t elem_size, int nranks,
                                     int rank);

#endif
