/* The pair channel (core/boot_pair.h): one listener per rank, one lazily
 * dialled connection per ordered pair, framed messages, a queue of
 * messages not yet asked for. */
#define _GNU_SOURCE /* accept4 */
#include "core/boot_pair.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/boot_proto.h"
#include "core/log.h"

#define MAX_UNPROVEN 64        /* connections still owing a hello; the oldest goes first */
#define PUMP_MS 50             /* how often a wait looks at deadlines and the communicator's health */

struct pair_msg_hdr {
    uint32_t tag;
    uint32_t bytes;
};

struct msg {
    struct msg *next;
    int from;
    uint32_t tag;
    uint32_t bytes;
    uint8_t data[];
};

enum stage { HELLO, HEADER, BODY };

struct inbound {
    int fd;
    int from; /* -1 until the hello is proven */
    enum stage stage;
    double hello_deadline;
    size_t got; /* of the hello, the header or the body */
    struct ccl__pair_hello hello;
    struct pair_msg_hdr hdr;
    struct msg *msg; /* BODY: being filled */
    char where[64];
};

struct ccl__pair_chan {
    pthread_mutex_t lock;
    int lfd;
    int *out;      /* [nranks]: our connection to each peer, -1 until needed */
    uint8_t *gone; /* [nranks]: the peer closed a connection with us (exited, or destroyed its communicator) */
    struct inbound *in;
    int nin, cap;
    struct msg *head; /* arrived, not yet received: arrival order */
    int dropped;      /* connections refused (strangers) */
    int outlive;      /* waits go on after the communicator failed (ccl__pair_outlive_failure) */
};

ccl_status_t ccl__pair_listen(struct ccl_comm *comm, union ccl__sa *addr) {
    struct ccl__pair_chan *ch = calloc(1, sizeof(*ch));
    if (!ch) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory for the pair channel");
    ch->lfd = -1;
    pthread_mutex_init(&ch->lock, NULL);
    comm->pairs = ch;
    ch->out = malloc((size_t)comm->nranks * sizeof(*ch->out));
    ch->gone = calloc((size_t)comm->nranks, 1);
    if (!ch->out || !ch->gone)
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory for the pair channel");
    for (int p = 0; p < comm->nranks; p++) ch->out[p] = -1;
    char host[80];
    snprintf(host, sizeof(host), strchr(comm->boot_addr, ':') ? "[%s]:0" : "%s:0", comm->boot_addr);
    ccl_status_t st = ccl__sa_parse(host, addr);
    if (st == CCL_OK) st = ccl__sock_listen(addr, &ch->lfd);
    if (st != CCL_OK) return ccl__set_error(comm, st, "init: cannot listen for pair messages on %s", comm->boot_addr);
    return CCL_OK;
}

static void drop_inbound(struct ccl__pair_chan *ch, int i) {
    close(ch->in[i].fd);
    free(ch->in[i].msg);
    ch->in[i] = ch->in[--ch->nin];
}

static void refuse(struct ccl_comm *comm, struct ccl__pair_chan *ch, int i, const char *why) {
    CCL_DROP(CCL__SUB_BOOT, comm->rank, ch->dropped, "pair channel: dropped connection from %s: %s", ch->in[i].where,
             why);
    drop_inbound(ch, i);
}

/* A proven peer's connection ended (cleanly or not): later receives from
 * it fail once its queued messages are taken. */
static void peer_gone(struct ccl_comm *comm, struct ccl__pair_chan *ch, int i, const char *how) {
    struct inbound *b = &ch->in[i];
    if (b->stage != HEADER || b->got)
        CCL_WARN(CCL__SUB_BOOT, comm->rank, "pair channel: rank %d's connection %s in the middle of a message",
                 b->from, how);
    ch->gone[b->from] = 1;
    drop_inbound(ch, i);
}

