/* ctest: TIMEOUT 300 */
/*
 * The single-copy algorithm (algo/single_copy.c), in its faults; its
 * results for every collective, dtype and op are in the collectives'
 * matrices (CCL_ALGO=...:single_copy on 2, 3 and 7 ranks):
 *   - init's probe: every rank reads every peer through cross-memory
 *     attach and ccl_comm_describe says single_copy=on; where the kernel
 *     refuses one rank (a seccomp filter that answers EPERM, as a
 *     container's default profile does without CAP_SYS_PTRACE), or one
 *     rank has CCL_SINGLE_COPY=0, it is off on every rank, a call forced
 *     onto it is refused with the reason (the communicator stays usable)
 *     and the planner's calls are right;
 *   - the tuning file's cross-memory attach figure: a first job writes
 *     it; a later job prices reads at the file's figure when its own
 *     probe is within reach of it (2x the speed, 3x the call), at its
 *     probe's when the file is 20x off, and that file is rewritten;
 *     ranks sharing one CPU keep their probe's figure out of the file
 *     and price at it whatever the file says;
 *   - a root whose buffer is not mapped: both ranks fail the call, the
 *     reader naming the root and its unmapped buffer, nobody crashes or
 *     hangs;
 *   - a rank killed during single-copy all-gathers of 8 MiB: every other
 *     rank fails within CCL_TIMEOUT naming it, nothing left in /dev/shm;
 *   - point-to-point over shm from CCL_SHM_SINGLE_COPY_BYTES to
 *     CCL_SHM_SINGLE_COPY_MAX_BYTES (the receiver reads the sender's
 *     buffer): messages of 512 KiB + 4 and 2 MiB - 4 (single copy), 3 MiB
 *     + 12 and 1000 bytes (slots) both ways at once, right, with the size
 *     set (ccl_comm_describe says p2p_single_copy=524288 on both ranks),
 *     with the planner's verdict (the same on both ranks, whichever it
 *     is: this machine's kernel decides) and with the path off; a send
 *     from an unmapped buffer (the receiver names the sender) and a
 *     receive that expects more than is sent (both ranks fail, neither
 *     hangs), single-copy as set.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "harness.h"
#include "plan/plan.h"
#include "util.h"

/* An all-gather of count floats a rank, every element checked. */
static void all_gather_checked(ccl_comm_t *comm, int rank, int nranks, size_t count, struct harness_tally *t) {
    float *send = malloc(count * sizeof(float)), *recv = malloc(count * (size_t)nranks * sizeof(float));
    if (!send || !recv) {
        EXPECT(t, 0, "out of memory");
        free(send), free(recv);
        return;
    }
    for (size_t i = 0; i < count; i++) send[i] = (float)(rank * 1000 + (int)(i % 997));
    EXPECT_OK(t, ccl_all_gather(send, recv, count, CCL_FLOAT32, comm));
    size_t bad = 0;
    for (int q = 0; q < nranks; q++)
        for (size_t i = 0; i < count; i++) bad += recv[(size_t)q * count + i] != (float)(q * 1000 + (int)(i % 997));
    EXPECT(t, bad == 0, "%zu of %zu gathered elements wrong", bad, count * (size_t)nranks);
    free(send), free(recv);
}

/* ---- init's probe ---- */

static int body_on(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    EXPECT(&t, util_describe_has(comm, "single_copy=on"), "one host, nothing in the way: single-copy is not on");
    EXPECT_OK(&t, ccl_comm_set_algo(comm, "allgather:single_copy"));
    all_gather_checked(comm, rank, nranks, 100003, &t);
    EXPECT(&t, util_describe_has(comm, "all_gather:single_copy"), "the forced all-gather did not run single-copy");
    return t.fails;
}

START_TEST(probed_on) {
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_on};
    HARNESS_RUN_OK(&run);
}
END_TEST

/* The kernel refuses this process cross-memory attach, as Docker's
 * default seccomp profile does to a container without CAP_SYS_PTRACE:
 * both calls answer EPERM. Installed before init, so the communicator's
 * threads inherit it. */
#define REFUSED 1
static void refuse_cma(int rank, int nranks, ccl_unique_id_t *id, void *arg) {
    (void)nranks, (void)id, (void)arg;
    if (rank != REFUSED) return;
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        fprintf(stderr, "rank %d: cannot install the seccomp filter: %s\n", rank, strerror(errno));
        _exit(3);
    }
}

