/*
 * The cost model. Each algorithm's time is the textbook alpha-beta formula
 * of the algorithm as lib/algo implements it, over the links it uses:
 *
 *   a step that moves m bytes over the links L costs  max over L of
 *   (alpha + m / bandwidth), the slowest link holding the step back (a
 *   network link's bandwidth is that of its message size: cost.h);
 *   a reduction of m bytes costs m / reduce speed, a copy m / copy speed.
 *
 * Bandwidths are those of a step in which every rank sends and receives at
 * once (what a ring step does), and every CPU-bound term is multiplied by
 * the shape's oversubscription: ranks that share a core take turns. Where
 * each rank's core is known, a ring, recursive-doubling or Bruck step
 * charges the busiest core instead: its ranks receiving from another core
 * at the link's speed, those receiving from their own as copies in its
 * cache (shape.c counts them). Each
 * wait also costs a handoff per extra rank on the core: the rank waited for
 * runs only when the waiting one yields (measured here: an 8-byte step on
 * 4 ranks over 2 cores takes 3.7 us where 2 ranks take 0.7).
 *
 * The formulas follow the code, not the ideal: the tree all-reduce sends
 * everything up before anything comes down (twice the ring's bytes per
 * rank at large sizes), the direct algorithm copies in and out of windows
 * of window_area bytes with three waits a round, hier's rings across hosts
 * share each host's network adapter.
 */
#include <math.h>
#include <string.h>

#include "algo/algo.h"
#include "plan/cost.h"

const char *const ccl__link_names[CCL__NUM_LINKS] = {"numa", "cross-numa", "cross-socket", "tcp", "rdma"};

int ccl__link_by_name(const char *name) {
    for (int c = 0; c < CCL__NUM_LINKS; c++)
        if (strcmp(name, ccl__link_names[c]) == 0) return c;
    return -1;
}

/* Cross-memory attach on that machine: the probe's read, and 64 MiB peer
 * buffers (written by their owners, then read in 64 KiB calls, two
 * readers at once) at 0.53x its speed (ccl-tune: 4.14 GB/s where init's
 * probe read 7.80 in the same minute). */
#define CMA_SPEED 6000.0
#define CMA_LARGE_BYTES 67108864.0
#define CMA_LARGE_SPEED 3200.0

void ccl__cost_defaults(struct ccl__figures *f) {
    /* From bench/algo-table on the 2-core development machine: a 2-rank
     * shm all-reduce of 8 bytes (0.7 us) and 16 MiB (5.4 ms), the same
     * over loopback TCP (8 us, 12 ms); crossing NUMA nodes and sockets,
     * and RDMA are textbook guesses until a probe or ccl-tune
     * measures them. */
    static const struct ccl__link_figure link[CCL__NUM_LINKS] = {
        [CCL__LINK_NUMA] = {0.6, 4400, 0, 0},  [CCL__LINK_XNUMA] = {0.9, 3500, 0, 0},
        [CCL__LINK_XPACKAGE] = {1.2, 2500, 0, 0}, [CCL__LINK_TCP] = {7.5, 1550, 0, 0},
        [CCL__LINK_RDMA] = {4.0, 3000, 0, 0},
    };
    memcpy(f->link, link, sizeof link);
    f->copy_bytes_per_us = 8000;
    f->reduce_bytes_per_us = 5000;
    f->cma_call_us = 0.6;
    f->cma_bytes_per_us = CMA_SPEED;
    f->cma_large_bytes = CMA_LARGE_BYTES;
    f->cma_large_bytes_per_us = CMA_LARGE_SPEED;
    f->cma_msg_bytes = f->cma_msg_bytes_per_us = 0;
    f->measured = 0;
}

double ccl__cost_link_bytes_us(const struct ccl__link_figure *l, double bytes) {
    const double knee = CCL__PROBE_BYTES;
    if (bytes <= knee || l->large_bytes <= knee || !(l->large_bytes_per_us > 0)) return bytes / l->bytes_per_us;
    /* The large step takes no less time than a small one, and moves its
     * bytes at no slower a rate than the small steps: anything else is a
     * slow or quick moment of the probe. In between, a message's average
     * rate only grows with its size, so cutting it into pieces never makes
     * it cheaper, and predictions never fall as a message grows. */
    double at_knee = knee / l->bytes_per_us;
    double at_large = fmin(fmax(l->large_bytes / l->large_bytes_per_us, at_knee), l->large_bytes / l->bytes_per_us);
    if (bytes >= l->large_bytes) return bytes * at_large / l->large_bytes;
    return at_knee + (bytes - knee) * (at_large - at_knee) / (l->large_bytes - knee);
}

double ccl__cost_handoff_us(double oversub) { return oversub > 1 ? CCL__HANDOFF_US * (oversub - 1) : 0; }

static int log2_ceil(int n) {
    int k = 0;
    while ((1 << k) < n) k++;
    return k;
}

/* ---- the terms ---- */

struct model {
    const struct ccl__job_shape *j;
    const struct ccl__figures *f;
    size_t chunk;  /* the call's chunk when it is fixed (CCL_CHUNK_BYTES); 0: the cheapest */
    double max;    /* the largest chunk the call may use: a slot of its algorithm's links, or the fixed chunk */
    size_t chosen; /* out: the chunk the prediction runs with */
};

