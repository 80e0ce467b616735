/* Spin, then yield, then sleep; with deadlines and failure checks. */
#include "prims/wait.h"

#include <errno.h>
#include <linux/futex.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/boot_pair.h"
#include "core/log.h"
#include "core/socket.h"
#include "core/status.h"
#include "transports/transport.h"

#define LIVENESS_PERIOD_S 0.1 /* how often a sleeping waiter checks its peers */
#define MAX_POLLFDS 64
#define TIGHT_SPIN_S 4e-6 /* how long a wait spins without yielding the core */
#define SPIN_LOOK_EVERY 8  /* a pure spin reads the clock and failure words once in this many rounds */
#define WHERE_ANSWER_S 1.0 /* how long a timed-out wait gives a peer to say where it is */
#define WHERE_HOPS 8       /* how far it follows "waiting on" from rank to rank */
#define SLEEP_MAX_S 0.05  /* the longest sleep of a wait with nothing in flight */
#define IN_FLIGHT_NAP_S 1e-3 /* and with an adapter working for it (ccl__wait_sleep_cap) */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

struct ccl__waiter {
    struct ccl_comm *comm;
    struct ccl__conn *const *conns; /* the connections this wait depends on */
    const int *nconns;
    uint32_t armed_bell;
    unsigned idle_rounds;
    int slept;         /* this idle stretch went to sleep */
    int published;     /* the status server was told what this wait is on (core/status.h) */
    int spinning;      /* a pure spin under way: most rounds only poll */
    int pure_spin;     /* alone on its core: spinning needs no yield */
    int no_spin;       /* this idle stretch skips the spin (an adapter works for it on our CPUs) */
    struct ccl__wake_words *announced; /* the wake words this waiter announced it may sleep on, or NULL */
    double idle_since; /* ccl__now() of the last progress */
    double next_check; /* next liveness check of the peers */
    ccl_status_t gone; /* a waited-on peer's liveness check failed: look once more before failing */
    const char *what;  /* for the timeout message */
    const struct ccl__wait_opts *o;
};

static const struct ccl__wait_opts plain_wait;

static void waiter_init(struct ccl__waiter *w, struct ccl_comm *comm, struct ccl__conn *const *conns, const int *nconns,
                        const char *what, const struct ccl__wait_opts *o) {
    w->comm = comm;
    w->o = o;
    w->conns = conns;
    w->nconns = nconns;
    w->armed_bell = 0;
    w->idle_rounds = 0;
    w->slept = 0;
    w->published = 0;
    w->spinning = 0;
    w->no_spin = 0;
    w->announced = NULL;
    w->pure_spin = comm->own_core && pthread_equal(pthread_self(), comm->own_core_thread);
    w->idle_since = ccl__now();
    w->next_check = w->idle_since + LIVENESS_PERIOD_S;
    w->gone = CCL_OK;
    w->what = what;
}

static void waiter_arm(struct ccl__waiter *w) { w->armed_bell = atomic_load(&w->comm->wake->bell); }

#define YIELD_DECAY 64 /* a stretch that ended awake gives back 1/64 of the yield above its base */

double ccl__wait_next_yield(double yield_s, double base_s, double max_s, int slept, double stretch_s) {
    if (max_s <= base_s) return yield_s;
    if (!slept) return yield_s - (yield_s - base_s) / YIELD_DECAY;
    if (stretch_s < max_s) return fmin(max_s, fmax(2 * yield_s, 2 * stretch_s));
    return fmax(base_s, yield_s / 2);
}

static void waiter_learn(struct ccl__waiter *w, double now) {
    struct ccl_comm *c = w->comm;
    if (w->o->detached || w->o->no_learn) return; /* the executor's to learn; or nothing to learn */
    c->yield_s = ccl__wait_next_yield(c->yield_s, c->yield_base_s, c->yield_max_s, w->slept, now - w->idle_since);
}

/* Peers ring the bell again only when they must wake a sleeper. */
static void waiter_withdraw(struct ccl__waiter *w) {
    if (w->published) {
        ccl__status_not_waiting(w->comm);
        w->published = 0;
    }
    if (!w->announced) return;
    ccl__wake_withdraw(w->announced);
    w->announced = NULL;
}

static void waiter_progress(struct ccl__waiter *w) {
    waiter_withdraw(w);
    if (w->idle_rounds) {
        double now = ccl__now();
        waiter_learn(w, now);
        w->idle_rounds = 0;
        w->slept = 0;
        w->spinning = 0;
        w->no_spin = 0;
        w->idle_since = now;
    }
}

