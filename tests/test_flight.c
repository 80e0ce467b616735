/* ctest: TIMEOUT 300 LABELS faults */
/*
 * Seeing a job from outside (docs/status.md): the flight recorder
 * (lib/core/flight.h) and the status server (lib/core/status.h).
 *
 * The flight recorder: what
 * a rank's dump holds after a run of known calls (read back byte by byte
 * against what the test called), that CCL_FLIGHT_RECORDER=0 writes
 * nothing, and jobs made to hang or fail on purpose: a rank asleep outside
 * libccl, a rank that calls another collective, a rank stopped with
 * SIGSTOP and a rank killed. In each, `ccl-trace flight` run on the dumps
 * must name the culprit.
 *
 * The status server: the same four faults on a job with a long timeout,
 * asked while it hangs, on one host (shm) and across hosts (tcp; ib in the
 * RDMA VM): `ccl-status` must name the culprit and its state within 2
 * seconds, in text and in JSON; a stranger (the wrong secret) learns
 * nothing; `--dump` makes every rank that answers write its recorder; and
 * the job goes on unharmed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/flight.h"
#include "harness.h"
#include "util.h"

#define NRANKS 3
#define CULPRIT 2
#define CAPACITY 8

static char dir[128];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/ccl-test-flight-%d", (int)getpid());
    mkdir(dir, 0700);
}

/* Removes the dumps and the directory. */
static void remove_dir(void) { util_remove_dir(dir); }

/* Files in dir whose names end in suffix. */
static int count_files(const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name), m = strlen(suffix);
        n += len > m && strcmp(e->d_name + len - m, suffix) == 0;
    }
    closedir(d);
    return n;
}

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- what a dump holds ---- */

struct expect_call {
    int kind, count, dtype, op, peer, is_send;
};

/* The calls each rank makes, in order: 6 all-reduces, a broadcast from
 * rank 1, a ring shift as one group (a send and a receive), 3 more
 * all-reduces: 12 entries, the last 8 of them in the ring. */