static int prove(struct ccl_comm *comm, struct ccl__pair_chan *ch, const struct ccl__pair_hello *h, char *why,
                 size_t n) {
    if (h->version != CCL__PAIR_VERSION)
        snprintf(why, n, "protocol version %u, expected %u", h->version, CCL__PAIR_VERSION);
    else if (!ccl__secret_equal(h->secret, comm->secret, CCL__SECRET_BYTES)) snprintf(why, n, "wrong secret");
    else if (h->comm_id != comm->comm_id)
        snprintf(why, n, "communicator id %016llx, expected %016llx", (unsigned long long)h->comm_id,
                 (unsigned long long)comm->comm_id);
    else if (h->to != comm->rank) snprintf(why, n, "addressed to rank %d", h->to);
    else if (h->from < 0 || h->from >= comm->nranks || h->from == comm->rank)
        snprintf(why, n, "claims rank %d of %d", h->from, comm->nranks);
    else {
        for (int j = 0; j < ch->nin; j++)
            if (ch->in[j].from == h->from) {
                snprintf(why, n, "rank %d is already connected", h->from);
                return -1;
            }
        return h->from;
    }
    return -1;
}

/* Where the bytes of the current stage go, and how many are still owed. */
static uint8_t *stage_buf(struct inbound *b, size_t *want) {
    switch (b->stage) {
    case HELLO: *want = sizeof(b->hello); return (uint8_t *)&b->hello;
    case HEADER: *want = sizeof(b->hdr); return (uint8_t *)&b->hdr;
    default: *want = b->msg->bytes; return b->msg->data;
    }
}

/* A stage's bytes are complete. 0: go on reading; -1: connection i was
 * dropped. */
static int stage_done(struct ccl_comm *comm, struct ccl__pair_chan *ch, int i) {
    struct inbound *b = &ch->in[i];
    char why[160];
    b->got = 0;
    if (b->stage == HELLO) {
        int from = prove(comm, ch, &b->hello, why, sizeof(why));
        explicit_bzero(b->hello.secret, sizeof(b->hello.secret));
        if (from < 0) {
            refuse(comm, ch, i, why);
            return -1;
        }
        b->from = from;
        b->stage = HEADER;
        return 0;
    }
    if (b->stage == HEADER) {
        if (b->hdr.bytes > CCL__PAIR_MAX_BYTES) {
            snprintf(why, sizeof(why), "a message of %u bytes (at most %u)", b->hdr.bytes, CCL__PAIR_MAX_BYTES);
            CCL_WARN(CCL__SUB_BOOT, comm->rank, "pair channel: rank %d sent %s", b->from, why);
            peer_gone(comm, ch, i, "was cut");
            return -1;
        }
        b->msg = malloc(sizeof(*b->msg) + b->hdr.bytes);
        if (!b->msg) {
            CCL_WARN(CCL__SUB_BOOT, comm->rank, "pair channel: out of memory for a message from rank %d", b->from);
            peer_gone(comm, ch, i, "was cut");
            return -1;
        }
        *b->msg = (struct msg){.from = b->from, .tag = b->hdr.tag, .bytes = b->hdr.bytes};
        b->stage = BODY;
        if (b->hdr.bytes) return 0;
    }
    struct msg **tail = &ch->head; /* BODY complete: queue it */
    while (*tail) tail = &(*tail)->next;
    *tail = b->msg;
    b->msg = NULL;
    b->stage = HEADER;
    return 0;
}

/* Reads what connection i has, without blocking. */
static void read_inbound(struct ccl_comm *comm, struct ccl__pair_chan *ch, int i) {
    for (;;) {
        struct inbound *b = &ch->in[i];
        size_t want;
        uint8_t *buf = stage_buf(b, &want); /* want > got: a complete stage moves on at once */
        ssize_t r = recv(b->fd, buf + b->got, want - b->got, MSG_DONTWAIT);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (r <= 0) {
            char how[96];
            snprintf(how, sizeof(how), "%s", r == 0 ? "closed" : strerror(errno));
            if (b->from >= 0) peer_gone(comm, ch, i, how);
            else refuse(comm, ch, i, how);
            return;
        }
        b->got += (size_t)r;
        if (b->stage == HELLO && b->got >= sizeof(b->hello.magic) && b->hello.magic != CCL__PAIR_MAGIC) {
            char why[64];
            snprintf(why, sizeof(why), "not a libccl pair hello (magic %08x)", b->hello.magic);
            refuse(comm, ch, i, why);
            return;
        }
        if (b->got < want) continue;
        if (stage_done(comm, ch, i) < 0) return;
    }
}

