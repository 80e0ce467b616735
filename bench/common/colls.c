/* The collectives as the benchmark sees them. */
#include "colls.h"

#include <stdlib.h>

static const struct bench_coll_info infos[BENCH_NUM_COLLS] = {
    [BENCH_ALL_REDUCE] = {"all_reduce", "all_reduce_perf", 1, 0, 1, 1, 1, 0},
    [BENCH_REDUCE_SCATTER] = {"reduce_scatter", "reduce_scatter_perf", 1, 0, 1, 1, 1, 0},
    [BENCH_ALL_GATHER] = {"all_gather", "all_gather_perf", 0, 0, 1, 1, 1, 0},
    [BENCH_BROADCAST] = {"broadcast", "broadcast_perf", 0, 1, 1, 1, 1, 0},
    [BENCH_REDUCE] = {"reduce", "reduce_perf", 1, 1, 1, 1, 1, 0},
    /* libccl's all-to-all is never in place; sending from and receiving
     * into one buffer at once would race in a ring exchange too. */
    [BENCH_ALL_TO_ALL] = {"all_to_all", "all_to_all_perf", 0, 0, 0, 1, 1, 0},
    [BENCH_SENDRECV] = {"sendrecv", "sendrecv_perf", 0, 0, 0, 1, 1, 0},
    /* Ranks 2k and 2k+1 in turn: 2k sends, 2k+1 sends it back. */
    [BENCH_PINGPONG] = {"pingpong", "pingpong_perf", 0, 0, 0, 1, 2, 1},
    [BENCH_BARRIER] = {"barrier", "barrier_perf", 0, 0, 0, 0, 1, 0},
    [BENCH_GATHER] = {"gather", "gather_perf", 0, 1, 1, 1, 1, 0},
    [BENCH_SCATTER] = {"scatter", "scatter_perf", 0, 1, 1, 1, 1, 0},
    [BENCH_ALLTOALLV] = {"alltoallv", "alltoallv_perf", 0, 0, 0, 1, 1, 0},
    [BENCH_HYPERCUBE] = {"hypercube", "hypercube_perf", 0, 0, 1, 1, 1, 1},
};

const struct bench_coll_info *bench_coll_info(enum bench_coll coll) { return &infos[coll]; }

double bench_bus_factor(enum bench_coll coll, int nranks) {
    double n = nranks;
    switch (coll) {
    case BENCH_ALL_REDUCE:
        return 2.0 * (n - 1) / n;
    case BENCH_REDUCE_SCATTER:
    case BENCH_ALL_GATHER:
    case BENCH_ALL_TO_ALL:
    case BENCH_GATHER: /* the root receives, or sends, (n - 1) of n blocks */
    case BENCH_SCATTER:
    case BENCH_ALLTOALLV: /* as nccl-tests: the bytes a rank sends, (n - 1) / n of them crossing */
    case BENCH_HYPERCUBE: /* n - 1 of the n blocks arrive */
        return (n - 1) / n;
    case BENCH_BARRIER:
        return 0.0;
    default:
        return 1.0;
    }
}

struct bench_layout bench_layout_for(enum bench_coll coll, size_t size_bytes, size_t elem_size, int nranks,
                                     int rank) {
    struct bench_layout l = {0};
    size_t n = (size_t)nranks, r = (size_t)rank;
    size_t whole = size_bytes / elem_size;
    switch (coll) {
    case BENCH_SCATTER:        /* the root's send: n blocks; in place, recv is its own block */
    case BENCH_REDUCE_SCATTER: /* send: n blocks; in place, recv is this rank's block */
        l.count = whole / n;
        l.send_elems = l.in_place_elems = n * l.count;
        l.recv_elems = l.count;
        l.in_place_recv = r * l.count;
        break;
    case BENCH_HYPERCUBE: /* as all-gather, each block a multiple of 16 bytes (nccl-tests) */
        l.count = (whole / n) & ~(16 / elem_size - 1);
        l.recv_elems = l.in_place_elems = n * l.count;
        l.send_elems = l.count;
        l.in_place_send = r * l.count;
        break;
    case BENCH_ALLTOALLV: /* count: the elements this rank sends, and receives, in all */
        for (int j = 0; j < nranks; j++) l.count += bench_a2av_elems(rank, j, nranks, size_bytes, elem_size);
        l.send_elems = l.recv_elems = l.count;
        break;
    case BENCH_GATHER:     /* the root's recv: n blocks; in place, send is its own block */
    case BENCH_ALL_GATHER: /* recv: n blocks; in place, send is this rank's block */
        l.count = whole / n;
        l.recv_elems = l.in_place_elems = n * l.count;
        l.send_elems = l.count;
        l.in_place_send = r * l.count;
        break;
    case BENCH_ALL_TO_ALL:
        l.count = whole / n;
        l.send_elems = l.recv_elems = n * l.count;
        break;
    case BENCH_BARRIER:
        return l;
    default:
        l.count = whole;
        l.send_elems = l.recv_elems = l.in_place_elems = whole;
        break;
    }
    l.bytes = (l.send_elems > l.recv_elems ? l.send_elems : l.recv_elems) * elem_size;
    if (!infos[coll].has_in_place) l.in_place_elems = 0;
    return l;
}

static double a2av_spread(void) {
    static double spread = -1;
    if (spread < 0) {
        const char *v = getenv("NCCL_TESTS_ALLTOALLV_SPREAD");
        char *end;
        double d = v ? strtod(v, &end) : 1.0;
        if (!v || end == v || *end) d = 1.0;
        spread = d < 0 ? 0 : d > 1 ? 1 : d;
    }
    return spread;
}

size_t bench_a2av_elems(int i, int j, int nranks, size_t size_bytes, size_t elem_size) {
    size_t bytes;
    if (nranks == 1) {
        bytes = size_bytes;
    } else {
        double n = nranks, distance = (j - i + nranks) % nranks, s = a2av_spread();
        double even = (double)size_bytes / n, by_distance = distance * (double)size_bytes / (n * (n - 1) / 2);
        bytes = (size_t)((1.0 - s) * even + s * by_distance);
    }
    return (bytes & ~(size_t)15) / elem_size;
}

void bench_a2av_counts(int rank, int nranks, size_t size_bytes, size_t elem_size, size_t *v) {
    size_t *sc = v, *sd = v + nranks, *rc = v + 2 * nranks, *rd = v + 3 * nranks, so = 0, ro = 0;
    for (int p = 0; p < nranks; p++) {
        sc[p] = bench_a2av_elems(rank, p, nranks, size_bytes, elem_size), sd[p] = so, so += sc[p];
        rc[p] = bench_a2av_elems(p, rank, nranks, size_bytes, elem_size), rd[p] = ro, ro += rc[p];
    }
}

const char *bench_a2av_unsupported(void) {
    const char *m = getenv("NCCL_TESTS_ALLTOALLV_MATRIX_FILE");
    return m && *m ? "NCCL_TESTS_ALLTOALLV_MATRIX_FILE is set: alltoallv_perf makes nccl-tests' generated pattern only "
                     "(NCCL_TESTS_ALLTOALLV_SPREAD), not a pattern read from a file"
                   : NULL;
}
