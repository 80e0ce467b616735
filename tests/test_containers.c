/* ctest: TIMEOUT 300 LABELS faults SKIP_RETURN_CODE 77 */
/*
 * Ranks in containers on one machine, made with the namespaces container
 * runtimes use (container.h):
 *  - PID namespaces of their own, sharing /dev/shm: shared memory is used,
 *    nobody is declared dead while idle (pids mean nothing across the
 *    boundary), and a rank killed inside one is still noticed at once;
 *    shared allocations (ccl_mem_alloc) work, their calls running as on
 *    any memory (no rank can open another's through /proc);
 *  - a private /dev/shm: that rank talks tcp, the others shm, and the job
 *    runs (before: init failed on a segment it could not open);
 *  - hostnames of their own: still one machine, so 4 ranks on 2 CPUs count
 *    as crowded;
 *  - a cgroup CPU quota: the CPUs a rank may use are what the quota allows;
 *  - a small /dev/shm shared by the host's ranks: init takes only what every
 *    pair needs, small calls run, and a call whose FIFO pages do not fit
 *    fails with CCL_ERR_NO_MEMORY and a sentence (no SIGBUS, no hang), on
 *    every rank.
 * Without root (or without namespaces) the suite is skipped (exit 77).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "container.h"
#include "harness.h"
#include "util.h"

#define COUNT ((size_t)100003) /* floats: a prime, not a multiple of any chunk */

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* "key=" followed by an integer in describe's text, or -1. */
static long described(ccl_comm_t *comm, const char *key) {
    char d[1024], pat[32];
    if (ccl_comm_describe(comm, d, sizeof d) != CCL_OK) return -1;
    snprintf(pat, sizeof pat, " %s=", key);
    const char *at = strstr(d, pat);
    return at ? strtol(at + strlen(pat), NULL, 10) : -1;
}

/* A few all-reduces checked exactly; the late rank makes the others wait
 * past several liveness checks first. */
static int run_checked(ccl_comm_t *comm, int rank, int nranks, struct harness_tally *t, int late_rank) {
    float *buf = malloc(COUNT * sizeof(float));
    if (!buf) {
        harness_fail(t, __FILE__, __LINE__, "out of memory");
        return -1;
    }
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < COUNT; i++) buf[i] = (float)((rank + 1) * (int)(i % 13) + round);
        if (rank == late_rank) sleep_s(0.4);
        ccl_status_t st = ccl_all_reduce(buf, buf, COUNT, CCL_FLOAT32, CCL_SUM, comm);
        EXPECT(t, st == CCL_OK, "all_reduce round %d returned %s: %s", round, ccl_status_string(st),
               ccl_comm_last_error(comm));
        if (st != CCL_OK) break;
        size_t bad = 0;
        for (size_t i = 0; i < COUNT; i++)
            bad += buf[i] != (float)((nranks * (nranks + 1) / 2) * (int)(i % 13) + nranks * round);
        EXPECT(t, bad == 0, "round %d: %zu of %zu results differ from the reference", round, bad, COUNT);
    }
    free(buf);
    return 0;
}

/* ---- PID namespaces ---- */

static const int pid_ns_ranks[] = {0, CONTAINER_PID_NS, CONTAINER_PID_NS};

static int body_pid_ns(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    EXPECT(&t, util_describe_has(comm, "transports=shm:2"), "ranks in other PID namespaces, one /dev/shm: not all shm");
    /* A pid names another process in another namespace: no rank reads
     * another's buffers through the kernel. */
    EXPECT(&t, util_describe_has(comm, "single_copy=off"), "single-copy on across PID namespaces");
    run_checked(comm, rank, nranks, &t, 0);
    return t.fails;
}

START_TEST(pid_namespaces) {
    struct harness_run run = {.nranks = 3, .body = body_pid_ns, .containers = pid_ns_ranks, .ccl_timeout = "30"};
    util_run_clean(&run, 0, "ranks 1 and 2 in PID namespaces of their own");
}
END_TEST

/* Shared allocations across PID namespaces: no rank can open another's
 * memory through /proc, so calls on them run as on any memory, right. */
