/*
 * --device: the benchmark's buffers in GPU memory, through the CUDA driver
 * loaded at run time (the programs link no CUDA library, as libccl does
 * not), and the device-to-device copy that is their roofline.
 */
#ifndef BENCH_DEVICE_MEM_H
#define BENCH_DEVICE_MEM_H

#include <stddef.h>

#include "report.h"

/* Makes this rank use GPU (rank % GPUs): loads the driver (CCL_CUDA_LIBRARY
 * or libcuda.so.1), makes the device's primary context current. 0, or -1
 * with why filled. Call after the ranks are forked. */
int bench_device_open(int rank, char *why, size_t whylen);
/* Device memory of `bytes`, zeroed; NULL when it cannot be had. */
void *bench_device_alloc(size_t bytes);
void bench_device_free(void *p);
/* Synchronous copies between host and device memory; 0 or -1. */
int bench_device_upload(void *dev, const void *host, size_t bytes);
int bench_device_download(void *host, const void *dev, size_t bytes);
/* "NVIDIA H100 80GB HBM3" (after bench_device_open). */
const char *bench_device_name(void);
/* The GPU's device-to-device copy between two buffers of min(bytes, cap)
 * bytes (cuMemcpyDtoDAsync, synchronised), median of a few reps, in bytes
 * copied per second as the host memcpy roofline counts them; gbps = 0 when
 * it cannot be measured. */
struct bench_memcpy bench_measure_device_copy(size_t bytes);

#endif
