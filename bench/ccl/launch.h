/* --ranks N: a benchmark that starts its own local ranks. */
#ifndef BENCH_LAUNCH_H
#define BENCH_LAUNCH_H

#include "ccl.h"

/* Forks n children and returns in each of them (1) with *rank and the job's
 * unique id set. The parent makes the id only after forking (the library
 * reads its environment once per process, so a child's own settings, such
 * as a per-rank CCL_HOST_ID, must come before anything loads it), hands it
 * to each child through a pipe, and waits: it returns (0) once every child
 * has exited, with *exit_status the first failure's status (128 + signal
 * for a child killed by one), stopping the other children when one fails. */
int bench_fork_ranks(int n, int host_per_rank, int *rank, ccl_unique_id_t *id, int *exit_status);

#endif
