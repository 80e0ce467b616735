/*
 * Local ranks for the stand-alone test programs (tests/nccl, tests/cuda),
 * which use no harness, through the project's one spawner (tools/spawn:
 * every rank forked first, the job's unique id made and handed out
 * after). A rank whose channel closes without an id exits 3.
 *
 * rank_main(r, id) is the rank's whole life (its return value is its exit
 * status); make_id(id) fills id_bytes (at most PIPE_BUF, so each write is
 * atomic) and returns 0. Returns 0 when every rank exited 0, and names each
 * one that did not on stderr.
 */
#ifndef CCL_TESTS_SPAWN_RANKS_H
#define CCL_TESTS_SPAWN_RANKS_H

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl_spawn.h" /* tools/spawn: fork first, then the id */

enum { SPAWN_MAX_RANKS = 64, SPAWN_MAX_ID = 512 };

/* As spawn_ranks, where rank `killed` (-1: none) must end by SIGKILL. */
static int spawn_ranks_one_killed(int nranks, size_t id_bytes, int (*make_id)(void *id),
                                  int (*rank_main)(int rank, const void *id), unsigned alarm_s, int killed) {
    static struct ccl_spawn s;
    struct ccl_spawned me;
    if (nranks > SPAWN_MAX_RANKS || id_bytes > SPAWN_MAX_ID || id_bytes > PIPE_BUF) return 1;
    int forked = ccl_spawn_fork(&s, nranks, CCL_SPAWN_PIPE, &me);
    if (forked == 1) {
        char id[SPAWN_MAX_ID];
        alarm(alarm_s); /* never hang a test run */
        if (ccl_spawn_take_id(&me, id, id_bytes) != 0) _exit(3);
        close(me.fd);
        _exit(rank_main(me.rank, id));
    }
    char id[SPAWN_MAX_ID];
    int bad = forked != 0 || make_id(id) != 0;
    if (bad) fprintf(stderr, "spawn_ranks: %s\n", forked != 0 ? "fork failed" : "no unique id");
    bad |= ccl_spawn_hand_id(&s, bad ? NULL : id, id_bytes, 1) != 0;
    for (int r = 0; r < s.started; r++) {
        int status = 0;
        waitpid(s.pid[r], &status, 0);
        if (r == killed ? !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) : !WIFEXITED(status) || WEXITSTATUS(status)) {
            fprintf(stderr, "rank %d %s (status 0x%x)\n", r, r == killed ? "was not killed" : "failed", status);
            bad = 1;
        }
    }
    return bad;
}

static int spawn_ranks(int nranks, size_t id_bytes, int (*make_id)(void *id), int (*rank_main)(int rank, const void *id),
                       unsigned alarm_s) {
    return spawn_ranks_one_killed(nranks, id_bytes, make_id, rank_main, alarm_s, -1);
}

#endif
