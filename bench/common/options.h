/* The command line of every benchmark program (nccl-tests' flags). */
#ifndef BENCH_OPTIONS_H
#define BENCH_OPTIONS_H

#include "bench.h"

/* 0: run; 1: help was printed (exit 0); -1: bad usage, the message was
 * printed (exit BENCH_EXIT_USAGE). */
int bench_parse_options(int argc, char **argv, enum bench_coll coll, const struct bench_backend *be,
                        struct bench_options *o);

/* A size as the flags take it: digits, then K, M or G (powers of 1024).
 * 0, or -1 when s is not one. */
int bench_parse_size(const char *s, size_t *out);

/* "256 KiB", "1 MiB", "8 B": sizes for people. */
void bench_format_bytes(size_t bytes, char *buf, size_t n);

#endif