static int record_body(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float f[7] = {0};
    int32_t b[3] = {rank, 1, 2};
    double t0 = wall();
    for (int i = 0; i < 6; i++) EXPECT_OK(&t, ccl_all_reduce(f, f, 7, CCL_FLOAT32, CCL_SUM, comm));
    EXPECT_OK(&t, ccl_broadcast(b, b, 3, CCL_INT32, 1, comm));
    int64_t out = rank, in = -1;
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_send(&out, 1, CCL_INT64, (rank + 1) % nranks, comm));
    EXPECT_OK(&t, ccl_recv(&in, 1, CCL_INT64, (rank + nranks - 1) % nranks, comm));
    EXPECT_OK(&t, ccl_group_end());
    for (int i = 0; i < 3; i++) EXPECT_OK(&t, ccl_all_reduce(f, f, 5, CCL_FLOAT32, CCL_MAX, comm));
    double t1 = wall();
    raise(SIGUSR2); /* CCL_FLIGHT_SIGNAL's default */
    /* The file's name has the communicator's id, which the API does not
     * give: find this rank's file by its suffix. */
    char path[600] = "";
    DIR *d = opendir(dir);
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".%d.flight", rank);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name), m = strlen(suffix);
        if (n > m && strcmp(e->d_name + n - m, suffix) == 0) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    }
    if (d) closedir(d);
    EXPECT(&t, path[0], "rank %d wrote no dump in %s on SIGUSR2", rank, dir);
    if (!path[0]) return t.fails;
    int fd = open(path, O_RDONLY);
    struct ccl__flight_header h;
    struct ccl__flight_entry e[CAPACITY];
    EXPECT(&t, fd >= 0 && read(fd, &h, sizeof h) == (ssize_t)sizeof h && read(fd, e, sizeof e) == (ssize_t)sizeof e,
           "%s is short", path);
    if (fd >= 0) close(fd);
    if (t.fails) return t.fails;
    EXPECT(&t, memcmp(h.magic, CCL__FLIGHT_MAGIC, 8) == 0 && h.version == 1, "bad magic or version");
    EXPECT(&t, h.rank == rank && h.nranks == nranks && h.capacity == CAPACITY && h.recorded == 12,
           "header: rank %d of %d, capacity %u, %llu recorded (want 12)", h.rank, h.nranks, h.capacity,
           (unsigned long long)h.recorded);
    EXPECT(&t, h.reason == CCL__FLIGHT_SIGNAL && h.failed_status == 0 && h.pid == getpid(), "reason %d, failed %d",
           h.reason, h.failed_status);
    EXPECT(&t, h.dumped_at >= t1 - 0.01 && h.dumped_at <= wall() + 0.01, "dumped at %.3f, not now", h.dumped_at);
    /* The last 8 calls: all-reduces #4 and #5, the broadcast (#6), the
     * send and the receive, all-reduces #7, #8, #9. */
    const struct expect_call want[CAPACITY] = {
        {1, 7, CCL_FLOAT32, CCL_SUM, -1, 0},    {1, 7, CCL_FLOAT32, CCL_SUM, -1, 0},
        {4, 3, CCL_INT32, -1, 1, 0},            {8, 1, CCL_INT64, -1, (rank + 1) % nranks, 1},
        {8, 1, CCL_INT64, -1, (rank + nranks - 1) % nranks, 0}, {1, 5, CCL_FLOAT32, CCL_MAX, -1, 0},
        {1, 5, CCL_FLOAT32, CCL_MAX, -1, 0},    {1, 5, CCL_FLOAT32, CCL_MAX, -1, 0}};
    const uint32_t seqs[CAPACITY] = {4, 5, 6, 0, 0, 7, 8, 9};
    double prev = t0;
    for (int i = 0; i < CAPACITY; i++) {
        const struct ccl__flight_entry *c = &e[i];
        const struct expect_call *w = &want[i];
        EXPECT(&t, c->index == (uint64_t)(4 + i) && c->kind == w->kind && c->count == (uint64_t)w->count &&
                       c->dtype == w->dtype && c->peer == w->peer && c->is_send == w->is_send && c->seq == seqs[i],
               "entry %d: index %llu kind %d count %llu dtype %d peer %d send %d seq %u", i,
               (unsigned long long)c->index, c->kind, (unsigned long long)c->count, c->dtype, c->peer, c->is_send,
               c->seq);
        if (w->kind != 8) EXPECT(&t, c->op == w->op, "entry %d: op %d, want %d", i, c->op, w->op);
        EXPECT(&t, c->state == CCL__FLIGHT_DONE && c->status == 0, "entry %d: state %d status %d", i, c->state,
               c->status);
        if (w->kind == 1) EXPECT(&t, c->algo < 16, "entry %d: all_reduce without its algorithm (%d)", i, c->algo);
        /* Times in order, within the run (the clock converted from ticks:
         * a few ms of slack for the rate measured over the run). */
        EXPECT(&t, c->t_start.s >= t0 - 0.005 && c->t_end.s >= c->t_start.s && c->t_end.s <= t1 + 0.005 &&
                       c->t_start.s >= prev - 0.005,
               "entry %d: %.6f-%.6f outside the run %.6f-%.6f", i, c->t_start.s, c->t_end.s, t0, t1);
        prev = c->t_start.s;
        /* How far each call began: the rank's completed waits only grow,
         * and every all-reduce of 3 ranks waits at least once. */
        if (i > 0) EXPECT(&t, c->steps0 >= e[i - 1].steps0, "entry %d: began at step %u, before %u", i, c->steps0,
                          e[i - 1].steps0);
        if (i > 5) EXPECT(&t, c->steps0 > e[i - 1].steps0, "entry %d: all-reduce began at step %u, as the one before",
                          i, c->steps0);
    }
    return t.fails;
}

START_TEST(dump_holds_the_calls) {
    make_dir();
    char env[400];
    snprintf(env, sizeof env, "CCL_FLIGHT_RECORDER=%d CCL_FLIGHT_DIR=%s CCL_STATUS_DIR=%s", CAPACITY, dir, dir);
    struct harness_run run = {.nranks = NRANKS, .body = record_body, .env = env};
    HARNESS_RUN_OK(&run);
    ck_assert_int_eq(count_files(".flight"), NRANKS);
    /* Every rank destroyed its communicator: no status file is left. */
    ck_assert_int_eq(count_files(".status"), 0);
    remove_dir();
}
END_TEST

