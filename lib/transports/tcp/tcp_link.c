/* Linking a TCP pair on its first use (CCL_CONNECT=lazy), from inside the
 * waits of the call that first needs it. Nothing here blocks.
 *
 * The higher rank of the pair dials the lower one's listener and sends
 * the hello, as at set-up; the lower rank takes it from its listener
 * (tcp_accept.c), which every wait on an unlinked pair serves. A dial
 * completes in the kernel whether or not the lower rank is serving yet,
 * and the hello and the first frames wait in its socket, so neither side
 * ever waits on the other's attention.
 *
 * A dead peer must still fail the call in seconds, as it would on a
 * linked pair. The dialer learns it from its dial (refused: the process
 * and its listener are gone; no answer: the host is down). The lower rank
 * has no socket to watch, so after PROBE_AFTER_S of waiting, and then
 * every PROBE_EVERY_S, it dials the higher rank's listener itself with a
 * probe hello, which the higher rank closes quietly: refused is gone,
 * unanswered for CCL_LINK_TIMEOUT is unreachable. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/log.h"
#include "transports/tcp/tcp.h"

/* A live peer that is merely late dials within moments of entering the
 * call: a probe before this would only cost it an accept. */
#define PROBE_AFTER_S 1.0
#define PROBE_EVERY_S 1.0

static struct ccl__tcp_state *state_of(struct ccl__tcp_conn *c) {
    return *ccl__tstate(c->base.comm, &ccl__transport_tcp);
}

static const char *host_of(const struct ccl__tcp_conn *c) { return c->base.comm->peers[c->base.peer].hostname; }

static int dials(const struct ccl__tcp_conn *c) { return c->base.comm->rank > c->base.peer; }

/* A dial or probe of the peer's listener failed with err: what that says
 * about the peer. */
static ccl_status_t fail_reaching(struct ccl__tcp_conn *c, int err, const char *what) {
    struct ccl_comm *comm = c->base.comm;
    int peer = c->base.peer;
    union ccl__sa addr;
    char name[80] = "?";
    if (ccl__tcp_peer_addr(comm, peer, &addr)) ccl__sa_str(&addr, name, sizeof(name));
    switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
        ccl__comm_blame(comm, peer, CCL__CULPRIT_EXITED);
        return ccl__tcp_fail(c, CCL_ERR_REMOTE,
                             "rank %d (%.64s) is gone: its listener at %s refused this rank's %s (its process "
                             "exited, or it destroyed the communicator) before the pair was first used",
                             peer, host_of(c), name, what);
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
        ccl__comm_blame(comm, peer, CCL__CULPRIT_UNREACHABLE);
        return ccl__tcp_fail(c, CCL_ERR_REMOTE,
                             "rank %d (%.64s) cannot be reached: its host at %s did not answer this rank's %s (%s, "
                             "CCL_LINK_TIMEOUT=%g); the link or the host is down",
                             peer, host_of(c), name, what, strerror(err), comm->params.link_timeout_s);
    case EMFILE:
    case ENFILE:
        return ccl__tcp_fail(c, CCL_ERR_SYSTEM,
                             "tcp: no file descriptor left for the %s of rank %d (%.64s) at %s: raise ulimit -n", what,
                             peer, host_of(c), name);
    default:
        return ccl__tcp_fail(c, CCL_ERR_SYSTEM, "tcp: %s of rank %d (%.64s) at %s: %s", what, peer, host_of(c), name,
                             strerror(err));
    }
}

/* A connect still on its way after CCL_LINK_TIMEOUT: the host does not
 * answer (a live listener answers at once, even before it accepts). */
static int overdue(const struct ccl__tcp_conn *c, double since) {
    double link_s = c->base.comm->params.link_timeout_s;
    return link_s > 0 && ccl__now() - since > link_s;
}

