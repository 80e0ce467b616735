/*
 * train_linreg: data-parallel training of a linear regression with libccl.
 *
 *     cclrun -n 4 ./train_linreg [--samples N] [--features F] [--epochs E]
 *                                [--lr RATE] [--seed S] [--check]
 *
 * Every rank generates its own shard of the same synthetic data set (sample
 * i depends only on the seed and i), computes the gradient over its shard,
 * and one all-reduce per epoch turns the shards' sums into the full-batch
 * gradient that every rank applies identically. With --check, rank 0 also
 * trains the same model alone on all the data and compares.
 */
#define _GNU_SOURCE
#include <ccl.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOISE_SCALE 0.01
#define MAX_SHOWN_WEIGHTS 20

struct config {
    uint64_t samples;
    int features;
    int epochs;
    double lr;
    uint64_t seed;
    int check;
};

/* Samples [first, first + count) of the training or the holdout set. */
struct dataset {
    uint64_t first, count;
    int features;
    double *x; /* count rows of features values */
    double *y;
};

struct job {
    const struct config *cfg;
    ccl_comm_t *comm;
    int rank, nranks;
};

/* ---- data: a pure function of (seed, sample index) ---- */

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

enum { STREAM_TRUE_MODEL = 1, STREAM_FEATURES = 2, STREAM_NOISE = 3 };

/* Uniform in [-1, 1), the same on every rank and every run with this seed. */
static double uniform_pm1(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
    uint64_t h = mix64(mix64(mix64(seed ^ mix64(stream)) + a) + b);
    return (double)(h >> 11) * 0x1.0p-52 - 1.0;
}

/* model layout everywhere: features weights, then the bias. */
static void make_true_model(const struct config *c, double *w_true) {
    for (int j = 0; j <= c->features; j++) w_true[j] = 2.0 * uniform_pm1(c->seed, STREAM_TRUE_MODEL, (uint64_t)j, 0);
}

static double predict(const double *model, const double *x, int features) {
    double p = model[features];
    for (int j = 0; j < features; j++) p += model[j] * x[j];
    return p;
}

static int make_dataset(const struct config *c, const double *w_true, uint64_t first, uint64_t count,
                        struct dataset *d) {
    size_t f = (size_t)c->features;
    *d = (struct dataset){.first = first, .count = count, .features = c->features};
    if (count > SIZE_MAX / sizeof(double) / f) return -1;
    d->x = malloc((size_t)count * f * sizeof(double) + 1);
    d->y = malloc((size_t)count * sizeof(double) + 1);
    if (!d->x || !d->y) return -1;
    for (uint64_t i = 0; i < count; i++) {
        double *x = d->x + i * f;
        for (size_t j = 0; j < f; j++) x[j] = uniform_pm1(c->seed, STREAM_FEATURES, first + i, j);
        d->y[i] = predict(w_true, x, c->features) + NOISE_SCALE * uniform_pm1(c->seed, STREAM_NOISE, first + i, 0);
    }
    return 0;
}

static void free_dataset(struct dataset *d) {
    free(d->x);
    free(d->y);
    d->x = d->y = NULL;
}

/* ---- training arithmetic, shared by the distributed and the single run ---- */

/* sums[0..F] = gradient of 0.5 * sum of squared errors (weights, bias);
 * sums[F+1] = sum of squared errors. Sample by sample, in index order. */
static void gradient_sums(const struct dataset *d, const double *model, double *sums) {
    int f = d->features;
    memset(sums, 0, (size_t)(f + 2) * sizeof(double));
    for (uint64_t i = 0; i < d->count; i++) {
        const double *x = d->x + i * (size_t)f;
        double r = predict(model, x, f) - d->y[i];
        for (int j = 0; j < f; j++) sums[j] += r * x[j];
        sums[f] += r;
        sums[f + 1] += r * r;
    }
}

static double squared_error_sum(const struct dataset *d, const double *model) {
    double s = 0;
    for (uint64_t i = 0; i < d->count; i++) {
        double r = predict(model, d->x + i * (size_t)d->features, d->features) - d->y[i];
        s += r * r;
    }
    return s;
}

/* Full-batch step on the mean: the sums divided by the total sample count. */
static void take_step(double *model, const double *sums, int features, double lr, uint64_t samples) {
    for (int j = 0; j <= features; j++) model[j] -= lr * (sums[j] / (double)samples);
}

static int prints_epoch(int epoch, int epochs) {
    int every = epochs <= 20 ? 1 : (epochs + 9) / 10;
    return epoch % every == 0 || epoch == epochs;
}