static int quiet_body(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks, (void)arg;
    struct harness_tally t = {rank, 0};
    double x = 1;
    for (int i = 0; i < 10; i++) EXPECT_OK(&t, ccl_all_reduce(&x, &x, 1, CCL_FLOAT64, CCL_SUM, comm));
    EXPECT_STATUS(&t, CCL_ERR_ABORTED, (ccl_comm_abort(comm), ccl_all_reduce(&x, &x, 1, CCL_FLOAT64, CCL_SUM, comm)));
    return t.fails;
}

/* CCL_FLIGHT_RECORDER=0: nothing recorded, nothing written, even when
 * the communicator fails (an abort). */
START_TEST(off_writes_nothing) {
    make_dir();
    char env[400];
    snprintf(env, sizeof env, "CCL_FLIGHT_RECORDER=0 CCL_FLIGHT_DIR=%s", dir);
    struct harness_run run = {.nranks = 2, .body = quiet_body, .env = env, .lenient_destroy = 1};
    HARNESS_RUN_OK(&run);
    ck_assert_int_eq(count_files(".flight"), 0);
    remove_dir();
}
END_TEST

/* ---- jobs made to hang ---- */

enum fault { ASLEEP, OTHER_CALL, STOPPED, KILLED };

static const char *const fault_names[] = {"a rank asleep outside libccl", "a rank calling another collective",
                                          "a rank stopped", "a rank killed"};

/* The calls before every fault: four all-reduces of 33 floats (#0-#3). */
static void good_calls(struct harness_tally *t, ccl_comm_t *comm, float *x) {
    for (int i = 0; i < 4; i++) EXPECT_OK(t, ccl_all_reduce(x, x, 33, CCL_FLOAT32, CCL_SUM, comm));
}

/* Four good all-reduces, then the fault at the fifth (call #4). */
static int hang_body(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    enum fault f = *(enum fault *)arg;
    struct harness_tally t = {rank, 0};
    float x[33] = {0};
    good_calls(&t, comm, x);
    ccl_status_t st;
    /* Asleep past the others' timeout (the harness's CCL_TIMEOUT, 2 s here). */
    if (rank == CULPRIT && f == ASLEEP) sleep((unsigned)atoi(getenv("CCL_TIMEOUT")) + 2);
    if (rank == CULPRIT && (f == STOPPED || f == KILLED)) {
        harness_child_send("ready");
        sleep(30); /* the parent stops or kills it here */
    }
    if (rank == CULPRIT && f == OTHER_CALL) st = ccl_broadcast(x, x, 33, CCL_FLOAT32, 0, comm);
    else st = ccl_all_reduce(x, x, 33, CCL_FLOAT32, CCL_SUM, comm);
    /* The sleeper may still complete its call from what the others left
     * in its reach before they gave up; everyone else fails. */
    if (rank != CULPRIT || f == OTHER_CALL)
        EXPECT(&t, st != CCL_OK, "the fifth call succeeded despite %s", fault_names[f]);
    if (rank != CULPRIT) harness_child_send("failed");
    return t.fails;
}

/* Runs `ccl-trace flight DIR` and returns its output (static). */
static const char *analyse(void) {
    static char out[16384];
    char cmd[800];
    snprintf(cmd, sizeof cmd, "PYTHONDONTWRITEBYTECODE=1 python3 %s flight %s 2>&1", CCL_TRACE_TOOL, dir);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    if (p) pclose(p);
    return out;
}

struct hang_case {
    enum fault f;
    char verdict[16384];
};

/* For the stopped and killed ranks: waits until rank CULPRIT is between
 * its calls, stops or kills it, and (stopped) keeps it stopped until the
 * others have failed and the dumps are read, then kills it. */
