/* Fork first, then the id (see ccl_spawn.h). */
#define _GNU_SOURCE
#include "ccl_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int channel(enum ccl_spawn_channel kind, int sv[2]) {
    if (kind == CCL_SPAWN_SEQPACKET) return socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
    return pipe2(sv, O_CLOEXEC); /* sv[0] reads, sv[1] writes */
}

int ccl_spawn_fork(struct ccl_spawn *s, int n, enum ccl_spawn_channel kind, struct ccl_spawned *me) {
    s->n = n;
    s->started = 0;
    if (n < 1 || n > CCL_SPAWN_MAX_RANKS) {
        fprintf(stderr, "spawn: %d ranks (1 to %d)\n", n, CCL_SPAWN_MAX_RANKS);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    for (; s->started < n; s->started++) {
        int sv[2];
        if (channel(kind, sv) != 0) {
            perror("spawn: channel");
            return -1;
        }
        /* The parent keeps sv[1] (a pipe's write end), the rank sv[0]. */
        pid_t pid = fork();
        if (pid == 0) {
            close(sv[1]);
            for (int r = 0; r < s->started; r++) close(s->fd[r]);
            me->rank = s->started;
            me->fd = sv[0];
            return 1;
        }
        close(sv[0]);
        if (pid < 0) {
            perror("spawn: fork");
            close(sv[1]);
            return -1;
        }
        s->pid[s->started] = pid;
        s->fd[s->started] = sv[1];
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t bytes) {
    const char *p = buf;
    while (bytes) {
        ssize_t w = write(fd, p, bytes);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        bytes -= (size_t)w;
    }
    return 0;
}

int ccl_spawn_hand_id(struct ccl_spawn *s, const void *id, size_t bytes, int close_after) {
    /* A rank that died already must not kill the parent: SIGPIPE is
     * blocked in this thread while it writes and any it raised is taken
     * here. Not ignored for good: the ranks a parent forks later would
     * inherit that, and a test of what a rank does on a broken pipe would
     * no longer see one. */
    sigset_t pipe_sig, old;
    sigemptyset(&pipe_sig);
    sigaddset(&pipe_sig, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_sig, &old);
    int bad = 0;
    for (int r = 0; r < s->started; r++) {
        if (id && s->fd[r] >= 0) bad |= write_full(s->fd[r], id, bytes) != 0;
        if (close_after || !id) {
            if (s->fd[r] >= 0) close(s->fd[r]);
            s->fd[r] = -1;
        }
    }
    while (sigtimedwait(&pipe_sig, NULL, &(struct timespec){0, 0}) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return bad ? -1 : 0;
}

int ccl_spawn_take_id(const struct ccl_spawned *me, void *id, size_t bytes) {
    char *p = id;
    while (bytes) {
        ssize_t r = read(me->fd, p, bytes);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        bytes -= (size_t)r;
    }
    return 0;
}

void ccl_spawn_close(struct ccl_spawn *s) {
    for (int r = 0; r < s->started; r++) {
        if (s->fd[r] >= 0) close(s->fd[r]);
        s->fd[r] = -1;
    }
}
