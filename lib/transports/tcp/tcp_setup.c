/* The TCP transport's set-up: listen, connect to the lower ranks of the
 * pairs linked at init with a hello, accept the higher ones (tcp_accept.c
 * checks their hellos), poison and teardown.
 *
 * Every rank first connects to all its lower-ranked peers and only then
 * accepts; connects complete through the peers' listen backlogs, so the
 * order cannot deadlock. Pairs linked on first use get their connection
 * here too, without a socket (tcp_link.c links them). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/log.h"
#include "transports/tcp/tcp.h"

/* Longest sleep of the accept loop, so an abort is noticed even when poison
 * could not reach the listener. */
#define ACCEPT_POLL_S 0.1
/* Longest single connect attempt, for the same reason as ACCEPT_POLL_S. */
#define DIAL_STEP_S 0.5

_Static_assert(sizeof(union ccl__sa) <= CCL__TRANSPORT_BLOB_BYTES, "a socket address must fit a peer blob");

static struct ccl__tcp_state *tcp_state(struct ccl_comm *comm) { return *ccl__tstate(comm, &ccl__transport_tcp); }

int ccl__tcp_can_connect(const struct ccl__peer_info *a, const struct ccl__peer_info *b) {
    (void)a;
    (void)b;
    return 1; /* any two ranks where it initialised: the lowest score, so anything faster wins */
}

/* The address to listen on: the bootstrap address (numeric, no port), or
 * this host's address when bootstrap left it empty. */
static ccl_status_t listen_addr(struct ccl_comm *comm, union ccl__sa *a) {
    if (!comm->boot_addr[0]) return ccl__sa_local(comm->params.ifname, a);
    char hostport[sizeof(comm->boot_addr) + 8];
    const char *fmt = strchr(comm->boot_addr, ':') ? "[%.*s]:0" : "%.*s:0";
    snprintf(hostport, sizeof(hostport), fmt, (int)sizeof(comm->boot_addr), comm->boot_addr);
    return ccl__sa_parse(hostport, a);
}

ccl_status_t ccl__tcp_local_init(struct ccl_comm *comm, uint8_t blob[CCL__TRANSPORT_BLOB_BYTES]) {
    if (*ccl__tstate(comm, &ccl__transport_tcp))
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "tcp: local_init called twice");
    struct ccl__tcp_state *s = calloc(1, sizeof(*s));
    if (!s) return CCL_ERR_NO_MEMORY;
    s->nranks = comm->nranks;
    atomic_init(&s->listen_fd, -1);
    s->conns = calloc((size_t)comm->nranks, sizeof(*s->conns));
    s->fds = calloc((size_t)comm->nranks, sizeof(*s->fds));
    s->use = calloc((size_t)comm->nranks, 1);
    s->pend = calloc(CCL__TCP_MAX_PENDING, sizeof(*s->pend));
    *ccl__tstate(comm, &ccl__transport_tcp) = s; /* from here on teardown frees it */
    if (!s->conns || !s->fds || !s->use || !s->pend) return CCL_ERR_NO_MEMORY;
    for (int p = 0; p < comm->nranks; p++) atomic_init(&s->fds[p], -1);

    ccl_status_t st = listen_addr(comm, &s->addr);
    if (st != CCL_OK)
        return ccl__set_error(comm, st, "tcp: no usable address to listen on (bootstrap address '%.64s')",
                              comm->boot_addr);
    int fd;
    char name[80];
    ccl__sa_str(&s->addr, name, sizeof(name));
    if ((st = ccl__sock_listen(&s->addr, &fd)) != CCL_OK)
        return ccl__set_error(comm, st, "tcp: cannot listen on %s", name);
    atomic_store(&s->listen_fd, fd);
    ccl__sa_str(&s->addr, name, sizeof(name));
    CCL_INFO(CCL__SUB_NET, comm->rank, "tcp: listening on %s", name);
    memset(blob, 0, CCL__TRANSPORT_BLOB_BYTES);
    memcpy(blob, &s->addr, sizeof(s->addr));
    return CCL_OK;
}

/* The listener from local_init is all peers need; every pair this
 * transport serves gets its connection, still without a socket. */
