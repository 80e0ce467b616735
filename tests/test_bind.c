/* CCL_BIND: where init pins each rank's thread, checked from the masks the
 * ranks report to each other. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "util.h"

/* What the thread of this child could use before init (set in setup). */
static cpu_set_t before;

static void record_mask(int rank, int nranks, ccl_unique_id_t *id, void *arg) {
    (void)rank;
    (void)nranks;
    (void)id;
    (void)arg;
    CPU_ZERO(&before);
    sched_getaffinity(0, sizeof before, &before);
}

/* Whether ccl_comm_describe says this rank's thread has a core of its own
 * (own_core=1: its waits spin without yielding). */
static int own_core(ccl_comm_t *comm, struct harness_tally *t) {
    char d[1024] = "";
    EXPECT_OK(t, ccl_comm_describe(comm, d, sizeof d));
    const char *p = strstr(d, " own_core=");
    EXPECT(t, p != NULL, "ccl_comm_describe has no own_core: %s", d);
    return p ? p[10] == '1' : -1;
}

/* How long ccl_comm_describe says this rank's waits spin, in us. */
static double spin_us(ccl_comm_t *comm, struct harness_tally *t) {
    char d[1024] = "";
    EXPECT_OK(t, ccl_comm_describe(comm, d, sizeof d));
    const char *p = strstr(d, " spin_us=");
    EXPECT(t, p != NULL, "ccl_comm_describe has no spin_us: %s", d);
    return p ? atof(p + 9) : -1;
}

/* Every rank's mask after init, gathered on every rank. */
static int gather_masks(ccl_comm_t *comm, struct harness_tally *t, cpu_set_t *all) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    EXPECT(t, sched_getaffinity(0, sizeof mine, &mine) == 0, "sched_getaffinity failed");
    return EXPECT_OK(t, ccl_all_gather(&mine, all, sizeof mine, CCL_UINT8, comm)) == CCL_OK;
}

/* CCL_BIND=core: each mask is inside what the rank could use; with enough
 * CPUs no two ranks share one; with too few each rank gets one CPU and the
 * CPUs are shared evenly (round robin). */
static int body_pinned(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    cpu_set_t all[8];
    if (!gather_masks(comm, &t, all)) return t.fails;
    int allowed = CPU_COUNT(&before);
    int per_cpu[CPU_SETSIZE] = {0};
    for (int r = 0; r < nranks; r++) {
        cpu_set_t inside;
        CPU_AND(&inside, &all[r], &before);
        EXPECT(&t, CPU_COUNT(&all[r]) > 0 && CPU_EQUAL(&inside, &all[r]),
               "rank %d is pinned to %d CPUs, not all of them among the %d it could use", r, CPU_COUNT(&all[r]), allowed);
        EXPECT(&t, CPU_COUNT(&all[r]) < allowed || allowed == 1, "rank %d was left on all %d CPUs", r, allowed);
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) per_cpu[cpu] += CPU_ISSET(cpu, &all[r]);
        for (int q = 0; q < r && nranks <= allowed; q++) {
            cpu_set_t both;
            CPU_AND(&both, &all[r], &all[q]);
            EXPECT(&t, CPU_COUNT(&both) == 0, "ranks %d and %d share a CPU with %d CPUs for %d ranks", q, r, allowed,
                   nranks);
        }
        if (nranks > allowed) EXPECT(&t, CPU_COUNT(&all[r]) == 1, "rank %d has %d CPUs, not one", r, CPU_COUNT(&all[r]));
    }
    /* A core each when there are enough (this machine's CPUs are cores). */
    int own = own_core(comm, &t);
    EXPECT(&t, own == (nranks <= allowed), "own_core=%d with %d ranks on %d CPUs", own, nranks, allowed);
    if (nranks > allowed) {
        int lo = nranks / allowed, hi = (nranks + allowed - 1) / allowed;
        for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
            if (CPU_ISSET(cpu, &before))
                EXPECT(&t, per_cpu[cpu] >= lo && per_cpu[cpu] <= hi, "CPU %d holds %d of %d ranks (want %d..%d)", cpu,
                       per_cpu[cpu], nranks, lo, hi);
    }
    float x = (float)rank, sum = 0;
    EXPECT_OK(&t, ccl_all_reduce(&x, &sum, 1, CCL_FLOAT32, CCL_SUM, comm));
    EXPECT(&t, sum == (float)(nranks * (nranks - 1) / 2), "all-reduce after pinning gave %g", (double)sum);
    return t.fails;
}