static int body_off(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    EXPECT(&t, util_describe_has(comm, "single_copy=off"), "one rank cannot read its peers: single-copy is not off");
    /* The planner's calls, right, at sizes where single-copy would run. */
    all_gather_checked(comm, rank, nranks, 1 << 20, &t);
    /* Forced onto it: refused before anything moves, the reason given. */
    EXPECT_OK(&t, ccl_comm_set_algo(comm, "allgather:single_copy"));
    float x = 1, y[8];
    ccl_status_t st = ccl_all_gather(&x, y, 1, CCL_FLOAT32, comm);
    EXPECT(&t, st == CCL_ERR_UNSUPPORTED, "a forced single-copy all-gather returned %s", ccl_status_string(st));
    EXPECT(&t, strstr(ccl_comm_last_error(comm), (const char *)arg) != NULL, "the refusal does not say why: %s",
           ccl_comm_last_error(comm));
    EXPECT_OK(&t, ccl_comm_set_algo(comm, "auto"));
    all_gather_checked(comm, rank, nranks, 1 << 16, &t);
    return t.fails;
}

START_TEST(refused_by_the_kernel_on_one_rank) {
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_off, .setup = refuse_cma,
                              .arg = (void *)"rank 1 cannot read rank 0's memory: the kernel refuses"};
    HARNESS_RUN_OK(&run);
}
END_TEST

START_TEST(switched_off_on_one_rank) {
    static const char *const env[] = {NULL, NULL, "CCL_SINGLE_COPY=0"};
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_off, .rank_env = env,
                              .arg = (void *)"CCL_SINGLE_COPY=0 on rank 2"};
    HARNESS_RUN_OK(&run);
}
END_TEST

/* ---- a buffer that is not there ---- */

/* An address this process no longer has (mapped, then unmapped), as a
 * buffer freed before the call, or while it runs, is; NULL where mmap
 * failed (a failure recorded in t). */
static void *unmapped(struct harness_tally *t, size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        EXPECT(t, 0, "mmap: %s", strerror(errno));
        return NULL;
    }
    munmap(p, bytes);
    return p;
}

#define ROOT 1
#define UNMAPPED_COUNT (1u << 20)

static int body_unmapped(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks, (void)arg;
    struct harness_tally t = {.rank = rank};
    size_t bytes = UNMAPPED_COUNT * sizeof(float);
    float *buf;
    if (rank == ROOT) {
        /* The root itself never touches its buffer in place. */
        if (!(buf = unmapped(&t, bytes))) return t.fails;
    } else {
        buf = calloc(UNMAPPED_COUNT, sizeof(float));
    }
    ccl_status_t st = ccl_broadcast(buf, buf, UNMAPPED_COUNT, CCL_FLOAT32, ROOT, comm);
    EXPECT(&t, st < 0, "a broadcast from an unmapped buffer returned %s", ccl_status_string(st));
    /* The root hears of the failure from the reader; had it exited at
     * once, a slower reader would find it gone instead (ESRCH). */
    if (rank == ROOT) usleep(500 * 1000);
    if (rank != ROOT) {
        const char *e = ccl_comm_last_error(comm);
        EXPECT(&t, strstr(e, "rank 1") != NULL && strstr(e, "not mapped") != NULL,
               "the error does not name the root and its unmapped buffer: %s", e);
        free(buf);
    }
    return t.fails;
}

START_TEST(root_buffer_unmapped) {
    struct harness_run run = {.nranks = 2, .transport = "shm", .body = body_unmapped, .ccl_timeout = "20",
                              .lenient_destroy = 1, .env = "CCL_ALGO=broadcast:single_copy"};
    HARNESS_RUN_OK(&run);
}
END_TEST

/* ---- a rank killed ---- */

#define KILL_TIMEOUT_S 10
#define KILL_COUNT (2u << 20)

struct gather_bufs {
    float *send, *recv;
};

static ccl_status_t all_gather_8_mib(ccl_comm_t *comm, void *arg) {
    struct gather_bufs *g = arg;
    return ccl_all_gather(g->send, g->recv, KILL_COUNT, CCL_FLOAT32, comm);
}