static int body_shared_alloc(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float *buf = NULL;
    if (EXPECT_OK(&t, ccl_mem_alloc(comm, COUNT * sizeof(float), (void **)&buf)) != CCL_OK) return t.fails;
    for (size_t i = 0; i < COUNT; i++) buf[i] = (float)((rank + 1) * (int)(i % 13));
    EXPECT_OK(&t, ccl_all_reduce(buf, buf, COUNT, CCL_FLOAT32, CCL_SUM, comm));
    size_t bad = 0;
    for (size_t i = 0; i < COUNT; i++) bad += buf[i] != (float)((nranks * (nranks + 1) / 2) * (int)(i % 13));
    EXPECT(&t, bad == 0, "%zu of %zu results differ from the reference", bad, COUNT);
    EXPECT(&t, util_describe_has(comm, "zero_copy_calls=0"), "a call ran zero-copy across PID namespaces");
    EXPECT_OK(&t, ccl_mem_free(comm, buf));
    return t.fails;
}

START_TEST(shared_alloc_across_pid_namespaces) {
    struct harness_run run = {.nranks = 3, .body = body_shared_alloc, .containers = pid_ns_ranks,
                              .ccl_timeout = "30", .env = "CCL_ZERO_COPY_MIN=0"};
    util_run_clean(&run, 0, "shared allocations, ranks 1 and 2 in PID namespaces of their own");
}
END_TEST

#define VICTIM 2

static int body_victim(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks, (void)arg;
    struct harness_tally t = {rank, 0};
    float *buf = calloc(COUNT, sizeof(float));
    ccl_status_t st = CCL_OK;
    for (int it = 0; buf && st == CCL_OK && it < 1000000; it++) {
        st = ccl_all_reduce(buf, buf, COUNT, CCL_FLOAT32, CCL_SUM, comm);
        if (it == 0) harness_child_send("started");
    }
    harness_child_send("error %d %.6f", (int)st, harness_now());
    EXPECT(&t, rank != VICTIM, "the victim was not killed");
    EXPECT(&t, st == CCL_ERR_REMOTE, "the loop ended with %s: %s", ccl_status_string(st), ccl_comm_last_error(comm));
    free(buf);
    return t.fails;
}

static int parent_victim(struct harness_run *run, void *arg) {
    (void)arg;
    char msg[HARNESS_MSG_BYTES];
    for (int r = 0; r < run->nranks; r++)
        if (harness_recv(run, r, msg, sizeof msg, run->start + 30) != 0 || strcmp(msg, "started") != 0) return 1;
    sleep_s(0.2);
    double died = harness_now();
    kill(run->pid[VICTIM], SIGKILL); /* its namespace's pid 1 follows (PDEATHSIG) */
    int fails = 0;
    double worst = 0;
    for (int r = 0; r < run->nranks; r++) {
        if (r == VICTIM) continue;
        int st = 0;
        double when = 0;
        if (harness_recv(run, r, msg, sizeof msg, died + 25) != 0 || sscanf(msg, "error %d %lf", &st, &when) != 2) {
            fprintf(stderr, "parent: rank %d reported no error after the kill\n", r);
            fails++;
            continue;
        }
        if (when - died > worst) worst = when - died;
    }
    fprintf(stderr, "[faults] kill -9 of rank %d in its own PID namespace: survivors erred within %.3f s\n", VICTIM,
            worst);
    if (worst > 5) {
        fprintf(stderr, "parent: survivors needed %.1f s to notice (CCL_TIMEOUT 30)\n", worst);
        fails++;
    }
    return fails;
}

START_TEST(killed_in_pid_namespace) {
    struct harness_run run = {.nranks = 3, .body = body_victim, .containers = pid_ns_ranks, .ccl_timeout = "30",
                              .parent = parent_victim, .lenient_destroy = 1, .deadline_s = 90};
    util_run_clean(&run, 1u << VICTIM, "rank %d killed in its PID namespace", VICTIM);
    ck_assert_msg(run.shm_leftovers == 0, "%d /dev/shm entries left after the kill", run.shm_leftovers);
}
END_TEST

/* ---- a private /dev/shm ---- */

static const int private_shm_ranks[] = {0, 0, CONTAINER_PRIVATE_SHM};

static int body_private_shm(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    const char *want = rank == 2 ? "transports=tcp:2" : "transports=shm:1,tcp:1";
    EXPECT(&t, util_describe_has(comm, want), "rank %d: want %s", rank, want);
    EXPECT(&t, described(comm, "hosts") == 2, "hosts=%ld, want 2 (groups that share memory)", described(comm, "hosts"));
    EXPECT(&t, described(comm, "local") == nranks, "local=%ld: still one machine", described(comm, "local"));
    run_checked(comm, rank, nranks, &t, 1);
    return t.fails;
}