static void accept_all(struct ccl_comm *comm, struct ccl__pair_chan *ch) {
    for (;;) {
        union ccl__sa from;
        socklen_t len = sizeof(from);
        int fd = accept4(ch->lfd, &from.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;
        int unproven = 0, oldest = -1;
        for (int j = 0; j < ch->nin; j++)
            if (ch->in[j].from < 0 && (unproven++, oldest < 0)) oldest = j;
        if (unproven >= MAX_UNPROVEN) refuse(comm, ch, oldest, "too many connections still owe a hello");
        if (ch->nin == ch->cap) {
            int cap = ch->cap ? 2 * ch->cap : 8;
            struct inbound *in = realloc(ch->in, (size_t)cap * sizeof(*in));
            if (!in) {
                close(fd);
                return;
            }
            ch->in = in, ch->cap = cap;
        }
        struct inbound *b = &ch->in[ch->nin++];
        *b = (struct inbound){.fd = fd, .from = -1, .stage = HELLO, .hello_deadline = ccl__now() + CCL__BOOT_HELLO_S};
        ccl__sa_str(&from, b->where, sizeof(b->where));
    }
}

/* One round: wait up to ms for anything on the listener, an inbound
 * connection or `fd` (events), then take in what arrived. *revents gets
 * fd's events. Returns how many inbound descriptors had something. */
static int pump(struct ccl_comm *comm, struct ccl__pair_chan *ch, int ms, int fd, short events, short *revents) {
    double now = ccl__now();
    for (int i = ch->nin - 1; i >= 0; i--)
        if (ch->in[i].from < 0 && now > ch->in[i].hello_deadline) refuse(comm, ch, i, "no hello in time");
    int n = ch->nin + 2;
    struct pollfd stack[66], *pf = n <= 66 ? stack : malloc((size_t)n * sizeof(*pf));
    if (!pf) return 0;
    pf[0] = (struct pollfd){.fd = ch->lfd, .events = POLLIN};
    pf[1] = (struct pollfd){.fd = fd, .events = events};
    for (int i = 0; i < ch->nin; i++) pf[i + 2] = (struct pollfd){.fd = ch->in[i].fd, .events = POLLIN};
    int ready = poll(pf, (nfds_t)n, ms), busy = 0;
    if (revents) *revents = ready > 0 ? pf[1].revents : 0;
    /* Back to front: reading may drop connection i, which moves the last
     * one into its place (already handled). */
    for (int i = ch->nin - 1; ready > 0 && i >= 0; i--)
        if (pf[i + 2].revents) busy++, read_inbound(comm, ch, i);
    if (ready > 0 && pf[0].revents) busy++, accept_all(comm, ch);
    if (pf != stack) free(pf);
    return busy;
}

/* Everything already here (connections waiting to be accepted, bytes in
 * the kernel): a peer that died after sending still has its messages
 * delivered. */
static void drain(struct ccl_comm *comm, struct ccl__pair_chan *ch) {
    while (pump(comm, ch, 0, -1, 0, NULL) > 0) {
    }
}

static ccl_status_t gone_error(struct ccl_comm *comm, int peer, const char *doing) {
    return ccl__set_error(comm, CCL_ERR_REMOTE, "pair channel: rank %d (%.64s, pid %d) is gone %s", peer,
                          comm->peers[peer].hostname, (int)comm->peers[peer].pid, doing);
}

static ccl_status_t check_waiting(struct ccl_comm *comm, double deadline, int peer, const char *doing) {
    ccl_status_t st = comm->pairs->outlive ? CCL_OK : ccl__comm_health(comm);
    if (st < 0) return st;
    if (ccl__now() > deadline)
        return ccl__set_error(comm, CCL_ERR_TIMEOUT, "pair channel: rank %d (%.64s) did not answer %s in time (%g s, "
                                                     "CCL_TIMEOUT)",
                              peer, comm->peers[peer].hostname, doing, comm->params.timeout_s);
    return CCL_OK;
}

/* Writes all of buf on our connection to peer, taking in inbound traffic
 * whenever the socket is full. */
static ccl_status_t write_all(struct ccl_comm *comm, struct ccl__pair_chan *ch, int peer, const void *buf, size_t n,
                              double deadline, const char *doing) {
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = send(ch->out[peer], p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            p += w, n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            ch->gone[peer] = 1;
            return gone_error(comm, peer, doing);
        }
        CCL_CHECK(check_waiting(comm, deadline, peer, doing));
        pump(comm, ch, PUMP_MS, ch->out[peer], POLLOUT, NULL);
    }
    return CCL_OK;
}

