/* ctest: TIMEOUT 300 LABELS faults SKIP_RETURN_CODE 77 */
/*
 * A link that goes down is told apart from a peer that is late. Every rank
 * runs in a network namespace of its own, cabled to a bridge (netlab.h):
 *  - cut: in the middle of an all-reduce loop, one rank's cable is pulled at
 *    the switch. Every rank must get CCL_ERR_REMOTE within a few seconds of
 *    CCL_LINK_TIMEOUT, long before CCL_TIMEOUT, and some rank's error must
 *    say which peer cannot be reached.
 *  - cut between hosts: two "hosts" (namespaces) of two ranks each, shared
 *    memory inside a host and tcp between them; one host's cable is pulled.
 *    Every rank errs in the same time, also the one whose host-mate found
 *    the cut first and left (its shared-memory peer is gone, not late).
 *  - cut before first use: the same two hosts, three ranks each, tcp; the
 *    cable goes before the pairs across that connect on first use were
 *    used: their first receives must fail the same way, with no socket
 *    to time out (the dial, or the probe, goes unanswered).
 *  - late: one rank sleeps for several link timeouts before it calls, while
 *    a peer's send to it fills every buffer on the way. Nobody may be
 *    declared dead: the calls finish bit-exact.
 * Without root or iproute2 the suite is skipped (exit 77) with the reason.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "netlab.h"
#include "util.h"

#define NRANKS 3
#define LINK_TIMEOUT_S 2.0
#define CCL_TIMEOUT_S 60.0
#define ENV "CCL_LINK_TIMEOUT=2"
#define TIMEOUT_STR "60"
#define NOTICE_LIMIT_S 15.0 /* link timeout + keepalive start + slack; CCL_TIMEOUT is 60 */
#define LOOP_COUNT ((size_t)64 << 10) /* 256 KiB of float32 per all-reduce */

static struct netlab lab;

#define HOST_RANKS 2 /* ranks per namespace in the two-host case */
#define HOSTS 2

/* The namespace whose cable is pulled, the all-reduce size of the loop, how
 * many ranks share a namespace, the transport (NULL: shm inside a host) and
 * the rank count. With shm between host-mates every rank's error must name
 * a rank of the other side: some find the cut themselves, the rest hear of
 * it from a host-mate's failure word. Over tcp alone a host-mate's closed
 * connection may be all a rank sees; it must still err in time. */
struct cut_case {
    int victim;
    size_t count;
    int ranks_per_ns;
    const char *transport;
    int nranks;
};

/* A child's namespace: its own (arg NULL), or its host's (a cut_case). */
static void enter_namespace(int rank, int nranks, ccl_unique_id_t *id, void *arg) {
    (void)nranks, (void)id;
    const struct cut_case *cc = arg;
    int ns = cc ? rank / cc->ranks_per_ns : rank;
    if (netlab_enter(&lab, ns) != 0) {
        fprintf(stderr, "[rank %d] cannot enter network namespace %s\n", rank, lab.ns[ns]);
        _exit(3);
    }
}

/* ---- cut ---- */

static const struct cut_case victims[] = {{1, LOOP_COUNT, 1, "tcp", NRANKS}, {0, LOOP_COUNT, 1, "tcp", NRANKS}};
#define CUT_CASES ((int)(sizeof victims / sizeof victims[0]))

static int body_cut(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    const size_t count = ((const struct cut_case *)arg)->count;
    struct harness_tally t = {rank, 0};
    float *in = malloc(count * sizeof(float)), *out = malloc(count * sizeof(float));
    if (!in || !out) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    for (size_t i = 0; i < count; i++) in[i] = (float)(i % 7);
    ccl_status_t st = CCL_OK;
    double end = harness_now() + CCL_TIMEOUT_S + 30;
    for (int it = 0; harness_now() < end; it++) {
        st = ccl_all_reduce(in, out, count, CCL_FLOAT32, CCL_SUM, comm);
        if (st != CCL_OK) break;
        if (it == 0) harness_child_send("started");
    }
    const char *why = ccl_comm_last_error(comm);
    const struct cut_case *cc = arg;
    const char *first = strstr(why, "rank ");
    int who = -1;
    if (first) sscanf(first, "rank %d", &who);
    int named = strstr(why, "cannot be reached") != NULL && who >= 0 &&
                (cc->ranks_per_ns == 1 || who / cc->ranks_per_ns != rank / cc->ranks_per_ns);
    harness_child_send("error %d %.6f %d", (int)st, harness_now(), named);
    fprintf(stderr, "[rank %d] %s: %s\n", rank, ccl_status_string(st), why);
    EXPECT(&t, st == CCL_ERR_REMOTE, "the loop ended with %s, expected a remote failure", ccl_status_string(st));
    free(in);
    free(out);
    return t.fails;
}

