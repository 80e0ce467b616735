/* ctest: TIMEOUT 300 */
/*
 * Choosing algorithms: CCL_ALGO by one name or per collective, the
 * planner's automatic choice, what describe says ran and why, and the
 * errors for names that are not algorithms and forced algorithms that
 * cannot run a call (never a silent fallback).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "plan/tune.h"
#include "util.h"

/* The "last:" part of describe must name `want` for the collective. */
static void expect_described(struct harness_tally *t, ccl_comm_t *comm, const char *want) {
    char d[2048];
    if (EXPECT_OK(t, ccl_comm_describe(comm, d, sizeof d)) != CCL_OK) return;
    EXPECT(t, strstr(d, want) != NULL, "describe says \"%s\", expected it to contain \"%s\"", d, want);
}

static int body_per_collective(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(rank + i);
    EXPECT_OK(&t, ccl_all_reduce(x, y, 64, CCL_FLOAT32, CCL_SUM, comm));
    for (int i = 0; i < 64; i++)
        EXPECT(&t, y[i] == (float)(nranks * i + nranks * (nranks - 1) / 2), "all_reduce y[%d] = %g", i, y[i]);
    expect_described(&t, comm, "all_reduce:tree (CCL_ALGO)");
    EXPECT_OK(&t, ccl_broadcast(x, y, 64, CCL_FLOAT32, 1, comm));
    for (int i = 0; i < 64; i++) EXPECT(&t, y[i] == (float)(1 + i), "broadcast y[%d] = %g", i, y[i]);
    expect_described(&t, comm, "broadcast:ring (CCL_ALGO)");
    /* Not forced: the planner's rule, with its reason. */
    EXPECT_OK(&t, ccl_barrier(comm));
    expect_described(&t, comm, "barrier:bruck (");
    return t.fails;
}

START_TEST(per_collective) {
    struct harness_run run = {.nranks = 3, .body = body_per_collective, .env = "CCL_ALGO=allreduce:tree,broadcast:ring"};
    util_run_clean(&run, 0, "CCL_ALGO per collective");
}
END_TEST

/* What the automatic choice must say for a small and a large all-reduce,
 * with the figures of the file below (those of a 2-core machine): on one
 * host the direct path for 8 bytes (one wait where the ring has 6 steps);
 * over TCP recursive doubling's 2 steps for 8 bytes; and for 4 MiB, over
 * TCP, recursive halving/doubling: it moves as many bytes as the ring in
 * 4 steps where the ring takes 6. On one host, 4 MiB goes single-copy,
 * crowded or not: it reads each byte once, where the direct path copies
 * the buffer in first and reads its peers' windows, whose lines cross
 * between the cores at the link's speed, and the ring copies every byte
 * twice (lib/plan/cost.c). */
struct auto_case {
    const char *name, *transport, *small, *large, *large_crowded;
};

static const struct auto_case auto_cases[] = {
    {"4 ranks shm", "shm", "all_reduce:direct (cheapest", "all_reduce:single_copy (cheapest",
     "all_reduce:single_copy (cheapest"},
    {"4 ranks tcp", "tcp", "all_reduce:rd (cheapest", "all_reduce:rhd (cheapest", "all_reduce:rhd (cheapest"},
};

/* The ranks of the job outnumber the CPUs they may use. */
static int crowded(int nranks) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < nranks;
}

static int body_automatic(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct auto_case *ac = arg;
    struct harness_tally t = {rank, 0};
    size_t big = 1 << 20;
    float *x = calloc(big, sizeof *x), *y = calloc(big, sizeof *y);
    if (!x || !y) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    EXPECT_OK(&t, ccl_all_reduce(x, y, 2, CCL_FLOAT32, CCL_SUM, comm));
    expect_described(&t, comm, ac->small);
    EXPECT_OK(&t, ccl_all_reduce(x, y, big, CCL_FLOAT32, CCL_SUM, comm));
    expect_described(&t, comm, crowded(nranks) ? ac->large_crowded : ac->large);
out:
    free(x);
    free(y);
    return t.fails;
}