/* ---- where is everybody? ---- */

/* What a waiting rank tells a timed-out one about itself. */
struct where {
    char what[48];      /* the call it waits in: "all_reduce #7" */
    int32_t waiting_on; /* the rank it waits on, -1 if none (compute, or a flush) */
};

static int blocking_peer(const struct ccl__waiter *w) {
    for (int i = 0; i < *w->nconns; i++)
        if (w->conns[i]) return w->conns[i]->peer;
    return -1;
}

/* Answers every "where are you?" that has arrived: a rank can only answer
 * from inside a wait, so one that does not answer is not in the library. */
static void answer_where(const struct ccl__waiter *w) {
    struct ccl_comm *comm = w->comm;
    int from;
    uint32_t q;
    while (ccl__pair_poll(comm, CCL__PAIR_TAG_WHERE_Q, &from, &q, sizeof(q))) {
        struct where a = {.waiting_on = blocking_peer(w)};
        snprintf(a.what, sizeof(a.what), "%s", w->what);
        ccl__pair_send(comm, from, CCL__PAIR_TAG_WHERE_A, &a, sizeof(a)); /* best effort */
    }
}

/* 1 and *a when peer answered within WHERE_ANSWER_S, 0 when it did not,
 * -1 when it cannot be asked. Keeps answering others meanwhile: they may
 * be asking us at the same moment. */
static int ask_where(const struct ccl__waiter *w, int peer, struct where *a) {
    uint32_t q = 1;
    if (ccl__pair_send(w->comm, peer, CCL__PAIR_TAG_WHERE_Q, &q, sizeof(q)) != CCL_OK) return -1;
    for (double end = ccl__now() + WHERE_ANSWER_S; ccl__now() < end;) {
        answer_where(w);
        int from;
        while (ccl__pair_poll(w->comm, CCL__PAIR_TAG_WHERE_A, &from, a, sizeof(*a)))
            if (from == peer) return 1; /* answers from earlier questions are dropped */
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Follows "waiting on" from the rank this wait depends on to the rank that
 * is behind, and says what that one is doing. */
static void trace_blame(const struct ccl__waiter *w, char *out, size_t n) {
    struct ccl_comm *comm = w->comm;
    size_t o = 0;
    out[0] = 0;
    int at = blocking_peer(w);
    uint64_t asked = 0;
    for (int hop = 0; at >= 0 && hop < WHERE_HOPS && o + 64 < n; hop++) {
        if (at == comm->rank) {
            o += (size_t)snprintf(out + o, n - o, " (this rank)");
            break;
        }
        if (at < 64 && (asked >> at & 1)) break; /* a cycle: every rank named waits on the next */
        if (at < 64) asked |= 1ull << at;
        struct where a;
        int r = ask_where(w, at, &a);
        a.what[sizeof(a.what) - 1] = 0;
        if (r < 0) {
            o += (size_t)snprintf(out + o, n - o, "; rank %d cannot be asked (it is gone)", at);
            break;
        }
        if (r == 0) {
            o += (size_t)snprintf(out + o, n - o,
                                  "; rank %d is behind: it is not inside a libccl call (it has not called %s, or "
                                  "is stuck outside the library)",
                                  at, w->what);
            break;
        }
        if (strcmp(a.what, w->what) != 0) {
            o += (size_t)snprintf(out + o, n - o, "; rank %d is in %s instead, waiting on rank %d", at, a.what,
                                  (int)a.waiting_on);
            break;
        }
        o += (size_t)snprintf(out + o, n - o, "; rank %d is in %s too, waiting on rank %d", at, a.what,
                              (int)a.waiting_on);
        at = a.waiting_on;
    }
}

static ccl_status_t timeout_error(struct ccl__waiter *w, double idle) {
    char peers[128] = "", blame[320];
    size_t o = 0;
    for (int i = 0; i < *w->nconns && o + 12 < sizeof(peers); i++)
        if (w->conns[i]) o += (size_t)snprintf(peers + o, sizeof(peers) - o, "%s%d", o ? "," : "", w->conns[i]->peer);
    if (w->o->detached) blame[0] = 0; /* the pair channel is the executor's */
    else trace_blame(w, blame, sizeof(blame));
    char said[64];
    ccl__set_error(w->comm, CCL_ERR_TIMEOUT, "%s: no progress for %.1f s (%s) waiting on rank(s) %s%s", w->what, idle,
                   ccl__timeout_words(w->comm, said, sizeof said), o ? peers : "-", blame);
    return ccl__comm_fail(w->comm, CCL_ERR_TIMEOUT);
}

ccl_status_t ccl__check_failures(struct ccl_comm *comm, const char *what) {
    ccl_status_t st = ccl__comm_health(comm);
    if (st < 0) return st;
    int32_t who = atomic_load(&comm->wake->fail_rank);
    if (who) {
        int32_t why = atomic_load(&comm->wake->fail_status), by = atomic_load(&comm->wake->fail_by);
        enum ccl__culprit_cause cause = (enum ccl__culprit_cause)atomic_load(&comm->wake->fail_cause);
        ccl__comm_blame(comm, who - 1, cause);
        const char *status = ccl_status_string(why ? (ccl_status_t)why : CCL_ERR_REMOTE);
        if (why == CCL_ERR_REVOKED) {
            ccl__set_error(comm, CCL_ERR_REVOKED, "%s: rank %d revoked the communicator (ccl_comm_revoke or a "
                           "shrink): shrink it or destroy it", what, who - 1);
            return ccl__comm_fail(comm, CCL_ERR_REVOKED);
        }
        if (!by || by == who) /* it failed itself and said so */
            ccl__set_error(comm, CCL_ERR_REMOTE, "%s: rank %d failed (%s)", what, who - 1, status);
        else if (cause == CCL__CULPRIT_UNREACHABLE)
            ccl__set_error(comm, CCL_ERR_REMOTE, "%s: rank %d cannot be reached, as rank %d found: the link or its host "
                           "is down", what, who - 1, by - 1);
        else if (cause == CCL__CULPRIT_EXITED)
            ccl__set_error(comm, CCL_ERR_REMOTE, "%s: rank %d exited, as rank %d found", what, who - 1, by - 1);
        else
            ccl__set_error(comm, CCL_ERR_REMOTE, "%s: rank %d failed or died (%s, as rank %d found)", what, who - 1,
                           status, by - 1);
        return ccl__comm_fail(comm, CCL_ERR_REMOTE);
    }
    return CCL_OK;
}

static ccl_status_t check_failures(struct ccl__waiter *w) { return ccl__check_failures(w->comm, w->what); }

static int waited_on(const struct ccl__waiter *w, const struct ccl__conn *c) {
    for (int i = 0; i < *w->nconns; i++)
        if (w->conns[i] == c) return 1;
    return 0;
}

static void futex_sleep(struct ccl__waiter *w, double max_s) {
    struct ccl__wake_words *wk = w->comm->wake;
    /* announced before the look that found nothing (waiter_idle): a ring
     * since the bell was armed bumped it, and the wait returns at once */
    if (atomic_load(&wk->bell) == w->armed_bell) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(max_s * 1e9)};
        syscall(SYS_futex, &wk->bell, FUTEX_WAIT, w->armed_bell, &ts, NULL, 0);
    }
}

