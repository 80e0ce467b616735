/*
 * The driver: for every type, op and root, for every size, a check pass
 * (one call per placement on fresh inputs, every output element compared
 * bit for bit) and then a timed pass (warm-up, a barrier, the timed block),
 * as nccl-tests does it. Every rank runs the same loop; rank 0 reports.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "colls.h"
#include "device_mem.h"
#include "measure.h"
#include "options.h"
#include "report.h"
#include "steady.h"
#include "values.h"

struct sweep {
    const struct bench_options *o;
    const struct bench_backend *be;
    struct bench_comm *c;
    enum bench_coll coll;
    const struct bench_coll_info *info;
    int rank, nranks;
    int reports; /* this rank prints and writes the results */
    int corrupt; /* CCL_BENCH_CORRUPT: the checker's self-test */
    size_t size_bytes; /* the size being measured (alltoallv's pattern divides it) */
    unsigned char *send, *recv; /* what the calls get: GPU memory with --device; -u's offset included */
    unsigned char *send_alloc, *recv_alloc; /* as allocated */
    void *send_reg, *recv_reg; /* -R 1: the registrations */
    unsigned char *hsend, *hrecv; /* --device: host copies that the check pass fills and reads */
    size_t buf_bytes;
    double *iter_times; /* -I */
    size_t fresh_bytes; /* --fresh: the inputs' bytes at the timed call's send */
    size_t *vcounts;    /* alltoallv: this size's counts and displacements (4 * nranks) */
    struct bench_call *calls;
    long long wrong_total;
    struct bench_report report;
    struct bench_progress progress;
    struct bench_steady steady; /* --steady */
};

/* What one placement of one size runs on. */
struct placement {
    const void *send;
    void *recv;
    unsigned char *clear; /* the output region, poisoned before a check */
    size_t clear_elems;
};

static size_t next_size(const struct bench_options *o, size_t s) {
    size_t next = o->step_bytes ? s + o->step_bytes : (size_t)((double)s * o->step_factor);
    if (next <= s) next = s + 1; /* small sizes with a factor below 2 */
    return next > o->max_bytes || next < s ? 0 : next;
}

static long count_sizes(const struct bench_options *o) {
    long n = 0;
    for (size_t s = o->min_bytes;; s = next_size(o, s)) {
        n++;
        if (next_size(o, s) == 0) return n;
    }
}

static int fail(struct sweep *sw, const char *what, const struct bench_call *call) {
    fprintf(stderr, "[rank %d] %s: %s", sw->rank, sw->o->prog, what);
    if (call && call->coll != BENCH_BARRIER)
        fprintf(stderr, " (%s, count %zu, %s%s%s)", sw->info->name, call->count, bench_dtype_name(call->dtype),
                sw->info->has_redop ? " " : "", sw->info->has_redop ? bench_redop_name(call->redop) : "");
    fprintf(stderr, ": %s\n", sw->be->last_error(sw->c));
    return -1;
}

/* -a: one time (or one per iteration) per rank -> the reported one. */
static int combine_times(struct sweep *sw, double *t, int n) {
    switch (sw->o->combine) {
    case BENCH_TIME_RANK0: return 0;
    case BENCH_TIME_MIN: return sw->be->combine(sw->c, t, n, BENCH_COMBINE_MIN);
    case BENCH_TIME_MAX: return sw->be->combine(sw->c, t, n, BENCH_COMBINE_MAX);
    default:
        if (sw->be->combine(sw->c, t, n, BENCH_COMBINE_SUM)) return -1;
        for (int i = 0; i < n; i++) t[i] /= sw->nranks;
        return 0;
    }
}

/* Where the check pass reads and writes what the call sees at p: p itself,
 * or with --device its place in the host copy of p's buffer. */
