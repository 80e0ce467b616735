/*
 * Results as people and scripts read them: nccl-tests' text table on
 * stdout, and the CSV and JSON files whose formats are fixed (one row per
 * size, type, op, root and placement). Everything streams row by row, so a
 * long or endless (-N 0) run shows results as they come.
 */
#ifndef BENCH_REPORT_H
#define BENCH_REPORT_H

#include <stdio.h>

#include "bench.h"

enum { BENCH_OUT_OF_PLACE, BENCH_IN_PLACE, BENCH_NUM_PLACEMENTS };

struct bench_place_result {
    int measured; /* 0: this collective has no such placement (N/A) */
    double time_us, algbw_gbps, busbw_gbps;
    long long wrong; /* -1: not checked */
    int has_stats;   /* -I */
    double min_us, median_us, p99_us, max_us;
};

struct bench_row {
    size_t bytes, count;
    int dtype, redop, root; /* -1: not applicable */
    const char *algo;       /* -A's list: this row's algorithm; NULL: the run's */
    char auto_ran[24];      /* algo "auto": what the planner ran for its last timed call */
    struct bench_place_result place[BENCH_NUM_PLACEMENTS];
};

/* How the memcpy roofline was measured, for the header. */
struct bench_memcpy {
    const char *gpu; /* --device: the GPU whose device-to-device copy this is; NULL: host memcpy */
    double gbps;
    size_t bytes;
    int reps;
};

struct bench_report {
    const struct bench_options *o;
    const struct bench_wiring *w;
    const char *op_name;
    int nranks;
    struct bench_memcpy memcpy;
    FILE *csv, *json;
    long json_rows;
    double busbw_sum;
    long busbw_rows;
    long long wrong_total;
    int checked;
    size_t buffer_bytes; /* -M: what the sweep allocated for one rank's buffers */
    /* --steady's account (steady.h), for the footer */
    long steady_redone, steady_waited_s, steady_kept_slow, steady_gave_up;
    double steady_best_us;
};

/* Opens the files and writes every header. -1 (message printed) when a
 * file cannot be opened. */
int bench_report_open(struct bench_report *r);
void bench_report_row(struct bench_report *r, const struct bench_row *row);
/* Footers; -1 when a file could not be written completely. */
int bench_report_close(struct bench_report *r);

#endif
