/* The ring's probe (a few all-gathers, every rank at once), and the rule
 * that holds a tuning file's link figure against such probes. */
#include <math.h>
#include <stdlib.h>

#include "algo/algo.h"
#include "plan/tune.h"

/* The probe's calls are stamped with this bit, so a slot of theirs can
 * never pass for a user call's or CCL_CHECK's. */
#define PROBE_SEQ_BIT 0x40000000u
#define WARM_SMALL 40

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ccl__tune_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static ccl_status_t gather(struct ccl_comm *comm, uint32_t seq, const void *mine, void *all, size_t bytes) {
    return ccl__ring_gather_bytes(comm, PROBE_SEQ_BIT | seq, mine, all, bytes);
}

/* Median microseconds of reps timed all-gathers of bytes per rank, after
 * warm untimed ones. */
static ccl_status_t timed(struct ccl_comm *comm, uint32_t *seq, size_t bytes, int warm, int reps, uint8_t *buf,
                          double *us) {
    double t[16];
    for (int i = -warm; i < reps; i++) {
        double t0 = ccl__now();
        CCL_CHECK(gather(comm, (*seq)++, buf, buf + bytes, bytes));
        if (i >= 0) t[i] = (ccl__now() - t0) * 1e6;
    }
    *us = ccl__tune_median(t, reps);
    return CCL_OK;
}

/* The link speed (bytes per us and rank) of a step of `bytes` per rank
 * that took per_step us, alpha (seen: a step of nothing) taken off. */
static double step_speed(const struct ccl__job_shape *shape, const struct ccl__figures *fig, double bytes,
                         double per_step, double seen) {
    double moving = per_step > 2 * seen ? per_step - seen : per_step / 2;
    return ccl__cost_ring_speed(shape, fig, bytes, moving);
}

#define PROBED 3 /* figures each rank brings: alpha, the speed, the large point's speed */

ccl_status_t ccl__tune_probe_ring(struct ccl_comm *comm, const struct ccl__job_shape *shape,
                                  const struct ccl__figures *fig, size_t large_bytes, struct ccl__link_figure *out) {
    int n = comm->nranks;
    size_t most = large_bytes > CCL__PROBE_BYTES ? large_bytes : CCL__PROBE_BYTES;
    uint8_t *buf = calloc((size_t)n + 1, most);
    double *all = malloc(sizeof(double) * PROBED * (size_t)n);
    if (!buf || !all) {
        free(buf), free(all);
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    }
    uint32_t seq = 0;
    double small, probe, slot = 0, mine[PROBED] = {0};
    /* A fresh communicator's first calls fault in its buffers and find cold
     * caches (measured here, 2 ranks on shared memory: a 1-byte step takes
     * 8 us in the first ten calls, 0.8 us after). Every page of a FIFO is a
     * fault the first time a message reaches it, in the sender and in the
     * receiver (about 2 us a page here), and shared memory places messages
     * of this size one after the other through a ring of depth + 1 slots
     * (transports/shm/shm.h): 64 KiB calls took 75 us for the first lap
     * through it, 18 calls, and 20 us after. So the large calls go first,
     * a lap's worth of them and two more, and the small ones find every
     * page warm too. */
    size_t lap = ((size_t)comm->params.slots + 1) * comm->ring_chunk_bytes;
    int warm = (int)((lap + CCL__PROBE_BYTES - 1) / CCL__PROBE_BYTES) + 2;
    ccl_status_t st = timed(comm, &seq, CCL__PROBE_BYTES, warm, 7, buf, &probe);
    if (st == CCL_OK && large_bytes) st = timed(comm, &seq, large_bytes, 2, 7, buf, &slot);
    if (st == CCL_OK) st = timed(comm, &seq, 1, WARM_SMALL, 15, buf, &small);
    if (st == CCL_OK) {
        /* Figures are those of unshared cores (the model adds the handoffs
         * of oversubscription back), never below a quarter of what was seen. */
        double seen = small / (n - 1);
        double alpha = seen - ccl__cost_handoff_us(shape->oversub);
        if (alpha < seen / 4) alpha = seen / 4;
        mine[0] = alpha;
        mine[1] = step_speed(shape, fig, CCL__PROBE_BYTES, probe / (n - 1), seen);
        if (large_bytes) mine[2] = step_speed(shape, fig, (double)large_bytes, slot / (n - 1), seen);
        st = gather(comm, seq++, mine, all, sizeof mine);
    }
    double *each = malloc(sizeof(double) * (size_t)n);
    if (st == CCL_OK && !each) st = ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    if (st == CCL_OK) {
        double median[PROBED];
        for (int k = 0; k < PROBED; k++) {
            for (int r = 0; r < n; r++) each[r] = all[PROBED * r + k];
            median[k] = ccl__tune_median(each, n);
        }
        *out = (struct ccl__link_figure){median[0], median[1], large_bytes ? (double)large_bytes : 0, median[2]};
    }
    free(each), free(buf), free(all);
    return st;
}

void ccl__tune_link_keep_best(struct ccl__link_figure *best, const struct ccl__link_figure *now) {
    best->alpha_us = fmin(best->alpha_us, now->alpha_us);
    best->bytes_per_us = fmax(best->bytes_per_us, now->bytes_per_us);
    best->large_bytes_per_us = fmax(best->large_bytes_per_us, now->large_bytes_per_us);
}

static int link_disagrees(const struct ccl__link_figure *file, const struct ccl__link_figure *now, int crowded) {
    int file_slower = file->alpha_us > 3.0 * now->alpha_us || file->bytes_per_us * CCL__TUNE_STALE_FACTOR < now->bytes_per_us;
    int file_faster = now->alpha_us > 3.0 * file->alpha_us || now->bytes_per_us * CCL__TUNE_STALE_FACTOR < file->bytes_per_us;
    return file_slower || (!crowded && file_faster);
}

int ccl__tune_link_stale(const struct ccl__link_figure *file, int crowded, ccl__tune_link_probe_fn probe, void *arg,
                         struct ccl__link_figure *best, ccl_status_t *st) {
    *st = CCL_OK;
    for (int i = 0; i < CCL__TUNE_STALE_PROBES; i++) {
        struct ccl__link_figure now;
        if ((*st = probe(arg, &now)) != CCL_OK) return 0;
        if (i == 0) *best = now;
        ccl__tune_link_keep_best(best, &now);
        if (!link_disagrees(file, best, crowded)) return 0;
    }
    return 1;
}