static unsigned char *host_view(const struct sweep *sw, const void *p) {
    const unsigned char *b = p;
    if (!sw->o->device) return (unsigned char *)b;
    if (b >= sw->send && b < sw->send + sw->buf_bytes) return sw->hsend + (b - sw->send);
    return sw->hrecv + (b - sw->recv);
}

/* --device: both host copies to the GPU before a checked call (to_gpu), or
 * the output buffer back after it. 0 or -1 (said). */
static int move_checked(struct sweep *sw, int to_gpu) {
    int bad = to_gpu ? bench_device_upload(sw->send, sw->hsend, sw->buf_bytes) ||
                           bench_device_upload(sw->recv, sw->hrecv, sw->buf_bytes)
                     : bench_device_download(sw->hrecv, sw->recv, sw->buf_bytes);
    if (bad) fprintf(stderr, "[rank %d] %s: copying the check pass's buffers %s the GPU failed\n", sw->rank, sw->o->prog,
                     to_gpu ? "to" : "from");
    return -bad;
}

static int check_pass(struct sweep *sw, const struct bench_call *call, const struct placement *pl, long long *wrong) {
    struct bench_check_case k = {sw->coll, call->dtype, call->redop, call->root, sw->nranks, sw->rank, call->count,
                                 sw->size_bytes};
    size_t es = bench_dtype_size(call->dtype);
    /* Stale results of an earlier call must not pass for new ones. */
    memset(host_view(sw, pl->clear), 0xa5, pl->clear_elems * es);
    bench_fill_input(&k, host_view(sw, pl->send));
    if (sw->o->device && move_checked(sw, 1)) return -1;
    if (sw->be->run(sw->c, call, 1, sw->o->nonblocking)) return fail(sw, "check pass failed", call);
    if (sw->o->device && move_checked(sw, 0)) return -1;
    unsigned char *out = host_view(sw, pl->recv);
    if (sw->corrupt && sw->rank == bench_corrupt_rank(&k)) bench_corrupt_one(&k, out);
    double w = (double)bench_count_wrong(&k, out);
    if (sw->be->combine(sw->c, &w, 1, BENCH_COMBINE_SUM)) return fail(sw, "combining wrong counts failed", NULL);
    *wrong = (long long)w;
    return 0;
}

/* -C: seconds of CPU time this process (every thread) has used. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A result's time per operation and the bandwidths that follow from it. */
static void set_time(const struct sweep *sw, struct bench_place_result *res, size_t bytes, double time_us) {
    res->time_us = time_us;
    res->algbw_gbps = time_us > 0 ? (double)bytes / time_us / 1e3 : 0;
    res->busbw_gbps = res->algbw_gbps * bench_bus_factor(sw->coll, sw->nranks);
}

static int timed_pass(struct sweep *sw, const struct bench_call *call, size_t bytes, struct bench_place_result *res) {
    const struct bench_options *o = sw->o;
    const struct bench_backend *be = sw->be;
    for (int i = 0; i < o->agg; i++) sw->calls[i] = *call;
    for (int i = 0; i < o->warmup; i++)
        if (be->run(sw->c, sw->calls, o->agg, o->nonblocking)) return fail(sw, "warm-up failed", call);
    double t;
    if (!o->stats) {
        if (be->barrier(sw->c)) return fail(sw, "barrier failed", NULL);
        double t0 = o->report_cputime ? cpu_now() : bench_now();
        for (int i = 0; i < o->iters; i++)
            if (be->run(sw->c, sw->calls, o->agg, o->nonblocking)) return fail(sw, "timed call failed", call);
        t = ((o->report_cputime ? cpu_now() : bench_now()) - t0) / o->iters / o->agg / sw->info->legs;
        if (combine_times(sw, &t, 1)) return fail(sw, "combining times failed", NULL);
    } else {
        /* Each iteration alone, so that its time is its own on every rank;
         * with --fresh, on inputs this rank has just written (a byte
         * pattern that is a normal number in every dtype, changed each
         * time so that every line is written anew). */
        for (int i = 0; i < o->iters; i++) {
            if (o->fresh && call->send) memset((void *)call->send, 0x3c | (i & 1), sw->fresh_bytes);
            if (be->barrier(sw->c)) return fail(sw, "barrier failed", NULL);
            double t0 = o->report_cputime ? cpu_now() : bench_now();
            if (be->run(sw->c, sw->calls, o->agg, o->nonblocking)) return fail(sw, "timed call failed", call);
            sw->iter_times[i] = ((o->report_cputime ? cpu_now() : bench_now()) - t0) / o->agg / sw->info->legs * 1e6;
        }
        if (combine_times(sw, sw->iter_times, o->iters)) return fail(sw, "combining times failed", NULL);
        /* -K: the first iterations left out of the statistics */
        struct bench_stats s = bench_stats_of(sw->iter_times + o->stats_skip, o->iters - o->stats_skip);
        res->has_stats = 1;
        res->min_us = s.min;
        res->median_us = s.median;
        res->p99_us = s.p99;
        res->max_us = s.max;
        t = s.mean * 1e-6;
    }
    set_time(sw, res, bytes, t * 1e6);
    return 0;
}

