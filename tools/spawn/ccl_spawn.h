/*
 * The one way the project's tests, benchmarks and tools start local ranks
 * of their own program: fork every rank first, and only then make the
 * job's unique id and hand it to each rank through its own channel.
 *
 * The order matters. Making the id starts the bootstrap root's thread, and
 * a child forked while that thread holds a lock (the allocator's, under a
 * sanitizer) waits for it forever; and a process that has initialised
 * CUDA cannot pass it to a child. A rank whose channel closes without an
 * id learns there is none (ccl_spawn_take_id fails) and exits.
 *
 * (cclrun is not a user of the fork and id calls: it execs the user's
 * program, whose ranks find the job through the environment, so it has no
 * id to hand out. It takes the port picker, which the tests share.)
 */
#ifndef CCL_TOOLS_SPAWN_H
#define CCL_TOOLS_SPAWN_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { CCL_SPAWN_MAX_RANKS = 256 };

/* The parent's view of the ranks it forked. */
struct ccl_spawn {
    int n;       /* asked for */
    int started; /* forked */
    pid_t pid[CCL_SPAWN_MAX_RANKS];
    int fd[CCL_SPAWN_MAX_RANKS]; /* the parent's end of each rank's channel (-1: closed) */
};

/* A rank's view of itself. */
struct ccl_spawned {
    int rank;
    int fd; /* its end of the channel: the id comes on it, and with seqpacket it stays open for more */
};

/* What a channel is: a pipe (the id only), or a SOCK_SEQPACKET pair that
 * stays open both ways after the id (a harness's control channel). */
enum ccl_spawn_channel { CCL_SPAWN_PIPE = 0, CCL_SPAWN_SEQPACKET = 1 };

/* Forks n ranks (stdout and stderr flushed first). In a rank it returns 1
 * with *me filled and every other rank's channel closed; in the parent 0
 * when all n started, else -1 (a message on stderr; s->started say how
 * many did, and they exit by themselves once their channel closes). */
int ccl_spawn_fork(struct ccl_spawn *s, int n, enum ccl_spawn_channel kind, struct ccl_spawned *me);

/* The parent: writes bytes of id (NULL: none, the job is off) to every
 * started rank; with close_after (or without an id), closes the channels
 * then. A rank that died already does not kill the parent (no SIGPIPE
 * reaches it). 0 when every write went through. */
int ccl_spawn_hand_id(struct ccl_spawn *s, const void *id, size_t bytes, int close_after);

/* A rank: reads the id, all bytes of it; -1 when the channel closed
 * without one. */
int ccl_spawn_take_id(const struct ccl_spawned *me, void *id, size_t bytes);

/* The parent: closes what channels are open. */
void ccl_spawn_close(struct ccl_spawn *s);

/* A port on 127.0.0.1 outside the kernel's ephemeral range (where other
 * processes' connect() and bind(0) take theirs), or -1 (errno set). With
 * listen_fd, the port stays bound: *listen_fd listens on it
 * (close-on-exec), to be handed to the process that serves it; without,
 * it was free a moment ago. */
int ccl_spawn_pick_port(int *listen_fd);

#ifdef __cplusplus
}
#endif

#endif