static const struct {
    int nranks, host_per_rank;
} pinned_cases[] = {{1, 0}, {2, 0}, {3, 0}, {5, 0}, {2, 1}, {3, 1}};

START_TEST(pinned) {
    struct harness_run run = {.nranks = pinned_cases[_i].nranks,
                              .host_per_rank = pinned_cases[_i].host_per_rank,
                              .transport = pinned_cases[_i].host_per_rank ? "tcp" : NULL,
                              .body = body_pinned,
                              .setup = record_mask,
                              .env = "CCL_BIND=core"};
    util_run_clean(&run, 0, "CCL_BIND=core, %d ranks%s", run.nranks, run.host_per_rank ? " as hosts" : "");
}
END_TEST

/* A launcher that gave the job one CPU: both ranks stay on it. */
START_TEST(restricted_mask) {
    cpu_set_t mask, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof mask, &mask), 0);
    int last = -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &mask)) last = cpu;
    CPU_ZERO(&one);
    CPU_SET(last, &one);
    /* Check runs each test in a process of its own: this stays here. */
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    struct harness_run run = {.nranks = 2, .body = body_pinned, .setup = record_mask, .env = "CCL_BIND=core"};
    util_run_clean(&run, 0, "CCL_BIND=core on CPU %d alone", last);
}
END_TEST

/* CCL_BIND=none (the library's default): init leaves the mask alone. */
static int body_untouched(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    cpu_set_t all[8];
    if (!gather_masks(comm, &t, all)) return t.fails;
    EXPECT(&t, CPU_EQUAL(&all[rank], &before), "init changed the mask from %d CPUs to %d", CPU_COUNT(&before),
           CPU_COUNT(&all[rank]));
    /* Only a rank its launcher bound to a CPU no other rank has. */
    int alone = CPU_COUNT(&before) == 1;
    for (int r = 0; r < nranks && alone; r++) {
        cpu_set_t both;
        CPU_AND(&both, &all[r], &before);
        alone = r == rank || (CPU_COUNT(&all[r]) == 1 && CPU_COUNT(&both) == 0);
    }
    int own = own_core(comm, &t);
    EXPECT(&t, own == alone, "own_core=%d for a rank %s", own, alone ? "alone on its CPU" : "that shares or has several");
    /* Ranks a launcher bound to a CPU each have a CPU each: the machine is
     * not crowded, though each rank may use one CPU, and waits spin. */
    int one_each = 1;
    for (int r = 0; r < nranks && one_each; r++) {
        one_each = CPU_COUNT(&all[r]) == 1;
        for (int q = 0; q < r && one_each; q++) one_each = !CPU_EQUAL(&all[r], &all[q]);
    }
    double spin = spin_us(comm, &t);
    if (one_each) EXPECT(&t, spin > 0, "waits spin %.0f us with %d ranks bound to a CPU each", spin, nranks);
    return t.fails;
}

static const char *const untouched_env[] = {"CCL_BIND=none", NULL};

START_TEST(untouched) {
    struct harness_run run = {.nranks = 3, .body = body_untouched, .setup = record_mask, .env = untouched_env[_i]};
    util_run_clean(&run, 0, "%s", untouched_env[_i] ? untouched_env[_i] : "CCL_BIND unset");
}
END_TEST

/* A launcher that bound each rank to a CPU of its own, in reverse order:
 * CCL_BIND=core leaves every rank where it is (a guard: pinning inside a
 * one-CPU mask could not move it either, but the plan's places rely on it). */
static void launcher_binds_reversed(int rank, int nranks, ccl_unique_id_t *id, void *arg) {
    util_pin_to_nth_cpu(nranks - 1 - rank);
    record_mask(rank, nranks, id, arg);
}