/* Our connection to peer carries nothing back: readable means the peer
 * closed it. */
static void watch_out(struct ccl__pair_chan *ch, int peer) {
    char c;
    ssize_t r = recv(ch->out[peer], &c, 1, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) ch->gone[peer] = 1;
}

/* Our connection to peer, dialled and proven on first use. */
static ccl_status_t dial(struct ccl_comm *comm, struct ccl__pair_chan *ch, int peer, double deadline) {
    if (ch->out[peer] >= 0) return CCL_OK;
    if (ch->gone[peer]) return gone_error(comm, peer, "(it closed its pair channel)");
    const union ccl__sa *addr = &comm->peers[peer].pair_addr;
    char where[80];
    ccl__sa_str(addr, where, sizeof(where));
    int fd;
    ccl_status_t st = ccl__sock_connect_up(addr, deadline, &fd);
    if (st == CCL_ERR_REMOTE) {
        ch->gone[peer] = 1;
        return ccl__set_error(comm, st, "pair channel: rank %d (%.64s, pid %d) refuses connections at %s: it "
                                        "exited or destroyed its communicator",
                              peer, comm->peers[peer].hostname, (int)comm->peers[peer].pid, where);
    }
    if (st != CCL_OK)
        return ccl__set_error(comm, st, "pair channel: cannot reach rank %d (%.64s) at %s", peer,
                              comm->peers[peer].hostname, where);
    ccl__sock_nonblock(fd);
    ch->out[peer] = fd;
    struct ccl__pair_hello h = {.magic = CCL__PAIR_MAGIC, .version = CCL__PAIR_VERSION, .comm_id = comm->comm_id,
                           .from = comm->rank, .to = peer};
    memcpy(h.secret, comm->secret, sizeof(h.secret));
    st = write_all(comm, ch, peer, &h, sizeof(h), deadline, "when greeted");
    explicit_bzero(h.secret, sizeof(h.secret));
    return st;
}

static ccl_status_t check_peer_arg(struct ccl_comm *comm, int peer, size_t bytes, const char *what) {
    if (!comm->pairs) return ccl__set_error(comm, CCL_ERR_INTERNAL, "pair channel: not open");
    if (peer < 0 || peer >= comm->nranks || peer == comm->rank)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "pair channel: %s rank %d (this is rank %d of %d)",
                              what, peer, comm->rank, comm->nranks);
    if (bytes > CCL__PAIR_MAX_BYTES)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "pair channel: a message of %zu bytes (at most %u)",
                              bytes, CCL__PAIR_MAX_BYTES);
    return CCL_OK;
}

ccl_status_t ccl__pair_send(struct ccl_comm *comm, int peer, uint32_t tag, const void *buf, size_t bytes) {
    return ccl__pair_send_within(comm, peer, tag, buf, bytes, comm->params.timeout_s);
}

ccl_status_t ccl__pair_send_within(struct ccl_comm *comm, int peer, uint32_t tag, const void *buf, size_t bytes,
                                   double seconds) {
    CCL_CHECK(check_peer_arg(comm, peer, bytes, "send to"));
    struct ccl__pair_chan *ch = comm->pairs;
    double deadline = ccl__now() + seconds;
    pthread_mutex_lock(&ch->lock);
    struct pair_msg_hdr h = {.tag = tag, .bytes = (uint32_t)bytes};
    if (ch->out[peer] >= 0) watch_out(ch, peer);
    ccl_status_t st =
        ch->gone[peer] ? gone_error(comm, peer, "(it closed its pair channel)") : dial(comm, ch, peer, deadline);
    if (st == CCL_OK) st = write_all(comm, ch, peer, &h, sizeof(h), deadline, "while sent to");
    if (st == CCL_OK) st = write_all(comm, ch, peer, buf, bytes, deadline, "while sent to");
    pthread_mutex_unlock(&ch->lock);
    return st;
}