START_TEST(private_dev_shm) {
    struct harness_run run = {.nranks = 3, .body = body_private_shm, .containers = private_shm_ranks,
                              .ccl_timeout = "30"};
    util_run_clean(&run, 0, "rank 2 with a private /dev/shm");
}
END_TEST

/* ---- hostnames of their own ---- */

static const int hostname_ranks[] = {CONTAINER_HOSTNAME, CONTAINER_HOSTNAME, CONTAINER_HOSTNAME, CONTAINER_HOSTNAME};

static int body_hostnames(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    long local = described(comm, "local"), cpus = described(comm, "cpus"), spin = described(comm, "spin_us");
    EXPECT(&t, local == nranks, "local=%ld: ranks with their own hostnames are still on one machine", local);
    EXPECT(&t, cpus > 0, "cpus=%ld", cpus);
    if (cpus > 0 && local > cpus) EXPECT(&t, spin == 0, "%ld ranks on %ld CPUs spin %ld us", local, cpus, spin);
    EXPECT(&t, described(comm, "hosts") == 1, "hosts=%ld: one /dev/shm is one host", described(comm, "hosts"));
    run_checked(comm, rank, nranks, &t, 3);
    return t.fails;
}

START_TEST(own_hostnames) {
    struct harness_run run = {.nranks = 4, .body = body_hostnames, .containers = hostname_ranks, .ccl_timeout = "30"};
    util_run_clean(&run, 0, "4 ranks with hostnames of their own");
}
END_TEST

/* ---- a cgroup CPU quota ---- */

static char cgroup_dir[256];
static int cgroup_v2;

