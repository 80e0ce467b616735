/*
 * --steady: timed blocks only while the machine runs at its usual speed.
 *
 * Some machines (virtual ones above all) have slow spells: for seconds or
 * minutes, data moved between cores goes several times slower while
 * latency and a one-core memcpy do not change. A block timed in a spell
 * says nothing about the library, and when the algorithms of -A's list
 * take turns, a spell over one algorithm's block and not another's makes
 * their ratio wrong. With --steady, every timed block is bracketed by a
 * probe (an all-reduce of BENCH_STEADY_PROBE_BYTES on -A's first
 * communicator, fastest of a few); a block with a probe more than the
 * factor (BENCH_STEADY_FACTOR unless given) times the fastest seen is
 * thrown away and timed again once the probe is back to speed. Every rank
 * takes the same decision: probes are combined across ranks first.
 *
 * The run's first five probes set the speed to expect; after them, each
 * block has one probe before and one after. Self-test:
 * CCL_BENCH_SLOW_PROBE=before (after) makes the first block's probe
 * before (after) it read ten times slower; =every makes every probe after
 * the first five read a hundred times slower, a machine slowed for good
 * (beyond what a loaded machine's own noise reaches). CCL_BENCH_STEADY_WAIT_S
 * shortens the wait limit for the self-test.
 */
#ifndef BENCH_STEADY_H
#define BENCH_STEADY_H

#include "bench.h"

#define BENCH_STEADY_PROBE_BYTES (1u << 20)
#define BENCH_STEADY_FACTOR 1.5
#define BENCH_STEADY_MAX_WAIT_S 60 /* the longest wait before a block */
#define BENCH_STEADY_MAX_TRIES 10  /* a block's tries: the last is kept, and counted if slow */

struct bench_steady {
    double factor; /* a probe over factor x the fastest is slow; 0: --steady is off */
    const struct bench_backend *be;
    struct bench_comm *c;
    int rank, nalgos;
    const char *prog;
    float *send, *recv;     /* the probe's buffers */
    double best;            /* the speed to expect: the fastest probe so far, or one slow for a whole wait (us; 0: none yet) */
    double fastest;         /* the fastest probe of the run, us */
    long gave_up;           /* waits that ended slow, after which the speed to expect was lowered */
    long kept, kept_slow;   /* blocks kept; of them, kept on their last try though slow */
    long kept_before_fall;  /* blocks kept at a speed to expect that a faster probe later showed slow */
    long ref_kept;          /* blocks kept when the speed to expect was set */
    long redone, waited_s;
    int slow_probe; /* CCL_BENCH_SLOW_PROBE's self-test: the role of the probe to slow, until done, or
                     * PROBE_EVERY_LATER (steady.c), every probe after the calibration, for good */
    int max_wait_s; /* BENCH_STEADY_MAX_WAIT_S, or CCL_BENCH_STEADY_WAIT_S (the self-test's shorter wait) */
};

/* 0, or -1 when out of memory (message printed). factor 0: off, and
 * nothing happens. */
int bench_steady_init(struct bench_steady *s, double factor, const struct bench_backend *be, struct bench_comm *c,
                      int rank, int nalgos, const char *prog);
void bench_steady_free(struct bench_steady *s);

/* Before a timed block on communicator slot `slot`: waits (probing once a
 * second) until the machine is at speed or BENCH_STEADY_MAX_WAIT_S have
 * passed; a wait that ends slow makes the last probe the speed to expect.
 * 0, or -1 when a probe failed. */
int bench_steady_before(struct bench_steady *s, int slot);
/* After it: *again is set when the block must be thrown away and timed
 * again (the machine slowed down during it), never on its last try. 0 or
 * -1. */
int bench_steady_after(struct bench_steady *s, int slot, int last_try, int *again);

/* For the footer: blocks thrown away, seconds waited, blocks kept although
 * slow (on their last try, or at a speed to expect that a faster probe
 * later showed slow: a run that starts in a spell learns the usual speed
 * only later), waits that ended slow, and the run's fastest probe. */
void bench_steady_summary(const struct bench_steady *s, long *redone, long *waited_s, long *kept_slow, long *gave_up,
                          double *fastest_us);

#endif