START_TEST(automatic) {
    const struct auto_case *ac = &auto_cases[_i];
    char path[] = "/tmp/ccl-tuning-XXXXXX", key[160], env[300];
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ccl__tune_machine_key(key, sizeof key);
    /* figures given by hand ("check no"): taken as they are, never found stale */
    dprintf(fd,
            "libccl-tuning 1\nmachine %s\ncheck no\ncopy 8000\nreduce 5000\ncma 1.5 8500\nlink numa 0.6 4400\n"
            "link tcp 7.5 1550\n",
            key);
    close(fd);
    snprintf(env, sizeof env, "CCL_TUNING_FILE=%s", path);
    struct harness_run run = {.nranks = 4, .transport = ac->transport, .body = body_automatic, .arg = (void *)ac,
                              .env = env};
    util_run_clean(&run, 0, "automatic choice, %s", ac->name);
    unlink(path);
}
END_TEST

/* A refused call leaves the communicator as it was, as CCL_CHECK's
 * refusals do: a barrier and an all_reduce (with forced, the algorithm
 * still forced; else the planner's) give the right sums after it. */
static void still_usable(struct harness_tally *t, ccl_comm_t *comm, int rank, int nranks, int forced) {
    if (!forced) EXPECT_OK(t, ccl_comm_set_algo(comm, "auto"));
    EXPECT_OK(t, ccl_barrier(comm));
    int32_t in[37], out[37];
    for (int i = 0; i < 37; i++) in[i] = i + rank;
    EXPECT_OK(t, ccl_all_reduce(in, out, 37, CCL_INT32, CCL_SUM, comm));
    int wrong = 0;
    for (int i = 0; i < 37; i++) wrong += out[i] != i * nranks + nranks * (nranks - 1) / 2;
    EXPECT(t, wrong == 0, "after the refusal, an all_reduce has %d wrong elements", wrong);
}

/* rd gathers only on a power-of-two rank count: forced on 3 and 5 ranks,
 * the call fails with a message that says why, on every rank, and the
 * communicator goes on. */
static int body_cannot_run(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float x[4] = {0}, y[20];
    ccl_status_t st = ccl_all_gather(x, y, 4, CCL_FLOAT32, comm);
    EXPECT(&t, st == CCL_ERR_UNSUPPORTED, "all_gather with CCL_ALGO=rd on %d ranks returned %s", nranks,
           ccl_status_string(st));
    const char *msg = ccl_comm_last_error(comm);
    EXPECT(&t, msg && strstr(msg, "power-of-two"), "message \"%s\" does not say why rd cannot run", msg ? msg : "");
    still_usable(&t, comm, rank, nranks, 1);
    return t.fails;
}

START_TEST(forced_cannot_run) {
    struct harness_run run = {.nranks = 3 + 2 * _i, .body = body_cannot_run, .env = "CCL_ALGO=rd"};
    util_run_clean(&run, 0, "CCL_ALGO=rd all_gather on %d ranks", 3 + 2 * _i);
}
END_TEST

/* A forced algorithm that does not run a collective at all. */
static int body_not_applicable(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float x[4] = {0};
    ccl_status_t st = ccl_broadcast(x, x, 4, CCL_FLOAT32, 0, comm);
    EXPECT(&t, st == CCL_ERR_UNSUPPORTED, "broadcast with CCL_ALGO=broadcast:bruck returned %s", ccl_status_string(st));
    const char *msg = ccl_comm_last_error(comm);
    EXPECT(&t, msg && strstr(msg, "bruck does not run broadcast"), "message \"%s\"", msg ? msg : "");
    still_usable(&t, comm, rank, nranks, 1);
    return t.fails;
}

START_TEST(forced_not_applicable) {
    struct harness_run run = {
        .nranks = 2, .body = body_not_applicable, .env = "CCL_ALGO=broadcast:bruck"};
    util_run_clean(&run, 0, "CCL_ALGO=broadcast:bruck");
}
END_TEST

/* direct reduces through shared windows: across hosts, or with no window,
 * it cannot run and says so on every rank (its all-to-all is point-to-point
 * and runs anywhere: test_coll_exchange runs it on tcp and mixed hosts). */
static int body_direct_needs_one_host(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float x[8] = {0}, y[8];
    ccl_status_t st = ccl_all_reduce(x, y, 8, CCL_FLOAT32, CCL_SUM, comm);
    EXPECT(&t, st == CCL_ERR_UNSUPPORTED, "all_reduce with CCL_ALGO=direct returned %s", ccl_status_string(st));
    const char *msg = ccl_comm_last_error(comm);
    EXPECT(&t, msg && strstr(msg, "one host with a shared window"), "message \"%s\" does not say why",
           msg ? msg : "");
    still_usable(&t, comm, rank, nranks, 0);
    return t.fails;
}

