/* --ranks N: fork, hand out the unique id, wait, and stop everyone if one fails. */
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

#include "common/bench.h"

#define GRACE_S 3.0 /* between SIGTERM and SIGKILL for the others when one failed */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int read_full(int fd, void *buf, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
    for (size_t put = 0; put < n;) {
        ssize_t w = write(fd, (const char *)buf + put, n - put);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        put += (size_t)w;
    }
    return 0;
}

static __attribute__((noreturn)) void child_fail(int rank, const char *what) {
    fprintf(stderr, "[rank %d] --ranks: %s\n", rank, what);
    _exit(BENCH_EXIT_ERROR);
}

/* In the child: becomes rank r once the id arrives. */
static void become_rank(int r, int host_per_rank, int id_fd, pid_t parent, ccl_unique_id_t *id) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the launcher */
    if (getppid() != parent) _exit(BENCH_EXIT_ERROR);
    if (host_per_rank) {
        char host[32];
        snprintf(host, sizeof host, "bench-host%d", r);
        setenv("CCL_HOST_ID", host, 1);
    }
    if (read_full(id_fd, id, sizeof(*id))) child_fail(r, "the launcher gave no unique id");
    close(id_fd);
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
    pid_t *pids = calloc((size_t)n, sizeof(*pids));
    int *id_fds = calloc((size_t)n, sizeof(*id_fds));
    int started = 0, failed = 0;
    pid_t parent = getpid();
    if (!pids || !id_fds) {
        fprintf(stderr, "--ranks: out of memory\n");
        failed = 1;
    }
    /* One core per rank, as MPI launchers do (see CCL_BIND); the user's
     * own CCL_BIND wins. */
    setenv("CCL_BIND", "core", 0);
    fflush(stdout);
    fflush(stderr);
    for (; !failed && started < n; started++) {
        int p[2];
        if (pipe2(p, O_CLOEXEC)) {
            perror("--ranks: pipe");
            failed = 1;
            break;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(p[1]);
            for (int r = 0; r < started; r++) close(id_fds[r]);
            free(pids);
            free(id_fds);
            become_rank(started, host_per_rank, p[0], parent, id);
            *rank = started;
            return 1;
        }
        close(p[0]);
        if (pid < 0) {
            perror("--ranks: fork");
            close(p[1]);
            failed = 1;
            break;
        }
        pids[started] = pid;
        id_fds[started] = p[1];
    }
    /* A child that died already must not kill the launcher through SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    ccl_status_t st = failed ? CCL_ERR_SYSTEM : ccl_get_unique_id(id);
    if (!failed && st != CCL_OK) {
        fprintf(stderr, "--ranks: ccl_get_unique_id: %s\n", ccl_status_string(st));
        failed = 1;
    }
    /* Children that get no id (their pipe closes empty) exit by themselves. */
    for (int r = 0; r < started; r++) {
        if (!failed) write_full(id_fds[r], id, sizeof(*id));
        close(id_fds[r]);
    }
    int first = pids ? wait_all(pids, n) : 0;
    *exit_status = failed ? BENCH_EXIT_ERROR : first;
    free(pids);
    free(id_fds);
    return 0;
}
