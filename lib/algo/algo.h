/*
 * Algorithms, written once against the step engine (never against a
 * transport). Each takes a fully validated call and the planner's choices
 * for it (struct ccl__call_plan).
 */
#ifndef CCL_ALGO_H
#define CCL_ALGO_H

#include "core/comm.h"
#include "prims/prims.h"

/* The names CCL_ALGO takes, in the order of this enum. */
enum ccl__algo_id {
    CCL__ALGO_RING = 0,
    CCL__ALGO_TREE,
    CCL__ALGO_RD,       /* recursive doubling */
    CCL__ALGO_RHD,      /* recursive halving / doubling (Rabenseifner) */
    CCL__ALGO_BRUCK,
    CCL__ALGO_PAIRWISE,
    CCL__ALGO_DIRECT,
    CCL__ALGO_HIER,
    CCL__ALGO_SINGLE_COPY, /* one host: peers' buffers read through the kernel (single_copy.c) */
    CCL__NUM_ALGOS
};

/* What the planner decided for one call. */
struct ccl__call_plan {
    int algo;           /* enum ccl__algo_id */
    size_t chunk_bytes; /* a step's data at most; the same on every rank */
};

struct ccl__coll_args {
    struct ccl__coll_id id; /* kind, seq, count, dtype, op, root */
    const void *sendbuf;
    void *recvbuf;
    int mem;                /* memory kind of both buffers (prims/compute.h) */
    /* The library's own call (split's exchange of colors and ids): the
     * planner's choice, whatever CCL_ALGO forces on the user's calls. */
    int planner_only;
    /* CCL_CHECK compared this call across the ranks already (the
     * GPU-resident try, which the staged path follows): once is enough. */
    int agreed;
    /* Elements from one rank's block to the next in a reduce-scatter's
     * sendbuf and an all-gather's recvbuf; 0: count (side by side). A
     * piece of a cut call (device/pipeline.h) has the whole call's count:
     * the ring runs it, the one algorithm that takes such blocks. */
    size_t block_stride;
    struct ccl__call_plan plan;
    /* The scalar of a premultiplied sum (id.op CCL__OP_PREMUL_SUM), one
     * element of id.dtype, copied when the call was issued. */
    unsigned char premul[CCL__OP_SCALAR_BYTES];
};

typedef ccl_status_t (*ccl__algo_fn)(struct ccl_comm *comm, const struct ccl__coll_args *a);

/* One algorithm: its implementation of each collective it applies to. */
struct ccl__algo {
    const char *name;
    const char *summary; /* one line, for describe and the docs */
    ccl__algo_fn run[CCL__NUM_OP_KINDS];
    /* NULL when it runs any call of the collectives it has; else 0 with
     * the reason in why when it cannot run this one. */
    int (*can_run)(const struct ccl_comm *comm, const struct ccl__coll_args *a, char *why, size_t whylen);
};

extern const struct ccl__algo ccl__algo_ring, ccl__algo_tree, ccl__algo_rd, ccl__algo_rhd, ccl__algo_bruck,
    ccl__algo_pairwise, ccl__algo_direct, ccl__algo_hier, ccl__algo_single_copy;
/* Indexed by enum ccl__algo_id; NULL for a name this build does not have. */
extern const struct ccl__algo *const ccl__algos[CCL__NUM_ALGOS];
extern const char *const ccl__algo_names[CCL__NUM_ALGOS];
/* enum ccl__algo_id for a CCL_ALGO name, or -1. */
int ccl__algo_by_name(const char *name, size_t len);

/* ---- shared by the algorithms ---- */

/* A ring over some of the ranks, on a buffer of count elements split into
 * n near-equal blocks (the all-reduce split), all in recvbuf: all-reduce
 * (sendbuf to recvbuf), reduce-scatter (block blk[pos] of the sum lands at
 * its place in recvbuf) or all-gather (each position's block already sits
 * at its place in recvbuf). div > 1 divides the reduced blocks (CCL_AVG). */
enum ccl__ring_what { CCL__RING_ALL_REDUCE, CCL__RING_REDUCE_SCATTER, CCL__RING_ALL_GATHER };
struct ccl__ring_spec {
    enum ccl__ring_what what;
    int n, pos;       /* ring size and this rank's position */
    const int *order; /* [n] the rank at each position */
    const int *blk;   /* [n] the block each position owns */
    int div;
    /* How the trace labels this ring's steps when it is one part of a
     * bigger algorithm (zero: a plain ring): the algorithm, the number of
     * its first step, the number of its first block, and where its buffer
     * starts in the call's (elements). */
    int trace_algo, step_base, chunk_base;
    size_t elem_base;
};
ccl_status_t ccl__ring_run(struct ccl_comm *comm, const struct ccl__coll_args *a, const struct ccl__ring_spec *s);

/* How many count-element blocks a collective reads from sendbuf (*smult)
 * and writes to recvbuf (*rmult) on this rank; 0: the buffer is ignored
 * here (a broadcast's sendbuf off the root, a reduce's recvbuf). */