/* A timed pass on communicator slot `slot` (-A's index, 0 without a list),
 * with --steady timed again until the machine stayed at speed through it. */
static int guarded_pass(struct sweep *sw, const struct bench_call *call, size_t bytes, int slot,
                        struct bench_place_result *res) {
    for (int again = 1, try = 1; again; try++) {
        if (bench_steady_before(&sw->steady, slot)) return fail(sw, "--steady's probe failed", NULL);
        if (timed_pass(sw, call, bytes, res)) return -1;
        if (bench_steady_after(&sw->steady, slot, try == BENCH_STEADY_MAX_TRIES, &again))
            return fail(sw, "--steady's probe failed", NULL);
    }
    return 0;
}

/* Points the calls that follow at -A's i-th algorithm (nothing to do
 * without a list). */
static int use_algo(struct sweep *sw, int i) {
    if (!sw->o->nalgos || !sw->be->use_algo(sw->c, i)) return 0;
    fprintf(stderr, "[rank %d] %s: switching to algorithm %s: %s\n", sw->rank, sw->o->prog, sw->o->algos[i],
            sw->be->last_error(sw->c));
    return -1;
}

/* With -A's list, each algorithm's timed pass runs o->rounds times, the
 * algorithms taking turns (each round starting one further along, so no
 * algorithm always follows the same one); the median round is reported.
 * A machine that slows down for a while slows every algorithm alike. */
static int timed_rounds(struct sweep *sw, const struct bench_call *call, size_t bytes, int p, struct bench_row *rows) {
    if (!sw->o->nalgos) return guarded_pass(sw, call, bytes, 0, &rows[0].place[p]);
    int n = sw->o->nalgos, rounds = sw->o->rounds;
    double *times = calloc((size_t)n * (size_t)rounds, sizeof(double));
    if (!times) return fail(sw, "out of memory for round times", NULL);
    int bad = 0;
    for (int r = 0; r < rounds && !bad; r++)
        for (int k = 0; k < n && !bad; k++) {
            int a = (k + r) % n;
            bad = use_algo(sw, a) || guarded_pass(sw, call, bytes, a, &rows[a].place[p]);
            times[a * rounds + r] = rows[a].place[p].time_us;
            if (!bad && sw->be->ran_algo && strcmp(sw->o->algos[a], "auto") == 0)
                sw->be->ran_algo(sw->c, sw->coll, rows[a].auto_ran, sizeof rows[a].auto_ran);
        }
    for (int a = 0; a < n && !bad; a++)
        set_time(sw, &rows[a].place[p], bytes, bench_stats_of(times + a * rounds, rounds).median);
    free(times);
    return bad ? -1 : 0;
}