/* Parent: 0 once every rank has said "started", else 1 with a line. */
static int await_started(struct harness_run *run) {
    char msg[HARNESS_MSG_BYTES];
    for (int r = 0; r < run->nranks; r++)
        if (harness_recv(run, r, msg, sizeof msg, run->start + 60) != 0 || strcmp(msg, "started") != 0) {
            fprintf(stderr, "parent: rank %d never started\n", r);
            return 1;
        }
    return 0;
}

static int parent_cut(struct harness_run *run, void *arg) {
    int victim = ((const struct cut_case *)arg)->victim;
    char msg[HARNESS_MSG_BYTES];
    if (await_started(run)) return 1;
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double cut = harness_now();
    if (netlab_cable(&lab, victim, 0) != 0) {
        fprintf(stderr, "parent: cannot pull namespace %d's cable\n", victim);
        return 1;
    }
    int fails = 0, named = 0;
    double worst = 0;
    for (int r = 0; r < run->nranks; r++) {
        int st = 0, says = 0;
        double when = 0;
        if (harness_recv(run, r, msg, sizeof msg, cut + CCL_TIMEOUT_S + 20) != 0 ||
            sscanf(msg, "error %d %lf %d", &st, &when, &says) != 3) {
            fprintf(stderr, "parent: rank %d reported no error after the cut\n", r);
            fails++;
            continue;
        }
        named += says;
        if (when - cut > worst) worst = when - cut;
        if (when - cut > NOTICE_LIMIT_S) {
            fprintf(stderr, "parent: rank %d noticed the cut after %.1f s (CCL_LINK_TIMEOUT=%g, CCL_TIMEOUT=%g)\n", r,
                    when - cut, LINK_TIMEOUT_S, CCL_TIMEOUT_S);
            fails++;
        }
    }
    if (!named) {
        fprintf(stderr, "parent: no rank's error said that a peer cannot be reached\n");
        fails++;
    }
    const struct cut_case *cc = arg;
    if (cc->ranks_per_ns > 1 && !cc->transport && named != run->nranks) {
        fprintf(stderr, "parent: %d of %d ranks' errors named a rank across the cut as unreachable\n", named,
                run->nranks);
        fails++;
    }
    fprintf(stderr, "[faults] namespace %d's cable pulled (%d ranks, CCL_LINK_TIMEOUT=%g): every rank erred within "
            "%.2f s, %d named the unreachable peer\n", victim, run->nranks, LINK_TIMEOUT_S, worst, named);
    return fails;
}

/* Every cable plugged again (after an earlier case's cut), and a run of
 * cc's ranks in their namespaces, whose parent pulls a cable. */
static struct harness_run cut_run(const struct cut_case *cc, harness_body_fn body, harness_parent_fn parent,
                                  double deadline_s) {
    for (int r = 0; r < NRANKS; r++) ck_assert_int_eq(netlab_cable(&lab, r, 1), 0);
    return (struct harness_run){
        .nranks = cc->nranks,
        .body = body,
        .arg = (void *)cc,
        .transport = cc->transport,
        .ranks_per_host = cc->ranks_per_ns,
        .env = ENV,
        .ccl_timeout = TIMEOUT_STR,
        .deadline_s = deadline_s,
        .setup = enter_namespace,
        .parent = parent,
        .lenient_destroy = 1,
    };
}