static int write_file(const char *dir, const char *file, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* A cgroup allowed one CPU's worth of time; "" when none can be made. */
static void make_cgroup(char *why, size_t n) {
    struct stat sb;
    if (stat("/sys/fs/cgroup/cgroup.controllers", &sb) == 0) {
        cgroup_v2 = 1;
        write_file("/sys/fs/cgroup", "cgroup.subtree_control", "+cpu");
        snprintf(cgroup_dir, sizeof cgroup_dir, "/sys/fs/cgroup/ccl-test-%d", (int)getpid());
    } else {
        snprintf(cgroup_dir, sizeof cgroup_dir, "/sys/fs/cgroup/cpu/ccl-test-%d", (int)getpid());
    }
    int ok = mkdir(cgroup_dir, 0755) == 0;
    if (ok && cgroup_v2) ok = write_file(cgroup_dir, "cpu.max", "100000 100000") == 0;
    if (ok && !cgroup_v2)
        ok = write_file(cgroup_dir, "cpu.cfs_period_us", "100000") == 0 &&
             write_file(cgroup_dir, "cpu.cfs_quota_us", "100000") == 0;
    if (!ok) {
        snprintf(why, n, "cannot make a cgroup with a CPU quota at %.160s", cgroup_dir);
        rmdir(cgroup_dir);
        cgroup_dir[0] = 0;
    }
}

static void join_cgroup(int rank, int nranks, ccl_unique_id_t *id, void *arg) {
    (void)nranks, (void)id, (void)arg;
    char pid[32];
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (write_file(cgroup_dir, "cgroup.procs", pid) != 0) {
        fprintf(stderr, "[rank %d] cannot join %s\n", rank, cgroup_dir);
        _exit(3);
    }
}

static int body_quota(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    long cpus = described(comm, "cpus"), spin = described(comm, "spin_us");
    EXPECT(&t, cpus == 1, "cpus=%ld under a quota of one CPU", cpus);
    EXPECT(&t, spin == 0, "%d ranks under a one-CPU quota spin %ld us", nranks, spin);
    run_checked(comm, rank, nranks, &t, 0);
    return t.fails;
}

START_TEST(cpu_quota) {
    struct harness_run run = {.nranks = 2, .body = body_quota, .setup = join_cgroup, .ccl_timeout = "30"};
    util_run_clean(&run, 0, "2 ranks in a cgroup allowed one CPU");
}
END_TEST

/* ---- a small /dev/shm ---- */

#define SMALL_SHM "size=2m" /* what init uses fits; the ring's three streaming FIFOs (1.2 MiB each) do not */
#define SMALL_SHM_RANKS 3
#define BIG_COUNT ((size_t)4 << 20) /* 16 MiB of float32: the ring streams through whole FIFOs */

static int body_small_shm(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    EXPECT(&t, util_describe_has(comm, "transports=shm:2"), "want shm between all %d ranks", nranks);
    float small[3] = {(float)rank, 1, (float)(2 * rank)};
    EXPECT_OK(&t, ccl_all_reduce(small, small, 3, CCL_FLOAT32, CCL_SUM, comm));
    float sum = (float)(nranks * (nranks - 1) / 2);
    EXPECT(&t, small[0] == sum && small[1] == (float)nranks && small[2] == 2 * sum,
           "small all-reduce: %g %g %g, want %g %d %g", (double)small[0], (double)small[1], (double)small[2],
           (double)sum, nranks, (double)(2 * sum));
    float *big = calloc(BIG_COUNT, sizeof(float));
    if (!big) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    ccl_status_t st = ccl_all_reduce(big, big, BIG_COUNT, CCL_FLOAT32, CCL_SUM, comm);
    const char *why = ccl_comm_last_error(comm);
    fprintf(stderr, "[rank %d] 16 MiB all-reduce in a 2 MiB /dev/shm: %s: %s\n", rank, ccl_status_string(st), why);
    EXPECT(&t, st == CCL_ERR_NO_MEMORY || st == CCL_ERR_REMOTE, "the 16 MiB all-reduce returned %s, want no memory "
           "(or a remote failure)", ccl_status_string(st));
    if (st == CCL_ERR_NO_MEMORY)
        EXPECT(&t, strstr(why, "/dev/shm is full") != NULL, "the error does not say /dev/shm is full: \"%s\"", why);
    harness_child_send("%d", (int)st);
    free(big);
    return t.fails;
}

static int parent_small_shm(struct harness_run *run, void *arg) {
    (void)arg;
    int full = 0, fails = 0;
    for (int r = 0; r < run->nranks; r++) {
        char msg[HARNESS_MSG_BYTES];
        if (harness_recv(run, r, msg, sizeof msg, run->start + 60) != 0) {
            fprintf(stderr, "parent: rank %d did not finish its calls\n", r);
            fails++;
            continue;
        }
        full += atoi(msg) == CCL_ERR_NO_MEMORY;
    }
    if (!full) {
        fprintf(stderr, "parent: no rank said that /dev/shm is full\n");
        fails++;
    }
    return fails;
}

START_TEST(small_dev_shm) {
    /* A mount namespace of this test's own, shared by the ranks it forks. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777," SMALL_SHM) != 0) {
            perror("small /dev/shm");
            _exit(3);
        }
        struct harness_run run = {.nranks = SMALL_SHM_RANKS, .body = body_small_shm, .transport = "shm",
                                  .env = "CCL_SHM_WINDOW_BYTES=0 CCL_ALGO=ring", .parent = parent_small_shm,
                                  .ccl_timeout = "30", .lenient_destroy = 1};
        harness_run(&run);
        char why[2048];
        harness_describe(&run, 0, why, sizeof why);
        if (harness_problems(&run, 0)) fprintf(stderr, "small /dev/shm: %s\n", why);
        _exit(harness_problems(&run, 0) ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "%d ranks sharing a 2 MiB /dev/shm: the run failed (status 0x%x; see above)", SMALL_SHM_RANKS, status);
}
END_TEST

static Suite *suite(int with_cgroup) {
    Suite *s = suite_create("containers");
    TCase *tc = tcase_create("containers");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pid_namespaces);
    tcase_add_test(tc, killed_in_pid_namespace);
    tcase_add_test(tc, shared_alloc_across_pid_namespaces);
    tcase_add_test(tc, private_dev_shm);
    tcase_add_test(tc, own_hostnames);
    tcase_add_test(tc, small_dev_shm);
    if (with_cgroup) tcase_add_test(tc, cpu_quota);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    char why[256] = "";
    if (container_probe(why, sizeof why) != 0) {
        printf("skipped: %s\n", why);
        return 77;
    }
    make_cgroup(why, sizeof why);
    if (!cgroup_dir[0]) printf("cpu_quota not run: %s\n", why);
    int rc = harness_main(suite(cgroup_dir[0] != 0));
    if (cgroup_dir[0]) rmdir(cgroup_dir);
    return rc;
}