static int body_killed(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    struct gather_bufs g = {calloc(KILL_COUNT, sizeof(float)), calloc(KILL_COUNT * (size_t)nranks, sizeof(float))};
    if (!g.send || !g.recv) EXPECT(&t, 0, "out of memory");
    else t.fails += util_outlive_victim(comm, rank, nranks, KILL_TIMEOUT_S, all_gather_8_mib, &g);
    free(g.send), free(g.recv);
    return t.fails;
}

START_TEST(rank_killed_during_calls) {
    static const int ranks[] = {2, 4};
    char timeout[8];
    snprintf(timeout, sizeof timeout, "%d", KILL_TIMEOUT_S);
    struct harness_run run = {.nranks = ranks[_i], .transport = "shm", .body = body_killed, .ccl_timeout = timeout,
                              .lenient_destroy = 1, .deadline_s = 120, .env = "CCL_ALGO=allgather:single_copy"};
    util_run_with_victim(&run);
}
END_TEST

/* ---- point-to-point ---- */

/* The size from which point-to-point messages go single-copy, as
 * ccl_comm_describe gives it: 0 for off, -1 when it says nothing. */
static long long p2p_single_copy_bytes(ccl_comm_t *comm) {
    char d[2048];
    const char *at = ccl_comm_describe(comm, d, sizeof d) == CCL_OK ? strstr(d, "p2p_single_copy=") : NULL;
    if (!at) return -1;
    at += strlen("p2p_single_copy=");
    return strncmp(at, "off", 3) == 0 ? 0 : strtoll(at, NULL, 10);
}

/* arg: the size the run set (a string), or NULL for the planner's verdict. */
static int body_p2p(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    struct harness_tally t = {.rank = rank};
    long long mine = p2p_single_copy_bytes(comm), theirs = -2;
    if (arg) EXPECT(&t, mine == atoll(arg), "describe says p2p_single_copy=%lld, where %s was set", mine,
                    (const char *)arg);
    /* Both ranks' verdicts agree (every rank holds the same figures). */
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_send(&mine, 1, CCL_INT64, 1 - rank, comm));
    EXPECT_OK(&t, ccl_recv(&theirs, 1, CCL_INT64, 1 - rank, comm));
    EXPECT_OK(&t, ccl_group_end());
    EXPECT(&t, mine == theirs, "rank %d says p2p_single_copy=%lld, its peer %lld", rank, mine, theirs);
    static const size_t sizes[] = {(512u << 10) + 4, (2u << 20) - 4, (3u << 20) + 12, 1000};
    int peer = 1 - rank;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        uint8_t *out = malloc(n), *in = malloc(n + 1);
        if (!out || !in) {
            EXPECT(&t, 0, "out of memory");
            free(out), free(in);
            return t.fails;
        }
        for (size_t i = 0; i < n; i++) out[i] = (uint8_t)(i * 7 + (size_t)rank * 13 + k);
        in[n] = 0xcd;
        EXPECT_OK(&t, ccl_group_start());
        EXPECT_OK(&t, ccl_send(out, n, CCL_UINT8, peer, comm));
        EXPECT_OK(&t, ccl_recv(in, n, CCL_UINT8, peer, comm));
        EXPECT_OK(&t, ccl_group_end());
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += in[i] != (uint8_t)(i * 7 + (size_t)peer * 13 + k);
        EXPECT(&t, bad == 0, "%zu bytes: %zu received wrong", n, bad);
        EXPECT(&t, in[n] == 0xcd, "%zu bytes: the receive wrote past its end", n);
        free(out), free(in);
    }
    return t.fails;
}

/* Single-copy as set, the planner's verdict, and the path off. */
START_TEST(p2p_both_ways) {
    static const char *const envs[] = {"CCL_SHM_SINGLE_COPY_BYTES=524288", NULL, "CCL_SINGLE_COPY=0"};
    static const char *const sizes[] = {"524288", NULL, NULL};
    struct harness_run run = {.nranks = 2, .transport = "shm", .body = body_p2p, .env = envs[_i],
                              .arg = (void *)sizes[_i]};
    HARNESS_RUN_OK(&run);
}
END_TEST

#define P2P_BYTES (2u << 20)