/* What a byte received from a rank on the same core costs that core, in
 * bytes over a shared-memory link of speed bytes_per_us: two copies in its
 * own cache (out of the sender, into the receiver), never more than a
 * byte from across the machine. */
static double same_core_weight(const struct ccl__figures *f, double bytes_per_us) {
    return fmin(1, 2 * bytes_per_us / f->copy_bytes_per_us);
}

/* The core's load when it is known; else oversub stands for it. */
static double core_factor(const struct ccl__job_shape *j, const struct ccl__figures *f, struct ccl__core_load core,
                          double bytes_per_us) {
    if (j->oversub <= 1 || core.cross + core.same == 0) return j->oversub;
    return core.cross + core.same * same_core_weight(f, bytes_per_us);
}

/* How many times over a link's bytes are slowed: `share` ranks of a host
 * using its network adapter at once, or ranks sharing cores taking turns
 * at copies the CPU does (core: who receives from where, when known: ring
 * neighbours on one core pass their data in its cache; measured, 4 and 8
 * ranks on 2 cores, 2 MiB ring all-reduce 1107 and 2663 us, where charging
 * every rank's bytes at the link's speed predicted 1746 and 4159). A
 * kernel network stack (CCL__CPU_COPIED_LINKS) is both: the kernel copies its bytes on the ranks' cores (measured:
 * loopback TCP, 4 ranks on 2 cores, 16 MiB ring all-reduce 44 ms where the
 * adapter's share alone predicted 16 ms). */
static double load(const struct model *m, int c, int share, struct ccl__core_load core) {
    if (CCL__CPU_COPIED_LINKS >> c & 1u) return fmax(share, m->j->oversub);
    return CCL__NETWORK_LINKS >> c & 1u ? share : core_factor(m->j, m->f, core, m->f->link[c].bytes_per_us);
}

static const struct ccl__core_load UNKNOWN_CORES = {0, 0};

/* The slowest link in set: m bytes over it, `share` ranks of a host using
 * its network adapter at once, plus alpha and the handoffs when `waits`
 * (a step waits on its link; a read of peers' memory does not). */
static double slowest(const struct model *m, unsigned set, double bytes, int share, struct ccl__core_load core,
                      int waits) {
    double worst = 0;
    for (int c = 0; c < CCL__NUM_LINKS; c++) {
        if (!(set >> c & 1u)) continue;
        const struct ccl__link_figure *l = &m->f->link[c];
        /* Ranks that share cores queue their messages on them, and a large
         * one saves nothing (measured: loopback TCP, 4 ranks on 2 cores,
         * rd's 512 KiB exchanges 258 us a step, 2.9x a 2-rank step, where
         * rhd's of 128 and 256 KiB took 2x theirs): the line. */
        double bytes_us = m->j->oversub > 1 ? bytes / l->bytes_per_us : ccl__cost_link_bytes_us(l, bytes);
        double t = load(m, c, share, core) * bytes_us;
        if (waits) t += l->alpha_us + ccl__cost_handoff_us(m->j->oversub);
        if (t > worst) worst = t;
    }
    return worst;
}

/* A step of m bytes over the links in set, `share` ranks of a host using
 * its network adapter at once, the busiest core loaded as `core` says: the
 * slowest link holds it back. */
static double core_step(const struct model *m, unsigned set, double bytes, int share, struct ccl__core_load core) {
    return slowest(m, set, bytes, share, core, 1);
}

static double shared_step(const struct model *m, unsigned set, double bytes, int share) {
    return core_step(m, set, bytes, share, UNKNOWN_CORES);
}

static double step(const struct model *m, unsigned set, double bytes) { return shared_step(m, set, bytes, 1); }

double ccl__cost_step_us(const struct ccl__job_shape *j, const struct ccl__figures *f, unsigned links, double bytes) {
    const struct model m = {.j = j, .f = f};
    return step(&m, links, bytes);
}

/* A step of the ring, of recursive doubling's k-th exchange, of Bruck's. */
static double ring_step(const struct model *m, double bytes) {
    return core_step(m, m->j->ring_links, bytes, 1, m->j->ring_core);
}

static double xor_step(const struct model *m, int k, double bytes) {
    return core_step(m, m->j->xor_links[k], bytes, m->j->xor_share[k], m->j->xor_core[k]);
}

static double shift_step(const struct model *m, int k, double bytes) {
    return core_step(m, m->j->shift_links[k], bytes, m->j->shift_share[k], m->j->shift_core[k]);
}

double ccl__cost_ring_speed(const struct ccl__job_shape *j, const struct ccl__figures *f, double bytes, double us) {
    struct ccl__core_load core = j->ring_core;
    /* Cores unknown, or every rank on one core: no byte of the ring
     * crosses, and the step says nothing of the link but its load. */
    if (j->oversub <= 1 || core.cross == 0) return j->oversub * bytes / us;
    /* us = (cross + same * 2 speed / copy) * bytes / speed while the same
     * core's copies are the cheaper, else (cross + same) * bytes / speed;
     * never faster than the cross receivers alone in a quarter of us. */
    double local = core.same * 2 * bytes / f->copy_bytes_per_us;
    double speed = core.cross * bytes / fmax(us - local, us / 4);
    return same_core_weight(f, speed) < 1 ? speed : (core.cross + core.same) * bytes / us;
}