static const struct {
    const char *name;
    const char *transport;
    int ranks_per_host;
    const char *env;
} direct_refusals[] = {
    {"2 hosts", "tcp", 1, "CCL_ALGO=direct"},
    {"one host, no window", "shm", 0, "CCL_ALGO=direct CCL_SHM_WINDOW_BYTES=0"},
};

START_TEST(direct_needs_one_host) {
    struct harness_run run = {.nranks = 2,
                              .body = body_direct_needs_one_host,
                              .transport = direct_refusals[_i].transport,
                              .ranks_per_host = direct_refusals[_i].ranks_per_host,
                              .env = direct_refusals[_i].env};
    util_run_clean(&run, 0, "CCL_ALGO=direct, %s", direct_refusals[_i].name);
}
END_TEST

/* hier pairs the places of equal hosts: on hosts of 2 and 1 ranks it says why not. */
static int body_hier_needs_equal_hosts(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float x[8] = {0}, y[8];
    ccl_status_t st = ccl_all_reduce(x, y, 8, CCL_FLOAT32, CCL_SUM, comm);
    EXPECT(&t, st == CCL_ERR_UNSUPPORTED, "all_reduce with CCL_ALGO=hier returned %s", ccl_status_string(st));
    const char *msg = ccl_comm_last_error(comm);
    EXPECT(&t, msg && strstr(msg, "as many ranks on every host (host of rank 0 has 2, host of rank 2 has 1)"),
           "message \"%s\" does not say why", msg ? msg : "");
    still_usable(&t, comm, rank, nranks, 0);
    return t.fails;
}

START_TEST(hier_needs_equal_hosts) {
    struct harness_run run = {
        .nranks = 3, .ranks_per_host = 2, .body = body_hier_needs_equal_hosts, .env = "CCL_ALGO=hier"};
    util_run_clean(&run, 0, "CCL_ALGO=hier on hosts of 2 and 1");
}
END_TEST

static const char *const bad_specs[] = {"spiral", "allreduce:spiral", "allrduce:ring", "allreduce:"};

START_TEST(bad_names_fail_init) {
    char env[64];
    snprintf(env, sizeof env, "CCL_ALGO=%s", bad_specs[_i]);
    struct harness_run run = {.nranks = 2, .env = env, .init_check = util_init_invalid_argument, .arg = env,
                              .ccl_timeout = "10", .deadline_s = 60};
    util_run_clean(&run, 0, "%s", env);
}
END_TEST

/* ---- per-communicator algorithms (ccl_config_t.algo) ----
 * The run's CCL_ALGO says ring; communicators made from the harness's
 * with config.algo run what their config says instead, a split inherits
 * its parent's, "auto" leaves a collective to the planner, and a name
 * that is not an algorithm fails init on every rank, naming the config. */

/* A communicator over the same ranks as comm, made with config.algo = algo
 * (the id passed over comm). NULL on failure, *st says why. */
static ccl_comm_t *comm_with_algo(struct harness_tally *t, ccl_comm_t *comm, int rank, int nranks, const char *algo,
                                  ccl_status_t *st) {
    ccl_unique_id_t id;
    util_shared_id(t, comm, &id);
    ccl_config_t cfg = CCL_CONFIG_INIT;
    cfg.algo = algo;
    ccl_comm_t *c = NULL;
    *st = ccl_comm_init_rank_config(&c, nranks, id, rank, &cfg);
    return c;
}

/* An all-reduce of 64 floats on c, checked, then describe must say `want`. */
static void reduce_and_expect(struct harness_tally *t, ccl_comm_t *c, int nranks, const char *want) {
    float x[64], y[64];
    int rank;
    if (EXPECT_OK(t, ccl_comm_rank(c, &rank)) != CCL_OK) return;
    for (int i = 0; i < 64; i++) x[i] = (float)(rank + i);
    if (EXPECT_OK(t, ccl_all_reduce(x, y, 64, CCL_FLOAT32, CCL_SUM, c)) != CCL_OK) return;
    for (int i = 0; i < 64; i++)
        EXPECT(t, y[i] == (float)(nranks * i + nranks * (nranks - 1) / 2), "all_reduce y[%d] = %g", i, y[i]);
    expect_described(t, c, want);
}

