/*
 * The bootstrap root: a thread that gathers every rank's info, hands the
 * table back, then serves the set-up rounds and exits. Strangers (wrong
 * secret, garbage, silence) are logged and dropped; they never stop or
 * crash the root.
 */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/boot_proto.h"
#include "core/bootstrap.h"
#include "core/log.h"
#include "core/params.h"
#include "core/peer.h"

/* Connections that have not proven the secret yet are capped; when a new
 * one arrives with every place taken, the oldest goes. A real rank sends
 * its hello as it connects, and the root reads a connection as soon as it
 * accepts it, so strangers, however many and however silent, cannot keep
 * a real rank out: they only push each other out. */
#define MAX_UNPROVEN 512

struct pending {
    int fd;
    double since;
    double hello_deadline;
    size_t got;                         /* of the hello, then of the record */
    struct ccl__boot_hello hello;
    uint8_t *record;                    /* allocated once the hello is proven */
    char addr[64];
};

/* The roots this process runs, so that a rank of this process does not
 * return from init, and perhaps exit, while its root still owes the other
 * ranks their last answer (ccl__boot_root_wait). An entry outlives its
 * root: the waiter, or the next root started, frees it. */
struct root_entry {
    uint8_t secret[CCL__SECRET_BYTES];
    pid_t pid; /* the process whose thread serves it: a child forked after the id was made has the entry, not
                * the thread */
    int done;
    struct root_entry *next;
};
static pthread_mutex_t roots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t roots_done = PTHREAD_COND_INITIALIZER;
static struct root_entry *roots;

/* A process that made an id often forks its ranks next (a launcher, a
 * test, Python's multiprocessing), and the first child connects to the
 * root while the parent forks the second. A root thread that is inside
 * malloc at that fork hands the child an allocator lock held by a thread
 * the child does not have: glibc's malloc guards against that, a
 * sanitizer's allocator (gcc 12's AddressSanitizer) does not, and the
 * child waits forever at its first allocation of that size. So a root
 * thread holds root_turn while it works and lets go only while it waits
 * in poll, and fork takes it first (fork_prepare): a fork waits for the
 * turn in progress, at most FORK_WAIT_S (a peer that does not read can
 * keep a send going), and then forks anyway. roots_lock is taken too, so
 * no child inherits it held either. */
static pthread_mutex_t root_turn = PTHREAD_MUTEX_INITIALIZER;
static int fork_holds_turn;
#define FORK_WAIT_S 1.0

static void fork_prepare(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)FORK_WAIT_S;
    fork_holds_turn = pthread_mutex_timedlock(&root_turn, &ts) == 0;
    pthread_mutex_lock(&roots_lock);
}

/* In the parent and in the child alike: the forking thread took both. */
static void fork_release(void) {
    pthread_mutex_unlock(&roots_lock);
    if (fork_holds_turn) pthread_mutex_unlock(&root_turn);
    fork_holds_turn = 0;
}

static pthread_once_t fork_gate_once = PTHREAD_ONCE_INIT;
static void install_fork_gate(void) { pthread_atfork(fork_prepare, fork_release, fork_release); }

/* The root's waits: root_turn is free while it sleeps in poll. */
static int root_poll(struct pollfd *pfd, nfds_t n, int timeout_ms) {
    pthread_mutex_unlock(&root_turn);
    int rc = poll(pfd, n, timeout_ms);
    int saved = errno;
    pthread_mutex_lock(&root_turn);
    errno = saved;
    return rc;
}

struct root {
    struct root_entry *entry;
    int *started; /* the starter's flag, set (under roots_lock) once the thread runs */
    int lfd;
    uint8_t secret[CCL__SECRET_BYTES];
    uint8_t member_token[CCL__SECRET_BYTES]; /* a grow's: ranks below members_below must hold it too */
    int members_below;                       /* 0: an ordinary root */
    double timeout_s;
    double deadline;
    int nranks;               /* from the first valid hello, 0 before */
    uint32_t record_bytes;    /* every rank's (this build's) */
    int joined;
    int *fds;                 /* [nranks] */
    char (*addrs)[64];        /* [nranks]: where each joined rank connected from */
    uint8_t *records;         /* [nranks][record_bytes], opaque here */
    uint8_t *told;            /* [nranks]: after a failure, the ranks that have heard of it */
    int ntold;
    struct ccl__boot_table_hdr failure; /* status != CCL_OK once the job cannot form */
    struct pending *pend;
    int npend, cap_pend;
    struct pollfd *pfd;       /* [cap_pend + 1] */
    int dropped;              /* connections refused or dropped */
    int formed;               /* the job formed: a hello now claims a rank already taken */
};

