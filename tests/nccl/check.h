/* The checks of the NCCL test programs: each keeps `rank` and `fails`. */
#ifndef CCL_TESTS_NCCL_CHECK_H
#define CCL_TESTS_NCCL_CHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            fails++;                                                       \
        }                                                                  \
    } while (0)
#define NCCL_OK(call)                                                                                    \
    do {                                                                                                 \
        ncclResult_t r_ = (call);                                                                        \
        CHECK(r_ == ncclSuccess, "%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
    } while (0)

#endif
