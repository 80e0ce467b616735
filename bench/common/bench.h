/*
 * The benchmark driver and the seam between it and a library under test.
 *
 * One driver (argument parsing, size sweep, check pass, timed pass, text,
 * CSV and JSON output, memcpy roofline) runs every program: all_reduce_perf
 * and its siblings differ only in the collective they pass to bench_main,
 * and the libccl programs differ from their MPI twins only in the backend.
 * A backend knows how to become a rank, issue calls and combine numbers
 * across ranks; it knows nothing of sizes, checks or output.
 */
#ifndef BENCH_H
#define BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h" /* only for ccl_dtype_t and ccl_op_t: the driver calls nothing in it */

enum bench_coll {
    BENCH_ALL_REDUCE,
    BENCH_REDUCE_SCATTER,
    BENCH_ALL_GATHER,
    BENCH_BROADCAST,
    BENCH_REDUCE,
    BENCH_ALL_TO_ALL,
    BENCH_SENDRECV,
    BENCH_PINGPONG,
    BENCH_BARRIER,
    BENCH_GATHER,
    BENCH_SCATTER,
    BENCH_ALLTOALLV,  /* nccl-tests' alltoallv: uneven per-peer counts (colls.h) */
    BENCH_HYPERCUBE,  /* nccl-tests' hypercube: an all-gather by send/recv, pairs at distance 2^k */
    BENCH_NUM_COLLS
};

/* Exit statuses of every program. */
enum {
    BENCH_EXIT_OK = 0,
    BENCH_EXIT_WRONG = 1, /* some result was wrong */
    BENCH_EXIT_USAGE = 2, /* bad flags */
    BENCH_EXIT_ERROR = 3, /* the library or the system failed */
};

/* -a: how one number per rank becomes the number printed. */
enum bench_combine_mode { BENCH_TIME_RANK0 = 0, BENCH_TIME_AVG = 1, BENCH_TIME_MIN = 2, BENCH_TIME_MAX = 3 };
enum bench_reduce_how { BENCH_COMBINE_MIN, BENCH_COMBINE_MAX, BENCH_COMBINE_SUM };

#define BENCH_ALL (-1) /* -r all */
#define BENCH_MAX_ALGOS 12

struct bench_options {
    const char *prog;   /* program name for messages */
    size_t min_bytes, max_bytes;
    size_t step_bytes;  /* -i: additive steps when > 0 */
    double step_factor; /* -f: multiplicative steps otherwise */
    int iters, warmup, agg, cycles;
    int check, nonblocking, stats;
    int device; /* --device: buffers in GPU memory */
    int shared; /* --shared-mem: buffers from the library's shared allocation (zero-copy) */
    double steady; /* --steady's factor (0: off): time blocks again that a slow spell touched (steady.h) */
    enum bench_combine_mode combine;
    unsigned dtype_mask; /* bit per ccl_dtype_t */
    unsigned redop_mask; /* bit per ccl_op_t */
    int root;            /* BENCH_ALL or a rank */
    const char *json_path, *csv_path;
    /* libccl launching only (the MPI twins reject these flags) */
    int ranks; /* --ranks: fork this many local ranks; 0: a launcher started us */
    int host_per_rank;
    const char *transport, *algo;
    /* -A with several plain names: each size is measured with each of
     * them in turn, their timed blocks interleaved round by round, on one
     * communicator whose algorithm ccl_comm_set_algo switches. */
    const char *algos[BENCH_MAX_ALGOS];
    int nalgos; /* 0: one algorithm (or the planner's) for the whole run */
    int rounds; /* --rounds: timed blocks per algorithm and size; the median is reported */
    /* nccl-tests' flags of 2.19 */
    int stats_skip;      /* -K: leading iterations left out of -I's statistics */
    int fresh;           /* --fresh: each iteration's inputs written just before it (with -I's timing) */
    int register_bufs;   /* -R 1: the buffers registered with the library (-R 2 is --shared-mem) */
    double timeout_s;    /* -T: a call that makes no progress this long fails (0: the library's default) */
    int report_cputime;  /* -C: the time column is CPU time (every thread of the process), not wall time */
    int timestamps;      /* -S: each row ends with the time it was measured */
    int memory_report;   /* -M: what the buffers and the process took, at the end */
    int unalign;         /* -u: send and receive buffers start this many elements past a page */
    char algo_names[160]; /* where algos point */
};

