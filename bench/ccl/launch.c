/* --ranks N: fork (the project's spawner), hand out the unique id, wait, and stop everyone if one fails. */
#define _GNU_SOURCE
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ccl_spawn.h"
#include "common/bench.h"

#define GRACE_S 3.0 /* between SIGTERM and SIGKILL for the others when one failed */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static __attribute__((noreturn)) void child_fail(int rank, const char *what) {
    fprintf(stderr, "[rank %d] --ranks: %s\n", rank, what);
    _exit(BENCH_EXIT_ERROR);
}

/* In the child: becomes rank r once the id arrives. */
static void become_rank(const struct ccl_spawned *me, int host_per_rank, pid_t parent, ccl_unique_id_t *id) {
    int r = me->rank;
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the launcher */
    if (getppid() != parent) _exit(BENCH_EXIT_ERROR);
    if (host_per_rank) {
        char host[32];
        snprintf(host, sizeof host, "bench-host%d", r);
        setenv("CCL_HOST_ID", host, 1);
    }
    if (ccl_spawn_take_id(me, id, sizeof(*id))) child_fail(r, "the launcher gave no unique id");
    close(me->fd);
}

static void signal_all(const pid_t *pids, int n, int sig) {
    for (int r = 0; r < n; r++)
        if (pids[r] > 0) kill(pids[r], sig);
}

static int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

/* Reaps every child; the first failure stops the others. */
static int wait_all(pid_t *pids, int n) {
    int first = 0, alive = 0;
    double kill_at = 0;
    for (int r = 0; r < n; r++) alive += pids[r] > 0;
    while (alive > 0) {
        int st;
        pid_t got = waitpid(-1, &st, kill_at > 0 ? WNOHANG : 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) break;
        if (got == 0) {
            if (now_s() > kill_at) signal_all(pids, n, SIGKILL);
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
            continue;
        }
        for (int r = 0; r < n; r++) {
            if (pids[r] != got) continue;
            pids[r] = 0;
            alive--;
            if (status_code(st) && !first) {
                first = status_code(st);
                signal_all(pids, n, SIGTERM);
                kill_at = now_s() + GRACE_S;
            }
        }
    }
    return first;
}

int bench_fork_ranks(int n, int host_per_rank, int *rank, ccl_unique_id_t *id, int *exit_status) {
    static struct ccl_spawn s;
    struct ccl_spawned me;
    pid_t parent = getpid();
    /* One core per rank, as MPI launchers do (see CCL_BIND); the user's
     * own CCL_BIND wins. */
    setenv("CCL_BIND", "core", 0);
    int forked = ccl_spawn_fork(&s, n, CCL_SPAWN_PIPE, &me), failed = forked != 0;
    if (forked == 1) {
        become_rank(&me, host_per_rank, parent, id);
        *rank = me.rank;
        return 1;
    }
    ccl_status_t st = failed ? CCL_ERR_SYSTEM : ccl_get_unique_id(id);
    if (!failed && st != CCL_OK) {
        fprintf(stderr, "--ranks: ccl_get_unique_id: %s\n", ccl_status_string(st));
        failed = 1;
    }
    /* Children that get no id (their channel closes empty) exit by themselves. */
    ccl_spawn_hand_id(&s, failed ? NULL : id, sizeof(*id), 1);
    int first = wait_all(s.pid, s.started);
    *exit_status = failed ? BENCH_EXIT_ERROR : first;
    return 0;
}