static double max_abs_diff(const double *a, const double *b, int n, double *max_abs_a) {
    double d = 0, m = 0;
    for (int j = 0; j < n; j++) {
        d = fmax(d, fabs(a[j] - b[j]));
        m = fmax(m, fabs(a[j]));
    }
    if (max_abs_a) *max_abs_a = m;
    return d;
}

/* ---- the distributed run ---- */

static int ccl_failed(const struct job *job, ccl_status_t st, const char *what) {
    if (st == CCL_OK) return 0;
    fprintf(stderr, "train_linreg: rank %d: %s failed: %s: %s\n", job->rank, what, ccl_status_string(st),
            ccl_comm_last_error(job->comm));
    return 1;
}
#define CHECK_CCL(job, call)                                                                                 \
    do {                                                                                                     \
        if (ccl_failed((job), (call), #call)) goto fail;                                                     \
    } while (0)

/* Trains *model in place; rank 0 prints progress. 0 or -1 (reported). */
static int train_distributed(const struct job *job, const struct dataset *train, const struct dataset *holdout,
                             uint64_t holdout_total, double *model) {
    const struct config *c = job->cfg;
    int f = c->features, e, printed = 0, rc = -1;
    size_t nsums = (size_t)f + 2;
    double *local = calloc(nsums, sizeof(double)), *global = calloc(nsums, sizeof(double));
    /* Holdout errors per epoch: this rank's shard, and the sum on rank 0. */
    double *holdout_local = calloc((size_t)c->epochs, sizeof(double));
    double *holdout_global = calloc((size_t)c->epochs, sizeof(double));
    int best_epoch = 0;
    if (!local || !global || !holdout_local || !holdout_global) {
        fprintf(stderr, "train_linreg: rank %d: out of memory\n", job->rank);
        goto fail;
    }
    for (e = 1; e <= c->epochs; e++) {
        gradient_sums(train, model, local);
        ccl_request_t *req = NULL;
        CHECK_CCL(job, ccl_all_reduce_async(local, global, nsums, CCL_FLOAT64, CCL_SUM, job->comm, &req));
        /* While the gradient travels, score the model it was computed at on
         * the holdout shard: work that needs no other rank, and that would
         * otherwise add to every epoch after the all-reduce. */
        holdout_local[e - 1] = squared_error_sum(holdout, model);
        CHECK_CCL(job, ccl_wait(req));
        take_step(model, global, f, c->lr, c->samples);

        if (!prints_epoch(e, c->epochs)) continue;
        /* The holdout errors since the last print reach rank 0 in one reduce. */
        CHECK_CCL(job, ccl_reduce(holdout_local + printed, holdout_global + printed, (size_t)(e - printed),
                                  CCL_FLOAT64, CCL_SUM, 0, job->comm));
        printed = e;
        if (job->rank != 0) continue;
        printf("epoch %d loss %.6e holdout %.6e\n", e, global[f + 1] / (double)c->samples,
               holdout_global[e - 1] / (double)holdout_total);
        fflush(stdout);
    }
    for (int k = 1; k < c->epochs; k++)
        if (holdout_global[k] < holdout_global[best_epoch]) best_epoch = k;
    if (job->rank == 0)
        printf("lowest holdout loss %.6e at epoch %d (losses are mean squared errors before that epoch's step)\n",
               holdout_global[best_epoch] / (double)holdout_total, best_epoch + 1);
    rc = 0;
fail:
    free(local);
    free(global);
    free(holdout_local);
    free(holdout_global);
    return rc;
}

/* Every rank applied the same all-reduced sums, so the models must agree to
 * the last bit: the element-wise max and min over ranks are both the model. */
static int check_ranks_agree(const struct job *job, const double *model, int *agree) {
    size_t n = (size_t)job->cfg->features + 1;
    double *hi = malloc(n * sizeof(double)), *lo = malloc(n * sizeof(double));
    int rc = -1;
    if (!hi || !lo) {
        fprintf(stderr, "train_linreg: rank %d: out of memory\n", job->rank);
        goto fail;
    }
    CHECK_CCL(job, ccl_all_reduce(model, hi, n, CCL_FLOAT64, CCL_MAX, job->comm));
    CHECK_CCL(job, ccl_all_reduce(model, lo, n, CCL_FLOAT64, CCL_MIN, job->comm));
    *agree = memcmp(hi, model, n * sizeof(double)) == 0 && memcmp(lo, model, n * sizeof(double)) == 0;
    if (!*agree) fprintf(stderr, "train_linreg: rank %d: the ranks' models differ\n", job->rank);
    rc = 0;
fail:
    free(hi);
    free(lo);
    return rc;
}

static void print_model(const struct config *c, const double *model, const double *w_true, int nranks) {
    printf("learned model after %d epochs on %llu samples, %d ranks:\n", c->epochs,
           (unsigned long long)c->samples, nranks);
    printf("  %-8s %14s %14s\n", "", "learned", "true");
    for (int j = 0; j < c->features && j < MAX_SHOWN_WEIGHTS; j++) {
        char name[24];
        snprintf(name, sizeof(name), "w[%d]", j);
        printf("  %-8s %14.8f %14.8f\n", name, model[j], w_true[j]);
    }
    if (c->features > MAX_SHOWN_WEIGHTS) printf("  ... (%d more)\n", c->features - MAX_SHOWN_WEIGHTS);
    printf("  %-8s %14.8f %14.8f\n", "bias", model[c->features], w_true[c->features]);
    printf("max |learned - true| = %.3e\n", max_abs_diff(model, w_true, c->features + 1, NULL));
}

/* The same model trained in this process alone on every sample, with the
 * same arithmetic and the same epochs. 0: within tolerance; 1: not; -1: error. */
static int check_against_single(const struct config *c, const double *w_true, const double *model) {
    struct dataset all = {0};
    double *single = calloc((size_t)c->features + 1, sizeof(double));
    double *sums = calloc((size_t)c->features + 2, sizeof(double));
    int rc = -1;
    if (!single || !sums || make_dataset(c, w_true, 0, c->samples, &all) != 0) {
        fprintf(stderr, "train_linreg: --check: out of memory for %llu samples\n", (unsigned long long)c->samples);
        goto out;
    }
    for (int e = 1; e <= c->epochs; e++) {
        gradient_sums(&all, single, sums);
        take_step(single, sums, c->features, c->lr, c->samples);
    }
    /* The two runs differ only in the order the float64 gradient sums are
     * added (per shard, then across ranks, instead of one pass), which moves
     * results by a few ulps per epoch; 1e-9 relative to the largest weight is
     * far above that yet far below any real bug (a lost or doubled shard
     * moves weights by percents). */
    double max_w;
    double diff = max_abs_diff(single, model, c->features + 1, &max_w);
    double tolerance = 1e-9 * (1.0 + max_w);
    rc = diff <= tolerance ? 0 : 1;
    printf("check: max |w_dist - w_single| = %.3e (tolerance %.3e): %s\n", diff, tolerance,
           rc == 0 ? "ok" : "FAILED");
out:
    free_dataset(&all);
    free(single);
    free(sums);
    return rc;
}

/* ---- command line and main ---- */

static void usage(FILE *f) {
    fprintf(f, "Usage: cclrun -n RANKS train_linreg [options]\n"
               "Data-parallel linear regression on generated data; rank 0 reports.\n"
               "  --samples N    training samples in all (default 4096)\n"
               "  --features F   features per sample (default 16)\n"
               "  --epochs E     full-batch gradient steps (default 50)\n"
               "  --lr RATE      learning rate (default 0.8)\n"
               "  --seed S       data seed (default 1)\n"
               "  --check        rank 0 also trains alone on all data and compares (exit 1 if off)\n");
}

static int parse_number(const char *opt, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double d = v ? strtod(v, &end) : 0;
    if (!v || errno || end == v || *end || !(d >= lo && d <= hi)) {
        fprintf(stderr, "train_linreg: %s needs a number from %g to %g, not '%s'\n", opt, lo, hi, v ? v : "");
        return -1;
    }
    *out = d;
    return 0;
}

/* 0: run; 1: help shown; -1: bad usage. */
static int parse_args(int argc, char **argv, struct config *c) {
    *c = (struct config){.samples = 4096, .features = 16, .epochs = 50, .lr = 0.8, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        if (strcmp(a, "--check") == 0) {
            c->check = 1;
            continue;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 1;
        } else if (strcmp(a, "--samples") == 0) {
            if (parse_number(a, v, 1, 1e12, &d) || d != floor(d)) goto bad;
            c->samples = (uint64_t)d;
        } else if (strcmp(a, "--features") == 0) {
            if (parse_number(a, v, 1, 1e6, &d) || d != floor(d)) goto bad;
            c->features = (int)d;
        } else if (strcmp(a, "--epochs") == 0) {
            if (parse_number(a, v, 1, 1e8, &d) || d != floor(d)) goto bad;
            c->epochs = (int)d;
        } else if (strcmp(a, "--lr") == 0) {
            if (parse_number(a, v, 1e-12, 1e3, &d)) goto bad;
            c->lr = d;
        } else if (strcmp(a, "--seed") == 0) {
            char *end;
            errno = 0;
            c->seed = v ? strtoull(v, &end, 0) : 0;
            if (!v || errno || end == v || *end) {
                fprintf(stderr, "train_linreg: --seed needs an unsigned integer, not '%s'\n", v ? v : "");
                goto bad;
            }
        } else {
            fprintf(stderr, "train_linreg: unknown option '%s'\n", a);
            goto bad;
        }
        i++; /* the option's value */
    }
    return 0;
bad:
    usage(stderr);
    return -1;
}

/* Rank r of n owns [r * total / n, (r + 1) * total / n) of a set that starts at base. */
static int make_shard(const struct job *job, const double *w_true, uint64_t base, uint64_t total,
                      struct dataset *d) {
    uint64_t r = (uint64_t)job->rank, n = (uint64_t)job->nranks;
    uint64_t first = r * total / n, end = (r + 1) * total / n;
    if (make_dataset(job->cfg, w_true, base + first, end - first, d) == 0) return 0;
    fprintf(stderr, "train_linreg: rank %d: out of memory for %llu samples\n", job->rank,
            (unsigned long long)(end - first));
    return -1;
}

/* 0: trained (and checked); 1: a check failed; -1: an error (reported). */
static int run(const struct job *job) {
    const struct config *c = job->cfg;
    /* The holdout set follows the training samples: same generator, unseen. */
    uint64_t holdout_total = (c->samples + 7) / 8;
    struct dataset train = {0}, holdout = {0};
    double *w_true = calloc((size_t)c->features + 1, sizeof(double));
    double *model = calloc((size_t)c->features + 1, sizeof(double));
    int rc = -1, agree = 1;
    if (!w_true || !model) {
        fprintf(stderr, "train_linreg: rank %d: out of memory\n", job->rank);
        goto out;
    }
    make_true_model(c, w_true);
    if (make_shard(job, w_true, 0, c->samples, &train) != 0 ||
        make_shard(job, w_true, c->samples, holdout_total, &holdout) != 0)
        goto out;
    if (job->rank == 0)
        printf("training %d features on %llu samples over %d ranks (%llu on rank 0), %d epochs, lr %g\n",
               c->features, (unsigned long long)c->samples, job->nranks, (unsigned long long)train.count,
               c->epochs, c->lr);
    if (train_distributed(job, &train, &holdout, holdout_total, model) != 0) goto out;
    if (c->check && check_ranks_agree(job, model, &agree) != 0) goto out;
    rc = agree ? 0 : 1;
    if (job->rank == 0) {
        print_model(c, model, w_true, job->nranks);
        if (c->check) {
            int single = check_against_single(c, w_true, model);
            rc = single < 0 ? -1 : (rc || single);
        }
    }
out:
    free_dataset(&train);
    free_dataset(&holdout);
    free(w_true);
    free(model);
    return rc;
}

int main(int argc, char **argv) {
    struct config cfg;
    int parsed = parse_args(argc, argv, &cfg);
    if (parsed != 0) return parsed > 0 ? 0 : 2;

    struct job job = {.cfg = &cfg};
    ccl_status_t st = ccl_comm_init_env(&job.comm);
    if (st != CCL_OK) {
        fprintf(stderr, "train_linreg: ccl_comm_init_env failed: %s%s%s (start it with cclrun -n N)\n",
                ccl_status_string(st), job.comm ? ": " : "", job.comm ? ccl_comm_last_error(job.comm) : "");
        return 1;
    }
    int rc = -1;
    if (!ccl_failed(&job, ccl_comm_rank(job.comm, &job.rank), "ccl_comm_rank") &&
        !ccl_failed(&job, ccl_comm_size(job.comm, &job.nranks), "ccl_comm_size"))
        rc = run(&job);
    /* After an error the other ranks may be waiting on us: abort tells them. */
    if (rc < 0) (void)ccl_failed(&job, ccl_comm_abort(job.comm), "ccl_comm_abort");
    st = ccl_comm_destroy(job.comm);
    if (st != CCL_OK && rc >= 0) { /* after an error, that error is the news */
        fprintf(stderr, "train_linreg: rank %d: ccl_comm_destroy failed: %s\n", job.rank, ccl_status_string(st));
        rc = -1;
    }
    return rc == 0 ? 0 : 1;
}
