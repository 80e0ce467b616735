/* Timing helpers shared by every program. */
#include "measure.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "options.h"

enum {
    MEMCPY_CAP = 64 << 20,
    MEMCPY_FLOOR = 4 << 10,
    MEMCPY_REPS = 5,
    MEMCPY_BYTES_PER_REP = 64 << 20, /* small buffers are copied many times per rep */
};
#define PROGRESS_QUIET_S 3.0
#define PROGRESS_EVERY_S 1.0

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct bench_stats bench_stats_of(double *vals, int n) {
    struct bench_stats s = {0};
    if (n <= 0) return s;
    qsort(vals, (size_t)n, sizeof(*vals), by_value);
    for (int i = 0; i < n; i++) s.mean += vals[i];
    s.mean /= n;
    s.min = vals[0];
    s.max = vals[n - 1];
    s.median = n % 2 ? vals[n / 2] : (vals[n / 2 - 1] + vals[n / 2]) / 2;
    int rank99 = (99 * n + 99) / 100; /* ceil(0.99 n), 1-based */
    s.p99 = vals[rank99 - 1];
    return s;
}

double bench_time_copies(void *dst, const void *src, size_t bytes, size_t copies) {
    double t0 = bench_now();
    for (size_t c = 0; c < copies; c++) {
        memcpy(dst, src, bytes);
        /* keeps the compiler from dropping copies it sees as dead */
        __asm__ __volatile__("" : : "r"(dst) : "memory");
    }
    return bench_now() - t0;
}

struct bench_memcpy bench_measure_memcpy(size_t bytes) {
    struct bench_memcpy m = {.gbps = 0, .bytes = bytes, .reps = MEMCPY_REPS};
    if (m.bytes > MEMCPY_CAP) m.bytes = MEMCPY_CAP;
    if (m.bytes < MEMCPY_FLOOR) m.bytes = MEMCPY_FLOOR;
    char *src = malloc(m.bytes), *dst = malloc(m.bytes);
    if (src && dst) {
        memset(src, 1, m.bytes);
        memcpy(dst, src, m.bytes); /* first touch outside the timing */
        size_t copies = MEMCPY_BYTES_PER_REP / m.bytes;
        if (copies < 1) copies = 1;
        double gbps[MEMCPY_REPS];
        for (int r = 0; r < MEMCPY_REPS; r++) {
            double dt = bench_time_copies(dst, src, m.bytes, copies);
            gbps[r] = dt > 0 ? (double)m.bytes * (double)copies / dt / 1e9 : 0;
        }
        m.gbps = bench_stats_of(gbps, MEMCPY_REPS).median;
    }
    free(src);
    free(dst);
    return m;
}

void bench_progress_start(struct bench_progress *p, const char *prog, long total) {
    p->prog = prog;
    p->start = p->last = bench_now();
    p->done = 0;
    p->total = total;
}

void bench_progress_step(struct bench_progress *p, size_t bytes_done) {
    p->done++;
    double now = bench_now();
    if (now - p->start < PROGRESS_QUIET_S || now - p->last < PROGRESS_EVERY_S) return;
    p->last = now;
    char size[32];
    bench_format_bytes(bytes_done, size, sizeof size);
    if (p->total > 0) fprintf(stderr, "[%s] %ld/%ld sizes, %s done\n", p->prog, p->done, p->total, size);
    else fprintf(stderr, "[%s] %ld sizes, %s done\n", p->prog, p->done, size);
}