static int body_config_algo(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    ccl_status_t st;
    reduce_and_expect(&t, comm, nranks, "all_reduce:ring (CCL_ALGO)");
    ccl_comm_t *tree = comm_with_algo(&t, comm, rank, nranks, "tree", &st);
    EXPECT(&t, st == CCL_OK && tree, "init with config.algo=tree returned %s", ccl_status_string(st));
    if (tree) {
        reduce_and_expect(&t, tree, nranks, "all_reduce:tree (config.algo)");
        expect_described(&t, tree, "algo=tree");
        /* a split (all ranks, in reverse order) keeps its parent's
         * algorithms, not the environment's */
        ccl_comm_t *copy = NULL;
        if (EXPECT_OK(&t, ccl_comm_split(tree, 0, -rank, &copy)) == CCL_OK && copy) {
            reduce_and_expect(&t, copy, nranks, "all_reduce:tree (config.algo)");
            ccl_comm_destroy(copy);
        }
        ccl_comm_destroy(tree);
    }
    ccl_comm_t *open = comm_with_algo(&t, comm, rank, nranks, "allreduce:auto,broadcast:ring", &st);
    EXPECT(&t, st == CCL_OK && open, "init with allreduce:auto returned %s", ccl_status_string(st));
    if (open) {
        reduce_and_expect(&t, open, nranks, "all_reduce:");
        expect_described(&t, open, "(cheapest"); /* the planner's reason, not a forced one */
        ccl_comm_destroy(open);
    }
    ccl_comm_t *bad = comm_with_algo(&t, comm, rank, nranks, "spiral", &st);
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT && !bad, "init with config.algo=spiral returned %s",
           ccl_status_string(st));
    const char *why = ccl_comm_last_error(NULL);
    EXPECT(&t, why && strstr(why, "config.algo=spiral"), "the failed init says \"%s\"", why ? why : "");
    if (bad) ccl_comm_destroy(bad);
    return t.fails;
}

START_TEST(config_algo) {
    struct harness_run run = {.nranks = 3, .body = body_config_algo, .env = "CCL_ALGO=ring"};
    util_run_clean(&run, 0, "config.algo over CCL_ALGO=ring");
}
END_TEST

/* ---- ccl_comm_set_algo ----
 * The run's CCL_ALGO says ring; set_algo changes what the next call runs
 * (and what a later split inherits), "auto" gives a collective back to
 * the planner, and a bad name, an open group or a call in flight is
 * refused with the algorithms left as they were. */

static int body_set_algo(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    reduce_and_expect(&t, comm, nranks, "all_reduce:ring (CCL_ALGO)");
    EXPECT_OK(&t, ccl_comm_set_algo(comm, "tree"));
    reduce_and_expect(&t, comm, nranks, "all_reduce:tree (ccl_comm_set_algo)");
    expect_described(&t, comm, "algo=tree");
    EXPECT_OK(&t, ccl_comm_set_algo(comm, "allreduce:auto,broadcast:ring"));
    reduce_and_expect(&t, comm, nranks, "(cheapest");
    /* refused, and the planner's choice stands */
    ccl_status_t st = ccl_comm_set_algo(comm, "allreduce:spiral");
    const char *why = ccl_comm_last_error(comm);
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT, "set_algo(allreduce:spiral) returned %s", ccl_status_string(st));
    EXPECT(&t, strstr(why, "set_algo: ccl_comm_set_algo=allreduce:spiral: 'allreduce:spiral' is not an algorithm"),
           "the refusal says \"%s\"", why);
    reduce_and_expect(&t, comm, nranks, "(cheapest");
    st = ccl_comm_set_algo(comm, NULL);
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT, "set_algo(NULL) returned %s", ccl_status_string(st));
    /* a split made now inherits the new algorithms */
    EXPECT_OK(&t, ccl_comm_set_algo(comm, "rd"));
    ccl_comm_t *copy = NULL;
    if (EXPECT_OK(&t, ccl_comm_split(comm, 0, -rank, &copy)) == CCL_OK && copy) {
        reduce_and_expect(&t, copy, nranks, "all_reduce:rd (ccl_comm_set_algo)");
        ccl_comm_destroy(copy);
    }
    /* inside a group: refused (the group's calls have not run yet) */
    if (EXPECT_OK(&t, ccl_group_start()) == CCL_OK) {
        st = ccl_comm_set_algo(comm, "ring");
        EXPECT(&t, st == CCL_ERR_INVALID_USAGE && strstr(ccl_comm_last_error(comm), "a group is open"),
               "set_algo in a group returned %s: %s", ccl_status_string(st), ccl_comm_last_error(comm));
        EXPECT_OK(&t, ccl_group_end());
    }
    /* with a call in flight: rank 0's all-reduce waits for the others,
     * which come 0.3 s late */
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(rank + i);
    ccl_request_t *req = NULL;
    if (rank != 0) usleep(300 * 1000);
    if (EXPECT_OK(&t, ccl_all_reduce_async(x, y, 64, CCL_FLOAT32, CCL_SUM, comm, &req)) == CCL_OK) {
        if (rank == 0) {
            st = ccl_comm_set_algo(comm, "ring");
            EXPECT(&t, st == CCL_ERR_INVALID_USAGE && strstr(ccl_comm_last_error(comm), "still in flight on rank 0"),
                   "set_algo with a call in flight returned %s: %s", ccl_status_string(st),
                   ccl_comm_last_error(comm));
        }
        EXPECT_OK(&t, ccl_wait(req));
        for (int i = 0; i < 64; i++)
            EXPECT(&t, y[i] == (float)(nranks * i + nranks * (nranks - 1) / 2), "async all_reduce y[%d] = %g", i,
                   y[i]);
    }
    reduce_and_expect(&t, comm, nranks, "all_reduce:rd (ccl_comm_set_algo)");
    return t.fails;
}