static double reduce_us(const struct model *m, double bytes) {
    return m->j->oversub * bytes / m->f->reduce_bytes_per_us;
}

static double copy_us(const struct model *m, double bytes) { return m->j->oversub * bytes / m->f->copy_bytes_per_us; }

/* The bytes' time alone, no alpha: data a rank reads from peers' memory
 * while every rank does the same (the direct path's windows), which
 * crosses the same links a ring step would. */
static double transfer_us(const struct model *m, unsigned set, double bytes) {
    return slowest(m, set, bytes, 1, UNKNOWN_CORES, 0);
}

/* Bytes over the slowest link in set as one core fetches them for all its
 * ranks: a single receiver's load, no alpha (direct's one shot reads
 * windows on one host only, never over a network). */
static double link_bytes_us(const struct model *m, unsigned set, double bytes) {
    static const struct ccl__core_load one_receiver = {.cross = 1, .same = 0};
    return slowest(m, set, bytes, 1, one_receiver, 0);
}

/* alpha alone: the latency of a wait on the slowest link in set. */
static double sync_us(const struct model *m, unsigned set) { return step(m, set, 0); }

/* Ranks beyond the largest power of two fold in before and out after
 * (rd.c's folded_all_reduce): one exchange of the buffer each way. */
static double fold_us(const struct model *m, double n) {
    if (ccl__pow2_floor(m->j->n) == m->j->n) return 0;
    return 2 * step(m, m->j->all_links, n) + reduce_us(m, n);
}

#define ONE_SHOT 16384.0 /* direct.c's ONE_SHOT_BYTES */
#define LINES_WAIT 0.7 /* a tiny all-reduce's wait, in alphas (all_reduce, CCL__ALGO_DIRECT) */

/* Rounds of the direct algorithm: one per window area of data. */
static double rounds(const struct model *m, double bytes) {
    double area = m->j->window_area ? (double)m->j->window_area : 1 << 19;
    return bytes <= area ? 1 : ceil(bytes / area);
}

/* The waits of one round of the direct algorithm: each its alpha, but
 * the core's handoff once a round, not once a wait. Every rank of a core
 * waits for the same counter of the same round, so the core passes
 * between them once. Measured: 4 ranks on 2 cores, all-reduce of 64 MiB
 * in rounds of 512 KiB and 128 KiB windows' areas (129 and 516 rounds;
 * all_reduce_perf -A direct, CCL_DIRECT_WINDOW_BYTES 2 MiB and 512 KiB):
 * the smaller rounds took less time, not the 3.3 ms more that three full
 * waits a round predicted; with 256 KiB windows (1032 rounds) 1.8 ms more
 * than with 512 KiB, 3.5 us a round, where three full waits are 9.9. */
static double round_waits_us(const struct model *m, int waits) {
    return waits * sync_us(m, m->j->all_links) - (waits - 1) * ccl__cost_handoff_us(m->j->oversub);
}

/* ---- pipelines: the chunk ---- */

#define PIECE_ALIGN 64.0       /* chunks are whole cache lines (and whole elements of every dtype) */
#define PIECE_MAX_TRIES 4096   /* k examined per call at most (the best is found well before) */
#define PIECE_PAST_BEST 16     /* k examined past the best so far before the search stops */

/* The bytes of each of k pieces of n (the last may be short). */
static size_t piece_bytes(double n, double k) {
    double b = ceil(n / k / PIECE_ALIGN) * PIECE_ALIGN;
    return b > 0 ? (size_t)b : (size_t)PIECE_ALIGN;
}

/* How many pieces of at most max bytes n is cut into (at least one). */
static double pieces(double n, double max) { return n > max ? ceil(n / max) : 1; }

/* The waits inside a step of `bytes` cut in chunks of at most m->max on
 * crowded cores: each chunk past the first is waited for on its own, and
 * where ranks share a core the one waited for runs only when the waiting
 * one yields (the handoff the step's own wait already pays once). The
 * direct algorithm pays its waits per round (3 a round) already.
 * Measured: 4 ranks on 2 cores, 16 MiB, the ring 1.07-1.10x direct
 * (bench/algo-table, 3 runs), where the model without them, with direct's
 * shared reads below, had it 0.97x. */
static double chunk_handoffs(const struct model *m, double bytes) {
    return (pieces(bytes, m->max) - 1) * ccl__cost_handoff_us(m->j->oversub);
}

/* n bytes in k pieces through a pipeline `fill` steps deep, a rank moving
 * `lanes` pieces a step (one per tree of the double binary tree): the
 * first piece takes fill + 1 steps, each later one a step more. Fewer,
 * larger pieces wait less; more, smaller ones fill the pipeline sooner.
 * With `search`, the cheapest k whose pieces are no larger than m->max,
 * unless the call fixed the chunk; without, pieces of m->max. Each k's
 * time grows with n and the k allowed only shrink as n grows, so the
 * prediction never falls as the message grows. The time is convex in k:
 * the search stops once it has risen for PIECE_PAST_BEST pieces past the
 * best. */
