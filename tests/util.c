/*
 * Small pieces every Check suite here repeats (see util.h).
 */
#define _GNU_SOURCE
#include "util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ccl_spawn.h"

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

int util_describe_has(ccl_comm_t *comm, const char *text) {
    char d[2048];
    return ccl_comm_describe(comm, d, sizeof d) == CCL_OK && strstr(d, text) != NULL;
}

int util_outlive_victim(ccl_comm_t *comm, int rank, int nranks, double timeout_s,
                        ccl_status_t (*call)(ccl_comm_t *comm, void *ctx), void *ctx) {
    struct harness_tally t = {.rank = rank};
    int victim = nranks - 1;
    ccl_status_t st = CCL_OK;
    double died = 0;
    for (int i = 0; i < 1000 && st == CCL_OK; i++) {
        if (i == 3 && rank == victim) {
            /* dies a moment into its fourth call, wherever that is */
            struct sigevent se = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGKILL};
            timer_t tm;
            timer_create(CLOCK_MONOTONIC, &se, &tm);
            struct itimerspec its = {.it_value = {0, 2 * 1000 * 1000}};
            timer_settime(tm, 0, &its, NULL);
        }
        if (i == 3) died = harness_now();
        st = call(comm, ctx);
    }
    EXPECT(&t, rank != victim, "the victim survived");
    double seen = harness_now() - died;
    EXPECT(&t, st == CCL_ERR_REMOTE || st == CCL_ERR_TIMEOUT, "the death gave %s", ccl_status_string(st));
    EXPECT(&t, seen < timeout_s + 5, "the death was seen after %.1f s", seen);
    char want[32];
    snprintf(want, sizeof want, "rank %d", victim);
    EXPECT(&t, strstr(ccl_comm_last_error(comm), want) != NULL, "the error does not name the dead rank: %s",
           ccl_comm_last_error(comm));
    return t.fails;
}

void util_run_with_victim(struct harness_run *run) {
    uint64_t dead = 1ull << (run->nranks - 1);
    util_run_clean(run, dead, "%d ranks", run->nranks);
    int st = run->status[run->nranks - 1];
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the victim was not killed (status 0x%x)", st);
}

int util_free_port(void) {
    int port = ccl_spawn_pick_port(NULL);
    ck_assert_msg(port > 0, "no free port on 127.0.0.1");
    return port;
}

int util_finish_child(pid_t pid, double timeout_s) {
    double end = harness_now() + timeout_s;
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (harness_now() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void util_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[600];
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}