/* Whether an adapter works on this wait's requests right now (a
 * transport's in_flight): a software adapter does that work on our CPUs. */
static int waiter_in_flight(const struct ccl__waiter *w) {
    for (int i = 0; i < *w->nconns; i++) {
        const struct ccl__conn *c = w->conns[i];
        if (c && c->t->in_flight && c->t->in_flight(c)) return 1;
    }
    return 0;
}

/* Sleep until a connection's descriptor, the bell or the abort event fires.
 * Shared-memory connections have no descriptor: when any takes part, sleep
 * on the bell and poll sockets only briefly in between. */
static void sleep_once(struct ccl__waiter *w, double left) {
    if (w->o->nap_s > 0 || w->o->detached) {
        /* This is the one wait routine's own sleep, for work that rings
         * no bell (or a detached wait, whose bell is the executor's): a
         * short nap, never past the deadline. */
        double nap = w->o->nap_s > 0 ? w->o->nap_s : 20e-6;
        nap = left < nap ? (left > 0 ? left : 0) : nap;
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = (long)(nap * 1e9)}, NULL);
        return;
    }
    struct pollfd fds[MAX_POLLFDS];
    int n = 0, fdless = 0;
    for (int i = 0; i < *w->nconns; i++) {
        struct ccl__conn *c = w->conns[i];
        if (!c) continue;
        short ev = 0;
        int fd = c->t->wait_fd(c, &ev);
        if (fd < 0) fdless = 1;
        else if (ev && n < MAX_POLLFDS - 1) fds[n++] = (struct pollfd){.fd = fd, .events = ev};
    }
    for (int i = 0; i < w->comm->nstaged && n < MAX_POLLFDS - 1; i++) {
        struct ccl__conn *c = w->comm->staged[i];
        short ev = 0;
        if (waited_on(w, c)) continue; /* already polled, for everything it waits on */
        int fd = c->t->wait_fd(c, &ev);
        if (fd >= 0 && (ev & POLLOUT)) fds[n++] = (struct pollfd){.fd = fd, .events = POLLOUT};
    }
    /* after wait_fd, which may have taken the completions that end the work */
    double cap = ccl__wait_sleep_cap(left, waiter_in_flight(w));
    if (n == 0) {
        futex_sleep(w, cap);
        return;
    }
    if (w->comm->event_fd >= 0) fds[n++] = (struct pollfd){.fd = w->comm->event_fd, .events = POLLIN};
    if (fdless) {
        if (poll(fds, (nfds_t)n, 0) > 0) return;
        futex_sleep(w, cap < 200e-6 ? cap : 200e-6);
        return;
    }
    poll(fds, (nfds_t)n, (int)ceil(cap * 1000));
}

