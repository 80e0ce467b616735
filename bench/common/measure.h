/* Clocks, the memcpy roofline, statistics over iterations, progress lines. */
#ifndef BENCH_MEASURE_H
#define BENCH_MEASURE_H

#include <stddef.h>

#include "report.h"

/* Seconds on the monotonic clock. */
double bench_now(void);

/* Seconds that `copies` memcpys of `bytes` from src to dst take, none of
 * them dropped by the compiler. */
double bench_time_copies(void *dst, const void *src, size_t bytes, size_t copies);

/* memcpy between two buffers of min(bytes, cap) (at least 4 KiB) bytes,
 * median of a few reps of enough copies to last a while; NULL buffers when
 * out of memory (gbps = 0 then). */
struct bench_memcpy bench_measure_memcpy(size_t bytes);

struct bench_stats {
    double mean, min, median, p99, max;
};
/* Sorts vals. p99 is the nearest-rank percentile. */
struct bench_stats bench_stats_of(double *vals, int n);

/* Progress on stderr for sweeps that take a while: nothing during the
 * first seconds, then at most one line a second. */
struct bench_progress {
    const char *prog;
    double start, last;
    long done, total;
};
void bench_progress_start(struct bench_progress *p, const char *prog, long total);
void bench_progress_step(struct bench_progress *p, size_t bytes_done);

#endif
