/* The TCP transport's set-up: listen, connect to lower ranks with a hello,
 * accept higher ranks (checking their hellos), poison and teardown.
 *
 * Every rank first connects to all its lower-ranked peers and only then
 * accepts; connects complete through the peers' listen backlogs, so the
 * order cannot deadlock. The acceptor reads hellos from many connections at
 * once, so a stranger that connects and stays silent costs the real peers
 * nothing; it is dropped after HELLO_TIMEOUT_S or when set-up ends. */
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

#define HELLO_TIMEOUT_S 5.0
#define MAX_PENDING 64
/* Longest sleep of the accept loop, so an abort is noticed even when poison
 * could not reach the listener. */
#define ACCEPT_POLL_S 0.1
/* Connections taken from the backlog per turn of the accept loop. */
#define ACCEPT_BATCH 256
/* Longest single connect attempt, for the same reason as ACCEPT_POLL_S. */
#define DIAL_STEP_S 0.5

_Static_assert(sizeof(union ccl__sa) <= CCL__TRANSPORT_BLOB_BYTES, "a socket address must fit a peer blob");

/* An accepted connection whose hello has not fully arrived. */
struct pending {
    int fd;
    double since;
    size_t got;
    char from[80];
    struct ccl__tcp_hello hello;
};

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
    *ccl__tstate(comm, &ccl__transport_tcp) = s; /* from here on teardown frees it */
    if (!s->conns || !s->fds) return CCL_ERR_NO_MEMORY;
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

ccl_status_t ccl__tcp_setup(struct ccl_comm *comm, const uint8_t *use) {
    (void)use; /* the listener from local_init is all peers need */
    if (!tcp_state(comm) || atomic_load(&tcp_state(comm)->listen_fd) < 0)
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "tcp: setup without a listener (local_init failed?)");
    return CCL_OK;
}

static void keep_conn(struct ccl__tcp_state *s, int peer, struct ccl__tcp_conn *c) {
    s->conns[peer] = c;
    atomic_store(&s->fds[peer], c->fd);
}

/* ---- connecting to lower ranks ---- */

static ccl_status_t dial(struct ccl_comm *comm, struct ccl__tcp_state *s, int p, double deadline) {
    const struct ccl__peer_info *info = &comm->peers[p];
    union ccl__sa addr;
    memcpy(&addr, ccl__peer_blob(comm, p, &ccl__transport_tcp), sizeof(addr));
    char name[80];
    ccl__sa_str(&addr, name, sizeof(name));
    if (!(info->transport_mask & (1u << ccl__transport_index(&ccl__transport_tcp))) || ccl__sa_len(&addr) == 0)
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
    struct ccl__tcp_hello hello = {
        .magic = CCL__TCP_HELLO_MAGIC, .version = CCL__TCP_HELLO_VERSION, .comm_id = comm->comm_id, .rank = comm->rank};
    memcpy(hello.secret, comm->secret, sizeof(hello.secret));
    st = ccl__sock_send_all(fd, &hello, sizeof(hello), deadline);
    explicit_bzero(hello.secret, sizeof(hello.secret));
    if (st != CCL_OK) {
        close(fd);
        return ccl__set_error(comm, st, "tcp: sending hello to rank %d (%.64s) at %s failed", p, info->hostname, name);
    }
    struct ccl__tcp_conn *c;
    if ((st = ccl__tcp_conn_new(comm, p, fd, &c)) != CCL_OK) {
        close(fd);
        return st;
    }
    keep_conn(s, p, c);
    CCL_INFO(CCL__SUB_NET, comm->rank, "tcp: connected to rank %d at %s", p, name);
    return CCL_OK;
}

/* ---- accepting higher ranks ---- */

static void drop(struct ccl_comm *comm, struct ccl__tcp_state *s, struct pending *pd, const char *why) {
    CCL_DROP(CCL__SUB_NET, comm->rank, s->dropped, "tcp: dropped connection from %s: %s", pd->from, why);
    close(pd->fd);
    pd->fd = -1;
}

