/* The libccl backend of the benchmark programs. */
#ifndef BENCH_BACKEND_CCL_H
#define BENCH_BACKEND_CCL_H

#include "common/bench.h"

extern const struct bench_backend bench_ccl_backend;

#endif
