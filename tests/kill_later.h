/*
 * A rank that kills itself a moment into a call, and when it died, shared
 * by every rank of the run: the kill -9 cases of the device tests
 * (test_stream_host, test_device_pipeline) start kill_self_after on a
 * thread of the victim and hold the survivors' detection time against
 * *death_time.
 */
#ifndef CCL_TESTS_KILL_LATER_H
#define CCL_TESTS_KILL_LATER_H

#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

static volatile double *death_time; /* shared by the ranks: when the victim died */

/* A thread's body: sleeps arg microseconds, notes the time, dies of SIGKILL. */
static inline void *kill_self_after(void *arg) {
    usleep((useconds_t)(uintptr_t)arg);
    *death_time = harness_now();
    raise(SIGKILL);
    return NULL;
}

/* In the test, before the run forks its ranks, and after it. */
static inline void death_time_share(void) {
    death_time = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_msg(death_time != MAP_FAILED, "mmap");
    *death_time = 0;
}

static inline void death_time_unshare(void) { munmap((void *)death_time, sizeof(double)); }

#endif