static int hang_parent(struct harness_run *run, void *arg) {
    struct hang_case *hc = arg;
    char msg[HARNESS_MSG_BYTES];
    int fails = 0;
    if (hc->f == STOPPED || hc->f == KILLED) {
        if (harness_recv(run, CULPRIT, msg, sizeof msg, run->start + 60) != 0) return 1;
        kill(run->pid[CULPRIT], hc->f == STOPPED ? SIGSTOP : SIGKILL);
    }
    for (int r = 0; r < run->nranks; r++)
        if (r != CULPRIT && harness_recv(run, r, msg, sizeof msg, run->start + 60) != 0) fails++;
    snprintf(hc->verdict, sizeof hc->verdict, "%s", analyse());
    if (hc->f == STOPPED) kill(run->pid[CULPRIT], SIGKILL);
    return fails;
}

static void hang_case(enum fault f, const char *transport) {
    make_dir();
    char env[400];
    snprintf(env, sizeof env, "CCL_FLIGHT_DIR=%s", dir);
    static struct hang_case hc;
    hc.f = f;
    /* The body and the parent hook share the run's argument: hc, whose
     * first member is the fault. CCL_TIMEOUT is 2 s, or the RDMA VM's own
     * (CCL_TEST_FLIGHT_TIMEOUT: an emulated machine, where a good call
     * under load can take seconds). */
    const char *timeout = getenv("CCL_TEST_FLIGHT_TIMEOUT");
    struct harness_run run = {.nranks = NRANKS, .body = hang_body, .arg = &hc, .env = env,
                              .ccl_timeout = timeout && *timeout ? timeout : "2",
                              .parent = hang_parent, .lenient_destroy = 1, .deadline_s = 90,
                              .transport = transport, .host_per_rank = transport != NULL};
    harness_run(&run);
    uint64_t dead = f == STOPPED || f == KILLED ? 1u << CULPRIT : 0;
    char why[2048];
    harness_describe(&run, dead, why, sizeof why);
    ck_assert_msg(harness_problems(&run, dead) == 0, "%s: %s", fault_names[f], why);
    fprintf(stderr, "== %s: ccl-trace flight says\n%s", fault_names[f], hc.verdict); /* for the test's log */
    char want[64];
    snprintf(want, sizeof want, ": rank %d went apart first.", CULPRIT);
    ck_assert_msg(strstr(hc.verdict, want), "%s: ccl-trace flight did not name rank %d:\n%s", fault_names[f], CULPRIT,
                  hc.verdict);
    remove_dir();
}

START_TEST(names_the_culprit) { hang_case((enum fault)_i, NULL); }
END_TEST

/* The transport across hosts: tcp, or CCL_TEST_STATUS_TRANSPORT (the
 * RDMA VM's suite sets ib). */
static const char *across_hosts(void) {
    const char *transport = getenv("CCL_TEST_STATUS_TRANSPORT");
    return transport && *transport ? transport : "tcp";
}

START_TEST(names_the_culprit_across_hosts) { hang_case((enum fault)_i, across_hosts()); }
END_TEST

/* ---- ccl-status on a hanging job ---- */

struct status_case {
    enum fault f;
    char text[16384], json[32768];
    double text_s, json_s;
    double start_s; /* the client's own start (the interpreter, its imports): ccl-status with no job to ask */
    char stranger[4096];
    int dumps; /* flight recorders written after ccl-status --dump */
};

/* Four good all-reduces, then rank CULPRIT's fault before the fifth:
 * asleep outside libccl until the parent has asked, another collective,
 * or stopped by the parent, then let go, or killed. The others wait in the
 * fifth (CCL_TIMEOUT is long). */
static int status_body(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    enum fault f = *(enum fault *)arg;
    struct harness_tally t = {rank, 0};
    float x[33] = {0};
    good_calls(&t, comm, x);
    if (rank == CULPRIT) {
        harness_child_send("ready");
        if (f == ASLEEP || f == STOPPED || f == KILLED) {
            /* Outside libccl until the parent has asked (stopped or
             * killed by it meanwhile) and says "go". */
            char msg[HARNESS_MSG_BYTES];
            harness_child_recv(msg, sizeof msg, 180);
        }
    }
    ccl_status_t st = rank == CULPRIT && f == OTHER_CALL ? ccl_broadcast(x, x, 33, CCL_FLOAT32, 0, comm)
                                                         : ccl_all_reduce(x, x, 33, CCL_FLOAT32, CCL_SUM, comm);
    /* Asleep or stopped and let go, the job goes on. */
    if (f == ASLEEP || f == STOPPED) EXPECT_OK(&t, st);
    else EXPECT(&t, st != CCL_OK, "the fifth call succeeded despite %s", fault_names[f]);
    /* Failed or not, the communicator lives until the parent has asked. */
    char msg[HARNESS_MSG_BYTES];
    harness_child_recv(msg, sizeof msg, 180);
    return t.fails;
}

