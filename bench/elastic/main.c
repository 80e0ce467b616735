/*
 * elastic_bench: how long an elastic job stands still when it loses a rank
 * and when it takes one in.
 *
 *   elastic_bench [-n 4,8,16,32] [--transport shm|tcp] [--trials 10]
 *
 * One trial at N ranks: N ranks and one spare process start; the ranks
 * all-reduce 8 bytes in a loop until this program kills the last one with
 * SIGKILL. Each survivor notes when its call failed (the death noticed),
 * shrinks, and all-reduces once on the new communicator (usable). Then the
 * survivors grow back to N with the spare (rank 0 makes the grow id, this
 * program carries it to the spare) and all-reduce once more. Reported per
 * N, median and worst of the trials:
 *   noticed   kill -> the last survivor's failed call
 *   shrink    the last survivor's failed call -> the last usable shrunk one
 *             (the agreement and the new communicator's set-up)
 *   total     kill -> the last usable shrunk communicator
 *   grow      the first member entering the grow -> the last rank's first
 *             call on the grown communicator done
 * Every time is CLOCK_MONOTONIC, which every process on the machine shares.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ccl.h"
#include "ccl_spawn.h"

#define MAX_N 64

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* What a survivor reports: when its call failed, when the shrunk
 * communicator worked, when it entered the grow and when the grown one
 * worked (0: did not). */
struct times {
    double failed, usable, grow_in, grown;
    int status;
};

static int send_all(int fd, const void *p, size_t n) { return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1; }

static int recv_all(int fd, void *p, size_t n) { return recv(fd, p, n, 0) == (ssize_t)n ? 0 : -1; }

static int member(const struct ccl_spawned *me, int n) {
    ccl_unique_id_t id;
    if (ccl_spawn_take_id(me, &id, sizeof id) != 0) return 1;
    ccl_comm_t *comm = NULL;
    if (ccl_comm_init_rank(&comm, n, id, me->rank) != CCL_OK) return 2;
    double x = 1;
    ccl_status_t st = ccl_barrier(comm);
    char ready = 'r';
    send_all(me->fd, &ready, 1);
    while (st == CCL_OK) st = ccl_all_reduce(&x, &x, 1, CCL_FLOAT64, CCL_SUM, comm);
    struct times t = {.failed = now()};
    ccl_comm_t *small = NULL, *grown = NULL;
    st = ccl_comm_shrink(comm, NULL, 0, &small);
    if (st == CCL_OK) st = ccl_all_reduce(&x, &x, 1, CCL_FLOAT64, CCL_SUM, small);
    t.usable = now();
    if (st == CCL_OK) st = ccl_barrier(small);
    t.grow_in = now();
    ccl_unique_id_t gid;
    if (st == CCL_OK && me->rank == 0) {
        st = ccl_comm_grow_id(small, &gid);
        if (st == CCL_OK) send_all(me->fd, &gid, sizeof gid); /* to the spare, through this program */
    }
    if (st == CCL_OK) st = ccl_comm_grow(small, n, me->rank == 0 ? &gid : NULL, -1, &grown);
    if (st == CCL_OK) st = ccl_all_reduce(&x, &x, 1, CCL_FLOAT64, CCL_SUM, grown);
    t.grown = now();
    t.status = st;
    if (st != CCL_OK) fprintf(stderr, "rank %d: %s\n", me->rank, ccl_comm_last_error(grown ? grown : small ? small : comm));
    send_all(me->fd, &t, sizeof t);
    if (grown) ccl_comm_destroy(grown);
    if (small) ccl_comm_destroy(small);
    ccl_comm_destroy(comm);
    return st != CCL_OK;
}