/* The hello is complete: the rank it proves, or -1 with *why set. */
static int check_hello(struct ccl_comm *comm, struct ccl__tcp_state *s, const uint8_t *use,
                       const struct ccl__tcp_hello *h, char *why, size_t n) {
    int r = h->rank;
    if (h->version != CCL__TCP_HELLO_VERSION)
        snprintf(why, n, "protocol version %u, expected %u", h->version, CCL__TCP_HELLO_VERSION);
    else if (!ccl__secret_equal(h->secret, comm->secret, CCL__SECRET_BYTES))
        snprintf(why, n, "wrong secret");
    else if (h->comm_id != comm->comm_id)
        snprintf(why, n, "communicator id %016llx, expected %016llx", (unsigned long long)h->comm_id,
                 (unsigned long long)comm->comm_id);
    else if (r < 0 || r >= comm->nranks)
        snprintf(why, n, "claims rank %d of %d", r, comm->nranks);
    else if (r <= comm->rank || !use[r])
        snprintf(why, n, "rank %d is not expected to connect to rank %d", r, comm->rank);
    else if (s->conns[r])
        snprintf(why, n, "rank %d is already connected", r);
    else
        return r;
    return -1;
}

/* Reads what has arrived of pd's hello; adopts the connection when it is
 * complete and valid, drops it when it cannot be. */
static ccl_status_t read_hello(struct ccl_comm *comm, struct ccl__tcp_state *s, const uint8_t *use,
                               struct pending *pd, int *adopted) {
    char why[160];
    ssize_t r = recv(pd->fd, (char *)&pd->hello + pd->got, sizeof(pd->hello) - pd->got, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return CCL_OK;
    if (r <= 0) {
        snprintf(why, sizeof(why), "%s after %zu of %zu hello bytes", r == 0 ? "closed" : strerror(errno), pd->got,
                 sizeof(pd->hello));
        drop(comm, s, pd, why);
        return CCL_OK;
    }
    pd->got += (size_t)r;
    /* A wrong magic is garbage: no need to wait for the rest of it. */
    if (pd->got >= sizeof(pd->hello.magic) && pd->hello.magic != CCL__TCP_HELLO_MAGIC) {
        snprintf(why, sizeof(why), "not a libccl tcp hello (magic %08x)", pd->hello.magic);
        drop(comm, s, pd, why);
        return CCL_OK;
    }
    if (pd->got < sizeof(pd->hello)) return CCL_OK;
    int rank = check_hello(comm, s, use, &pd->hello, why, sizeof(why));
    explicit_bzero(pd->hello.secret, sizeof(pd->hello.secret));
    if (rank < 0) {
        drop(comm, s, pd, why);
        return CCL_OK;
    }
    struct ccl__tcp_conn *c;
    ccl_status_t st = ccl__tcp_conn_new(comm, rank, pd->fd, &c);
    if (st != CCL_OK) return st; /* pd->fd is still ours: the caller closes it */
    keep_conn(s, rank, c);
    CCL_INFO(CCL__SUB_NET, comm->rank, "tcp: accepted rank %d from %s", rank, pd->from);
    pd->fd = -1;
    (*adopted)++;
    return CCL_OK;
}

static int compact(struct pending *pend, int npend) {
    int n = 0;
    for (int i = 0; i < npend; i++)
        if (pend[i].fd >= 0) pend[n++] = pend[i];
    return n;
}

/* Takes the connections waiting in the backlog (a bounded batch) and
 * reads what each already sent. When strangers fill every place, the
 * oldest goes at once: a real peer sends its hello as it connects, so it
 * is read, and adopted, as soon as it is accepted; strangers only push
 * each other out. */
static ccl_status_t accept_new(struct ccl_comm *comm, struct ccl__tcp_state *s, const uint8_t *use, int lfd,
                               struct pending *pend, int *npend, int *adopted) {
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        union ccl__sa from;
        socklen_t len = sizeof(from);
        memset(&from, 0, sizeof(from));
        int fd = accept4(lfd, &from.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return CCL_OK;
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
            ccl_status_t st = ccl__comm_health(comm);
            if (st < 0) return st; /* poison shut the listener */
            return ccl__set_error(comm, CCL_ERR_SYSTEM, "tcp: accept: %s", strerror(errno));
        }
        if (*npend == MAX_PENDING) {
            drop(comm, s, &pend[0], "too many connections without a hello");
            memmove(&pend[0], &pend[1], sizeof(pend[0]) * (MAX_PENDING - 1));
            (*npend)--;
        }
        struct pending *pd = &pend[(*npend)++];
        memset(pd, 0, sizeof(*pd));
        pd->fd = fd;
        pd->since = ccl__now();
        ccl__sa_str(&from, pd->from, sizeof(pd->from));
        ccl_status_t st = read_hello(comm, s, use, pd, adopted);
        if (st != CCL_OK) return st;
        if (pd->fd < 0) (*npend)--; /* adopted or dropped already */
    }
    return CCL_OK;
}