static double pipeline(struct model *m, unsigned links, double n, int fill, int lanes, int search) {
    if (fill < 0) fill = 0;
    double k = pieces(n, m->max), last = m->chunk || fill == 0 || !search ? k : fmax(k, ceil(n / PIECE_ALIGN));
    /* Each lane's piece is a message of its own: the waits overlap, each
     * message's latency does not (measured: 2 ranks, 8 bytes, the tree
     * 2.3 us on shm and 30 us on tcp where the ring's two steps take 1.6
     * and 17). */
    double lane_us = (lanes - 1) * (step(m, links, 0) - ccl__cost_handoff_us(m->j->oversub));
    double best = -1, best_k = k;
    for (int tries = 0; k <= last && tries < PIECE_MAX_TRIES; k++, tries++) {
        double t = (fill + k) * (step(m, links, lanes * n / k) + lane_us);
        if (best < 0 || t < best) best = t, best_k = k;
        else if (k - best_k > PIECE_PAST_BEST) break;
    }
    /* A fixed chunk is the call's; one piece: any chunk that holds it
     * cuts alike, so say the largest. */
    if (best_k > 1 && !m->chunk) m->chosen = piece_bytes(n, best_k);
    return best;
}

/* ---- the single-copy algorithm (algo/single_copy.c) ---- */

#define CMA_PIECE 65536.0 /* single_copy.c's PIECE_BYTES: a fold reads a peer's piece a call */

/* Of a rank's reads of its peers' memory, the share that crosses to
 * another core: a peer that shares this rank's core (oversub - 1 of the
 * N - 1, as CCL_BIND places them) is read from that core's own caches. */
static double crossing_share(const struct ccl__job_shape *j) {
    return j->oversub > 1 ? fmax(0, 1 - (j->oversub - 1) / (j->n - 1)) : 1;
}

/* Bytes a rank reads out of its peers' windows, which they have just
 * written: like a ring step's data, the lines cross between the cores at
 * the shared-memory link's speed, from the first byte. (The first 64 KiB
 * once counted as a local copy, from a machine where the ring's small
 * steps were slow; here the ring took 1.1-2.1 us for 2-8 KiB a rank where
 * direct took 1.0-2.0, and 4.4 at 32 KiB where direct took 6.2, and that
 * discount had the planner run direct's broadcast of 64 KiB on 2 ranks at
 * 2.2x the fastest algorithm's time: bench/algo-table --coll.) */
static double window_reads_us(const struct model *m, double bytes) {
    return crossing_share(m->j) * transfer_us(m, m->j->all_links, bytes);
}

/* Of the crossing reads of windows that every rank of a core reads alike
 * (an all-gather's blocks, a broadcast's root window), the share that
 * crosses: the first of a core's oversub ranks fetches a window's lines
 * from the other core, the rest read them from this core's caches.
 * Measured: 4 ranks on 2 cores, all-gather of 4, 16 and 64 MiB, direct
 * 1050, 4638 and 25328 us against recursive doubling's 1331, 5750 and
 * 33034 (all_gather_perf, medians of 3 rounds), where costing each rank's
 * reads as its own put recursive doubling 1.26-1.38x ahead; broadcast of
 * 4 and 16 MiB, direct 1153 and 6146 against single-copy's 1539 and 7147,
 * where the model put single-copy ahead. */
static double alike_reads_share(const struct ccl__job_shape *j) { return j->oversub > 1 ? 1 / j->oversub : 1; }