static int run_size(struct sweep *sw, size_t size, ccl_dtype_t dtype, ccl_op_t redop, int root) {
    size_t es = bench_dtype_size(dtype);
    struct bench_layout l = bench_layout_for(sw->coll, size, es, sw->nranks, sw->rank);
    /* -u: the calls' buffers start unalign elements of this type past the page */
    unsigned char *send = sw->send + (size_t)sw->o->unalign * es, *recv = sw->recv + (size_t)sw->o->unalign * es;
    if (sw->coll != BENCH_BARRIER && l.count == 0) { /* smaller than one element per rank */
        if (sw->reports) bench_progress_step(&sw->progress, size);
        return 0;
    }
    int nalgos = sw->o->nalgos ? sw->o->nalgos : 1;
    struct bench_row rows[BENCH_MAX_ALGOS];
    for (int a = 0; a < nalgos; a++)
        rows[a] = (struct bench_row){l.bytes, l.count, sw->coll == BENCH_BARRIER ? -1 : (int)dtype,
                                     sw->info->has_redop ? (int)redop : -1, sw->info->has_root ? root : -1,
                                     sw->o->nalgos ? sw->o->algos[a] : NULL, "", {{0}}};
    sw->size_bytes = size;
    if (sw->coll == BENCH_ALLTOALLV) bench_a2av_counts(sw->rank, sw->nranks, size, es, sw->vcounts);
    struct bench_call call = {sw->coll, send, recv, l.count, dtype, redop, root, sw->vcounts};
    for (int p = 0; p < BENCH_NUM_PLACEMENTS; p++) {
        struct placement pl = {send, recv, recv, l.recv_elems};
        if (p == BENCH_IN_PLACE) {
            if (!l.in_place_elems) continue;
            pl.send = recv + l.in_place_send * es;
            pl.recv = recv + l.in_place_recv * es;
            pl.clear_elems = l.in_place_elems; /* the whole shared buffer */
        }
        call.send = pl.send;
        call.recv = pl.recv;
        sw->fresh_bytes = l.send_elems * es;
        for (int a = 0; a < nalgos; a++) {
            struct bench_place_result *res = &rows[a].place[p];
            res->measured = 1;
            res->wrong = -1;
            if (sw->o->check && sw->info->moves_data &&
                (use_algo(sw, a) || check_pass(sw, &call, &pl, &res->wrong)))
                return -1;
            if (res->wrong > 0) sw->wrong_total += res->wrong;
        }
        if (timed_rounds(sw, &call, l.bytes, p, rows)) return -1;
    }
    if (sw->reports) {
        for (int a = 0; a < nalgos; a++) bench_report_row(&sw->report, &rows[a]);
        bench_progress_step(&sw->progress, l.bytes);
    }
    return 0;
}

/* NULL when the sweep can run this combination, else why not: the
 * program's own limits, then the library's. */
static const char *unsupported(const struct sweep *sw, ccl_dtype_t dtype, ccl_op_t redop) {
    if (sw->coll == BENCH_HYPERCUBE && (sw->nranks & (sw->nranks - 1)))
        return "a hypercube needs a power-of-2 rank count (as nccl-tests' hypercube_perf)";
    if (sw->coll == BENCH_ALLTOALLV && bench_a2av_unsupported()) return bench_a2av_unsupported();
    return sw->be->unsupported(sw->c, sw->coll, dtype, redop);
}

/* The first root a sweep runs (-1 for a collective without one). */
static int first_root(const struct sweep *sw) {
    return !sw->info->has_root ? -1 : sw->o->root == BENCH_ALL ? 0 : sw->o->root;
}