/* One run of the loop with cc's cable pulled mid-way. */
static void run_cut(const struct cut_case *cc) {
    struct harness_run run = cut_run(cc, body_cut, parent_cut, 150);
    util_run_clean(&run, 0, "namespace %d's cable pulled (%d ranks per namespace, %s)", cc->victim, cc->ranks_per_ns,
                   cc->transport ? cc->transport : "shm inside a namespace");
}

START_TEST(cut_cable) { run_cut(&victims[_i]); }
END_TEST

/* Host 1's cable, then host 0's: ranks 2 and 3, or 0 and 1, lose the
 * other host at once; with shm inside the hosts, then with tcp everywhere.
 * 16 MiB calls keep every buffer between the hosts full when the cable goes. */
#define HOSTS_LOOP_COUNT ((size_t)4 << 20)
static const struct cut_case victim_hosts[] = {
    {1, HOSTS_LOOP_COUNT, HOST_RANKS, NULL, HOSTS * HOST_RANKS},
    {0, HOSTS_LOOP_COUNT, HOST_RANKS, NULL, HOSTS * HOST_RANKS},
    {1, HOSTS_LOOP_COUNT, HOST_RANKS, "tcp", HOSTS * HOST_RANKS},
    {0, HOSTS_LOOP_COUNT, HOST_RANKS, "tcp", HOSTS * HOST_RANKS},
};
#define HOSTS_CASES ((int)(sizeof victim_hosts / sizeof victim_hosts[0]))

START_TEST(cut_between_hosts) { run_cut(&victim_hosts[_i]); }
END_TEST

/* ---- cut before first use ----
 * Two hosts of three ranks, tcp everywhere. Pairs beyond the rings' and
 * trees' connect on their first use (CCL_CONNECT=lazy); at 6 ranks on two
 * hosts (the hierarchical ring links 0-3, 1-4 and 2-5 at init) 1-3 is
 * such a pair. Host 1's cable is pulled before any call, then ranks 1 and
 * 3 receive from each other: no socket exists to time out. Rank 3's dial
 * goes unanswered, rank 1's probe of rank 3's listener too: each must fail
 * within CCL_LINK_TIMEOUT and a few seconds, saying the other cannot be
 * reached and that it did not answer (not a linked socket's keepalive). */

#define FIRST_USE_NS_RANKS 3
static const struct cut_case first_use_hosts = {1, 1000, FIRST_USE_NS_RANKS, "tcp", HOSTS * FIRST_USE_NS_RANKS};

static int first_use_partner(int rank) {
    return rank == 1 ? 3 : rank == 3 ? 1 : -1;
}

static int body_first_use_cut(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks, (void)arg;
    struct harness_tally t = {rank, 0};
    float buf[1000];
    char msg[HARNESS_MSG_BYTES];
    harness_child_send("started");
    if (harness_child_recv(msg, sizeof msg, 60) != 0 || strcmp(msg, "cut") != 0) {
        harness_fail(&t, __FILE__, __LINE__, "the parent never said the cable was pulled");
        return t.fails;
    }
    int partner = first_use_partner(rank);
    if (partner < 0) return 0;
    double t0 = harness_now();
    ccl_status_t st = ccl_recv(buf, 1000, CCL_FLOAT32, partner, comm);
    double took = harness_now() - t0;
    const char *why = ccl_comm_last_error(comm);
    char says[48];
    snprintf(says, sizeof says, "rank %d (", partner);
    EXPECT(&t, st == CCL_ERR_REMOTE && strstr(why, says) && strstr(why, "cannot be reached") &&
                   strstr(why, "did not answer this rank's"),
           "a receive from rank %d across the cut returned %s: \"%s\"", partner, ccl_status_string(st), why);
    EXPECT(&t, took < NOTICE_LIMIT_S, "the receive from rank %d took %.1f s to fail", partner, took);
    fprintf(stderr, "[faults] cable cut before first use: rank %d's receive from rank %d failed after %.2f s: \"%s\"\n",
            rank, partner, took, why);
    return t.fails;
}