double ccl__wait_sleep_cap(double left_s, int in_flight) {
    double cap = in_flight ? IN_FLIGHT_NAP_S : SLEEP_MAX_S;
    return left_s < cap ? (left_s > 0 ? left_s : 0) : cap;
}

static ccl_status_t waiter_idle(struct ccl__waiter *w) {
    /* What arrives during a round's pause and bookkeeping waits for them:
     * a pure spin pauses once a round (a pause is ~140 cycles on current
     * x86 cores, ~150 ns under the test VM's emulation) and looks at the
     * clock and the failure words only now and then. With 16 pauses and a
     * look every round, 8 B pingpong over soft-RoCE in the test VM took
     * 33 us against 29 (medians of 12 alternating rounds). */
    double now;
    if (w->spinning) {
        if (++w->idle_rounds % SPIN_LOOK_EVERY) {
            cpu_relax();
            return CCL_OK;
        }
        now = ccl__now();
    } else {
        now = ccl__now();
        if (w->idle_rounds++ == 0) {
            w->idle_since = now;
            w->no_spin = w->comm->spin_unless_in_flight && waiter_in_flight(w);
        }
    }
    ccl_status_t st = w->o->through_failures ? CCL_OK : check_failures(w);
    if (st < 0) return st;
    double spin_s = w->no_spin ? 0 : fmax(w->comm->spin_s, w->o->spin_s), idle = now - w->idle_since;
    if (idle < spin_s) {
        /* Past the first microseconds, a spinning rank also yields: when the
         * scheduler has put the peer it waits for on the same core, a pure
         * spin would hold that core for all of spin_s on every wait. Pinned
         * to a core no other local rank uses, the thread that was pinned
         * spins all of spin_s: the yield would only cost it a system call
         * (measured over soft-RoCE in the test VM, 5 alternating rounds:
         * 8 B one-way latency 37.9 us yielding, 32.2 us spinning). Other
         * threads (the progress thread of asynchronous calls) may share the
         * core with the caller's compute, and keep yielding. */
        w->spinning = w->pure_spin;
        if (idle < TIGHT_SPIN_S || w->pure_spin) cpu_relax();
        else sched_yield();
        return CCL_OK;
    }
    w->spinning = 0;
    if (idle > w->comm->params.timeout_s) return timeout_error(w, idle);
    if (now >= w->next_check) {
        w->next_check = now + LIVENESS_PERIOD_S;
        if (!w->published) {
            /* Past the spin only: the fast path tells nobody anything. */
            ccl__status_waiting(w->comm, blocking_peer(w), w->idle_since);
            w->published = 1;
        }
        if (!w->o->detached) answer_where(w);
        for (int i = 0; i < *w->nconns; i++) {
            struct ccl__conn *c = w->conns[i];
            if (c && (st = c->t->check_peer(c)) < 0) {
                w->gone = st;
                return CCL_OK;
            }
        }
    }
    if (idle < spin_s + fmax(w->comm->yield_s, w->o->yield_s)) {
        sched_yield();
        return CCL_OK;
    }
    if (w->announced != w->comm->wake && !w->o->detached && w->o->nap_s <= 0) {
        /* Peers ring only a rank that may sleep (core/wake.c): announce it,
         * then look once more (the loop arms the bell and polls) before the
         * first sleep, so nothing published before the announcement is
         * slept through. Again if the words moved since (the connection
         * manager points comm->wake into the shm segment and back). */
        waiter_withdraw(w);
        ccl__wake_announce(w->announced = w->comm->wake);
        return CCL_OK;
    }
    w->slept = 1;
    sleep_once(w, w->comm->params.timeout_s - idle);
    return CCL_OK;
}