static void drop(struct root *r, int i, const char *why) {
    CCL_DROP(CCL__SUB_BOOT, -1, r->dropped, "bootstrap root: dropped connection from %s: %s", r->pend[i].addr, why);
    close(r->pend[i].fd);
    free(r->pend[i].record);
    r->pend[i] = r->pend[--r->npend];
}

static void refuse_with(struct root *r, int i, const struct ccl__boot_table_hdr *h) {
    ccl__sock_send_all(r->pend[i].fd, h, sizeof(*h), ccl__now() + 1.0);
    drop(r, i, h->msg);
}

static void refuse(struct root *r, int i, int32_t status, const char *fmt, int a, int b) {
    struct ccl__boot_table_hdr h = {.status = status};
    snprintf(h.msg, sizeof(h.msg), fmt, a, b);
    refuse_with(r, i, &h);
}

/* The job cannot form: every rank that joined hears why now, every rank
 * that comes later when it does. */
static void fail_job(struct root *r, int32_t status, const char *msg) {
    r->failure.status = status;
    snprintf(r->failure.msg, sizeof(r->failure.msg), "%s", msg);
    CCL_WARN(CCL__SUB_BOOT, -1, "bootstrap root: %s", msg);
    for (int k = 0; k < r->nranks; k++) {
        if (r->fds[k] < 0) continue;
        ccl__sock_send_all(r->fds[k], &r->failure, sizeof(r->failure), ccl__now() + 1.0);
        close(r->fds[k]);
        r->fds[k] = -1;
        r->told[k] = 1;
        r->ntold++;
    }
}

/* A complete hello and record arrived on pending connection i: adopt or
 * refuse (only now, so that the rank, done sending, reads why). */
static void adopt(struct root *r, int i) {
    struct ccl__boot_hello h = r->pend[i].hello;
    if (h.nranks <= 0 || h.rank < 0 || h.rank >= h.nranks) {
        refuse(r, i, CCL_ERR_INVALID_ARGUMENT, "rank %d is out of range for %d ranks", h.rank, h.nranks);
        return;
    }
    if (h.record_bytes != r->record_bytes) {
        refuse(r, i, CCL_ERR_INVALID_ARGUMENT, "rank sent a peer record of %d bytes where this libccl's are %d "
               "(ranks from different builds?)", (int)h.record_bytes, (int)r->record_bytes);
        return;
    }
    if (r->nranks == 0) {
        r->nranks = h.nranks;
        r->fds = malloc(sizeof(int) * (size_t)h.nranks);
        r->addrs = calloc((size_t)h.nranks, sizeof(*r->addrs));
        r->told = calloc((size_t)h.nranks, 1);
        r->records = calloc((size_t)h.nranks, r->record_bytes);
        if (!r->fds || !r->addrs || !r->told || !r->records) {
            refuse(r, i, CCL_ERR_NO_MEMORY, "bootstrap root out of memory (%d ranks)%.0d", h.nranks, 0);
            r->nranks = 0;
            free(r->fds);
            free(r->addrs);
            free(r->told);
            free(r->records);
            r->fds = NULL;
            r->addrs = NULL;
            r->told = NULL;
            r->records = NULL;
            return;
        }
        for (int k = 0; k < h.nranks; k++) r->fds[k] = -1;
    }
    if (h.nranks != r->nranks) {
        refuse(r, i, CCL_ERR_INVALID_ARGUMENT, "nranks %d differs from the %d given by the first rank", h.nranks,
               r->nranks);
        return;
    }
    if (r->failure.status != CCL_OK) {
        if (!r->told[h.rank]) r->told[h.rank] = 1, r->ntold++;
        refuse_with(r, i, &r->failure);
        return;
    }
    if (r->formed) {
        struct ccl__boot_table_hdr late = {.status = CCL_ERR_INVALID_USAGE};
        snprintf(late.msg, sizeof(late.msg), "rank %d of %d was already claimed, from %s, and the job formed without "
                 "this process (two processes started as one rank, or a stranger holds the job's secret)", h.rank,
                 r->nranks, r->addrs[h.rank]);
        CCL_WARN(CCL__SUB_BOOT, -1, "bootstrap root: refused %s: %s", r->pend[i].addr, late.msg);
        refuse_with(r, i, &late);
        return;
    }
    if (r->fds[h.rank] >= 0) {
        /* Two processes hold the secret and one rank: no way to tell which
         * is the real one, so nobody goes on. */
        char msg[sizeof(r->failure.msg)];
        snprintf(msg, sizeof(msg), "rank %d of %d was claimed twice, from %s and from %s; no rank may go on "
                 "(two processes started as one rank, or a stranger holds the job's secret)", h.rank, r->nranks,
                 r->addrs[h.rank], r->pend[i].addr);
        fail_job(r, CCL_ERR_INVALID_USAGE, msg);
        refuse_with(r, i, &r->failure);
        return;
    }
    r->fds[h.rank] = r->pend[i].fd;
    snprintf(r->addrs[h.rank], sizeof(r->addrs[h.rank]), "%s", r->pend[i].addr);
    memcpy(r->records + (size_t)h.rank * r->record_bytes, r->pend[i].record, r->record_bytes);
    r->joined++;
    CCL_TRACE(CCL__SUB_BOOT, -1, "bootstrap root: rank %d of %d joined from %s", h.rank, h.nranks, r->pend[i].addr);
    free(r->pend[i].record);
    r->pend[i] = r->pend[--r->npend];
}