static int parent_first_use_cut(struct harness_run *run, void *arg) {
    (void)arg;
    if (await_started(run)) return 1;
    if (netlab_cable(&lab, first_use_hosts.victim, 0) != 0) {
        fprintf(stderr, "parent: cannot pull namespace %d's cable\n", first_use_hosts.victim);
        return 1;
    }
    for (int r = 0; r < run->nranks; r++) harness_send(run, r, "cut");
    return 0;
}

START_TEST(cut_before_first_use) {
    struct harness_run run = cut_run(&first_use_hosts, body_first_use_cut, parent_first_use_cut, 90);
    util_run_clean(&run, 0, "host 1's cable pulled before the pairs across were first used");
}
END_TEST

/* ---- late ---- */

#define LATE_RANK 1
#define LATE_SLEEP_S 6 /* three link timeouts */
#define P2P_COUNT ((size_t)16 << 20) /* 64 MiB of float32: more than every buffer between two hosts */

static int body_late(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float *buf = malloc(P2P_COUNT * sizeof(float));
    if (!buf) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    if (rank == LATE_RANK) {
        struct timespec ts = {LATE_SLEEP_S, 0};
        nanosleep(&ts, NULL);
    }
    ccl_status_t st = CCL_OK;
    if (rank == 0) {
        for (size_t i = 0; i < P2P_COUNT; i++) buf[i] = (float)(i % 1000);
        st = ccl_send(buf, P2P_COUNT, CCL_FLOAT32, LATE_RANK, comm);
    } else if (rank == LATE_RANK) {
        st = ccl_recv(buf, P2P_COUNT, CCL_FLOAT32, 0, comm);
        size_t bad = 0;
        for (size_t i = 0; st == CCL_OK && i < P2P_COUNT; i++) bad += buf[i] != (float)(i % 1000);
        EXPECT(&t, bad == 0, "%zu received values differ from what rank 0 sent", bad);
    }
    EXPECT(&t, st == CCL_OK, "send/recv returned %s: %s", ccl_status_string(st), ccl_comm_last_error(comm));
    for (size_t i = 0; i < LOOP_COUNT; i++) buf[i] = (float)(rank + 1);
    st = ccl_all_reduce(buf, buf, LOOP_COUNT, CCL_FLOAT32, CCL_SUM, comm);
    EXPECT(&t, st == CCL_OK, "all_reduce returned %s: %s", ccl_status_string(st), ccl_comm_last_error(comm));
    float want = (float)(nranks * (nranks + 1) / 2);
    size_t bad = 0;
    for (size_t i = 0; st == CCL_OK && i < LOOP_COUNT; i++) bad += buf[i] != want;
    EXPECT(&t, bad == 0, "%zu all-reduce results differ from %g", bad, (double)want);
    free(buf);
    return t.fails;
}

START_TEST(late_is_not_down) {
    for (int r = 0; r < NRANKS; r++) ck_assert_int_eq(netlab_cable(&lab, r, 1), 0);
    struct harness_run run = {
        .nranks = NRANKS,
        .body = body_late,
        .transport = "tcp",
        .host_per_rank = 1,
        .env = ENV,
        .ccl_timeout = TIMEOUT_STR,
        .deadline_s = 120,
        .setup = enter_namespace,
    };
    util_run_clean(&run, 0, "rank %d %d s late", LATE_RANK, LATE_SLEEP_S);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("link_down");
    util_add_loop_case(s, "cut_cable", cut_cable, CUT_CASES, 200);
    util_add_loop_case(s, "cut_between_hosts", cut_between_hosts, HOSTS_CASES, 400);
    TCase *tc = tcase_create("cut_before_first_use");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, cut_before_first_use);
    suite_add_tcase(s, tc);
    tc = tcase_create("late_is_not_down");
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, late_is_not_down);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    char why[256];
    if (netlab_up(&lab, NRANKS, why, sizeof why) != 0) {
        printf("skipped: %s\n", why);
        return 77;
    }
    /* The same name inside every namespace: the root (here) and each rank
     * pick the lab's interface. */
    setenv("CCL_SOCKET_IFNAME", lab.ifname, 1);
    int rc = harness_main(suite());
    netlab_down(&lab);
    return rc;
}