static int body_p2p_unmapped(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks, (void)arg;
    struct harness_tally t = {.rank = rank};
    ccl_status_t st;
    if (rank == 1) {
        void *gone = unmapped(&t, P2P_BYTES);
        if (!gone) return t.fails;
        st = ccl_send(gone, P2P_BYTES, CCL_UINT8, 0, comm);
        EXPECT(&t, st < 0, "a send from an unmapped buffer returned %s", ccl_status_string(st));
        usleep(500 * 1000); /* as body_unmapped's root */
    } else {
        uint8_t *in = malloc(P2P_BYTES);
        st = ccl_recv(in, P2P_BYTES, CCL_UINT8, 1, comm);
        EXPECT(&t, st < 0, "a receive from an unmapped buffer returned %s", ccl_status_string(st));
        const char *e = ccl_comm_last_error(comm);
        EXPECT(&t, strstr(e, "rank 1") != NULL && strstr(e, "not mapped") != NULL,
               "the error does not name the sender and its unmapped buffer: %s", e);
        free(in);
    }
    return t.fails;
}

START_TEST(p2p_send_buffer_unmapped) {
    struct harness_run run = {.nranks = 2, .transport = "shm", .body = body_p2p_unmapped, .ccl_timeout = "20",
                              .lenient_destroy = 1, .env = "CCL_SHM_SINGLE_COPY_BYTES=524288"};
    HARNESS_RUN_OK(&run);
}
END_TEST

static int body_p2p_sizes_differ(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks, (void)arg;
    struct harness_tally t = {.rank = rank};
    uint8_t *buf = calloc(2 * P2P_BYTES, 1);
    double t0 = harness_now();
    ccl_status_t st = rank == 1 ? ccl_send(buf, P2P_BYTES, CCL_UINT8, 0, comm)
                                : ccl_recv(buf, 2 * P2P_BYTES, CCL_UINT8, 1, comm);
    EXPECT(&t, st < 0, "a %s of sizes that differ returned %s", rank ? "send" : "receive", ccl_status_string(st));
    EXPECT(&t, harness_now() - t0 < 15, "it took %.1f s to fail", harness_now() - t0);
    if (rank == 0)
        EXPECT(&t, strstr(ccl_comm_last_error(comm), "bytes") != NULL, "the error does not give the sizes: %s",
               ccl_comm_last_error(comm));
    free(buf);
    return t.fails;
}

START_TEST(p2p_sizes_differ) {
    struct harness_run run = {.nranks = 2, .transport = "shm", .body = body_p2p_sizes_differ, .ccl_timeout = "10",
                              .lenient_destroy = 1, .env = "CCL_SHM_SINGLE_COPY_BYTES=524288"};
    HARNESS_RUN_OK(&run);
}
END_TEST


/* ---- the tuning file's figure against init's probe ---- */

/* What a job should price cross-memory attach at: the file's figure
 * where its probe agrees with it (within 3x for the call, 2x for the
 * speed, plan/tune.c), else the probe's. The ranks' probe is the same on
 * every rank. */
#define MOVED 50 /* a rank's exit status: its probe disagreed with a file meant to agree */

struct cma_file {
    double call_us, bytes_per_us; /* the file's cma line (0: no file) */
    int want_kept;                /* 1: the probe must have agreed and the file's figure stand */
    int crowded;                  /* the ranks share one CPU: the probe's figure, whatever the file says */
    const char *report;           /* rank 0 writes its probe's figure here ("call speed"), when set */
};

static int body_cma_figure(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    const struct cma_file *cf = arg;
    struct harness_tally t = {.rank = rank};
    double call = comm->cma_call_us, speed = comm->cma_bytes_per_us;
    const struct ccl__figures *f = ccl__plan_model_figures(comm);
    EXPECT(&t, speed > 0 && f, "init probed no cross-memory attach figure");
    if (t.fails) return t.fails;
    if (cf->report && rank == 0) {
        FILE *fp = fopen(cf->report, "w");
        EXPECT(&t, fp && fprintf(fp, "%.17g %.17g\n", call, speed) > 0 && fclose(fp) == 0, "cannot write %s",
               cf->report);
    }
    int agree = !cf->crowded && cf->bytes_per_us > 0 && call < 3 * cf->call_us && cf->call_us < 3 * call && speed < 2 * cf->bytes_per_us &&
                cf->bytes_per_us < 2 * speed;
    double want_call = agree ? cf->call_us : call, want_speed = agree ? cf->bytes_per_us : speed;
    /* (the ranks trade the file's figures as floats) */
    EXPECT(&t, fabs(f->cma_call_us - want_call) < 1e-5 * want_call && fabs(f->cma_bytes_per_us - want_speed) < 1e-5 * want_speed,
           "the model prices a read at %.3f us + %.1f bytes/us; the file says %.3f + %.1f, the probe %.3f + %.1f, "
           "so it should be the %s", f->cma_call_us, f->cma_bytes_per_us, cf->call_us, cf->bytes_per_us, call, speed,
           agree ? "file's" : "probe's");
    if (cf->want_kept && !agree && !t.fails) return MOVED; /* the machine's speed moved: the caller tries again */
    return t.fails;
}

