/*
 * Tests' hold on the simulated CUDA driver (tests/cuda/sim_driver.c): the
 * driver calls a test makes itself (allocations, copies, streams), and
 * loading it with a context current. The library under test loads the
 * same driver through CCL_CUDA_LIBRARY=CCL_TEST_SIM_DRIVER.
 */
#ifndef CCL_TESTS_SIM_GPU_H
#define CCL_TESTS_SIM_GPU_H

#include <dlfcn.h>
#include <unistd.h>

#include "harness.h"

typedef unsigned long long sim_ptr;
static struct {
    int (*DevicePrimaryCtxRetain)(void **, int);
    int (*CtxSetCurrent)(void *);
    int (*MemAlloc)(sim_ptr *, size_t);
    int (*MemFree)(sim_ptr);
    int (*MemHostAlloc)(void **, size_t, unsigned);
    int (*MemFreeHost)(void *);
    int (*MemcpyAsync)(sim_ptr, sim_ptr, size_t, void *);
    int (*StreamCreate)(void **, unsigned);
    int (*StreamDestroy)(void *);
    int (*StreamSynchronize)(void *);
} sim;

static inline int sim_bind(void *h) {
    static const char *const names[] = {"cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc_v2",
                                        "cuMemFree_v2", "cuMemHostAlloc", "cuMemFreeHost", "cuMemcpyAsync",
                                        "cuStreamCreate", "cuStreamDestroy_v2", "cuStreamSynchronize"};
    void **slots = (void **)&sim;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(slots[i] = dlsym(h, names[i]))) return -1;
    return 0;
}

/* Loads the simulated driver and makes its context current. */
static inline void sim_open(struct harness_tally *t) {
    void *driver = dlopen(CCL_TEST_SIM_DRIVER, RTLD_NOW | RTLD_GLOBAL);
    EXPECT(t, driver && sim_bind(driver) == 0, "loading the simulated driver: %s", driver ? "symbols" : dlerror());
    if (t->fails) return;
    usleep(20000); /* libccl looks for a newly loaded driver at most once a clock tick */
    void *ctx = NULL;
    EXPECT(t, sim.DevicePrimaryCtxRetain(&ctx, 0) == 0 && sim.CtxSetCurrent(ctx) == 0, "no context");
}

#endif
