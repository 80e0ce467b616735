/*
 * Multi-rank test harness: runs a body on N real processes that each join
 * one communicator, the way a launcher would start a job.
 *
 * The parent (the Check test, itself a forked process in CK_FORK mode)
 * forks N children first, then calls ccl_get_unique_id (so the rendezvous
 * root lives in the parent as a thread) and sends the id to each child.
 * The order matters: the library reads its environment once per process,
 * so a parent that had already called into it would pass its parameters
 * down and every child's setenv would be ignored (each child checks this).
 * Each child sets its environment (transport, per-rank host id, timeout, a
 * /dev/shm prefix unique to this run), joins with ccl_comm_init_rank, runs
 * the body, destroys the communicator and _exits with its failure count
 * (capped at 100). Children never call Check (no ck_assert, no exit
 * handlers): they count failures with EXPECT and print the first few as
 * "[rank r] file:line message" on stderr. So: one harness_run per test
 * case (Check forks a fresh process for each), and no other library call
 * in the test process before it.
 *
 * The parent waits with an overall deadline, kills every child still alive
 * at that point (and reports which ranks hung), and removes /dev/shm entries
 * the run left behind (counting them: a leak is a failure). HARNESS_RUN_OK
 * asserts in the Check test that every rank exited 0.
 *
 * Each child also has a control channel to the parent (a SOCK_SEQPACKET
 * pair, one message per send) so fault tests can coordinate: "I started",
 * "go now", "I saw error X at time T".
 */
#ifndef CCL_TEST_HARNESS_H
#define CCL_TEST_HARNESS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ccl.h"

#define HARNESS_MAX_RANKS 64
#define HARNESS_MSG_BYTES 256

/* ---- failure counting inside a child ---- */

struct harness_tally {
    int rank;
    int fails;
};

void harness_fail(struct harness_tally *t, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Count (and print the first few) failures; never aborts the child. */
#define EXPECT(t, cond, fmt, ...)                                                              \
    do {                                                                                       \
        if (!(cond)) harness_fail((t), __FILE__, __LINE__, "%s: " fmt, #cond, ##__VA_ARGS__); \
    } while (0)

/* A ccl call must return exactly `want`; evaluates to the status it got. */
#define EXPECT_STATUS(t, want, call)                                                          \
    ({                                                                                        \
        ccl_status_t expect_st_ = (call);                                                     \
        if (expect_st_ != (want))                                                             \
            harness_fail((t), __FILE__, __LINE__, "%s returned %s (%d), expected %s", #call,  \
                         ccl_status_string(expect_st_), (int)expect_st_,                      \
                         ccl_status_string(want));                                            \
        expect_st_;                                                                           \
    })
#define EXPECT_OK(t, call) EXPECT_STATUS(t, CCL_OK, call)

/* ---- a run ---- */

struct harness_run;

/* Runs in each child on a working communicator; returns its failure count. */
typedef int (*harness_body_fn)(ccl_comm_t *comm, int rank, int nranks, void *arg);
/* Runs in each child before ccl_comm_init_rank: may setenv or alter its copy
 * of the unique id (e.g. corrupt the secret). */
typedef void (*harness_setup_fn)(int rank, int nranks, ccl_unique_id_t *id, void *arg);
/* Judges init's status in a child (default: must be CCL_OK); returns a
 * failure count. When init failed the body is not run. */
typedef int (*harness_init_check_fn)(int rank, ccl_status_t st, void *arg);
/* Runs in the parent while the children run (fault injection); returns a
 * failure count. run->pid[] and the control channels are live. */
typedef int (*harness_parent_fn)(struct harness_run *run, void *arg);

struct harness_run {
    /* ---- what to run (zero means the default) ---- */
    int nranks;
    harness_body_fn body;
    void *arg;
    const char *transport;          /* CCL_TRANSPORT for every child; NULL leaves it alone */
    int host_per_rank;              /* CCL_HOST_ID=host<rank>: every rank a "host" */
    int ranks_per_host;             /* if > 0: CCL_HOST_ID=host<rank / ranks_per_host> */
    const char *ccl_timeout;        /* CCL_TIMEOUT (seconds) for children; default "60" */
    double deadline_s;              /* parent kills everything after this; default 240 */
    const char *env;                /* extra "NAME=VALUE NAME=VALUE ..." for every child */
    const char *const *rank_env;    /* [nranks]: more of the same for one child (NULL entries: none) */
    harness_setup_fn setup;
    harness_init_check_fn init_check;
    harness_parent_fn parent;
    int lenient_destroy;            /* ccl_comm_destroy may fail (failed/aborted comms) */
    const int *claim;               /* [nranks]: the rank each child passes to init (NULL: its own) */
    const int *containers;          /* [nranks]: CONTAINER_* bits (container.h) each child runs in (NULL: none) */
    /* The last `joiners` children join no communicator at start: they run
     * joiner_body instead (newcomers of a grow); the others' communicator
     * has nranks - joiners ranks. */
    int joiners;
    int (*joiner_body)(int rank, int nranks, void *arg);

    /* ---- what happened ---- */
    char shm_prefix[32];            /* CCL_SHM_PREFIX given to the children */
    ccl_unique_id_t id;
    pid_t pid[HARNESS_MAX_RANKS];
    int ctrl_fd[HARNESS_MAX_RANKS]; /* parent's end of each control channel */
    int status[HARNESS_MAX_RANKS];  /* waitpid status */
    int hung[HARNESS_MAX_RANKS];    /* still alive at the deadline, killed */
    double start;                   /* harness_now() when the children were forked */
    double deadline;                /* absolute harness_now() deadline */
    double elapsed_s;
    int parent_failures;            /* from the parent hook */
    int shm_leftovers;              /* /dev/shm entries with our prefix after the run */
    ccl_status_t id_status;         /* ccl_get_unique_id's status */
};

/* Monotonic seconds (CLOCK_MONOTONIC: comparable across processes). */
double harness_now(void);

/* Forks, runs, waits, cleans up. Returns the number of problems: ranks
 * that did not exit 0 (or hung), parent-hook failures, shm leftovers. */
int harness_run(struct harness_run *run);

/* A sentence naming every problem of a finished run ("" if none). The
 * expected-death mask (bit r) excludes ranks a test killed on purpose. */
void harness_describe(const struct harness_run *run, uint64_t expected_dead, char *buf, size_t n);
int harness_problems(const struct harness_run *run, uint64_t expected_dead);

#define HARNESS_RUN_OK(run)                                                                      \
    do {                                                                                         \
        char harness_why_[2048];                                                                 \
        harness_run(run);                                                                        \
        harness_describe((run), 0, harness_why_, sizeof harness_why_);                           \
        ck_assert_msg(harness_problems((run), 0) == 0, "%d-rank run failed: %s", (run)->nranks, \
                      harness_why_);                                                             \
    } while (0)

/* ---- control channel ---- */
/* Child side: send one message to the parent / receive one (0 on success,
 * -1 on timeout or a closed channel). */
int harness_child_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int harness_child_recv(char *buf, size_t n, double timeout_s);
/* Parent side, for rank r, with an absolute harness_now() deadline. */
int harness_send(struct harness_run *run, int rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int harness_recv(struct harness_run *run, int rank, char *buf, size_t n, double deadline);

/* ---- small helpers for bodies ---- */
/* Count /dev/shm entries whose name starts with prefix. */
int harness_shm_count(const char *prefix);
/* The Check runner for one suite: runs it and returns the process status. */
int harness_main(Suite *suite);

#endif
