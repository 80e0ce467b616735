/*
 * The first program a user writes: every rank joins, leaves and exits at
 * once, with no collective in between. Rank 0's process holds the
 * bootstrap root (ccl_comm_init_env under a launcher's variables), and a
 * split's lowest rank of each colour holds that split's root: a rank that
 * returns from init (or split) and exits must never take a root away
 * while the others still wait for its last answer. Each job is repeated:
 * the race this guards against failed most runs, not every one.
 */
/* ctest: TIMEOUT 300 LABELS boot */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "util.h"

enum { MAX_RANKS = 16, JOB_DEADLINE_S = 60 };

/* One rank's whole life; its exit status: 0, or which step failed. */
static int rank_main(int rank, int nranks, int port, int split) {
    char v[48];
    snprintf(v, sizeof v, "%d", rank);
    setenv("OMPI_COMM_WORLD_RANK", v, 1);
    snprintf(v, sizeof v, "%d", nranks);
    setenv("OMPI_COMM_WORLD_SIZE", v, 1);
    snprintf(v, sizeof v, "127.0.0.1:%d", port);
    setenv("CCL_ROOT_ADDR", v, 1);
    setenv("CCL_TIMEOUT", "30", 1);
    snprintf(v, sizeof v, "%08x%08x%016x", (unsigned)port, (unsigned)getppid(), 0x5eed);
    setenv("CCL_SECRET", v, 1); /* as a launcher gives one (without, init warns that it is insecure) */
    alarm(JOB_DEADLINE_S); /* never hang the suite */
    ccl_comm_t *comm = NULL, *sub = NULL;
    if (ccl_comm_init_env(&comm) != CCL_OK) {
        fprintf(stderr, "rank %d: init: %s\n", rank, ccl_comm_last_error(NULL));
        return 10;
    }
    int st = 0;
    if (split) {
        /* Two colours whose lowest ranks (0 and 1) each hold a root; every
         * rank leaves as soon as its split returns. */
        if (ccl_comm_split(comm, rank % 2, rank, &sub) != CCL_OK) {
            fprintf(stderr, "rank %d: split: %s\n", rank, ccl_comm_last_error(comm));
            st = 11;
        } else if (ccl_comm_destroy(sub) != CCL_OK) {
            st = 12;
        }
    }
    if (ccl_comm_destroy(comm) != CCL_OK) st = st ? st : 13;
    return st;
}

/* Runs nranks processes that join and leave; returns how many failed. */
static int run_job(int nranks, int split) {
    int port = util_free_port();
    pid_t pid[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) _exit(rank_main(r, nranks, port, split));
    }
    int failed = 0;
    for (int r = 0; r < nranks; r++) {
        int status = 0;
        waitpid(pid[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "%d ranks%s: rank %d ended with status 0x%x\n", nranks, split ? " (split)" : "", r,
                    status);
            failed++;
        }
    }
    return failed;
}

static void repeat(int runs, int nranks, int split) {
    int bad_runs = 0;
    for (int i = 0; i < runs; i++) bad_runs += run_job(nranks, split) > 0;
    ck_assert_msg(bad_runs == 0, "%d of %d runs of %d ranks%s had a rank fail", bad_runs, runs, nranks,
                  split ? " splitting" : "");
}

/* The id made first, then the ranks forked (as Python's multiprocessing
 * and many launchers do): each child holds a copy of the parent's root
 * registry but not its thread, and must not wait for a root it does not
 * run. Its init takes well under a second; alarm(30), with CCL_TIMEOUT
 * at 60, catches a wait for a root that is not there. (10 s was seen
 * passed once in about seven runs under AddressSanitizer on two cores.)
 *
 * Every rank is forked before any starts its init, so the root's thread
 * is still waiting for its first connection at each fork. A child forked
 * while that thread holds a lock of the allocator or of the thread
 * registry inherits it held: glibc's fork takes its own locks first, so a
 * plain build is safe, but gcc 12's AddressSanitizer runtime does not,
 * and a rank sat in init until the alarm in loaded CI runs. The gate kept
 * the thread from accepting during the forks, but the thread was still
 * being set up (ASan's thread start, its first table) when the first
 * fork came: ccl_get_unique_id now returns only once the thread runs,
 * with its table made, allocating nothing until a rank connects. */
START_TEST(ranks_forked_after_the_id) {
    enum { N = 3 };
    setenv("CCL_TIMEOUT", "60", 1);
    ccl_unique_id_t id;
    ck_assert_int_eq(ccl_get_unique_id(&id), CCL_OK);
    pid_t pid[N];
    int gate[2];
    ck_assert_int_eq(pipe(gate), 0);
    for (int r = 0; r < N; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) {
            /* Check's SIGALRM handler, inherited from the test process,
             * would kill the whole test's process group; the default
             * action ends this rank alone, and the parent names it. */
            signal(SIGALRM, SIG_DFL);
            alarm(30);
            char go;
            close(gate[1]);
            if (read(gate[0], &go, 1) != 0) _exit(9); /* end of file: every rank is forked */
            close(gate[0]);
            ccl_comm_t *c = NULL;
            if (ccl_comm_init_rank(&c, N, id, r) != CCL_OK) _exit(10);
            _exit(ccl_comm_destroy(c) == CCL_OK ? 0 : 11);
        }
    }
    close(gate[0]);
    close(gate[1]);
    for (int r = 0; r < N; r++) {
        int status = 0;
        waitpid(pid[r], &status, 0);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d ended with status 0x%x%s", r, status,
                      WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? " (still in init after 30 s)" : "");
    }
}
END_TEST

START_TEST(init_then_exit_4_ranks) { repeat(20, 4, 0); }
END_TEST

START_TEST(init_then_exit_8_ranks) { repeat(10, 8, 0); }
END_TEST

START_TEST(init_then_exit_3_ranks) { repeat(10, 3, 0); }
END_TEST

START_TEST(split_then_exit_4_ranks) { repeat(16, 4, 1); }
END_TEST

START_TEST(split_then_exit_5_ranks) { repeat(8, 5, 1); }
END_TEST

int main(void) {
    Suite *s = suite_create("init_exit");
    TCase *tc = tcase_create("init_exit");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, ranks_forked_after_the_id);
    tcase_add_test(tc, init_then_exit_4_ranks);
    tcase_add_test(tc, init_then_exit_8_ranks);
    tcase_add_test(tc, init_then_exit_3_ranks);
    tcase_add_test(tc, split_then_exit_4_ranks);
    tcase_add_test(tc, split_then_exit_5_ranks);
    suite_add_tcase(s, tc);
    return harness_main(s);
}
