/*
 * Local ranks for the stand-alone test programs (tests/nccl, tests/cuda),
 * which use no harness: forks every rank first and only then makes the job's
 * unique id, handing it to the ranks through a pipe. The order matters:
 * making the id starts the bootstrap root's thread, and a child forked while
 * that thread holds a lock (the allocator's, under a sanitizer) waits for it
 * forever; and a process that has initialised CUDA cannot pass it to a
 * child. A rank whose pipe closes without an id exits 3.
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

enum { SPAWN_MAX_RANKS = 64, SPAWN_MAX_ID = 512 };

/* As spawn_ranks, where rank `killed` (-1: none) must end by SIGKILL. */
static int spawn_ranks_one_killed(int nranks, size_t id_bytes, int (*make_id)(void *id),
                                  int (*rank_main)(int rank, const void *id), unsigned alarm_s, int killed) {
    pid_t pid[SPAWN_MAX_RANKS];
    int id_pipe[2], bad = 0, started = 0;
    if (nranks < 1 || nranks > SPAWN_MAX_RANKS || id_bytes > SPAWN_MAX_ID || id_bytes > PIPE_BUF || pipe(id_pipe) != 0)
        return 1;
    for (; started < nranks; started++) {
        pid[started] = fork();
        if (pid[started] < 0) break;
        if (pid[started] == 0) {
            char id[SPAWN_MAX_ID];
            close(id_pipe[1]);
            alarm(alarm_s); /* never hang a test run */
            if (read(id_pipe[0], id, id_bytes) != (ssize_t)id_bytes) _exit(3);
            close(id_pipe[0]);
            _exit(rank_main(started, id));
        }
    }
    close(id_pipe[0]);
    char id[SPAWN_MAX_ID];
    if (started < nranks || make_id(id) != 0) {
        fprintf(stderr, "spawn_ranks: %s\n", started < nranks ? "fork failed" : "no unique id");
        bad = 1;
    } else {
        for (int r = 0; r < nranks; r++) bad |= write(id_pipe[1], id, id_bytes) != (ssize_t)id_bytes;
    }
    close(id_pipe[1]);
    for (int r = 0; r < started; r++) {
        int status = 0;
        waitpid(pid[r], &status, 0);
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