/* Read what pending connection i has; validate the hello as soon as it is
 * complete so a stranger is dropped before it can send more. */
static void feed(struct root *r, int i) {
    struct pending *p = &r->pend[i];
    const size_t hb = sizeof(p->hello);
    int in_hello = p->record == NULL;
    uint8_t *to = in_hello ? (uint8_t *)&p->hello + p->got : p->record + (p->got - hb);
    size_t want = in_hello ? hb - p->got : hb + p->hello.record_bytes - p->got;
    ssize_t n = read(p->fd, to, want);
    if (n == 0) return drop(r, i, "closed before joining");
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        return drop(r, i, strerror(errno));
    }
    p->got += (size_t)n;
    if (in_hello && p->got == hb) {
        const struct ccl__boot_hello *h = &p->hello;
        if (h->magic != CCL__BOOT_MAGIC) return drop(r, i, "not a libccl bootstrap hello");
        if (h->version != CCL__BOOT_VERSION) return drop(r, i, "bootstrap protocol version differs");
        if (!ccl__secret_equal(h->secret, r->secret, CCL__SECRET_BYTES)) return drop(r, i, "wrong secret");
        if (h->rank >= 0 && h->rank < r->members_below &&
            !ccl__secret_equal(h->member_token, r->member_token, CCL__SECRET_BYTES)) {
            CCL_WARN(CCL__SUB_BOOT, -1, "bootstrap root: refused %s: it claims rank %d, one of the growing "
                     "communicator's %d ranks, without proof that it is that rank (a rank excluded earlier, a stale "
                     "process, or a stranger holding the newcomers' id)", p->addr, h->rank, r->members_below);
            return drop(r, i, "no proof of membership");
        }
        if (h->record_bytes == 0 || h->record_bytes > CCL__BOOT_MAX_RECORD)
            return refuse(r, i, CCL_ERR_INVALID_ARGUMENT, "a peer record of %d bytes (at most %d)",
                          (int)h->record_bytes, (int)CCL__BOOT_MAX_RECORD);
        if (!(p->record = malloc(h->record_bytes)))
            return refuse(r, i, CCL_ERR_NO_MEMORY, "bootstrap root out of memory (%d bytes)%.0d", (int)h->record_bytes,
                          0);
        p->hello_deadline = r->deadline; /* proven: it may take its time for the record */
        return;
    }
    if (!in_hello && p->got == hb + p->hello.record_bytes) adopt(r, i);
}

/* The oldest connection that has not proven the secret, or -1. */
static int oldest_unproven(const struct root *r, int *count) {
    int oldest = -1;
    *count = 0;
    for (int i = 0; i < r->npend; i++) {
        if (r->pend[i].record) continue;
        (*count)++;
        if (oldest < 0 || r->pend[i].since < r->pend[oldest].since) oldest = i;
    }
    return oldest;
}