static struct msg *take(struct ccl__pair_chan *ch, int peer, uint32_t tag) {
    for (struct msg **m = &ch->head; *m; m = &(*m)->next)
        if ((*m)->from == peer && (*m)->tag == tag) {
            struct msg *found = *m;
            *m = found->next;
            return found;
        }
    return NULL;
}

/* A message taken for a receive: its bytes into buf when it is exactly
 * `bytes` long (else the two ranks disagree: CCL_ERR_REMOTE, error set);
 * frees it either way. */
static ccl_status_t deliver(struct ccl_comm *comm, struct msg *m, int peer, uint32_t tag, void *buf, size_t bytes) {
    ccl_status_t st = CCL_OK;
    if (m->bytes != bytes)
        st = ccl__set_error(comm, CCL_ERR_REMOTE,
                            "pair channel: rank %d sent %u bytes under tag %u, rank %d expected %zu", peer, m->bytes,
                            tag, comm->rank, bytes);
    else if (bytes) memcpy(buf, m->data, bytes);
    free(m);
    return st;
}

ccl_status_t ccl__pair_recv(struct ccl_comm *comm, int peer, uint32_t tag, void *buf, size_t bytes) {
    return ccl__pair_recv_until(comm, peer, tag, buf, bytes, ccl__now() + comm->params.timeout_s);
}

ccl_status_t ccl__pair_recv_until(struct ccl_comm *comm, int peer, uint32_t tag, void *buf, size_t bytes,
                                  double deadline) {
    CCL_CHECK(check_peer_arg(comm, peer, bytes, "receive from"));
    struct ccl__pair_chan *ch = comm->pairs;
    char doing[48];
    snprintf(doing, sizeof(doing), "with message tag %u", tag);
    pthread_mutex_lock(&ch->lock);
    /* Dialling the peer (if no message went there yet) is how we learn
     * that it died: its end of our connection closes. */
    ccl_status_t st = CCL_OK;
    struct msg *m = NULL;
    while (!(m = take(ch, peer, tag))) {
        if (ch->gone[peer] || (st = dial(comm, ch, peer, deadline)) != CCL_OK) {
            drain(comm, ch);
            if ((m = take(ch, peer, tag))) {
                st = CCL_OK; /* it died after sending this one */
                break;
            }
            if (st == CCL_OK) st = gone_error(comm, peer, "before sending the message it owes");
            break;
        }
        if ((st = check_waiting(comm, deadline, peer, doing)) != CCL_OK) break;
        short rev = 0;
        pump(comm, ch, PUMP_MS, ch->out[peer], POLLIN, &rev);
        if (rev) watch_out(ch, peer);
    }
    pthread_mutex_unlock(&ch->lock);
    return m ? deliver(comm, m, peer, tag, buf, bytes) : st;
}

ccl_status_t ccl__pair_exchange(struct ccl_comm *comm, int peer, uint32_t tag, const void *mine, void *theirs,
                                size_t bytes) {
    CCL_CHECK(ccl__pair_send(comm, peer, tag, mine, bytes));
    return ccl__pair_recv(comm, peer, tag, theirs, bytes);
}

static struct msg *take_any(struct ccl__pair_chan *ch, uint32_t tag) {
    for (struct msg **m = &ch->head; *m; m = &(*m)->next)
        if ((*m)->tag == tag) {
            struct msg *found = *m;
            *m = found->next;
            return found;
        }
    return NULL;
}

int ccl__pair_poll(struct ccl_comm *comm, uint32_t tag, int *from, void *buf, size_t bytes) {
    struct ccl__pair_chan *ch = comm->pairs;
    if (!ch || pthread_mutex_trylock(&ch->lock) != 0) return 0;
    drain(comm, ch);
    struct msg *found = take_any(ch, tag);
    pthread_mutex_unlock(&ch->lock);
    if (!found) return 0;
    int ok = found->bytes == bytes;
    if (ok) {
        *from = found->from;
        memcpy(buf, found->data, bytes);
    }
    free(found);
    return ok;
}

void ccl__pair_outlive_failure(struct ccl_comm *comm) {
    struct ccl__pair_chan *ch = comm->pairs;
    if (!ch) return;
    pthread_mutex_lock(&ch->lock);
    ch->outlive = 1;
    pthread_mutex_unlock(&ch->lock);
}