/* Runs a command, its output into out; returns the seconds it took. */
static double run_timed(const char *cmd, char *out, size_t n) {
    double t0 = harness_now();
    FILE *p = popen(cmd, "r");
    size_t len = p ? fread(out, 1, n - 1, p) : 0;
    out[len] = 0;
    if (p) pclose(p);
    return harness_now() - t0;
}

static int status_parent(struct harness_run *run, void *arg) {
    struct status_case *sc = arg;
    char msg[HARNESS_MSG_BYTES], cmd[800];
    if (harness_recv(run, CULPRIT, msg, sizeof msg, run->start + 60) != 0) return 1;
    if (sc->f == STOPPED) kill(run->pid[CULPRIT], SIGSTOP);
    if (sc->f == KILLED) kill(run->pid[CULPRIT], SIGKILL);
    /* The others are in their fifth call by now, past its spin. */
    usleep(700 * 1000);
    char none[512];
    snprintf(cmd, sizeof cmd, "CCL_STATUS_DIR=%s/none PYTHONDONTWRITEBYTECODE=1 python3 %s 2>&1", dir,
             CCL_STATUS_TOOL);
    sc->start_s = run_timed(cmd, none, sizeof none);
    snprintf(cmd, sizeof cmd, "CCL_STATUS_DIR=%s PYTHONDONTWRITEBYTECODE=1 python3 %s 2>&1", dir, CCL_STATUS_TOOL);
    sc->text_s = run_timed(cmd, sc->text, sizeof sc->text);
    snprintf(cmd, sizeof cmd, "CCL_STATUS_DIR=%s PYTHONDONTWRITEBYTECODE=1 python3 %s --json 2>&1", dir,
             CCL_STATUS_TOOL);
    sc->json_s = run_timed(cmd, sc->json, sizeof sc->json);
    /* A stranger: rank 0's address, the job's communicator, another secret. */
    snprintf(cmd, sizeof cmd, "f=$(ls %s/*.0.status) && CCL_SECRET=%064d PYTHONDONTWRITEBYTECODE=1 python3 %s "
             "--addr $(sed -n 's/^addr //p' $f) --comm $(sed -n 's/^comm //p' $f) 2>&1", dir, 7, CCL_STATUS_TOOL);
    run_timed(cmd, sc->stranger, sizeof sc->stranger);
    /* Every rank that answers writes its recorder when asked to. */
    char out[4096];
    snprintf(cmd, sizeof cmd, "CCL_STATUS_DIR=%s PYTHONDONTWRITEBYTECODE=1 python3 %s --dump 2>&1", dir,
             CCL_STATUS_TOOL);
    run_timed(cmd, out, sizeof out);
    sc->dumps = count_files(".flight");
    if (sc->f == STOPPED) kill(run->pid[CULPRIT], SIGCONT);
    if (sc->f == STOPPED || sc->f == ASLEEP) harness_send(run, CULPRIT, "go");
    for (int r = 0; r < run->nranks; r++)
        if (r != CULPRIT || sc->f != KILLED) harness_send(run, r, "done");
    return 0;
}