static int grow_pending(struct root *r) {
    if (r->npend < r->cap_pend) return 1;
    int cap = r->cap_pend ? r->cap_pend * 2 : 16;
    struct pending *grown = realloc(r->pend, sizeof(*grown) * (size_t)cap);
    if (!grown) return 0;
    r->pend = grown;
    struct pollfd *pfd = realloc(r->pfd, sizeof(*pfd) * (size_t)(cap + 1));
    if (!pfd) return 0;
    r->pfd = pfd;
    r->cap_pend = cap;
    return 1;
}

/* Takes one connection from the backlog and reads what it already sent.
 * Returns 0 when the backlog is empty (or nothing more can be taken). */
static int accept_one(struct root *r) {
    int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    /* Only a full house or a shortage of descriptors needs the oldest. */
    int unproven = 0, oldest = -1;
    if (fd < 0 || r->npend >= MAX_UNPROVEN) oldest = oldest_unproven(r, &unproven);
    if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) return 1;
        /* Out of descriptors: strangers hold them. The oldest goes, and
         * the next round takes the newcomer. */
        if ((errno == EMFILE || errno == ENFILE) && oldest >= 0) {
            drop(r, oldest, "out of file descriptors: the oldest connection without a hello goes");
            return 1;
        }
        return 0;
    }
    if (unproven >= MAX_UNPROVEN) drop(r, oldest, "too many connections without a hello: the oldest goes");
    if (!grow_pending(r)) {
        close(fd);
        return 0;
    }
    struct pending *p = &r->pend[r->npend++];
    *p = (struct pending){.fd = fd, .since = ccl__now()};
    p->hello_deadline = p->since + CCL__BOOT_HELLO_S;
    union ccl__sa peer;
    socklen_t len = sizeof(peer);
    if (getpeername(fd, &peer.sa, &len) == 0) ccl__sa_str(&peer, p->addr, sizeof(p->addr));
    else snprintf(p->addr, sizeof(p->addr), "?");
    feed(r, r->npend - 1);
    return 1;
}

/* One turn of the root's loop: drop connections silent too long, read
 * what arrived, take new connections. Returns 0 once the deadline passed. */
static int serve_pending(struct root *r) {
    double now = ccl__now();
    if (now > r->deadline) return 0;
    for (int i = r->npend - 1; i >= 0; i--)
        if (now > r->pend[i].hello_deadline) drop(r, i, "said nothing in time");
    if (!grow_pending(r)) return 1;
    int n = 0;
    r->pfd[n++] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
    for (int i = 0; i < r->npend; i++) r->pfd[n++] = (struct pollfd){.fd = r->pend[i].fd, .events = POLLIN};
    if (root_poll(r->pfd, (nfds_t)n, 100) <= 0) return 1;
    /* Pending entries move when one is dropped: walk backwards. */
    for (int i = n - 1; i >= 1; i--)
        if (r->pfd[i].revents && i - 1 < r->npend && r->pend[i - 1].fd == r->pfd[i].fd) feed(r, i - 1);
    /* A bounded batch, so the connections already here are read again soon. */
    for (int k = 0; k < 64 && (r->pfd[0].revents & POLLIN) && accept_one(r); k++) {
    }
    return 1;
}

static ccl_status_t gather(struct root *r) {
    while (r->failure.status == CCL_OK && (r->nranks == 0 || r->joined < r->nranks))
        if (!serve_pending(r)) return CCL_ERR_TIMEOUT;
    return (ccl_status_t)r->failure.status;
}

#define LATE_GRACE_S 0.5 /* the longest the root answers latecomers once the job formed */

/* A process that connected while the job formed (its hello waits in the
 * listening queue) hears that its rank was taken, and by whom, rather than
 * finding the connection closed. Nothing waiting: done at once. */
static void refuse_latecomers(struct root *r) {
    r->formed = 1;
    double until = ccl__now() + LATE_GRACE_S;
    while (ccl__now() < until) {
        struct pollfd p = {.fd = r->lfd, .events = POLLIN};
        if (r->npend == 0 && root_poll(&p, 1, 0) <= 0) return;
        if (!serve_pending(r)) return;
    }
}

/* The deadline passed with ranks missing: every rank that joined hears
 * which ones never came and where they were to come (this root), so the
 * job's log names the rank that never started wherever it is read. */