static ccl_status_t timeout_error(struct ccl_comm *comm, struct ccl__tcp_state *s, const uint8_t *use) {
    char missing[200] = "";
    size_t o = 0;
    for (int p = comm->rank + 1; p < comm->nranks; p++) {
        if (!use[p] || s->conns[p]) continue;
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

static ccl_status_t accept_peers(struct ccl_comm *comm, struct ccl__tcp_state *s, const uint8_t *use,
                                 double deadline) {
    int expected = 0, adopted = 0, npend = 0;
    for (int p = comm->rank + 1; p < comm->nranks; p++) expected += use[p] != 0;
    struct pending pend[MAX_PENDING];
    struct pollfd pfd[MAX_PENDING + 2];
    int lfd = atomic_load(&s->listen_fd);
    ccl_status_t st = CCL_OK;
    while (adopted < expected) {
        if ((st = ccl__comm_health(comm)) < 0 || (st = ccl__boot_told(comm)) < 0) break;
        double now = ccl__now();
        if (now >= deadline) {
            st = timeout_error(comm, s, use);
            break;
        }
        double wake = now + ACCEPT_POLL_S < deadline ? now + ACCEPT_POLL_S : deadline;
        for (int i = 0; i < npend; i++) {
            if (pend[i].since + HELLO_TIMEOUT_S <= now) {
                char why[96];
                snprintf(why, sizeof(why), "no complete hello within %g s (%zu of %zu bytes)", HELLO_TIMEOUT_S,
                         pend[i].got, sizeof(pend[i].hello));
                drop(comm, s, &pend[i], why);
            } else if (pend[i].since + HELLO_TIMEOUT_S < wake) {
                wake = pend[i].since + HELLO_TIMEOUT_S;
            }
        }
        npend = compact(pend, npend);
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < npend; i++) pfd[i + 1] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
        /* The root answers early when a rank fails: wake for it at once. */
        pfd[npend + 1] = (struct pollfd){.fd = comm->boot_fd, .events = POLLIN};
        int ms = (int)((wake - now) * 1000.0) + 1;
        if (poll(pfd, (nfds_t)npend + 2, ms) < 0 && errno != EINTR) {
            st = ccl__set_error(comm, CCL_ERR_SYSTEM, "tcp: poll: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < npend && st == CCL_OK; i++)
            if (pfd[i + 1].revents) st = read_hello(comm, s, use, &pend[i], &adopted);
        npend = compact(pend, npend);
        if (st == CCL_OK && adopted < expected && pfd[0].revents)
            st = accept_new(comm, s, use, lfd, pend, &npend, &adopted);
        if (st != CCL_OK) break;
    }
    for (int i = 0; i < npend; i++)
        if (pend[i].fd >= 0)
            drop(comm, s, &pend[i], st == CCL_OK ? "set-up finished before its hello" : "set-up failed");
    ccl__log_drops_total(CCL__SUB_NET, comm->rank, "tcp set-up", s->dropped);
    return st;
}

ccl_status_t ccl__tcp_connect(struct ccl_comm *comm, const uint8_t *use, struct ccl__conn **conns) {
    struct ccl__tcp_state *s = tcp_state(comm);
    if (!s || atomic_load(&s->listen_fd) < 0)
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "tcp: connect without a listener (local_init failed?)");
    double deadline = ccl__now() + comm->params.timeout_s;
    ccl_status_t st = CCL_OK;
    for (int p = 0; p < comm->rank && st == CCL_OK; p++)
        if (use[p] && !s->conns[p]) st = dial(comm, s, p, deadline);
    ccl__test_fault_point(comm, "connect"); /* dialed the lower ranks, the higher ones wait for us */
    if (st == CCL_OK) st = accept_peers(comm, s, use, deadline);
    for (int p = 0; p < comm->nranks; p++)
        if (use[p] && s->conns[p]) conns[p] = &s->conns[p]->base;
    return st;
}

ccl_status_t ccl__tcp_setup_done(struct ccl_comm *comm) {
    struct ccl__tcp_state *s = tcp_state(comm);
    if (!s) return CCL_OK;
    int fd = atomic_exchange(&s->listen_fd, -1);
    if (fd >= 0) close(fd);
    return CCL_OK;
}

void ccl__tcp_teardown(struct ccl_comm *comm) {
    struct ccl__tcp_state *s = tcp_state(comm);
    if (!s) return;
    ccl__tcp_setup_done(comm);
    for (int p = 0; s->conns && p < s->nranks; p++) {
        if (!s->conns[p]) continue;
        atomic_store(&s->fds[p], -1);
        ccl__tcp_conn_free(s->conns[p]);
        s->conns[p] = NULL;
    }
    free(s->conns);
    free(s->fds);
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