static int run_cycle(struct sweep *sw, int first_cycle) {
    const struct bench_options *o = sw->o;
    if (sw->coll == BENCH_BARRIER) return run_size(sw, 0, CCL_FLOAT32, CCL_SUM, -1);
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        if (!(o->dtype_mask & (1u << d))) continue;
        for (int op = 0; op < BENCH_NUM_REDOPS; op++) {
            if (sw->info->has_redop ? !(o->redop_mask & (1u << op)) : op != CCL_SUM) continue;
            const char *why = unsupported(sw, (ccl_dtype_t)d, (ccl_op_t)op);
            if (why) {
                if (sw->reports && first_cycle)
                    printf("# skipped %s%s%s: %s\n", bench_dtype_name((ccl_dtype_t)d), sw->info->has_redop ? " " : "",
                           sw->info->has_redop ? bench_redop_name((ccl_op_t)op) : "", why);
                continue;
            }
            int r0 = first_root(sw);
            int r1 = !sw->info->has_root ? -1 : o->root == BENCH_ALL ? sw->nranks - 1 : o->root;
            for (int root = r0; root <= r1; root++)
                for (size_t s = o->min_bytes; s; s = next_size(o, s))
                    if (run_size(sw, s, (ccl_dtype_t)d, (ccl_op_t)op, root)) return -1;
        }
    }
    return 0;
}

static long rows_per_cycle(const struct sweep *sw) {
    if (sw->coll == BENCH_BARRIER) return 1;
    long n = count_sizes(sw->o) * __builtin_popcount(sw->o->dtype_mask);
    if (sw->info->has_redop) n *= __builtin_popcount(sw->o->redop_mask);
    if (sw->info->has_root && sw->o->root == BENCH_ALL) n *= sw->nranks;
    return n;
}

/* Every rank learns whether every rank is ready: one failing rank must not
 * leave the others waiting in a collective. */
static int all_ok(struct sweep *sw, int ok) {
    double v = ok;
    if (sw->be->combine(sw->c, &v, 1, BENCH_COMBINE_MIN)) {
        fail(sw, "agreeing on setup failed", NULL);
        return 0;
    }
    return v > 0;
}

/* A fresh communicator's first calls fault in its transport's buffers:
 * shared memory passes messages of 16 KiB and more through a ring of bytes
 * each page of which faults once, in the sender and in the receiver (2
 * ranks, 32 KiB ring all-reduce: 15.5 us a call while the first lap
 * lasted, 5.6-7.0 after; a size's own warm-up, -w calls, covers part of a
 * lap). So before
 * the sweep each algorithm's communicator runs the sweep's largest call of
 * its first type until WARM_BYTES have passed: the timed blocks measure
 * the warm path, which is what a trainer's calls after its first few take. */
#define WARM_BYTES (8u << 20)
#define WARM_MAX_CALLS 64

static int warm_transports(struct sweep *sw) {
    const struct bench_options *o = sw->o;
    if (!sw->info->moves_data) return 0;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        if (!(o->dtype_mask & (1u << d))) continue;
        for (int op = 0; op < BENCH_NUM_REDOPS; op++) {
            if (sw->info->has_redop ? !(o->redop_mask & (1u << op)) : op != CCL_SUM) continue;
            if (unsupported(sw, (ccl_dtype_t)d, (ccl_op_t)op)) continue;
            struct bench_layout l = bench_layout_for(sw->coll, o->max_bytes, bench_dtype_size((ccl_dtype_t)d),
                                                     sw->nranks, sw->rank);
            if (l.count == 0) return 0;
            if (sw->coll == BENCH_ALLTOALLV)
                bench_a2av_counts(sw->rank, sw->nranks, o->max_bytes, bench_dtype_size((ccl_dtype_t)d), sw->vcounts);
            struct bench_call call = {sw->coll, sw->send, sw->recv, l.count, (ccl_dtype_t)d, (ccl_op_t)op,
                                      first_root(sw), sw->vcounts};
            size_t calls = l.bytes ? WARM_BYTES / l.bytes : WARM_MAX_CALLS;
            if (calls < 1) calls = 1;
            if (calls > WARM_MAX_CALLS) calls = WARM_MAX_CALLS;
            int nalgos = o->nalgos ? o->nalgos : 1;
            for (int a = 0; a < nalgos; a++) {
                if (use_algo(sw, a)) return -1;
                for (size_t i = 0; i < calls; i++)
                    if (sw->be->run(sw->c, &call, 1, 0)) return fail(sw, "warming the transports failed", &call);
            }
            return 0;
        }
    }
    return 0;
}