static void fail_missing(struct root *r) {
    char msg[sizeof r->failure.msg], where[80] = "?";
    union ccl__sa self;
    socklen_t len = sizeof self;
    if (getsockname(r->lfd, &self.sa, &len) == 0) ccl__sa_str(&self, where, sizeof where);
    if (r->nranks == 0) {
        snprintf(msg, sizeof msg, "no rank joined the bootstrap root at %s within %g s (CCL_TIMEOUT)", where,
                 r->timeout_s);
        CCL_WARN(CCL__SUB_BOOT, -1, "bootstrap root: %s", msg);
        return;
    }
    int o = snprintf(msg, sizeof msg, "%d of %d ranks joined within %g s (CCL_TIMEOUT); never connected to the "
                     "bootstrap root at %s: rank", r->joined, r->nranks, r->timeout_s, where);
    int listed = 0, missing = r->nranks - r->joined;
    for (int k = 0; k < r->nranks && o > 0 && (size_t)o < sizeof msg; k++) {
        if (r->fds[k] >= 0) continue;
        if ((size_t)o + 32 > sizeof msg) {
            snprintf(msg + o, sizeof msg - (size_t)o, " and %d more", missing - listed);
            break;
        }
        o += snprintf(msg + o, sizeof msg - (size_t)o, "%s %d", listed ? "," : (missing > 1 ? "s" : ""), k);
        listed++;
    }
    fail_job(r, CCL_ERR_TIMEOUT, msg);
}

/* After a failure: tell every rank that still comes, until all have heard
 * or the deadline passes. */
static void tell_latecomers(struct root *r) {
    while (r->ntold < r->nranks && serve_pending(r)) {
    }
}

static void send_tables(struct root *r) {
    struct ccl__boot_table_hdr h = {.status = CCL_OK, .nranks = r->nranks};
    ccl__boot_clock_id(h.root_clock_id, sizeof(h.root_clock_id));
    if (getrandom(&h.comm_id, sizeof(h.comm_id), 0) != sizeof(h.comm_id)) h.comm_id = (uint64_t)getpid() << 32;
    double dl = ccl__now() + r->timeout_s;
    for (int k = 0; k < r->nranks; k++) {
        if (ccl__sock_send_all(r->fds[k], &h, sizeof(h), dl) == CCL_OK)
            ccl__sock_send_all(r->fds[k], r->records, (size_t)r->record_bytes * (size_t)r->nranks, dl);
    }
}

/* One round: every rank's status in, the first failure (or OK) out to all.
 * A rank whose connection dies counts as failed with CCL_ERR_REMOTE. The
 * first failure is answered at once to every rank still in its phase (it
 * watches the root while it waits on peers, so a death in set-up is an
 * error everywhere within moments, not at CCL_TIMEOUT); each rank still
 * gets exactly one answer per round. */
static int serve_round(struct root *r) {
    struct ccl__boot_round_msg out = {.status = CCL_OK, .rank = -1};
    int n = r->nranks, waiting = 0;
    uint8_t *in_round = calloc((size_t)n, 1), *answered = calloc((size_t)n, 1);
    struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
    if (!in_round || !answered || !pfd) {
        free(in_round), free(answered), free(pfd);
        return 0;
    }
    for (int k = 0; k < n; k++) waiting += in_round[k] = r->fds[k] >= 0;
    double dl = ccl__now() + r->timeout_s;
    while (waiting > 0) {
        int np = 0;
        for (int k = 0; k < n; k++)
            if (in_round[k]) pfd[np++] = (struct pollfd){.fd = r->fds[k], .events = POLLIN};
        double left = dl - ccl__now();
        int rc = left > 0 ? root_poll(pfd, (nfds_t)np, (int)(left * 1000) + 1) : 0;
        if (rc < 0 && errno == EINTR) continue;
        int failed_now = 0;
        for (int k = 0, i = 0; k < n; k++) {
            if (!in_round[k]) continue;
            int ready = rc > 0 && pfd[i++].revents;
            if (rc > 0 && !ready) continue;
            struct ccl__boot_round_msg in;
            /* Past the deadline (rc == 0) a rank that has not answered is lost. */
            ccl_status_t st = rc > 0 ? ccl__sock_recv_all(r->fds[k], &in, sizeof(in), ccl__now() + 1.0) : CCL_ERR_TIMEOUT;
            if (st != CCL_OK) {
                in = (struct ccl__boot_round_msg){.status = CCL_ERR_REMOTE, .rank = k};
                close(r->fds[k]);
                r->fds[k] = -1;
                answered[k] = 1;
            }
            in_round[k] = 0;
            waiting--;
            if (in.status != CCL_OK && out.status == CCL_OK) {
                out = (struct ccl__boot_round_msg){in.status, k, 0};
                failed_now = 1;
            }
        }
        if (!failed_now) continue;
        out.root_time = ccl__now();
        for (int k = 0; k < n; k++)
            if (r->fds[k] >= 0 && !answered[k]) {
                ccl__sock_send_all(r->fds[k], &out, sizeof(out), ccl__now() + 1.0);
                answered[k] = 1;
            }
    }
    out.root_time = ccl__now();
    for (int k = 0; k < n; k++)
        if (r->fds[k] >= 0 && !answered[k]) ccl__sock_send_all(r->fds[k], &out, sizeof(out), ccl__now() + r->timeout_s);
    free(in_round), free(answered), free(pfd);
    return out.status == CCL_OK;
}