int ccl__pair_recv_any(struct ccl_comm *comm, uint32_t tag, int *from, void *buf, size_t bytes, int ms) {
    struct ccl__pair_chan *ch = comm->pairs;
    if (!ch) return 0;
    double deadline = ccl__now() + ms * 1e-3;
    pthread_mutex_lock(&ch->lock);
    struct msg *m;
    for (;;) {
        drain(comm, ch);
        if ((m = take_any(ch, tag)) && m->bytes != bytes) {
            CCL_WARN(CCL__SUB_BOOT, comm->rank, "pair channel: rank %d sent %u bytes under tag %08x, expected %zu: "
                     "dropped", m->from, m->bytes, tag, bytes);
            free(m);
            continue;
        }
        double left = deadline - ccl__now();
        if (m || left <= 0) break;
        pump(comm, ch, (int)(left * 1e3) + 1, -1, 0, NULL);
    }
    pthread_mutex_unlock(&ch->lock);
    if (!m) return 0;
    *from = m->from;
    memcpy(buf, m->data, bytes);
    free(m);
    return 1;
}

int ccl__pair_alive(struct ccl_comm *comm, int peer, double seconds) {
    struct ccl__pair_chan *ch = comm->pairs;
    if (!ch || peer < 0 || peer >= comm->nranks || peer == comm->rank) return 1;
    pthread_mutex_lock(&ch->lock);
    drain(comm, ch);
    if (!ch->gone[peer] && ch->out[peer] >= 0) watch_out(ch, peer);
    int alive = !ch->gone[peer] && dial(comm, ch, peer, ccl__now() + seconds) == CCL_OK;
    if (!alive) ch->gone[peer] = 1;
    pthread_mutex_unlock(&ch->lock);
    return alive;
}

int ccl__pair_take(struct ccl_comm *comm, int peer, uint32_t tag, void *buf, size_t bytes) {
    struct ccl__pair_chan *ch = comm->pairs;
    if (!ch || peer < 0 || peer >= comm->nranks || pthread_mutex_trylock(&ch->lock) != 0) return 0;
    drain(comm, ch);
    struct msg *m = take(ch, peer, tag);
    pthread_mutex_unlock(&ch->lock);
    if (!m) return 0;
    ccl_status_t st = deliver(comm, m, peer, tag, buf, bytes);
    return st == CCL_OK ? 1 : st;
}

int ccl__pair_wait_fd(struct ccl_comm *comm, int peer) {
    struct ccl__pair_chan *ch = comm->pairs;
    if (!ch || pthread_mutex_trylock(&ch->lock) != 0) return -1;
    int fd = ch->lfd;
    for (int i = 0; i < ch->nin; i++)
        if (ch->in[i].from == peer) fd = ch->in[i].fd;
    pthread_mutex_unlock(&ch->lock);
    return fd;
}

int ccl__pair_gone(struct ccl_comm *comm, int peer) {
    struct ccl__pair_chan *ch = comm->pairs;
    if (!ch || peer < 0 || peer >= comm->nranks || pthread_mutex_trylock(&ch->lock) != 0) return 0;
    drain(comm, ch);
    if (!ch->gone[peer] && ch->out[peer] >= 0) watch_out(ch, peer);
    int gone = ch->gone[peer];
    pthread_mutex_unlock(&ch->lock);
    return gone;
}

void ccl__pair_close(struct ccl_comm *comm) {
    struct ccl__pair_chan *ch = comm->pairs;
    if (!ch) return;
    comm->pairs = NULL;
    ccl__log_drops_total(CCL__SUB_BOOT, comm->rank, "pair channel", ch->dropped);
    if (ch->lfd >= 0) close(ch->lfd);
    for (int p = 0; ch->out && p < comm->nranks; p++)
        if (ch->out[p] >= 0) close(ch->out[p]);
    while (ch->nin) drop_inbound(ch, ch->nin - 1);
    while (ch->head) {
        struct msg *m = ch->head;
        ch->head = m->next;
        free(m);
    }
    free(ch->in);
    free(ch->out);
    free(ch->gone);
    pthread_mutex_destroy(&ch->lock);
    free(ch);
}
