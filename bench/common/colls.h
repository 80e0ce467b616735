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
    /* Steps of one call that wait on each other (a ping-pong's legs, a
     * hypercube's rounds): -m and -z 0 would overlap them. */
    int sequential;
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

/* alltoallv_perf's pattern, nccl-tests' generated one: of size_bytes per
 * rank, rank i sends rank j a share weighted by their distance (j - i) mod
 * n, blended with an even share by NCCL_TESTS_ALLTOALLV_SPREAD (0 even,
 * 1, the default, by distance alone), each cut down to 16 bytes. Every
 * rank sends and receives the same total. Elements of elem_size. */
size_t bench_a2av_elems(int i, int j, int nranks, size_t size_bytes, size_t elem_size);
/* This rank's counts and displacements for the call: vcounts (4 * nranks:
 * send counts, send displacements, receive counts, receive displacements). */
void bench_a2av_counts(int rank, int nranks, size_t size_bytes, size_t elem_size, size_t *vcounts);
/* NULL when the pattern can be made here, else why not. */
const char *bench_a2av_unsupported(void);

#endif