/* The file's "cma" line into call_us and bytes_per_us, 0 where it has
 * none; with rewrite, the line is first rewritten to them, or added (and
 * they are left as the file now holds them). */
static int cma_line(const char *path, double *call_us, double *bytes_per_us, int rewrite) {
    FILE *fp = fopen(path, "r");
    if (!fp) return 0;
    char text[8192], line[512];
    size_t used = 0;
    int found = 0;
    while (fgets(line, sizeof line, fp)) {
        double c, b;
        if (sscanf(line, "cma %lf %lf", &c, &b) == 2) {
            found = 1;
            if (rewrite) snprintf(line, sizeof line, "cma %.3f %.1f\n", *call_us, *bytes_per_us);
            if (rewrite) sscanf(line, "cma %lf %lf", &c, &b); /* the figures as written */
            *call_us = c, *bytes_per_us = b;
        }
        used += (size_t)snprintf(text + used, sizeof text - used, "%s", line);
    }
    fclose(fp);
    if (rewrite && !found) { /* a crowded job's file has none: add it */
        snprintf(line, sizeof line, "cma %.3f %.1f\n", *call_us, *bytes_per_us);
        sscanf(line, "cma %lf %lf", call_us, bytes_per_us); /* the figures as written */
        used += (size_t)snprintf(text + used, sizeof text - used, "%s", line);
        found = 1;
    }
    if (rewrite) {
        fp = fopen(path, "w");
        if (!fp) return 0;
        fputs(text, fp);
        fclose(fp);
    }
    return found;
}

/* 0: the job ran as wanted; 1: its probe disagreed with a file meant to
 * agree (try again); else a failure, described on stderr. Each job in a
 * process of its own: the library reads its parameters once a process,
 * and the harness sets them for each run. */
static int run_cma_job(const char *path, struct cma_file *cf) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        cpu_set_t cpus;
        if (cf->crowded) { /* both ranks on this process's first CPU */
            if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) _exit(2);
            int first = 0;
            while (!CPU_ISSET(first, &cpus)) first++;
            CPU_ZERO(&cpus);
            CPU_SET(first, &cpus);
            if (sched_setaffinity(0, sizeof cpus, &cpus) != 0) _exit(2);
        }
        char env[300], why[2048];
        snprintf(env, sizeof env, "CCL_TUNING_FILE=%s", path);
        struct harness_run run = {.nranks = 2, .transport = "shm", .body = body_cma_figure, .arg = cf, .env = env};
        harness_run(&run);
        int moved = 0;
        for (int r = 0; r < run.nranks; r++)
            moved += WIFEXITED(run.status[r]) && WEXITSTATUS(run.status[r]) == MOVED;
        if (moved == run.nranks && run.shm_leftovers == 0) _exit(1);
        if (harness_problems(&run, 0) == 0) _exit(0);
        harness_describe(&run, 0, why, sizeof why);
        fprintf(stderr, "tuning_file_cma_figure: %s\n", why);
        _exit(2);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status) <= 1 ? WEXITSTATUS(status) : -1;
}

/* A first job writes the machine's file with its probe's figure; a file
 * within reach of a later job's probe stands (every job prices the
 * single-copy algorithm alike, where the probe alone swung 1.1-1.7 us and
 * 10-13.5 GB/s from one init to the next), one 20x too fast does not. */
