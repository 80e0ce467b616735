/*
 * Small pieces every Check suite here repeats (see util.h).
 */
#define _GNU_SOURCE
#include "util.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

void util_add_loop_case(Suite *s, const char *name, const TTest *test, int n, int timeout_s) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    tcase_add_loop_test(tc, test, 0, n);
    suite_add_tcase(s, tc);
}

void util_run_clean(struct harness_run *run, uint64_t expected_dead, const char *fmt, ...) {
    char context[512], why[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    harness_run(run);
    harness_describe(run, expected_dead, why, sizeof why);
    ck_assert_msg(harness_problems(run, expected_dead) == 0, "%s: %s", context, why);
}

int util_init_invalid_argument(int rank, ccl_status_t st, void *arg) {
    struct harness_tally t = {rank, 0};
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT, "init with %s returned %s", (const char *)arg, ccl_status_string(st));
    return t.fails;
}

void util_shared_id(struct harness_tally *t, ccl_comm_t *comm, ccl_unique_id_t *id) {
    memset(id, 0, sizeof *id);
    if (t->rank == 0) EXPECT_OK(t, ccl_get_unique_id(id));
    EXPECT_OK(t, ccl_broadcast(id, id, sizeof *id, CCL_UINT8, 0, comm));
}

void util_raise_fd_limit(long want) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= (rlim_t)want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= (rlim_t)want ? (rlim_t)want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) fprintf(stderr, "util: cannot raise the open-file limit to %ld\n", want);
}

int util_pin_to_nth_cpu(int k) {
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof all, &all) != 0) return -1;
    int n = CPU_COUNT(&all), want = n ? k % n : 0, seen = 0;
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &all) && seen++ == want) CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof one, &one);
    return n;
}