ccl_status_t ccl__tcp_setup(struct ccl_comm *comm, const uint8_t *use) {
    struct ccl__tcp_state *s = tcp_state(comm);
    if (!s || atomic_load(&s->listen_fd) < 0)
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "tcp: setup without a listener (local_init failed?)");
    memcpy(s->use, use, (size_t)comm->nranks);
    for (int p = 0; p < comm->nranks; p++) {
        if (!use[p]) continue;
        ccl_status_t st = ccl__tcp_conn_new(comm, p, &s->conns[p]);
        if (st != CCL_OK) return st;
    }
    return CCL_OK;
}

/* ---- connecting to lower ranks ---- */

static ccl_status_t dial(struct ccl_comm *comm, struct ccl__tcp_state *s, int p, double deadline) {
    const struct ccl__peer_info *info = &comm->peers[p];
    union ccl__sa addr;
    int reachable = ccl__tcp_peer_addr(comm, p, &addr);
    char name[80];
    ccl__sa_str(&addr, name, sizeof(name));
    if (!reachable)
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "tcp: rank %d (%.64s) has no TCP address", p, info->hostname);
    int fd = -1;
    ccl_status_t st;
    do {
        if ((st = ccl__comm_health(comm)) < 0 || (st = ccl__boot_told(comm)) < 0) return st;
        double step = ccl__now() + DIAL_STEP_S;
        st = ccl__sock_connect(&addr, step < deadline ? step : deadline, &fd);
    } while (st == CCL_ERR_TIMEOUT && ccl__now() < deadline);
    if (st != CCL_OK)
        return ccl__set_error(comm, st, "tcp: cannot connect to rank %d (%.64s) at %s%s", p, info->hostname, name,
                              st == CCL_ERR_TIMEOUT ? " before the deadline (CCL_TIMEOUT)" : "");
    if ((st = ccl__tcp_hello_send(comm, fd, CCL__TCP_HELLO_MAGIC, deadline)) != CCL_OK) {
        close(fd);
        return ccl__set_error(comm, st, "tcp: sending hello to rank %d (%.64s) at %s failed", p, info->hostname, name);
    }
    if ((st = ccl__tcp_conn_link(s->conns[p], fd)) != CCL_OK) {
        close(fd);
        return st;
    }
    CCL_INFO(CCL__SUB_NET, comm->rank, "tcp: connected to rank %d at %s", p, name);
    return CCL_OK;
}

/* ---- accepting higher ranks ---- */

static ccl_status_t timeout_error(struct ccl_comm *comm, struct ccl__tcp_state *s) {
    char missing[200] = "";
    size_t o = 0;
    for (int p = comm->rank + 1; p < comm->nranks; p++) {
        if (s->use[p] != CCL__USE_AT_INIT || s->conns[p]->fd >= 0) continue;
        if (o + 16 >= sizeof(missing)) {
            snprintf(missing + o, sizeof(missing) - o, ", ...");
            break;
        }
        o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", o ? ", " : "", p);
    }
    return ccl__set_error(comm, CCL_ERR_TIMEOUT,
                          "tcp: rank %d waited %g s (CCL_TIMEOUT) for connections; rank(s) %s never connected",
                          comm->rank, comm->params.timeout_s, missing);
}

static ccl_status_t accept_peers(struct ccl_comm *comm, struct ccl__tcp_state *s, double deadline) {
    int expected = 0, adopted = 0;
    for (int p = comm->rank + 1; p < comm->nranks; p++) expected += s->use[p] == CCL__USE_AT_INIT;
    struct pollfd pfd[CCL__TCP_MAX_PENDING + 2];
    int lfd = atomic_load(&s->listen_fd);
    ccl_status_t st = CCL_OK;
    while (adopted < expected) {
        if ((st = ccl__comm_health(comm)) < 0 || (st = ccl__boot_told(comm)) < 0) break;
        double now = ccl__now();
        if (now >= deadline) {
            st = timeout_error(comm, s);
            break;
        }
        double wake = now + ACCEPT_POLL_S < deadline ? now + ACCEPT_POLL_S : deadline;
        for (int i = 0; i < s->npend; i++)
            if (s->pend[i].since + CCL__TCP_HELLO_TIMEOUT_S < wake) wake = s->pend[i].since + CCL__TCP_HELLO_TIMEOUT_S;
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < s->npend; i++) pfd[i + 1] = (struct pollfd){.fd = s->pend[i].fd, .events = POLLIN};
        /* The root answers early when a rank fails: wake for it at once. */
        pfd[s->npend + 1] = (struct pollfd){.fd = comm->boot_fd, .events = POLLIN};
        int ms = (int)((wake - now) * 1000.0) + 1;
        if (poll(pfd, (nfds_t)s->npend + 2, ms) < 0 && errno != EINTR) {
            st = ccl__set_error(comm, CCL_ERR_SYSTEM, "tcp: poll: %s", strerror(errno));
            break;
        }
        if ((st = ccl__tcp_serve(comm, s, &adopted)) != CCL_OK) break;
    }
    if (st != CCL_OK) ccl__tcp_drop_pending(comm, s, "set-up failed");
    return st;
}