/* y0 up to x0, y1 from x1, on the line joining them in between. */
static double along(double x, double x0, double y0, double x1, double y1) {
    return x <= x0 ? y0 : x >= x1 ? y1 : y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

/* The kernel's copy per byte of a peer buffer of `buffer` bytes: the
 * probe's speed while the buffer is no larger than the probe's (its lines
 * still in caches), the large point's once it is as large (from memory),
 * in between on the line joining the two. Without a measured large point
 * it is the default's share of the probe's speed, and no faster than the
 * default large point: a large buffer comes from memory, which the probe,
 * reading lines still in the caches, does not measure (it read 7-19 GB/s
 * from one init to the next on the 2-core development machine, and
 * proportional to it the model took the single-copy algorithm for 4 ranks
 * of 2 cores at 16 MiB, where it measured 1.2-1.4x slower than direct).
 * A large point never counts as faster than the probe. */
static double cma_byte_us(const struct ccl__figures *f, double buffer) {
    int measured = (f->measured & CCL__FIG_CMA_LARGE) && f->cma_large_bytes > CCL__PROBE_BYTES;
    double fast = 1 / f->cma_bytes_per_us, large = measured ? f->cma_large_bytes : CMA_LARGE_BYTES;
    double slow = fmax(measured ? 1 / f->cma_large_bytes_per_us
                                : fmax(fast * CMA_SPEED / CMA_LARGE_SPEED, 1 / CMA_LARGE_SPEED),
                       fast);
    /* Init's read of a message-sized buffer, where it ran, is a measured
     * point between the two (never faster than the probe's, never slower
     * than the large one's): without it a 1 MiB read counted at nearly the
     * probe's speed, which read 11-19 GB/s from one init to the next on
     * the 2-core development machine, where 1 MiB reads ran at 9-13. */
    double msg = f->cma_msg_bytes, at_msg = msg > 0 ? 1 / f->cma_msg_bytes_per_us : 0;
    if (msg > CCL__PROBE_BYTES && msg < large && at_msg > 0) {
        at_msg = fmin(fmax(at_msg, fast), slow);
        return buffer <= msg ? along(buffer, CCL__PROBE_BYTES, fast, msg, at_msg)
                             : along(buffer, msg, at_msg, large, slow);
    }
    return along(buffer, CCL__PROBE_BYTES, fast, large, slow);
}

int ccl__cost_kernel_read_pays(const struct ccl__figures *f, double read_bytes_per_us) {
    return read_bytes_per_us >= f->copy_bytes_per_us / 2;
}

/* Bytes a rank reads from (or writes to) its peers' own buffers of
 * `buffer` bytes through the kernel, in `calls` system calls: one copy,
 * where the windows take two. Every byte counts as crossing, a peer that
 * shares this rank's core too: the kernel's copy of it does not run out
 * of that core's caches as plain loads would. Measured: 4 ranks on 2
 * cores, all-gather, reduce-scatter, all-reduce and broadcast of 16 KiB
 * to 4 MiB, the single-copy algorithm took 1.2-2.7x the direct
 * algorithm's or the ring's time on inputs written just before each call
 * (all_gather_perf --fresh) and 1.1-3.4x on the benchmarks' reused ones,
 * at every size, where counting a core-mate's buffer as cached up to
 * 1 MiB had the planner take it for 256 KiB and 1 MiB calls, at up to
 * 2.1x direct's time. */
static double cma_read_us(const struct model *m, double bytes, double calls, double buffer) {
    const struct ccl__figures *f = m->f;
    return m->j->oversub * (bytes * cma_byte_us(f, buffer) + calls * f->cma_call_us);
}

/* n: the per-rank piece, as for every formula (cost.h). The fold reads
 * N - 1 peers' pieces of a rank's slice, one call each. */
static double single_copy_us(const struct model *m, int kind, double n) {
    const struct ccl__job_shape *j = m->j;
    if (!j->single_copy) return -1;
    int N = j->n;
    double part = (double)(N - 1) / N, sync = sync_us(m, j->all_links);
    switch (kind) {
    case CCL__K_ALL_REDUCE:
        return 3 * sync + 2 * cma_read_us(m, part * n, (N - 1) * pieces(n / N, CMA_PIECE), n) + part * reduce_us(m, n);
    case CCL__K_REDUCE:
        return 2 * sync + 2 * cma_read_us(m, part * n, 2 * (N - 1) * pieces(n / N, CMA_PIECE), n) + part * reduce_us(m, n);
    case CCL__K_REDUCE_SCATTER:
        return 2 * sync + cma_read_us(m, (N - 1) * n, (N - 1) * pieces(n, CMA_PIECE), n) + (N - 1) * reduce_us(m, n);
    /* (out of place, its own block's copy, which every algorithm makes and
     * the ring's formula leaves out too) */
    case CCL__K_ALL_GATHER: return 2 * sync + cma_read_us(m, (N - 1) * n, N - 1, n);
    case CCL__K_BROADCAST: return 2 * sync + cma_read_us(m, n, 1, n);
    default: return -1;
    }
}

/* Loads of peers' memory: priced as the kernel's reads of it (below),
 * and never above the direct algorithm's reads of the same bytes from
 * peers' windows, which cross between the cores alike: where the kernel
 * copies slowly, its probe priced the loads above what they take
 * (measured, 3 ranks on 2 cores, 1 MiB all-reduce: zero-copy 146-186 us,
 * direct 295-320, where a kernel read of 4.9-6.5 GB/s put zero-copy at
 * 316 and direct at 290). */
static double peer_loads_us(const struct model *m, double bytes) {
    /* plain loads: a core-mate's memory comes out of this core's caches */
    double across = crossing_share(m->j);
    return fmin(m->j->oversub * across * bytes * cma_byte_us(m->f, 0), across * transfer_us(m, m->j->all_links, bytes));
}

/* The zero-copy path: the single-copy algorithm's reads and folds, as
 * loads of the peers' mapped memory, no system call (peer_loads_us:
 * cma_read_us with no calls, and as for a cached buffer at any size:
 * plain loads pay no per-page copy in the kernel, and the path measured
 * ahead of every other from 32 KiB to 32 MiB on 2 and 4 ranks). Its
 * reads cost at most what the probe measured for the kernel's reads of
 * freshly written peer memory (the same lines cross between the same
 * cores; plain loads are no slower; where the kernel refused the probe,
 * the file's or the default figure). In place costs the same: measured on 2 ranks, in place
 * zero-copy took 0.53-0.62x the single-copy algorithm's time from 256 KiB
 * to 16 MiB, and tied at 64 KiB (before its last fold wrote the output
 * itself, in place lost to the staged paths up to 1 MiB). */
static double zero_copy_us(const struct model *m, int kind, double n) {
    const struct ccl__job_shape *j = m->j;
    if (!j->windows) return -1;
    int N = j->n;
    double part = (double)(N - 1) / N, sync = sync_us(m, j->all_links);
    switch (kind) {
    case CCL__K_ALL_REDUCE: return 3 * sync + peer_loads_us(m, 2 * part * n) + part * reduce_us(m, n);
    case CCL__K_REDUCE: return 2 * sync + peer_loads_us(m, part * n) + part * reduce_us(m, n);
    case CCL__K_REDUCE_SCATTER: return 2 * sync + peer_loads_us(m, (N - 1) * n) + (N - 1) * reduce_us(m, n);
    case CCL__K_ALL_GATHER: return 2 * sync + peer_loads_us(m, (N - 1) * n);
    case CCL__K_BROADCAST: return 2 * sync + peer_loads_us(m, n);
    default: return -1;
    }
}

double ccl__cost_zero_copy_us(const struct ccl__job_shape *j, const struct ccl__figures *f, int kind, size_t bytes) {
    struct model m = {j, f, 0, 131072, 0};
    return j->n < 2 ? -1 : zero_copy_us(&m, kind, (double)bytes);
}

/* ---- per collective; n is the per-rank piece (see cost.h) ---- */

static double all_reduce(struct model *m, int algo, double n) {
    const struct ccl__job_shape *j = m->j;
    int N = j->n, p = ccl__pow2_floor(N);
    double part = (double)(N - 1) / N;
    switch (algo) {
    case CCL__ALGO_RING:
        return 2 * (N - 1) * (ring_step(m, n / N) + chunk_handoffs(m, n / N)) + part * reduce_us(m, n);
    case CCL__ALGO_TREE: {
        /* Up both trees, then down: each rank moves the whole buffer once
         * up and once down. A piece of each half goes up (or down) a level
         * a step, a rank moving one of each tree's: each way is a pipeline
         * depth - 1 steps deep. In whole slots: finer pieces, which this
         * formula favours, measured slower (bench/chunk-table: 17-30% at
         * 64 KiB on shm 4 and 8 ranks and tcp 4, no better within the
         * noise from 256 KiB to 4 MiB). */
        return 2 * pipeline(m, j->dtree_links, n / 2, j->dtree_depth - 1, 2, 0) + reduce_us(m, n);
    }
    /* rd.c runs rd and rhd a segment at a time (its SEGMENT_BYTES),
     * which keeps what a step streams within the caches, as the formulas'
     * bytes assume. A segment's first step waits no more than any chunk's:
     * the exchanges go chunk by chunk in every segment, as the ring's
     * rounds go chunk by chunk, and no formula counts those waits. So the
     * formulas are the whole buffer's (measured: loopback tcp, 4 ranks on
     * 2 cores, 8-64 MiB, rhd in 1 MiB segments took 0.90-0.96 of the
     * ring's time, where charging each segment its steps' latencies again
     * put it 3% behind). */
    case CCL__ALGO_RD: {
        double t = fold_us(m, n);
        for (int k = 0; (1 << k) < p; k++) t += xor_step(m, k, n) + chunk_handoffs(m, n) + reduce_us(m, n);
        return t;
    }
    case CCL__ALGO_RHD: {
        double t = fold_us(m, n), piece = n;
        for (int k = 0; (1 << k) < p; k++) {
            piece /= 2;
            t += 2 * (xor_step(m, k, piece) + chunk_handoffs(m, piece)) + reduce_us(m, piece);
        }
        return t;
    }
    case CCL__ALGO_DIRECT: {
        if (!j->windows) return -1;
        /* In rounds, what a rank reads from peers' windows (2 (N-1)/N of
         * the buffer) crosses the links between cores like a ring step's
         * data; only its own copy in is local. One shot (16 KiB at most,
         * direct.c): every rank reduces the whole buffer from every
         * window, which the peers have just written. A core fetches each
         * window of another core's ranks once, its own ranks taking turns
         * read it from the core's cache after the first: N - oversub
         * windows cross to each core (measured: 8 ranks, 4 KiB in 29 us,
         * where costing every rank's reads as link steps predicts 42; 2
         * ranks, 8 KiB, direct 1.08-1.13x recursive doubling's one
         * exchange in three bench/algo-table runs, where leaving the
         * crossing out predicted direct at 0.6x). With many ranks one shot
         * costs more than the rounds above the limit would; a prediction
         * never falls as the message grows, so above it the limit's time
         * is a floor. */
        unsigned all = j->all_links;
        /* Up to CCL__LINES_MAX_BYTES a call is a tiny all-reduce
         * (algo/lines.c): one wait on lines that carry the inputs, where a
         * message through the slots (recursive doubling's exchange, the
         * probe's alpha) also takes a meta line and the receiver's release.
         * Measured, all_reduce_perf -A direct|rd, 8 B to 2 KiB, medians of
         * 4 alternations: 2 ranks 0.65-0.9x recursive doubling's time, 3
         * and 4 ranks sharing 2 cores 0.5-0.75x. */
        if (n <= CCL__LINES_MAX_BYTES)
            return LINES_WAIT * sync_us(m, all) + copy_us(m, n) + (N - 1) * reduce_us(m, n) +
                   link_bytes_us(m, all, (N - fmax(1, j->oversub)) * n);
        double shot = sync_us(m, all) + copy_us(m, ONE_SHOT) + (N - 1) * reduce_us(m, ONE_SHOT) +
                      link_bytes_us(m, all, (N - fmax(1, j->oversub)) * ONE_SHOT);
        if (n <= ONE_SHOT) return shot * n / ONE_SHOT + sync_us(m, all) * (1 - n / ONE_SHOT);
        /* A window of a peer that shares this rank's core is read from
         * that core's own caches: only the reads of the other cores'
         * windows cross the machine. Ranks per core beyond the first
         * (oversub - 1 of the N - 1 peers) share each core, as CCL_BIND
         * places them. Measured: 8 ranks on 2 cores, 512 KiB, direct
         * 220 us and the ring 274, where charging every read as crossing
         * predicted 621 and 656 (bench/algo-table). */
        double across = crossing_share(j);
        /* Of the two halves' reads, the all-gather's are the same segments
         * for every rank of a core: a segment of another core's rank
         * crosses once and its other ranks read it from the core's caches.
         * With k ranks a core, its crossing reads are (k + 1) (N - k) / N
         * of the buffer where every rank's own would be 2 k (N - k) / N.
         * Measured: 4 and 8 ranks on 2 cores, direct 0.87-0.95x the ring
         * from 1 to 64 MiB (bench/algo-table), where counting every read
         * as crossing predicted 1.16-1.44x. */
        double shared = (1 + alike_reads_share(j)) / 2;
        double t = rounds(m, n) * round_waits_us(m, 3) + copy_us(m, n) +
                   2 * shared * across * transfer_us(m, all, part * n) + part * reduce_us(m, n);
        return t > shot ? t : shot;
    }
    case CCL__ALGO_HIER: {
        /* On one host, or with one rank per host, hier runs one ring in
         * two calls (or one): the ring's own schedule, never faster, so
         * not an algorithm to choose or rank apart from it. */
        if (!j->per_host || j->nhosts == 1 || j->per_host == 1) return -1;
        int L = j->per_host, H = j->nhosts;
        double t = 0, in = (double)(L - 1) / L, x = (double)(H - 1) / H, block = n / L;
        if (L > 1) t += 2 * (L - 1) * step(m, j->inside_links, n / L) + in * reduce_us(m, n);
        /* The L rings across hosts run at once through each host's one
         * network adapter. */
        if (H > 1) t += 2 * (H - 1) * shared_step(m, j->across_links, block / H, L) + x * reduce_us(m, block);
        return t;
    }
    default: return -1;
    }
}

static double reduce_scatter(const struct model *m, int algo, double b) {
    const struct ccl__job_shape *j = m->j;
    int N = j->n;
    switch (algo) {
    case CCL__ALGO_RING: return (N - 1) * (ring_step(m, b) + chunk_handoffs(m, b) + reduce_us(m, b));
    case CCL__ALGO_DIRECT:
        /* every rank's block in, then N - 1 peers' windows read as they
         * are folded */
        if (!j->windows) return -1;
        return rounds(m, N * b) * round_waits_us(m, 2) + copy_us(m, N * b) + window_reads_us(m, (N - 1) * b) +
               (N - 1) * reduce_us(m, b);
    default: return -1;
    }
}

static double all_gather(const struct model *m, int algo, double b) {
    const struct ccl__job_shape *j = m->j;
    int N = j->n;
    switch (algo) {
    case CCL__ALGO_RING: return (N - 1) * (ring_step(m, b) + chunk_handoffs(m, b));
    case CCL__ALGO_RD: {
        if (ccl__pow2_floor(N) != N) return -1;
        double t = copy_us(m, b);
        for (int k = 0; (1 << k) < N; k++) t += xor_step(m, k, b * (1 << k));
        return t;
    }
    case CCL__ALGO_BRUCK: {
        /* Step k sends the 2^k blocks gathered so far (fewer in the last),
         * then one rotation puts the blocks in rank order. */
        double t = copy_us(m, N * b);
        for (int k = 0; (1 << k) < N; k++) {
            int blocks = (1 << k) < N - (1 << k) ? 1 << k : N - (1 << k);
            t += shift_step(m, k, b * blocks);
        }
        return t;
    }
    case CCL__ALGO_DIRECT:
        /* Its block in, its own out, and N - 1 peers' windows read. Costing
         * those reads as copies in this core's cache predicted a third of
         * the time measured (2 ranks, 512 KiB a rank, 48 us against 114 and
         * more; broadcast of 1 MiB 63 against 162-175), and put direct
         * ahead of the ring where the ring is faster. */
        if (!j->windows) return -1;
        return rounds(m, N * b) * round_waits_us(m, 2) + 2 * copy_us(m, b) +
               alike_reads_share(j) * window_reads_us(m, (N - 1) * b);
    default: return -1;
    }
}

static double broadcast_or_reduce(struct model *m, int algo, double n, int reduces) {
    const struct ccl__job_shape *j = m->j;
    int N = j->n, depth = log2_ceil(N);
    double red = reduces ? reduce_us(m, n) : 0;
    switch (algo) {
    case CCL__ALGO_RING:
        /* A chain: the first piece takes N - 1 hops, the rest follow one
         * step behind. */
        return pipeline(m, j->ring_links, n, N - 2, 1, 1) + red;
    case CCL__ALGO_TREE: {
        /* Binomial: the root (and each inner rank) serves up to log2 N
         * children, one after another, piece after piece: it is busy
         * depth steps a piece, so smaller pieces only add waits. */
        double k = pieces(n, m->max);
        return depth * k * step(m, j->btree_links, n / k) + depth * red;
    }
    case CCL__ALGO_DIRECT:
        /* The buffer in, and out of the windows: reduce reads every
         * input's slice and the root every slice (2 (N-1)/N of it across),
         * broadcast the root's window (all of it, read alike by the ranks
         * of a core). */
        if (!j->windows) return -1;
        if (reduces)
            return rounds(m, n) * round_waits_us(m, 3) + 2 * copy_us(m, n) +
                   window_reads_us(m, 2.0 * (N - 1) / N * n) + (double)(N - 1) / N * red;
        return rounds(m, n) * round_waits_us(m, 2) + copy_us(m, n) +
               alike_reads_share(j) * window_reads_us(m, n);
    default: return -1;
    }
}

static double all_to_all(const struct model *m, int algo, double b) {
    const struct ccl__job_shape *j = m->j;
    int N = j->n;
    switch (algo) {
    case CCL__ALGO_PAIRWISE: return (N - 1) * shared_step(m, j->all_links, b, j->per_host_max);
    case CCL__ALGO_DIRECT: /* every pair at once: the waits overlap, the bytes do not */
        return sync_us(m, j->all_links) +
               (N - 1) * (shared_step(m, j->all_links, b, j->per_host_max) - sync_us(m, j->all_links));
    case CCL__ALGO_BRUCK: {
        double t = 2 * copy_us(m, N * b);
        for (int k = 0; (1 << k) < N; k++) t += shift_step(m, k, b * (N / 2));
        return t;
    }
    default: return -1;
    }
}

static double barrier(const struct model *m, int algo) {
    const struct ccl__job_shape *j = m->j;
    switch (algo) {
    case CCL__ALGO_RING: return 2 * (j->n - 1) * sync_us(m, j->ring_links);
    case CCL__ALGO_BRUCK: {
        double t = 0;
        for (int k = 0; (1 << k) < j->n; k++) t += sync_us(m, j->shift_links[k]);
        return t;
    }
    default: return -1;
    }
}

double ccl__cost_predict_chunk(const struct ccl__job_shape *j, const struct ccl__figures *f, int kind, int algo,
                               size_t bytes, size_t chunk, size_t *chosen) {
    /* Unless a pipeline below finds a better one, the largest chunk the
     * algorithm's links allow: the model sees only waits in smaller ones. */
    size_t slot = algo == CCL__ALGO_RING || !j->any_chunk ? j->ring_chunk : j->any_chunk;
    if (!slot) slot = 131072; /* a shape nobody gave slots: the default */
    size_t max = chunk && chunk < slot ? chunk : slot;
    struct model m = {j, f, chunk, (double)max, max};
    double n = (double)bytes, t;
    if (j->n == 1) t = algo == CCL__ALGO_RING && kind != CCL__K_ALL_TO_ALL ? copy_us(&m, n) : -1;
    else if (algo == CCL__ALGO_SINGLE_COPY) t = single_copy_us(&m, kind, n);
    else switch (kind) {
        case CCL__K_ALL_REDUCE: t = all_reduce(&m, algo, n); break;
        case CCL__K_REDUCE_SCATTER: t = reduce_scatter(&m, algo, n); break;
        case CCL__K_ALL_GATHER: t = all_gather(&m, algo, n); break;
        case CCL__K_BROADCAST: t = broadcast_or_reduce(&m, algo, n, 0); break;
        case CCL__K_REDUCE: t = broadcast_or_reduce(&m, algo, n, 1); break;
        case CCL__K_ALL_TO_ALL: t = all_to_all(&m, algo, n); break;
        case CCL__K_BARRIER: t = barrier(&m, algo); break;
        default: t = -1;
        }
    if (chosen) *chosen = m.chosen;
    return t;
}

double ccl__cost_predict(const struct ccl__job_shape *j, const struct ccl__figures *f, int kind, int algo,
                         size_t bytes) {
    return ccl__cost_predict_chunk(j, f, kind, algo, bytes, 0, NULL);
}

#define TIE 1e-9 /* relative: predictions closer than this are equal */

struct ccl__cost_pick ccl__cost_choose(const struct ccl__job_shape *j, const struct ccl__figures *f, int kind,
                                       size_t bytes, size_t chunk) {
    struct ccl__cost_pick p = {-1, -1, 0, 0, 0};
    for (int a = 0; a < CCL__NUM_ALGOS; a++) {
        if (!ccl__algos[a] || !ccl__algos[a]->run[kind]) continue;
        size_t c;
        double t = ccl__cost_predict_chunk(j, f, kind, a, bytes, chunk, &c);
        if (t < 0) continue;
        /* A tie goes to the algorithm registered first (the ring first):
         * on 2 ranks rhd runs the ring's very steps, and its formula's
         * rounding must not decide between them. */
        if (p.algo < 0 || t < p.us * (1 - TIE)) {
            p.next = p.algo, p.next_us = p.us;
            p.algo = a, p.us = t, p.chunk = c;
        } else if (p.next < 0 || t < p.next_us) {
            p.next = a, p.next_us = t;
        }
    }
    return p;
}