static int setup(struct sweep *sw, struct bench_wiring *w) {
    const struct bench_options *o = sw->o;
    size_t bytes = (o->max_bytes + 4095) & ~(size_t)4095;
    int ok = 1;
    if (sw->info->has_root && o->root != BENCH_ALL && o->root >= sw->nranks) {
        if (sw->rank == 0) fprintf(stderr, "%s: -r %d: there are only %d ranks\n", o->prog, o->root, sw->nranks);
        all_ok(sw, 0); /* so that no rank exits (and gets rank 0 stopped) before the message is out */
        return BENCH_EXIT_USAGE;
    }
    char why[300];
    if (o->device && bench_device_open(sw->rank, why, sizeof why)) {
        fprintf(stderr, "[rank %d] %s: %s\n", sw->rank, o->prog, why);
        all_ok(sw, 0);
        return BENCH_EXIT_ERROR;
    }
    /* -u: each buffer starts that many elements (of the widest type: 8 bytes) past its page */
    size_t pad = (size_t)o->unalign * 8;
    bytes += (pad + 4095) & ~(size_t)4095;
    sw->buf_bytes = bytes;
    if (sw->coll != BENCH_BARRIER) {
        sw->send_alloc = o->device ? bench_device_alloc(bytes) : o->shared ? sw->be->shared_alloc(sw->c, bytes)
                                                                           : aligned_alloc(4096, bytes);
        sw->recv_alloc = o->device ? bench_device_alloc(bytes) : o->shared ? sw->be->shared_alloc(sw->c, bytes)
                                                                           : aligned_alloc(4096, bytes);
        sw->send = sw->send_alloc, sw->recv = sw->recv_alloc;
        if (o->device) {
            sw->hsend = calloc(1, bytes);
            sw->hrecv = calloc(1, bytes);
        }
    }
    sw->iter_times = calloc((size_t)o->iters, sizeof(double));
    sw->calls = calloc((size_t)o->agg, sizeof(*sw->calls));
    sw->vcounts = calloc(4 * (size_t)sw->nranks, sizeof(size_t));
    if ((sw->coll != BENCH_BARRIER && (!sw->send || !sw->recv || (o->device && (!sw->hsend || !sw->hrecv)))) ||
        !sw->iter_times || !sw->calls || !sw->vcounts) {
        fprintf(stderr, "[rank %d] %s: out of %s memory for buffers of %zu bytes\n", sw->rank, o->prog,
                o->device ? "GPU or host" : "host", bytes);
        ok = 0;
    } else if (sw->send && !o->device) { /* first touch outside any timing (device memory comes zeroed) */
        memset(sw->send, 0, bytes);
        memset(sw->recv, 0, bytes);
    }
    if (ok && o->register_bufs &&
        (sw->be->register_buf(sw->c, sw->send, bytes, &sw->send_reg) ||
         sw->be->register_buf(sw->c, sw->recv, bytes, &sw->recv_reg))) {
        fail(sw, "registering the buffers (-R 1) failed", NULL);
        ok = 0;
    }
    if (ok && bench_steady_init(&sw->steady, o->steady, sw->be, sw->c, sw->rank, o->nalgos, o->prog)) ok = 0;
    if (!all_ok(sw, ok)) return BENCH_EXIT_ERROR;
    sw->be->describe(sw->c, w);
    if (warm_transports(sw)) return BENCH_EXIT_ERROR;
    /* The roofline is one core's memcpy, or with --device the GPU's own
     * copy: the other ranks wait meanwhile. */
    if (sw->rank == 0 && o->device) {
        sw->report.memcpy = bench_measure_device_copy(o->max_bytes);
        sw->report.memcpy.gpu = bench_device_name();
    } else if (sw->rank == 0) {
        sw->report.memcpy = bench_measure_memcpy(o->max_bytes);
    }
    if (sw->be->barrier(sw->c)) {
        fail(sw, "barrier failed", NULL);
        return BENCH_EXIT_ERROR;
    }
    ok = 1;
    if (sw->reports) {
        sw->report.o = o;
        sw->report.w = w;
        sw->report.op_name = sw->info->name;
        sw->report.nranks = sw->nranks;
        sw->report.buffer_bytes = sw->coll == BENCH_BARRIER ? 0 : 2 * bytes;
        ok = bench_report_open(&sw->report) == 0;
        bench_progress_start(&sw->progress, o->prog, o->cycles ? rows_per_cycle(sw) * o->cycles : 0);
    }
    return all_ok(sw, ok) ? BENCH_EXIT_OK : BENCH_EXIT_ERROR;
}