void ccl__coll_extent(const struct ccl_comm *comm, const struct ccl__coll_args *a, size_t *smult, size_t *rmult);
/* The bytes this rank's sendbuf and recvbuf span for call a, strided
 * blocks (block_stride) included. */
void ccl__coll_span(const struct ccl_comm *comm, const struct ccl__coll_args *a, size_t *send_bytes,
                    size_t *recv_bytes);
/* The same for rank (the GPU-resident path's leader works for every rank). */
void ccl__coll_extent_of(const struct ccl_comm *comm, const struct ccl__coll_args *a, int rank, size_t *smult,
                         size_t *rmult);
/* The zero-copy path (zero_copy.c): a collective of a kind it runs whose
 * buffers lie, on every rank, in shared allocations (ccl_mem_alloc) runs
 * in place over them (*done = 1); otherwise *done = 0 on every rank alike
 * and the caller runs the call its own way. Needs the direct path's
 * windows (one host) and at least two ranks; collective. */
int ccl__zero_copy_fits(int kind);
ccl_status_t ccl__zero_copy_try(struct ccl_comm *comm, const struct ccl__coll_args *a, int *done);

/* At least bytes of scratch for the single-copy and zero-copy folds, kept
 * for the communicator's life (NULL: out of memory): freed and taken again
 * each call, the pieces came back from the kernel as fresh pages to fault
 * in (measured: 2 ranks, 64 KiB single-copy all-reduce, 18.6 us against
 * 13.4 kept). The executor's, one call at a time. */
char *ccl__fold_scratch(struct ccl_comm *comm, size_t bytes);

/* The stamps of the library's own exchanges made for a call
 * (ccl__ring_gather_bytes): the call's number with one of these bits, so
 * that their slots never pass for a user call's, or for each other's. */
#define CCL__SEQ_CHECK 0x80000000u        /* CCL_CHECK's argument records */
#define CCL__SEQ_CHECK_COUNTS 0x40000000u /* and all_to_all_v's counts */
#define CCL__SEQ_GPU_TRADE 0x20000000u    /* the GPU-resident path's buffer records */
#define CCL__SEQ_SINGLE_COPY 0x10000000u  /* init: which ranks may read which (plan.c) */

/* The library's own all-gather of bytes per rank (CCL_CHECK's argument
 * records, the planner's probe): the ring, whatever CCL_ALGO forces, host
 * memory, stamped seq so its slots never pass for a user call's. */
ccl_status_t ccl__ring_gather_bytes(struct ccl_comm *comm, uint32_t seq, const void *mine, void *all, size_t bytes);

/* The direct algorithm's all-to-all (every pair's transfer at once), which
 * lives with the other point-to-point all-to-all in a2a.c. */
ccl_status_t ccl__direct_all_to_all(struct ccl_comm *comm, const struct ccl__coll_args *a);

/* The trees, in ranks: which 0 and 1 are the double binary tree's two
 * trees, 2 the binomial tree rooted at rank 0. A rank's parent (-1 at the
 * root), and how many levels below its root the double binary tree's
 * deepest rank is (the deeper of its two trees). */
int ccl__tree_parent(int n, int rank, int which);
int ccl__dtree_depth(int n);

/* Bytes the direct algorithm moves per round through a window of
 * window_bytes (its in or out area). */
size_t ccl__direct_area(size_t window_bytes);
/* Where in a window's control page the GPU-resident path keeps its words
 * (device/gpu_direct.c): the direct algorithm's control block ends
 * before it. */
#define CCL__WINDOW_GPU_WORDS 2048
/* And where the tiny all-reduces' slots are (lines.c): two of
 * CCL__LINES_SLOT_BYTES, each the call's number and identity in 32 bytes
 * and up to CCL__LINES_MAX_BYTES of input. */
#define CCL__WINDOW_LINES_AT 4096
#define CCL__LINES_SLOT_BYTES 2048
#define CCL__LINES_MAX_BYTES (CCL__LINES_SLOT_BYTES - 32)
/* Whether the direct algorithm runs this call as a tiny all-reduce: the
 * same answer on every rank called alike. */
int ccl__lines_can_run(const struct ccl_comm *comm, const struct ccl__coll_args *a);
ccl_status_t ccl__lines_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a);

/* Copies sendbuf to recvbuf unless they are the same (one rank, or the
 * local share of a result). */
void ccl__algo_local_copy(const struct ccl__coll_args *a, size_t count);
/* Whether a call writes its output of output_bytes past the caches
 * (streaming stores): host memory, at least comm->stream_bytes (the
 * planner's size), and not lines this rank has just read in the call,
 * which a normal store finds in the cache and a streaming one evicts. The
 * direct path's and the ring's rule alike. */
int ccl__algo_output_streams(const struct ccl_comm *comm, int mem, size_t output_bytes, int output_was_read);
/* Element offset and length of block b when count elements are split into
 * n near-equal blocks (the first count % n one element longer). */
size_t ccl__block_off(size_t count, int n, int b);
size_t ccl__block_len(size_t count, int n, int b);
static inline int ccl__mod(int a, int n) { return ((a % n) + n) % n; }
static inline const char *ccl__at(const void *buf, size_t elems, size_t esize) {
    return (const char *)buf + elems * esize;
}

#endif