void ccl__note_staged(struct ccl_comm *comm, struct ccl__conn *c) {
    if (c->staged || c->t->flushed(c)) return;
    c->staged = 1;
    comm->staged[comm->nstaged++] = c;
}

/* Stream transports move staged bytes only when asked: the connections
 * waited on, and every one still holding committed bytes (dropped from the
 * list once flushed). */
static ccl_status_t progress_conns(struct ccl__waiter *w, int *moved) {
    if (w->o->detached) return CCL_OK; /* the executor's connections */
    for (int i = 0; i < *w->nconns; i++) {
        struct ccl__conn *c = w->conns[i];
        int m = 0;
        if (!c) continue;
        ccl_status_t st = c->t->progress(c, &m);
        if (st < 0) return ccl__comm_fail(w->comm, st);
        *moved |= m;
    }
    struct ccl_comm *comm = w->comm;
    int k = 0;
    for (int i = 0; i < comm->nstaged; i++) {
        struct ccl__conn *c = comm->staged[i];
        int m = 0;
        /* One progress per connection and round: the waited ones had theirs. */
        ccl_status_t st = c->t->flushed(c) || waited_on(w, c) ? CCL_OK : c->t->progress(c, &m);
        if (st < 0) {
            for (int j = 0; j < comm->nstaged; j++) comm->staged[j]->staged = 0;
            comm->nstaged = 0; /* the communicator has failed: nothing more moves */
            return ccl__comm_fail(comm, st);
        }
        *moved |= m;
        if (c->t->flushed(c)) c->staged = 0;
        else comm->staged[k++] = c;
    }
    comm->nstaged = k;
    return CCL_OK;
}

void ccl__wake_peers(struct ccl_comm *comm) {
    for (int q = 0; q < comm->nranks; q++) {
        struct ccl__conn *c = comm->conns[q];
        if (c && c->t->wake) c->t->wake(c);
    }
}

ccl_status_t ccl__wait(struct ccl_comm *comm, const char *what, struct ccl__conn *const *conns, const int *nconns,
                       ccl__poll_fn poll, void *ctx) {
    return ccl__wait_with(comm, what, conns, nconns, poll, ctx, &plain_wait);
}

/* The wait past its first look; every return leaves w announced or not. */
static ccl_status_t wait_loop(struct ccl__waiter *w, ccl__poll_fn poll, void *ctx) {
    ccl_status_t st;
    int moved;
    for (;;) {
        waiter_arm(w);
        moved = 0;
        if ((st = progress_conns(w, &moved)) < 0) return st;
        if ((st = poll(ctx, &moved)) != CCL_INPROGRESS) {
            if (st == CCL_OK) waiter_progress(w); /* the last stretch teaches too */
            return st;
        }
        if (moved) waiter_progress(w);
        else if ((st = waiter_idle(w)) < 0) return st;
        if (w->gone == CCL_OK) continue;
        /* The peer may have committed what this wait needs just before it
         * left: its stores are visible now that its exit is, so one more
         * look settles it. */
        moved = 0;
        if ((st = progress_conns(w, &moved)) < 0) return st;
        if ((st = poll(ctx, &moved)) != CCL_INPROGRESS) return st;
        if (!moved) return ccl__comm_fail(w->comm, w->gone);
        w->gone = CCL_OK;
        waiter_progress(w);
    }
}

ccl_status_t ccl__wait_with(struct ccl_comm *comm, const char *what, struct ccl__conn *const *conns, const int *nconns,
                            ccl__poll_fn poll, void *ctx, const struct ccl__wait_opts *opts) {
    int moved = 0;
    ccl_status_t st = poll(ctx, &moved); /* the fast path: no clock read */
    if (st != CCL_INPROGRESS) {
        if (st == CCL_OK) ccl__status_step(comm);
        return st;
    }
    struct ccl__waiter w;
    waiter_init(&w, comm, conns, nconns, what, opts ? opts : &plain_wait);
    st = wait_loop(&w, poll, ctx);
    waiter_withdraw(&w);
    if (st == CCL_OK) ccl__status_step(comm);
    return st;
}