/* A root's tables and the root itself (its descriptors closed already;
 * tables never made are NULL). */
static void root_free(struct root *r) {
    free(r->fds);
    free(r->addrs);
    free(r->told);
    free(r->records);
    free(r->pend);
    free(r->pfd);
    free(r);
}

static void *root_main(void *arg) {
    struct root *r = arg;
    pthread_mutex_lock(&roots_lock);
    *r->started = 1;
    r->started = NULL; /* the starter's stack: gone once it saw the flag */
    pthread_cond_broadcast(&roots_done);
    pthread_mutex_unlock(&roots_lock);
    pthread_mutex_lock(&root_turn);
    ccl_status_t st = gather(r);
    if (st == CCL_OK) {
        send_tables(r);
        for (int round = 0; round < CCL__BOOT_ROUNDS && serve_round(r); round++) {
        }
        refuse_latecomers(r);
    } else if (r->failure.status != CCL_OK) {
        tell_latecomers(r);
    } else {
        fail_missing(r);
    }
    ccl__log_drops_total(CCL__SUB_BOOT, -1, "bootstrap root", r->dropped);
    for (int k = 0; k < r->nranks; k++)
        if (r->fds[k] >= 0) close(r->fds[k]);
    for (int i = 0; i < r->npend; i++) {
        close(r->pend[i].fd);
        free(r->pend[i].record);
    }
    close(r->lfd);
    struct root_entry *entry = r->entry;
    root_free(r);
    pthread_mutex_lock(&roots_lock);
    entry->done = 1;
    pthread_cond_broadcast(&roots_done);
    pthread_mutex_unlock(&roots_lock);
    pthread_mutex_unlock(&root_turn);
    return NULL;
}

/* Entries of roots that ended and that nobody waited for (a process that
 * made an id and was no rank of it) go when the next root starts. */
static void sweep_done_roots(void) {
    for (struct root_entry **e = &roots; *e;) {
        struct root_entry *x = *e;
        if (x->done || x->pid != getpid()) *e = x->next, free(x); /* ended, or inherited without its thread */
        else e = &x->next;
    }
}

static void forget_root(struct root_entry *entry) {
    for (struct root_entry **e = &roots; *e; e = &(*e)->next)
        if (*e == entry) {
            *e = entry->next;
            break;
        }
    free(entry);
}

/* Under roots_lock: this process's entry of the root with this secret. */
static struct root_entry *find_root(const uint8_t secret[CCL__SECRET_BYTES]) {
    struct root_entry *e = roots;
    while (e && (e->pid != getpid() || !ccl__secret_equal(e->secret, secret, CCL__SECRET_BYTES))) e = e->next;
    return e;
}

/* Several ranks of one process (ncclCommInitAll's threads) wait on one
 * root: the first to see it done forgets its entry, so each wait looks the
 * entry up afresh after every sleep (one it held across a sleep may have
 * been freed); an entry gone means its root is done. */
void ccl__boot_root_wait(const uint8_t secret[CCL__SECRET_BYTES], double deadline) {
    pthread_mutex_lock(&roots_lock);
    for (struct root_entry *e; (e = find_root(secret)) != NULL;) {
        if (e->done) {
            forget_root(e);
            break;
        }
        double left = deadline - ccl__now();
        if (left <= 0) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double at = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (left < 1 ? left : 1);
        ts.tv_sec = (time_t)at;
        ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&roots_done, &roots_lock, &ts);
    }
    pthread_mutex_unlock(&roots_lock);
}