static int run_all(struct sweep *sw) {
    struct bench_wiring w;
    memset(&w, 0, sizeof w);
    int status = setup(sw, &w);
    if (status != BENCH_EXIT_OK) return status;
    for (int cycle = 0; sw->o->cycles == 0 || cycle < sw->o->cycles; cycle++)
        if (run_cycle(sw, cycle == 0)) {
            sw->be->abort(sw->c);
            return BENCH_EXIT_ERROR;
        }
    status = sw->wrong_total ? BENCH_EXIT_WRONG : BENCH_EXIT_OK;
    struct bench_report *r = &sw->report;
    if (sw->o->steady)
        bench_steady_summary(&sw->steady, &r->steady_redone, &r->steady_waited_s, &r->steady_kept_slow,
                             &r->steady_gave_up, &r->steady_best_us);
    if (sw->reports && bench_report_close(&sw->report)) status = BENCH_EXIT_ERROR;
    /* Nobody exits before rank 0 has written everything: launchers stop
     * every rank when one exits with a failure. */
    if (sw->be->barrier(sw->c)) {
        fail(sw, "final barrier failed", NULL);
        return BENCH_EXIT_ERROR;
    }
    return status;
}

int bench_main(int argc, char **argv, enum bench_coll coll, const struct bench_backend *be) {
    struct bench_options o;
    int parsed = bench_parse_options(argc, argv, coll, be, &o);
    if (parsed) return parsed > 0 ? BENCH_EXIT_OK : BENCH_EXIT_USAGE;
    int status;
    struct bench_comm *c = be->start(&o, &status);
    if (!c) return status;
    struct sweep sw = {.o = &o, .be = be, .c = c, .coll = coll, .info = bench_coll_info(coll)};
    sw.rank = be->rank(c);
    sw.nranks = be->size(c);
    sw.reports = be->reports ? be->reports(c) : sw.rank == 0;
    const char *corrupt = getenv("CCL_BENCH_CORRUPT");
    sw.corrupt = corrupt && *corrupt && strcmp(corrupt, "0") != 0;
    status = run_all(&sw);
    if (sw.send_reg) be->unregister_buf(c, sw.send_reg);
    if (sw.recv_reg) be->unregister_buf(c, sw.recv_reg);
    if (o.device) {
        bench_device_free(sw.send_alloc);
        bench_device_free(sw.recv_alloc);
        free(sw.hsend);
        free(sw.hrecv);
    } else if (o.shared) {
        if (sw.send_alloc) be->shared_free(c, sw.send_alloc);
        if (sw.recv_alloc) be->shared_free(c, sw.recv_alloc);
    } else {
        free(sw.send_alloc);
        free(sw.recv_alloc);
    }
    free(sw.iter_times);
    free(sw.calls);
    free(sw.vcounts);
    bench_steady_free(&sw.steady);
    return be->finish(c, status);
}