START_TEST(tuning_file_cma_figure) {
    char dir[] = "/tmp/ccl-cma-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tuning", dir);
    struct cma_file cf = {0, 0, 0, 0, NULL}; /* no file yet: the probe's figure */
    ck_assert_msg(run_cma_job(path, &cf) == 0, "the first job failed (its ranks' stderr says why)");
    double call = 0, speed = 0;
    if (!cma_line(path, &call, &speed, 0)) {
        /* Ranks that share cores keep their probe's figure out of the
         * file: a machine of one CPU cannot give two ranks a core each.
         * tuning_file_cma_figure_crowded covers that case there. */
        unlink(path), rmdir(dir);
        ck_assert_msg(sysconf(_SC_NPROCESSORS_ONLN) < 2, "2 ranks on %ld CPUs wrote no cma line",
                      sysconf(_SC_NPROCESSORS_ONLN));
        printf("tuning_file_cma_figure: not run: one CPU, so the two ranks share it\n");
        return;
    }
    /* within reach: the file's figure must stand (tried again if the
     * machine's speed moved past the factor between the jobs) */
    int rc = 1;
    for (int attempt = 0; attempt < 3 && rc == 1; attempt++) {
        cf = (struct cma_file){call * 1.2, speed * 1.25, 1, 0, NULL};
        ck_assert(cma_line(path, &cf.call_us, &cf.bytes_per_us, 1));
        rc = run_cma_job(path, &cf);
        ck_assert_msg(rc >= 0, "the job with the file in reach failed (its ranks' stderr says why)");
    }
    ck_assert_msg(rc == 0, "three jobs' probes disagreed with a file 1.25x their machine's speed");
    /* out of reach: the probe's figure */
    cf = (struct cma_file){call, speed * 20, 0, 0, NULL};
    ck_assert(cma_line(path, &cf.call_us, &cf.bytes_per_us, 1));
    ck_assert_msg(run_cma_job(path, &cf) == 0, "the job with a file 20x too fast failed (its ranks' stderr says why)");
    double now_call = 0, now_speed = 0;
    ck_assert(cma_line(path, &now_call, &now_speed, 0));
    ck_assert_msg(now_speed < speed * 10, "the stale cma line (%.1f bytes/us) was not rewritten: it says %.1f",
                  speed * 20, now_speed);
    unlink(path), rmdir(dir);
}
END_TEST

/* Ranks that share a CPU price reads at their own probe's figure, even
 * with a cma line in the file (a crowded probe times the crowding, and
 * the model was fitted to it). */
START_TEST(tuning_file_cma_figure_crowded) {
    char dir[] = "/tmp/ccl-cma-XXXXXX", path[64], report[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tuning", dir);
    snprintf(report, sizeof report, "%s/probe", dir);
    struct cma_file cf = {0, 0, 0, 1, report};
    ck_assert_msg(run_cma_job(path, &cf) == 0, "the first crowded job failed (its ranks' stderr says why)");
    double call = 0, speed = 0;
    ck_assert_msg(!cma_line(path, &call, &speed, 0), "a crowded job wrote its probe's cma figure into the file");
    FILE *fp = fopen(report, "r");
    ck_assert_msg(fp && fscanf(fp, "%lf %lf", &call, &speed) == 2, "the first job reported no probe figure");
    fclose(fp);
    /* a line within reach of that probe, which an uncrowded job would take */
    call *= 1.2, speed *= 1.25;
    ck_assert(cma_line(path, &call, &speed, 1));
    cf = (struct cma_file){call, speed, 0, 1, NULL};
    ck_assert_msg(run_cma_job(path, &cf) == 0, "the crowded job with a cma line failed (its ranks' stderr says why)");
    unlink(report), unlink(path), rmdir(dir);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("single_copy");
    TCase *tc = tcase_create("probe");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, probed_on);
    tcase_add_test(tc, refused_by_the_kernel_on_one_rank);
    tcase_add_test(tc, switched_off_on_one_rank);
    tcase_add_test(tc, tuning_file_cma_figure);
    tcase_add_test(tc, tuning_file_cma_figure_crowded);
    suite_add_tcase(s, tc);
    tc = tcase_create("faults");
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, root_buffer_unmapped);
    tcase_add_loop_test(tc, rank_killed_during_calls, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("p2p");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, p2p_both_ways, 0, 3);
    tcase_add_test(tc, p2p_send_buffer_unmapped);
    tcase_add_test(tc, p2p_sizes_differ);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