static int spare(const struct ccl_spawned *me, int n) {
    ccl_unique_id_t id;
    if (ccl_spawn_take_id(me, &id, sizeof id) != 0) return 1; /* the job's id: not for a spare */
    ccl_unique_id_t gid;
    if (recv_all(me->fd, &gid, sizeof gid) != 0) return 1;
    ccl_comm_t *grown = NULL;
    double x = 1;
    struct times t = {0};
    ccl_status_t st = ccl_comm_grow(NULL, n, &gid, n - 1, &grown);
    if (st == CCL_OK) st = ccl_all_reduce(&x, &x, 1, CCL_FLOAT64, CCL_SUM, grown);
    t.grown = now();
    t.status = st;
    send_all(me->fd, &t, sizeof t);
    if (grown) ccl_comm_destroy(grown);
    return st != CCL_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One trial; fills the four figures in ms. 0 on success. */
static int trial(int n, double *noticed, double *shrink, double *total, double *grow) {
    struct ccl_spawn s;
    struct ccl_spawned me;
    int r = ccl_spawn_fork(&s, n + 1, CCL_SPAWN_SEQPACKET, &me);
    if (r == 1) _exit(me.rank < n ? member(&me, n) : spare(&me, n));
    if (r < 0) return -1;
    ccl_unique_id_t id;
    if (ccl_get_unique_id(&id) != CCL_OK || ccl_spawn_hand_id(&s, &id, sizeof id, 0) != 0) return -1;
    int fails = 0;
    char c;
    for (int k = 0; k < n; k++) fails += recv_all(s.fd[k], &c, 1) != 0;
    usleep(20 * 1000);
    double killed = now();
    kill(s.pid[n - 1], SIGKILL);
    ccl_unique_id_t gid;
    fails += recv_all(s.fd[0], &gid, sizeof gid) != 0;
    fails += send_all(s.fd[n], &gid, sizeof gid) != 0;
    double last_failed = 0, last_usable = 0, first_in = 1e300, last_grown = 0;
    for (int k = 0; k < n + 1; k++) {
        if (k == n - 1) continue;
        struct times t;
        if (recv_all(s.fd[k], &t, sizeof t) != 0 || t.status != CCL_OK) {
            fails++;
            continue;
        }
        if (k < n) {
            if (t.failed > last_failed) last_failed = t.failed;
            if (t.usable > last_usable) last_usable = t.usable;
            if (t.grow_in < first_in) first_in = t.grow_in;
        }
        if (t.grown > last_grown) last_grown = t.grown;
    }
    for (int k = 0; k < n + 1; k++) {
        int ws;
        waitpid(s.pid[k], &ws, 0);
        close(s.fd[k]);
    }
    *noticed = (last_failed - killed) * 1e3;
    *shrink = (last_usable - last_failed) * 1e3;
    *total = (last_usable - killed) * 1e3;
    *grow = (last_grown - first_in) * 1e3;
    return fails ? -1 : 0;
}

static void usage(void) {
    fprintf(stderr, "usage: elastic_bench [-n 4,8,16,32] [--transport shm|tcp] [--trials 10]\n");
    exit(2);
}

int main(int argc, char **argv) {
    int sizes[16], nsizes = 0, trials = 10;
    const char *transport = "shm", *list = "4,8,16,32";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) list = argv[++i];
        else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc) transport = argv[++i];
        else if (strcmp(argv[i], "--trials") == 0 && i + 1 < argc) trials = atoi(argv[++i]);
        else usage();
    }
    for (char *dup = strdup(list), *tok = strtok(dup, ","); tok && nsizes < 16; tok = strtok(NULL, ","))
        sizes[nsizes++] = atoi(tok);
    if (trials < 1 || trials > 1000) usage();
    for (int k = 0; k < nsizes; k++)
        if (sizes[k] < 3 || sizes[k] > MAX_N) usage();
    setenv("CCL_TRANSPORT", transport, 1);
    printf("# elastic_bench: transport %s, %d trials per size; ms, median / worst\n", transport, trials);
    printf("# %5s %17s %17s %17s %17s\n", "ranks", "noticed", "shrink", "total", "grow");
    for (int k = 0; k < nsizes; k++) {
        int n = sizes[k];
        double v[4][1000];
        int ok = 0;
        for (int t = 0; t < trials; t++) {
            fprintf(stderr, "\relastic_bench: %d ranks, trial %d of %d", n, t + 1, trials);
            if (trial(n, &v[0][ok], &v[1][ok], &v[2][ok], &v[3][ok]) == 0) ok++;
        }
        fprintf(stderr, "\r%60s\r", "");
        if (!ok) {
            printf("  %5d   every trial failed\n", n);
            continue;
        }
        printf("  %5d", n);
        for (int m = 0; m < 4; m++) {
            qsort(v[m], (size_t)ok, sizeof(double), cmp_double);
            printf("  %7.1f / %7.1f", v[m][ok / 2], v[m][ok - 1]);
        }
        printf("%s\n", ok < trials ? "  (some trials failed)" : "");
        fflush(stdout);
    }
    return 0;
}