static ccl_status_t advance_dial(struct ccl__tcp_conn *c, int *moved) {
    struct ccl_comm *comm = c->base.comm;
    if (c->dial_fd < 0) {
        union ccl__sa addr;
        if (!ccl__tcp_peer_addr(comm, c->base.peer, &addr))
            return ccl__tcp_fail(c, CCL_ERR_INTERNAL, "tcp: rank %d (%.64s) has no TCP address", c->base.peer,
                                 host_of(c));
        int err = ccl__sock_connect_start(&addr, &c->dial_fd);
        if (err) return fail_reaching(c, err, "connection");
        c->probe_since = ccl__now();
    }
    int err = ccl__sock_connect_result(c->dial_fd);
    if (err < 0) return overdue(c, c->probe_since) ? fail_reaching(c, ETIMEDOUT, "connection") : CCL_INPROGRESS;
    if (err) return fail_reaching(c, err, "connection");
    /* An empty new socket takes the few bytes at once. */
    ccl_status_t st = ccl__tcp_hello_send(comm, c->dial_fd, CCL__TCP_HELLO_MAGIC, ccl__now() + comm->params.timeout_s);
    if (st != CCL_OK) return fail_reaching(c, ECONNRESET, "hello");
    if ((st = ccl__tcp_conn_link(c, c->dial_fd)) != CCL_OK) return c->failed = st; /* the error is set */
    c->dial_fd = -1;
    *moved = 1;
    CCL_INFO(CCL__SUB_NET, comm->rank, "tcp: connected to rank %d on first use, %.1f ms after the call first needed it",
             c->base.peer, (ccl__now() - c->link_since) * 1e3);
    return CCL_OK;
}

ccl_status_t ccl__tcp_link_advance(struct ccl__tcp_conn *c, int *moved) {
    if (c->failed) return c->failed;
    if (c->fd >= 0) return CCL_OK;
    if (c->link_since == 0) {
        c->link_since = ccl__now();
        c->next_probe = c->link_since + PROBE_AFTER_S;
    }
    if (dials(c)) return advance_dial(c, moved);
    int adopted = 0;
    ccl_status_t st = ccl__tcp_serve(c->base.comm, state_of(c), &adopted);
    if (st < 0) return c->failed = st; /* the error is set */
    if (adopted) *moved = 1;
    return c->fd >= 0 ? CCL_OK : CCL_INPROGRESS;
}

int ccl__tcp_link_wait_fd(struct ccl__tcp_conn *c, short *events) {
    *events = dials(c) ? POLLOUT : POLLIN;
    return dials(c) ? c->dial_fd : atomic_load(&state_of(c)->listen_fd);
}

/* The probe's connect answered: the higher rank lives. Its hello tells
 * the listener it is only a probe; best effort, the answer is in. */
static void probe_answered(struct ccl__tcp_conn *c) {
    /* No wait: an empty new socket takes it at once, or never will. */
    if (ccl__tcp_hello_send(c->base.comm, c->probe_fd, CCL__TCP_PROBE_MAGIC, ccl__now()) != CCL_OK)
        CCL_TRACE(CCL__SUB_NET, c->base.comm->rank, "tcp: the probe's hello to rank %d did not leave", c->base.peer);
    close(c->probe_fd);
    c->probe_fd = -1;
    c->next_probe = ccl__now() + PROBE_EVERY_S;
}

ccl_status_t ccl__tcp_link_check(struct ccl__tcp_conn *c) {
    int moved = 0;
    ccl_status_t st = ccl__tcp_link_advance(c, &moved);
    if (st != CCL_INPROGRESS || dials(c)) return st == CCL_INPROGRESS ? CCL_OK : st;
    if (c->probe_fd >= 0) {
        int err = ccl__sock_connect_result(c->probe_fd);
        if (err < 0) return overdue(c, c->probe_since) ? fail_reaching(c, ETIMEDOUT, "probe") : CCL_OK;
        if (err) return fail_reaching(c, err, "probe");
        probe_answered(c);
        return CCL_OK;
    }
    if (ccl__now() < c->next_probe) return CCL_OK;
    union ccl__sa addr;
    if (!ccl__tcp_peer_addr(c->base.comm, c->base.peer, &addr)) return CCL_OK;
    int err = ccl__sock_connect_start(&addr, &c->probe_fd);
    if (err) return fail_reaching(c, err, "probe");
    c->probe_since = ccl__now();
    return CCL_OK;
}
