/* --steady: bracket every timed block with a bandwidth probe (steady.h). */
#define _GNU_SOURCE
#include "steady.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "measure.h"

#define PROBE_REPS 3
#define CALIBRATION_PROBES 5

enum { PROBE_CALIBRATION = 1, PROBE_BEFORE, PROBE_AFTER, PROBE_EVERY_LATER };

int bench_steady_init(struct bench_steady *s, double factor, const struct bench_backend *be, struct bench_comm *c,
                      int rank, int nalgos, const char *prog) {
    memset(s, 0, sizeof *s);
    s->factor = factor;
    s->be = be;
    s->c = c;
    s->rank = rank;
    s->nalgos = nalgos;
    s->prog = prog;
    if (s->factor == 0) return 0;
    const char *slow_probe = getenv("CCL_BENCH_SLOW_PROBE");
    s->slow_probe = !slow_probe                   ? 0
                    : !strcmp(slow_probe, "before") ? PROBE_BEFORE
                    : !strcmp(slow_probe, "after")  ? PROBE_AFTER
                    : !strcmp(slow_probe, "every")  ? PROBE_EVERY_LATER
                                                    : 0;
    const char *wait = getenv("CCL_BENCH_STEADY_WAIT_S");
    s->max_wait_s = wait && atoi(wait) > 0 ? atoi(wait) : BENCH_STEADY_MAX_WAIT_S;
    s->send = calloc(BENCH_STEADY_PROBE_BYTES / sizeof(float), sizeof(float));
    s->recv = calloc(BENCH_STEADY_PROBE_BYTES / sizeof(float), sizeof(float));
    if (!s->send || !s->recv) {
        fprintf(stderr, "[rank %d] %s: out of memory for --steady's probe\n", rank, prog);
        return -1;
    }
    return 0;
}

void bench_steady_free(struct bench_steady *s) {
    free(s->send);
    free(s->recv);
    memset(s, 0, sizeof *s);
}

/* The fastest of a few all-reduces, the slowest rank's time (the same on
 * every rank), always on -A's first communicator so that every probe of
 * the run measures the same thing; then back to `slot`'s. */
static int probe(struct bench_steady *s, int slot, int role, double *us) {
    struct bench_call call = {BENCH_ALL_REDUCE, s->send, s->recv, BENCH_STEADY_PROBE_BYTES / sizeof(float),
                              CCL_FLOAT32, CCL_SUM, -1, NULL};
    if (s->nalgos && slot != 0 && s->be->use_algo(s->c, 0)) return -1;
    double best = 0;
    /* Warm first: a rank that has just slept wakes slowly. */
    int bad = s->be->run(s->c, &call, 1, 0);
    for (int i = 0; i < PROBE_REPS && !bad; i++) {
        bad = s->be->barrier(s->c);
        double t0 = bench_now();
        bad = bad || s->be->run(s->c, &call, 1, 0);
        double t = (bench_now() - t0) * 1e6;
        if (i == 0 || t < best) best = t;
    }
    if (bad || s->be->combine(s->c, &best, 1, BENCH_COMBINE_MAX)) return -1;
    if (s->nalgos && slot != 0 && s->be->use_algo(s->c, slot)) return -1;
    /* The guard's self-test: the first probe of the role
     * CCL_BENCH_SLOW_PROBE names (the first block's before or after, on
     * every rank) reads ten times slower. By role, not by number: a probe
     * the machine itself made slow adds probes, which would move a
     * numbered one to another role. */
    if (role == s->slow_probe) {
        best *= 10;
        s->slow_probe = 0;
    }
    /* "every": each probe after the calibration, as a machine that has
     * slowed down for good would read. A hundred times, not ten: under a
     * sanitizer and a loaded machine the calibration itself was seen ten
     * times slower than later probes, and a tenfold slowdown then read as
     * the usual speed. */
    if (s->slow_probe == PROBE_EVERY_LATER && role != PROBE_CALIBRATION) best *= 100;
    *us = best;
    return 0;
}

/* Records the probe; 1 when it is slow against the speed to expect. A
 * probe faster than that by more than the factor means the blocks kept
 * since it was set were timed in a slow period (the run started in one,
 * or a wait ended slow): said at once and counted in the summary. */
static int slow(struct bench_steady *s, double us) {
    if (s->best > 0 && us * s->factor < s->best && s->kept > s->ref_kept) {
        if (s->rank == 0)
            fprintf(stderr,
                    "[%s] --steady: the machine has become faster (probe %.0f us, expected %.0f us): the %ld "
                    "blocks timed before were timed while it was slow\n",
                    s->prog, us, s->best, s->kept - s->ref_kept);
        s->kept_before_fall += s->kept - s->ref_kept;
        s->ref_kept = s->kept;
    }
    if (s->best == 0 || us < s->best) s->best = us;
    if (s->fastest == 0 || us < s->fastest) s->fastest = us;
    return us > s->factor * s->best;
}

static void pause_one_second(void) {
    struct timespec ts = {1, 0};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int bench_steady_before(struct bench_steady *s, int slot) {
    if (s->factor == 0) return 0;
    double us;
    /* The first probes set the speed to expect. */
    for (int i = 0, fresh = s->best == 0; fresh && i < CALIBRATION_PROBES; i++) {
        if (probe(s, slot, PROBE_CALIBRATION, &us)) return -1;
        slow(s, us);
    }
    if (probe(s, slot, PROBE_BEFORE, &us)) return -1;
    for (int waited = 0; slow(s, us) && waited < s->max_wait_s; waited++) {
        if (s->rank == 0 && waited == 0)
            fprintf(stderr, "[%s] --steady: the machine is slow (probe %.0f us, fastest %.0f us): waiting\n", s->prog,
                    us, s->best);
        pause_one_second();
        s->waited_s++;
        if (probe(s, slot, PROBE_BEFORE, &us)) return -1;
    }
    if (us > s->factor * s->best) {
        /* Slow for the whole wait: the machine has changed state, not
         * passed through a spell (its memcpy speed here moves 2.5x for
         * minutes at a time). Waiting again before every block would wait
         * the limit before each one, and no block would be kept; the
         * speed to expect is now this one, until a faster probe comes. */
        if (s->rank == 0)
            fprintf(stderr, "[%s] --steady: still slow after %d s (probe %.0f us, fastest %.0f us): timing at this "
                    "speed from now on\n", s->prog, s->max_wait_s, us, s->best);
        s->best = us;
        s->ref_kept = s->kept;
        s->gave_up++;
    }
    return 0;
}

int bench_steady_after(struct bench_steady *s, int slot, int last_try, int *again) {
    *again = 0;
    if (s->factor == 0) return 0;
    double us;
    if (probe(s, slot, PROBE_AFTER, &us)) return -1;
    if (slow(s, us)) {
        if (!last_try) {
            s->redone++;
            *again = 1;
            return 0;
        }
        s->kept_slow++;
    }
    s->kept++;
    return 0;
}

void bench_steady_summary(const struct bench_steady *s, long *redone, long *waited_s, long *kept_slow, long *gave_up,
                          double *fastest_us) {
    *redone = s->redone;
    *waited_s = s->waited_s;
    *kept_slow = s->kept_slow + s->kept_before_fall;
    *gave_up = s->gave_up;
    *fastest_us = s->fastest;
}
