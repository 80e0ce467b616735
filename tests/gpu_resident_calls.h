/* The calls of comm that ran on the GPU-resident path, from
 * ccl_comm_describe's gpu_resident_calls; -1 when the path is off, -2 when
 * describe failed. Shared by test_stream_host and tests/cuda/cuda_device. */
#ifndef CCL_TESTS_GPU_RESIDENT_CALLS_H
#define CCL_TESTS_GPU_RESIDENT_CALLS_H

#include <stdlib.h>
#include <string.h>

#include "ccl.h"

static inline long gpu_resident_calls(ccl_comm_t *comm) {
    char d[2048];
    if (ccl_comm_describe(comm, d, sizeof d) != CCL_OK) return -2;
    const char *p = strstr(d, "gpu_resident_calls=");
    return p ? strtol(p + strlen("gpu_resident_calls="), NULL, 10) : -1;
}

#endif
