/* nccl-tests' NCCL_TESTS_SPLIT and NCCL_TESTS_SPLIT_MASK: the ranks split
 * into groups by a color made from their rank, and every group runs the
 * benchmark on its own communicator at once. */
#ifndef BENCH_CCL_SPLIT_H
#define BENCH_CCL_SPLIT_H

#include <stddef.h>

/* This rank's color: 1 when neither variable is set, 0 with *color and
 * *said (the setting, for the header), -1 with why when one is malformed.
 * NCCL_TESTS_SPLIT_MASK=HEX: rank & HEX. NCCL_TESTS_SPLIT: "AND n" or
 * "&n" (rank & n), "OR n" or "|n", "MOD n" or "%n", "DIV n" or "/n". */
int bench_split_color(int rank, int *color, char *said, size_t said_n, char *why, size_t why_n);

#endif