static ccl_status_t root_start(int lfd, const uint8_t secret[CCL__SECRET_BYTES],
                               const uint8_t member_token[CCL__SECRET_BYTES], int members_below, double timeout_s,
                               size_t record_bytes);

ccl_status_t ccl__boot_root_start(union ccl__sa *addr, const uint8_t secret[CCL__SECRET_BYTES], double timeout_s,
                                  size_t record_bytes) {
    return ccl__boot_root_start_members(addr, secret, NULL, 0, timeout_s, record_bytes);
}

ccl_status_t ccl__boot_root_start_members(union ccl__sa *addr, const uint8_t secret[CCL__SECRET_BYTES],
                                          const uint8_t member_token[CCL__SECRET_BYTES], int members_below,
                                          double timeout_s, size_t record_bytes) {
    if (record_bytes == 0 || record_bytes > CCL__BOOT_MAX_RECORD) return CCL_ERR_INTERNAL;
    int lfd;
    ccl_status_t st = ccl__sock_listen(addr, &lfd);
    if (st != CCL_OK) return st;
    return root_start(lfd, secret, member_token, members_below, timeout_s, record_bytes);
}

ccl_status_t ccl__boot_root_start_on(int lfd, const uint8_t secret[CCL__SECRET_BYTES], double timeout_s,
                                     size_t record_bytes) {
    if (record_bytes == 0 || record_bytes > CCL__BOOT_MAX_RECORD) {
        close(lfd);
        return CCL_ERR_INTERNAL;
    }
    return root_start(lfd, secret, NULL, 0, timeout_s, record_bytes);
}

/* Takes lfd, listening, and closes it on failure. */
static ccl_status_t root_start(int lfd, const uint8_t secret[CCL__SECRET_BYTES],
                               const uint8_t member_token[CCL__SECRET_BYTES], int members_below, double timeout_s,
                               size_t record_bytes) {
    struct root *r = calloc(1, sizeof(*r));
    if (!r || !(r->entry = calloc(1, sizeof(*r->entry)))) {
        free(r);
        close(lfd);
        return CCL_ERR_NO_MEMORY;
    }
    memcpy(r->entry->secret, secret, CCL__SECRET_BYTES);
    r->entry->pid = getpid();
    r->lfd = lfd;
    ccl__sock_nonblock(r->lfd);
    memcpy(r->secret, secret, CCL__SECRET_BYTES);
    if (member_token && members_below > 0) {
        memcpy(r->member_token, member_token, CCL__SECRET_BYTES);
        r->members_below = members_below;
    }
    r->timeout_s = timeout_s;
    r->record_bytes = (uint32_t)record_bytes;
    r->deadline = ccl__now() + timeout_s;
    /* The thread's first turn allocates nothing: the table is made here. */
    if (!grow_pending(r)) {
        close(r->lfd);
        free(r->entry);
        root_free(r);
        return CCL_ERR_NO_MEMORY;
    }
    pthread_once(&fork_gate_once, install_fork_gate);
    int started = 0;
    r->started = &started;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_mutex_lock(&roots_lock);
    sweep_done_roots();
    r->entry->next = roots;
    roots = r->entry;
    pthread_mutex_unlock(&roots_lock);
    int rc = pthread_create(&t, &attr, root_main, r);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_lock(&roots_lock);
        forget_root(r->entry);
        pthread_mutex_unlock(&roots_lock);
        close(r->lfd);
        root_free(r);
        return CCL_ERR_SYSTEM;
    }
    /* Returns once the thread runs, waiting in poll and allocating
     * nothing until a rank connects. A process that forks its ranks right
     * after making the id (Python's multiprocessing, a test) then never
     * forks while the thread is being set up: a sanitizer runtime without
     * fork handlers (gcc 12's AddressSanitizer) holds locks of its own
     * then, which a child would inherit held and wait on forever at its
     * first thread or allocation of that size. */
    pthread_mutex_lock(&roots_lock);
    while (!started) pthread_cond_wait(&roots_done, &roots_lock);
    pthread_mutex_unlock(&roots_lock);
    union ccl__sa at;
    socklen_t len = sizeof(at);
    char s[64] = "?";
    if (getsockname(lfd, &at.sa, &len) == 0) ccl__sa_str(&at, s, sizeof(s));
    CCL_INFO(CCL__SUB_BOOT, -1, "bootstrap root listening on %s", s);
    return CCL_OK;
}