static void status_case(enum fault f, const char *transport) {
    make_dir();
    char env[400];
    snprintf(env, sizeof env, "CCL_STATUS_DIR=%s CCL_FLIGHT_DIR=%s", dir, dir);
    static struct status_case sc;
    memset(&sc, 0, sizeof sc);
    sc.f = f;
    /* The waiting ranks must outlast the parent's five clients: 1 s each
     * here, up to 8 s each in the RDMA VM under CI's load. */
    struct harness_run run = {.nranks = NRANKS, .body = status_body, .arg = &sc, .env = env, .ccl_timeout = "150",
                              .parent = status_parent, .lenient_destroy = 1, .deadline_s = 200,
                              .transport = transport, .host_per_rank = transport != NULL};
    harness_run(&run);
    fprintf(stderr, "== %s (%s): ccl-status says (%.2f s, %.2f s of it to start)\n%s", fault_names[f],
            transport ? transport : "shm", sc.text_s, sc.start_s, sc.text);
    uint64_t dead = f == KILLED ? 1u << CULPRIT : 0;
    char why[2048];
    harness_describe(&run, dead, why, sizeof why);
    ck_assert_msg(harness_problems(&run, dead) == 0, "%s: %s", fault_names[f], why);
    /* Asked within 2 s, counted from when the client is up. The RDMA VM
     * is an emulated machine, where the interpreter alone takes 3 s and
     * everything else is as slow: its suite gives a bound of its own
     * (CCL_TEST_STATUS_BOUND_S). */
    const char *bound_env = getenv("CCL_TEST_STATUS_BOUND_S");
    double bound = bound_env && atof(bound_env) > 0 ? atof(bound_env) : 2.0;
    ck_assert_msg(sc.text_s - sc.start_s < bound && sc.json_s - sc.start_s < bound,
                  "%s: ccl-status took %.2f s (text) and %.2f s (JSON), %.2f s of it to start (bound %.1f s)",
                  fault_names[f], sc.text_s, sc.json_s, sc.start_s, bound);
    /* The culprit, and its state, in text... */
    static const char *const state[] = {"outside libccl for", "broadcast", "silent", "dead"};
    char want[64];
    snprintf(want, sizeof want, "rank %d holds up rank(s) ", CULPRIT);
    const char *line = strstr(sc.text, want);
    ck_assert_msg(line && strstr(line, state[f]), "%s: ccl-status did not name rank %d as '%s':\n%s",
                  fault_names[f], CULPRIT, state[f], sc.text);
    /* ... and in JSON. */
    snprintf(want, sizeof want, "\"rank\": %d,", CULPRIT);
    const char *held = strstr(sc.json, "\"holds_up\"");
    ck_assert_msg(held && strstr(held, want), "%s: no holds_up for rank %d:\n%s", fault_names[f], CULPRIT, sc.json);
    /* Ranks waiting in a call say how far they got in it. */
    if (f == ASLEEP || f == STOPPED)
        ck_assert_msg(strstr(sc.json, "\"steps_done\"") && strstr(sc.text, "steps done"),
                      "%s: no steps_done for the waiting ranks:\n%s", fault_names[f], sc.text);
    /* Nothing failed while asleep or stopped: the dumps are the ones asked for, one per rank that answered. */
    if (f == ASLEEP || f == STOPPED)
        ck_assert_msg(sc.dumps == (f == ASLEEP ? NRANKS : NRANKS - 1), "%s: %d flight recorders after --dump",
                      fault_names[f], sc.dumps);
    ck_assert_msg(strstr(sc.stranger, "closed without an answer") && !strstr(sc.stranger, "all_reduce"),
                  "%s: a stranger was told something:\n%s", fault_names[f], sc.stranger);
    remove_dir();
}

START_TEST(status_names_the_culprit) { status_case((enum fault)_i, NULL); }
END_TEST

/* The same across hosts, every rank a host of its own. */
START_TEST(status_across_hosts) { status_case((enum fault)_i, across_hosts()); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("flight");
    TCase *tc = tcase_create("flight");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, dump_holds_the_calls);
    tcase_add_test(tc, off_writes_nothing);
    tcase_add_loop_test(tc, names_the_culprit, ASLEEP, KILLED + 1);
    suite_add_tcase(s, tc);
    TCase *status = tcase_create("status");
    tcase_set_timeout(status, 280);
    tcase_add_loop_test(status, status_names_the_culprit, ASLEEP, KILLED + 1);
    suite_add_tcase(s, status);
    TCase *hosts = tcase_create("across_hosts");
    tcase_set_timeout(hosts, 280);
    tcase_add_loop_test(hosts, names_the_culprit_across_hosts, ASLEEP, KILLED + 1);
    tcase_add_loop_test(hosts, status_across_hosts, ASLEEP, KILLED + 1);
    suite_add_tcase(s, hosts);
    return s;
}

int main(void) { return harness_main(suite()); }
