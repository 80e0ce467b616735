/*
 * Small pieces every Check suite here repeats: registering a looped test
 * case, and running a multi-rank job that must come back clean.
 */
#ifndef CCL_TEST_UTIL_H
#define CCL_TEST_UTIL_H

#include <check.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

/* A test case `name` that runs test for _i in [0, n), each within
 * timeout_s seconds. */
void util_add_loop_case(Suite *s, const char *name, const TTest *test, int n, int timeout_s);

/* Runs `run` and asserts that it had no problem other than the deaths in
 * expected_dead (bit r: rank r); the assertion's message is the formatted
 * context, ": ", and harness_describe's sentence. */
void util_run_clean(struct harness_run *run, uint64_t expected_dead, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A harness init_check: init must fail with CCL_ERR_INVALID_ARGUMENT; arg
 * is the environment that should make it fail (for the message). */
int util_init_invalid_argument(int rank, ccl_status_t st, void *arg);

/* A port of 127.0.0.1 that nothing listens on now, outside the kernel's
 * ephemeral range (ccl_spawn_pick_port), for a root address that a test's
 * rank 0 will listen on. */
int util_free_port(void);

/* The exit status of child pid, waited for up to timeout_s; -1 when it
 * did not exit normally, or had to be killed at the deadline. */
int util_finish_child(pid_t pid, double timeout_s);

/* Removes the files in dir, then dir (one level: what ranks wrote there). */
void util_remove_dir(const char *dir);

/* A fresh unique id made by rank 0 and broadcast over comm: every rank
 * gets the same, for a second communicator over the same ranks. */
void util_shared_id(struct harness_tally *t, ccl_comm_t *comm, ccl_unique_id_t *id);

/* Pins this process to the k-th (from 0, modulo their number) of the CPUs
 * it may use now, as a launcher binding ranks would; returns how many it
 * could use, or -1 when its affinity cannot be read. */
int util_pin_to_nth_cpu(int k);

/* Whether ccl_comm_describe of comm contains text. */
int util_describe_has(ccl_comm_t *comm, const char *text);

/* A rank killed in the middle of a call: runs call(comm, ctx) until it
 * fails (1000 times at most); the last rank arms a SIGKILL 2 ms into its
 * fourth. Every other rank must fail with CCL_ERR_REMOTE or
 * CCL_ERR_TIMEOUT within timeout_s + 5 s of that call, naming the dead
 * rank. Returns the failure count. */
int util_outlive_victim(ccl_comm_t *comm, int rank, int nranks, double timeout_s,
                        ccl_status_t (*call)(ccl_comm_t *comm, void *ctx), void *ctx);
/* Runs such a job: no problem but the last rank's death, by SIGKILL. */
void util_run_with_victim(struct harness_run *run);

/* Raises this process's open-file limit to at least `want` descriptors
 * (up to the hard limit), for tests that hold many connections open. */
void util_raise_fd_limit(long want);

#endif
