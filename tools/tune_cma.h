/*
 * ccl-tune's large point for cross-memory attach (the single-copy
 * algorithm's reads of a peer buffer too large for any cache).
 */
#ifndef CCL_TUNE_CMA_H
#define CCL_TUNE_CMA_H

#include <stddef.h>

/* n processes, each owning `bytes` it has just written, each reading the
 * next one's whole buffer in the algorithm's 64 KiB calls while every one
 * does the same, reps times. 0 with the median speed (bytes per us) in
 * *bytes_per_us; else the errno that stopped a read (EPERM: the kernel
 * refuses cross-memory attach here), or -1 when a process failed. */
int ccl__tune_cma_large(int n, size_t bytes, int reps, double *bytes_per_us);

#endif