ccl_status_t ccl__tcp_connect(struct ccl_comm *comm, const uint8_t *use, struct ccl__conn **conns) {
    struct ccl__tcp_state *s = tcp_state(comm);
    if (!s || atomic_load(&s->listen_fd) < 0)
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "tcp: connect without a listener (local_init failed?)");
    double deadline = ccl__now() + comm->params.timeout_s;
    ccl_status_t st = CCL_OK;
    (void)use; /* setup kept it */
    for (int p = 0; p < comm->rank && st == CCL_OK; p++)
        if (s->use[p] == CCL__USE_AT_INIT && s->conns[p]->fd < 0) st = dial(comm, s, p, deadline);
    ccl__test_fault_point(comm, "connect"); /* dialed the lower ranks, the higher ones wait for us */
    if (st == CCL_OK) st = accept_peers(comm, s, deadline);
    /* Pairs for first use are there already; the others once linked. */
    for (int p = 0; p < comm->nranks; p++)
        if (s->conns[p] && (s->conns[p]->fd >= 0 || s->use[p] == CCL__USE_ON_FIRST_USE)) conns[p] = &s->conns[p]->base;
    return st;
}

static void close_listener(struct ccl__tcp_state *s) {
    int fd = atomic_exchange(&s->listen_fd, -1);
    if (fd >= 0) close(fd);
}

ccl_status_t ccl__tcp_setup_done(struct ccl_comm *comm) {
    struct ccl__tcp_state *s = tcp_state(comm);
    if (!s) return CCL_OK;
    ccl__tcp_drop_pending(comm, s, "set-up finished before its hello");
    ccl__log_drops_total(CCL__SUB_NET, comm->rank, "tcp set-up", s->dropped);
    int later = 0;
    for (int p = 0; p < comm->nranks; p++) later += s->use[p] == CCL__USE_ON_FIRST_USE;
    /* Pairs linked on first use dial this listener, and probe it. */
    if (later) {
        s->serving_lazy = 1;
        CCL_INFO(CCL__SUB_NET, comm->rank, "tcp: %d pair(s) connect when first used", later);
        return CCL_OK;
    }
    close_listener(s);
    return CCL_OK;
}

void ccl__tcp_teardown(struct ccl_comm *comm) {
    struct ccl__tcp_state *s = tcp_state(comm);
    if (!s) return;
    if (s->pend) ccl__tcp_drop_pending(comm, s, "the communicator is going");
    close_listener(s);
    for (int p = 0; s->conns && p < s->nranks; p++) {
        if (!s->conns[p]) continue;
        atomic_store(&s->fds[p], -1);
        ccl__tcp_conn_free(s->conns[p]);
        s->conns[p] = NULL;
    }
    free(s->conns);
    free(s->fds);
    free(s->use);
    free(s->pend);
    free(s);
    *ccl__tstate(comm, &ccl__transport_tcp) = NULL;
}

/* May run on another thread than the data path (ccl_comm_abort): it only
 * reads the atomic descriptors and shuts the sockets, which makes every
 * peer's next read see end-of-file at once. */
void ccl__tcp_poison(struct ccl_comm *comm, int status) {
    (void)status;
    struct ccl__tcp_state *s = tcp_state(comm);
    if (!s) return;
    for (int p = 0; s->fds && p < s->nranks; p++) {
        int fd = atomic_load(&s->fds[p]);
        if (fd >= 0) shutdown(fd, SHUT_RDWR);
    }
    int lfd = atomic_load(&s->listen_fd);
    if (lfd >= 0) shutdown(lfd, SHUT_RDWR);
}
