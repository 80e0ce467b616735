/*
 * Every benchmark program: all_reduce_perf, ..., and the MPI twins
 * all_reduce_perf_mpi, ... are this file built with BENCH_COLL naming the
 * collective and BENCH_BACKEND the library (see CMakeLists.txt).
 */
#include "common/bench.h"

extern const struct bench_backend BENCH_BACKEND;

int main(int argc, char **argv) { return bench_main(argc, argv, BENCH_COLL, &BENCH_BACKEND); }