START_TEST(launcher_bound) {
    struct harness_run run = {.nranks = 2 + _i, .body = body_untouched, .setup = launcher_binds_reversed,
                              .env = "CCL_BIND=core"};
    util_run_clean(&run, 0, "CCL_BIND=core after a launcher bound each of %d ranks", run.nranks);
}
END_TEST

/* ccl_comm_bind_thread: a thread of the rank's own (a framework's worker)
 * pins itself where CCL_BIND=core would pin the rank, and communicates
 * from there; the thread that made the communicator stays where it was. */
struct bound {
    ccl_comm_t *comm;
    ccl_status_t st;
    cpu_set_t mask;
    float sum;
    int rank;
};

static void *bind_and_reduce(void *arg) {
    struct bound *b = arg;
    b->st = ccl_comm_bind_thread(b->comm);
    CPU_ZERO(&b->mask);
    pthread_getaffinity_np(pthread_self(), sizeof b->mask, &b->mask);
    float x = (float)b->rank;
    if (b->st == CCL_OK) b->st = ccl_all_reduce(&x, &b->sum, 1, CCL_FLOAT32, CCL_SUM, b->comm);
    return NULL;
}

static int body_bind_thread(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    EXPECT(&t, ccl_comm_bind_thread(NULL) == CCL_ERR_INVALID_ARGUMENT, "ccl_comm_bind_thread(NULL) was not refused");
    struct bound b = {.comm = comm, .rank = rank};
    pthread_t th;
    EXPECT(&t, pthread_create(&th, NULL, bind_and_reduce, &b) == 0, "pthread_create failed");
    pthread_join(th, NULL);
    EXPECT_OK(&t, b.st);
    EXPECT(&t, b.sum == (float)(nranks * (nranks - 1) / 2), "all-reduce on the bound thread gave %g", (double)b.sum);
    cpu_set_t now;
    CPU_ZERO(&now);
    sched_getaffinity(0, sizeof now, &now);
    EXPECT(&t, CPU_EQUAL(&now, &before), "binding another thread moved the thread that made the communicator");
    cpu_set_t all[8];
    if (EXPECT_OK(&t, ccl_all_gather(&b.mask, all, sizeof b.mask, CCL_UINT8, comm)) != CCL_OK) return t.fails;
    int allowed = CPU_COUNT(&before);
    for (int r = 0; r < nranks; r++) {
        cpu_set_t inside;
        CPU_AND(&inside, &all[r], &before);
        EXPECT(&t, CPU_COUNT(&all[r]) == 1 && CPU_EQUAL(&inside, &all[r]),
               "rank %d's bound thread may use %d CPUs, not one of the %d it could", r, CPU_COUNT(&all[r]), allowed);
        for (int q = 0; q < r && nranks <= allowed; q++)
            EXPECT(&t, !CPU_EQUAL(&all[q], &all[r]), "ranks %d and %d were bound to the same CPU with %d for %d ranks",
                   q, r, allowed, nranks);
    }
    return t.fails;
}

START_TEST(bind_thread) {
    struct harness_run run = {.nranks = 2 + _i, .body = body_bind_thread, .setup = record_mask};
    util_run_clean(&run, 0, "ccl_comm_bind_thread on %d ranks", run.nranks);
}
END_TEST

START_TEST(bad_value_fails_init) {
    struct harness_run run = {.nranks = 2, .env = "CCL_BIND=socket", .init_check = util_init_invalid_argument,
                              .arg = "CCL_BIND=socket", .ccl_timeout = "10", .deadline_s = 60};
    util_run_clean(&run, 0, "CCL_BIND=socket");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("bind");
    util_add_loop_case(s, "pinned", pinned, (int)(sizeof pinned_cases / sizeof pinned_cases[0]), 60);
    TCase *tc = tcase_create("other");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, restricted_mask);
    tcase_add_loop_test(tc, untouched, 0, 2);
    tcase_add_loop_test(tc, launcher_bound, 0, 2);
    tcase_add_test(tc, bad_value_fails_init);
    tcase_add_loop_test(tc, bind_thread, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
