/* The TCP transport's acceptor: what arrives on a rank's listener, at
 * set-up and (for pairs linked on first use) for the communicator's life.
 *
 * Nothing here blocks. Connections are taken from the backlog in bounded
 * batches and their hellos read as they arrive, many at once, so a
 * stranger that connects and stays silent costs the real peers nothing:
 * it is dropped after CCL__TCP_HELLO_TIMEOUT_S, or pushed out when
 * strangers fill every place. A hello that proves the communicator's
 * secret links the connection to the peer it names; a probe (tcp_link.c)
 * is closed quietly. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/log.h"
#include "transports/tcp/tcp.h"

/* Connections taken from the backlog per call. */
#define ACCEPT_BATCH 256

ccl_status_t ccl__tcp_hello_send(const struct ccl_comm *comm, int fd, uint32_t magic, double deadline) {
    struct ccl__tcp_hello h = {
        .magic = magic, .version = CCL__TCP_HELLO_VERSION, .comm_id = comm->comm_id, .rank = comm->rank};
    memcpy(h.secret, comm->secret, sizeof(h.secret));
    ccl_status_t st = ccl__sock_send_all(fd, &h, sizeof(h), deadline);
    explicit_bzero(h.secret, sizeof(h.secret));
    return st;
}

int ccl__tcp_peer_addr(const struct ccl_comm *comm, int peer, union ccl__sa *addr) {
    memcpy(addr, ccl__peer_blob(comm, peer, &ccl__transport_tcp), sizeof(*addr));
    return (comm->peers[peer].transport_mask & (1u << ccl__transport_index(&ccl__transport_tcp))) &&
           ccl__sa_len(addr) != 0;
}

static void drop(struct ccl_comm *comm, struct ccl__tcp_state *s, struct ccl__tcp_pending *pd, const char *why) {
    CCL_DROP(CCL__SUB_NET, comm->rank, s->dropped, "tcp: dropped connection from %s: %s", pd->from, why);
    close(pd->fd);
    pd->fd = -1;
}

/* The hello is complete: the rank it proves, or -1 with *why set. */
static int check_hello(struct ccl_comm *comm, struct ccl__tcp_state *s, const struct ccl__tcp_hello *h, char *why,
                       size_t n) {
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
    else if (h->magic == CCL__TCP_PROBE_MAGIC)
        return r; /* any member may ask whether this rank lives */
    else if (r <= comm->rank || !s->use[r] || !s->conns[r] ||
             (s->use[r] != CCL__USE_AT_INIT && !s->serving_lazy))
        snprintf(why, n, "rank %d is not expected to connect to rank %d%s", r, comm->rank,
                 s->use[r] && r > comm->rank ? " yet" : "");
    else if (s->conns[r]->fd >= 0)
        snprintf(why, n, "rank %d is already connected", r);
    else
        return r;
    return -1;
}

/* Reads what has arrived of pd's hello; links the connection when it is
 * complete and valid, drops it when it cannot be. */
static ccl_status_t read_hello(struct ccl_comm *comm, struct ccl__tcp_state *s, struct ccl__tcp_pending *pd,
                               int *adopted) {
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
    uint32_t magic = pd->hello.magic;
    if (pd->got >= sizeof(magic) && magic != CCL__TCP_HELLO_MAGIC && magic != CCL__TCP_PROBE_MAGIC) {
        snprintf(why, sizeof(why), "not a libccl tcp hello (magic %08x)", magic);
        drop(comm, s, pd, why);
        return CCL_OK;
    }
    if (pd->got < sizeof(pd->hello)) return CCL_OK;
    int rank = check_hello(comm, s, &pd->hello, why, sizeof(why));
    explicit_bzero(pd->hello.secret, sizeof(pd->hello.secret));
    if (rank < 0) {
        drop(comm, s, pd, why);
        return CCL_OK;
    }
    if (magic == CCL__TCP_PROBE_MAGIC) {
        CCL_TRACE(CCL__SUB_NET, comm->rank, "tcp: rank %d checked that this rank is alive", rank);
        close(pd->fd);
        pd->fd = -1;
        return CCL_OK;
    }
    ccl_status_t st = ccl__tcp_conn_link(s->conns[rank], pd->fd);
    if (st != CCL_OK) return st; /* pd->fd is still ours: the caller closes it */
    CCL_INFO(CCL__SUB_NET, comm->rank, "tcp: accepted rank %d from %s", rank, pd->from);
    pd->fd = -1;
    (*adopted)++;
    return CCL_OK;
}

static int compact(struct ccl__tcp_pending *pend, int npend) {
    int n = 0;
    for (int i = 0; i < npend; i++)
        if (pend[i].fd >= 0) pend[n++] = pend[i];
    return n;
}

/* Takes the connections waiting in the backlog (a bounded batch) and
 * reads what each already sent. When strangers fill every place, the
 * oldest goes at once: a real peer sends its hello as it connects, so it
 * is read, and linked, as soon as it is accepted; strangers only push
 * each other out. */
static ccl_status_t accept_new(struct ccl_comm *comm, struct ccl__tcp_state *s, int lfd, int *adopted) {
    struct ccl__tcp_pending *pend = s->pend;
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
            if (errno == EMFILE || errno == ENFILE)
                return ccl__set_error(comm, CCL_ERR_SYSTEM,
                                      "tcp: accept: %s (this rank has run out of file descriptors: raise ulimit -n)",
                                      strerror(errno));
            return ccl__set_error(comm, CCL_ERR_SYSTEM, "tcp: accept: %s", strerror(errno));
        }
        if (s->npend == CCL__TCP_MAX_PENDING) {
            drop(comm, s, &pend[0], "too many connections without a hello");
            memmove(&pend[0], &pend[1], sizeof(pend[0]) * (CCL__TCP_MAX_PENDING - 1));
            s->npend--;
        }
        struct ccl__tcp_pending *pd = &pend[s->npend++];
        memset(pd, 0, sizeof(*pd));
        pd->fd = fd;
        pd->since = ccl__now();
        ccl__sa_str(&from, pd->from, sizeof(pd->from));
        ccl_status_t st = read_hello(comm, s, pd, adopted);
        if (st != CCL_OK) return st;
        if (pd->fd < 0) s->npend--; /* linked, closed or dropped already */
    }
    return CCL_OK;
}

ccl_status_t ccl__tcp_serve(struct ccl_comm *comm, struct ccl__tcp_state *s, int *adopted) {
    int lfd = atomic_load(&s->listen_fd);
    if (lfd < 0) return CCL_OK;
    double now = ccl__now();
    ccl_status_t st = CCL_OK;
    for (int i = 0; i < s->npend && st == CCL_OK; i++) {
        struct ccl__tcp_pending *pd = &s->pend[i];
        if (pd->since + CCL__TCP_HELLO_TIMEOUT_S <= now) {
            char why[96];
            snprintf(why, sizeof(why), "no complete hello within %g s (%zu of %zu bytes)", CCL__TCP_HELLO_TIMEOUT_S,
                     pd->got, sizeof(pd->hello));
            drop(comm, s, pd, why);
        } else {
            st = read_hello(comm, s, pd, adopted);
        }
    }
    s->npend = compact(s->pend, s->npend);
    if (st == CCL_OK) st = accept_new(comm, s, lfd, adopted);
    return st;
}

void ccl__tcp_drop_pending(struct ccl_comm *comm, struct ccl__tcp_state *s, const char *why) {
    for (int i = 0; i < s->npend; i++)
        if (s->pend[i].fd >= 0) drop(comm, s, &s->pend[i], why);
    s->npend = 0;
}
