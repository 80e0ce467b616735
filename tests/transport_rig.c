/* The transport suites' rig (transport_rig.h). */
#define _GNU_SOURCE
#include "transport_rig.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/params.h"
#include "core/socket.h"
#include "transports/manager.h"

#define RANK_ALARM_S 60
#define DEFAULT_DEADLINE_S 90.0

static __attribute__((noreturn)) void peer_gone(struct rig_rank *c, int peer) {
    harness_fail(&c->t, __FILE__, __LINE__, "rank %d's channel closed early", peer);
    fflush(NULL);
    _exit(c->t.fails > 100 ? 100 : c->t.fails);
}

void rig_send(struct rig_rank *c, int peer, const void *buf, size_t n) {
    if (ccl__sock_send_all(c->chan[peer], buf, n, ccl__now() + RANK_ALARM_S) != CCL_OK) peer_gone(c, peer);
}

void rig_recv(struct rig_rank *c, int peer, void *buf, size_t n) {
    if (ccl__sock_recv_all(c->chan[peer], buf, n, ccl__now() + RANK_ALARM_S) != CCL_OK) peer_gone(c, peer);
}

void rig_barrier(struct rig_rank *c) {
    char b = 'b';
    for (int j = 0; j < c->nranks; j++)
        if (j != c->rank) rig_send(c, j, &b, 1);
    for (int i = 0; i < c->nranks; i++)
        if (i != c->rank) rig_recv(c, i, &b, 1);
}

void rig_run(const struct rig_run *run) {
    int n = run->nranks;
    ck_assert_msg(n >= 1 && n <= RIG_MAX_RANKS, "%s: %d ranks (the rig holds 1 to %d)", run->tag, n, RIG_MAX_RANKS);
    int sv[RIG_MAX_RANKS][RIG_MAX_RANKS][2]; /* sv[i][j]: the pair i < j; [0] is i's end */
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i][j]), 0);
    fflush(NULL);
    pid_t pid[RIG_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] > 0) continue;
        struct rig_rank c = {.rank = r, .nranks = n, .arg = run->arg, .t = {.rank = r}};
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) {
                if (i == r) c.chan[j] = sv[i][j][0]; else close(sv[i][j][0]);
                if (j == r) c.chan[i] = sv[i][j][1]; else close(sv[i][j][1]);
            }
        c.chan[r] = -1;
        alarm(RANK_ALARM_S);
        if (run->ignore_sigpipe) signal(SIGPIPE, SIG_IGN);
        (run->body[r] ? run->body[r] : run->body[0])(&c);
        for (int p = 0; p < n; p++)
            if (p != r) close(c.chan[p]);
        fflush(NULL);
        exit(c.t.fails > 100 ? 100 : c.t.fails); /* exit, not _exit: LeakSanitizer checks each rank */
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) close(sv[i][j][0]), close(sv[i][j][1]);
    int status[RIG_MAX_RANKS] = {0}, done[RIG_MAX_RANKS] = {0}, ended = 0, next = 0;
    double deadline = ccl__now() + (run->deadline_s > 0 ? run->deadline_s : DEFAULT_DEADLINE_S);
    while (ended < n) {
        for (int r = 0; r < n; r++) {
            if (done[r] || (run->reap == RIG_REAP_IN_RANK_ORDER && r != next)) continue;
            if (waitpid(pid[r], &status[r], WNOHANG) == pid[r]) done[r] = 1, ended++, next += r == next;
        }
        if (ended < n && ccl__now() > deadline) {
            char which[64] = "";
            for (int r = 0, o = 0; r < n; r++)
                if (!done[r]) o += snprintf(which + o, sizeof which - (size_t)o, " %d", r);
            for (int r = 0; r < n; r++)
                if (!done[r]) kill(pid[r], SIGKILL), waitpid(pid[r], &status[r], 0);
            ck_abort_msg("%s: rank(s)%s still running after %.0f s", run->tag, which,
                         run->deadline_s > 0 ? run->deadline_s : DEFAULT_DEADLINE_S);
        }
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    for (int r = 0; r < n; r++) {
        int st = status[r];
        if (run->killed_mask & (1u << r))
            ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: rank %d was to die of SIGKILL (0x%x)",
                          run->tag, r, st);
        else
            ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: rank %d of %d %s %d", run->tag, r, n,
                          WIFEXITED(st) ? "had failures:" : "died of signal",
                          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
}

struct ccl_comm *rig_comm_new(const struct rig_rank *c, uint64_t comm_id, int slots, double timeout_s,
                              uint8_t secret_byte) {
    struct ccl_comm *comm = calloc(1, sizeof(*comm));
    if (!comm) abort();
    comm->boot_fd = -1; /* no bootstrap root: set-up steps have nobody to hear from */
    comm->magic = CCL__COMM_MAGIC;
    comm->rank = c->rank;
    comm->nranks = c->nranks;
    comm->comm_id = comm_id;
    memset(comm->secret, secret_byte, sizeof(comm->secret));
    comm->params = *ccl__params_get();
    comm->params.slots = slots;
    if (timeout_s > 0) comm->params.timeout_s = timeout_s;
    if (ccl__conns_alloc(comm) != CCL_OK) abort(); /* tstate, and the transports' knobs */
    comm->peers = calloc((size_t)c->nranks, sizeof(*comm->peers));
    comm->conns = calloc((size_t)c->nranks, sizeof(*comm->conns));
    comm->blobs = calloc((size_t)c->nranks * (size_t)ccl__ntransports, CCL__TRANSPORT_BLOB_BYTES);
    if (!comm->peers || !comm->conns || !comm->blobs) abort();
    comm->wake = &comm->local_wake;
    comm->event_fd = -1;
    snprintf(comm->boot_addr, sizeof(comm->boot_addr), "127.0.0.1");
    pthread_mutex_init(&comm->err_lock, NULL);
    return comm;
}

void rig_comm_free(struct ccl_comm *comm) {
    pthread_mutex_destroy(&comm->err_lock);
    free(comm->peers);
    free(comm->conns);
    ccl__conns_free(comm);
    free(comm->blobs);
    free(comm);
}

void rig_exchange(struct rig_rank *c, struct ccl_comm *comm, const struct ccl__transport *t,
                  const struct ccl__peer_info *mine) {
    const size_t bb = CCL__TRANSPORT_BLOB_BYTES;
    for (int j = 0; j < c->nranks; j++)
        if (j != c->rank) {
            rig_send(c, j, mine, sizeof(*mine));
            rig_send(c, j, ccl__peer_blob(comm, c->rank, t), bb);
        }
    for (int i = 0; i < c->nranks; i++) {
        if (i == c->rank) {
            comm->peers[i] = *mine;
            continue;
        }
        rig_recv(c, i, &comm->peers[i], sizeof(comm->peers[i]));
        rig_recv(c, i, (uint8_t *)ccl__peer_blob(comm, i, t), bb);
    }
}