/* What the header and the result files say about the library and wiring. */
struct bench_wiring {
    char library[32];   /* "libccl", "mpi-openmpi", ... */
    char version[32];
    int nhosts;
    char transport[64]; /* "shm", "shm+tcp", "none" */
    char algo[160];
    char detail[512];   /* rank 0's own description, for the header */
    char split[160];    /* NCCL_TESTS_SPLIT: how the ranks were split ("" when they were not) */
    int machine_ranks;  /* ranks on rank 0's machine and the CPUs they may use; */
    int machine_cpus;   /* 0 where the library does not say */
};

/* One call as the backend issues it: the arguments of the library's own
 * function (count is the call's count argument). Placement is implied by
 * the pointers: in place when the library's in-place rule holds. */
struct bench_call {
    enum bench_coll coll;
    const void *send;
    void *recv;
    size_t count;
    ccl_dtype_t dtype;
    ccl_op_t redop;
    int root;
    /* alltoallv: this rank's send counts, send displacements, receive
     * counts and receive displacements (nranks each, in elements) */
    const size_t *vcounts;
};

struct bench_comm; /* a backend's rank state */

struct bench_backend {
    int launch_flags;           /* accepts --ranks, --host-per-rank, -t, -A */
    int device_buffers;         /* accepts --device (the library takes GPU memory) */
    /* Makes this process a rank. NULL when this process must exit instead,
     * with *exit_status set: a --ranks parent after its children, or a
     * failure (already reported on stderr). */
    struct bench_comm *(*start)(const struct bench_options *o, int *exit_status);
    int (*rank)(const struct bench_comm *c);
    /* 1 on the one rank that prints and writes the results (NULL: rank 0;
     * with NCCL_TESTS_SPLIT, rank 0 of the whole job) */
    int (*reports)(const struct bench_comm *c);
    int (*size)(const struct bench_comm *c);
    void (*describe)(struct bench_comm *c, struct bench_wiring *w);
    /* With -A's list: the calls, barriers and waits that follow run on the
     * communicator of o->algos[i]. 0 or -1. */
    int (*use_algo)(struct bench_comm *c, int i);
    /* The algorithm the library's planner ran for the last call of coll on
     * the active communicator ("ring"), in out; "" when it does not say.
     * May be NULL. */
    void (*ran_algo)(struct bench_comm *c, enum bench_coll coll, char *out, size_t n);
    /* NULL when the library can run this combination, else why not. */
    const char *(*unsupported)(const struct bench_comm *c, enum bench_coll coll, ccl_dtype_t dtype, ccl_op_t redop);
    /* Issues n calls as one aggregate (a group) and waits for them; with
     * nonblocking, through the library's non-blocking calls. 0 or -1. */
    int (*run)(struct bench_comm *c, const struct bench_call *calls, int n, int nonblocking);
    int (*barrier)(struct bench_comm *c);
    /* In place, element-wise across ranks: every rank gets the result. */
    int (*combine)(struct bench_comm *c, double *vals, int n, enum bench_reduce_how how);
    /* The last failure, as a sentence. */
    const char *(*last_error)(const struct bench_comm *c);
    /* Tells the other ranks that this one gives up (they fail rather than hang). */
    void (*abort)(struct bench_comm *c);
    /* --shared-mem: bytes of the library's shared memory on the measured
     * communicator (collective), and its free; NULL where it has none. */
    void *(*shared_alloc)(struct bench_comm *c, size_t bytes);
    void (*shared_free)(struct bench_comm *c, void *p);
    /* -R 1: registers [p, p + bytes) with the library for the run (handle
     * for unregister); NULL where the library has no registration. 0 or -1. */
    int (*register_buf)(struct bench_comm *c, void *p, size_t bytes, void **handle);
    void (*unregister_buf)(struct bench_comm *c, void *handle);
    /* Frees everything; returns the exit status the process should use. */
    int (*finish)(struct bench_comm *c, int exit_status);
};

/* The whole program: parse, start, sweep, report. */
int bench_main(int argc, char **argv, enum bench_coll coll, const struct bench_backend *be);

#endif
