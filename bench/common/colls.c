/* The collectives as the benchmark sees them. */
#include "colls.h"

static const struct bench_coll_info infos[BENCH_NUM_COLLS] = {
    [BENCH_ALL_REDUCE] = {"all_reduce", "all_reduce_perf", 1, 0, 1, 1, 1},
    [BENCH_REDUCE_SCATTER] = {"reduce_scatter", "reduce_scatter_perf", 1, 0, 1, 1, 1},
    [BENCH_ALL_GATHER] = {"all_gather", "all_gather_perf", 0, 0, 1, 1, 1},
    [BENCH_BROADCAST] = {"broadcast", "broadcast_perf", 0, 1, 1, 1, 1},
    [BENCH_REDUCE] = {"reduce", "reduce_perf", 1, 1, 1, 1, 1},
    /* libccl's all-to-all is never in place; sending from and receiving
     * into one buffer at once would race in a ring exchange too. */
    [BENCH_ALL_TO_ALL] = {"all_to_all", "all_to_all_perf", 0, 0, 0, 1, 1},
    [BENCH_SENDRECV] = {"sendrecv", "sendrecv_perf", 0, 0, 0, 1, 1},
    /* Ranks 2k and 2k+1 in turn: 2k sends, 2k+1 sends it back. */
    [BENCH_PINGPONG] = {"pingpong", "pingpong_perf", 0, 0, 0, 1, 2},
    [BENCH_BARRIER] = {"barrier", "barrier_perf", 0, 0, 0, 0, 1},
    [BENCH_GATHER] = {"gather", "gather_perf", 0, 1, 1, 1, 1},
    [BENCH_SCATTER] = {"scatter", "scatter_perf", 0, 1, 1, 1, 1},
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