START_TEST(set_algo) {
    struct harness_run run = {.nranks = 3, .body = body_set_algo, .env = "CCL_ALGO=ring"};
    util_run_clean(&run, 0, "ccl_comm_set_algo over CCL_ALGO=ring");
}
END_TEST

/* With CCL_CHECK=1, ranks whose set_algo calls differ are named at their
 * next collective, nothing moved; agreeing again, they go on. */
static int body_set_algo_disagree(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(rank + i), y[i] = -1.0f;
    EXPECT_OK(&t, ccl_comm_set_algo(comm, rank == 2 ? "allreduce:tree" : "allreduce:ring"));
    ccl_status_t st = ccl_all_reduce(x, y, 64, CCL_FLOAT32, CCL_SUM, comm);
    const char *why = ccl_comm_last_error(comm);
    EXPECT(&t, st == CCL_ERR_INVALID_USAGE, "all_reduce with other algorithms returned %s", ccl_status_string(st));
    EXPECT(&t, strstr(why, "rank 0 called all_reduce #") && strstr(why, "with algorithm ring") &&
                   strstr(why, "rank 2 called all_reduce #") && strstr(why, "with algorithm tree"),
           "the error says \"%s\"", why);
    EXPECT(&t, y[0] == -1.0f, "the refused all_reduce wrote its output (y[0] = %g)", y[0]);
    EXPECT_OK(&t, ccl_comm_set_algo(comm, "allreduce:tree"));
    reduce_and_expect(&t, comm, nranks, "all_reduce:tree (ccl_comm_set_algo)");
    return t.fails;
}

START_TEST(set_algo_disagree) {
    struct harness_run run = {.nranks = 3, .body = body_set_algo_disagree, .env = "CCL_CHECK=1"};
    util_run_clean(&run, 0, "ccl_comm_set_algo differing under CCL_CHECK=1");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("algo_choice");
    TCase *tc = tcase_create("choice");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, per_collective);
    tcase_add_test(tc, config_algo);
    tcase_add_test(tc, set_algo);
    tcase_add_test(tc, set_algo_disagree);
    tcase_add_loop_test(tc, automatic, 0, (int)(sizeof auto_cases / sizeof auto_cases[0]));
    tcase_add_loop_test(tc, forced_cannot_run, 0, 2);
    tcase_add_test(tc, forced_not_applicable);
    tcase_add_test(tc, hier_needs_equal_hosts);
    tcase_add_loop_test(tc, direct_needs_one_host, 0, (int)(sizeof direct_refusals / sizeof direct_refusals[0]));
    suite_add_tcase(s, tc);
    util_add_loop_case(s, "bad_names", bad_names_fail_init, (int)(sizeof bad_specs / sizeof bad_specs[0]), 120);
    return s;
}

int main(void) { return harness_main(suite()); }
