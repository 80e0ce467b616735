/* The status server (status.h). */
#define _GNU_SOURCE /* pipe2 */
#include "core/status.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/flight.h"
#include "core/log.h"
#include "core/params.h"
#include "core/socket.h"

#define ASK_WAIT_S 1.0 /* how long a client may take to ask */

static pthread_mutex_t server_lock = PTHREAD_MUTEX_INITIALIZER;
static int users;            /* communicators counted in */
static int lfd = -1;         /* the listening socket */
static int stop_pipe[2] = {-1, -1};
static pthread_t thread;
static union ccl__sa where;
static uint64_t dropped;     /* strangers turned away */
/* Moves in a child forked after the server started, which has no server
 * thread: communicators counted in before then are not counted again. */
static int generation;

static void forked_child(void) {
    if (lfd >= 0) close(lfd);
    if (stop_pipe[0] >= 0) close(stop_pipe[0]), close(stop_pipe[1]);
    lfd = stop_pipe[0] = stop_pipe[1] = -1;
    users = 0;
    generation++;
    pthread_mutex_init(&server_lock, NULL);
}

/* ---- waits ---- */

void ccl__status_waiting(struct ccl_comm *comm, int peer, double since) {
    atomic_store_explicit(&comm->wait_since_us, (int64_t)(since * 1e6), memory_order_relaxed);
    atomic_store_explicit(&comm->wait_peer, peer + 2, memory_order_relaxed);
}

void ccl__status_not_waiting(struct ccl_comm *comm) {
    atomic_store_explicit(&comm->wait_peer, 0, memory_order_relaxed);
}

/* ---- the answer ---- */

struct text {
    char *p;
    size_t len, cap;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = t->p ? vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? 2 * t->cap : 4096;
        while (n >= 0 && cap < t->len + (size_t)n + 1) cap *= 2;
        char *grown = realloc(t->p, cap);
        if (!grown) return; /* the answer is cut short; the client says it could not read it */
        t->p = grown;
        t->cap = cap;
    }
}

/* A JSON string. */
static void put_str(struct text *t, const char *s) {
    put(t, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') put(t, "\\%c", c);
        else if (c < 0x20) put(t, "\\u%04x", c);
        else put(t, "%c", c);
    }
    put(t, "\"");
}

struct asked {
    const struct ccl__status_ask *ask;
    struct text out;
    int matched;
};

/* One rank of this process: where it is. Under the registry's lock, so
 * comm cannot go meanwhile. */
static void describe(struct ccl_comm *comm, void *arg) {
    struct asked *a = arg;
    if (comm->comm_id != a->ask->comm_id || !ccl__secret_equal(comm->secret, a->ask->secret, sizeof comm->secret))
        return;
    struct text *t = &a->out;
    double now = ccl__wall_now();
    if (a->matched++) put(t, ",");
    put(t, "{\"rank\":%d,\"nranks\":%d,\"pid\":%d,\"host\":", comm->rank, comm->nranks, (int)getpid());
    put_str(t, comm->peers ? comm->peers[comm->rank].hostname : "");
    struct ccl__flight_entry e;
    if (!comm->flight) {
        put(t, ",\"recorder\":false");
    } else if (ccl__flight_newest(comm, &e)) {
        int in_call = e.state == CCL__FLIGHT_RUNNING || e.state == CCL__FLIGHT_ISSUED;
        put(t, ",\"recorder\":true,\"calls\":%llu,\"in_call\":%s", (unsigned long long)e.index + 1,
            in_call ? "true" : "false");
        put(t, ",\"call\":{\"kind\":%d,\"seq\":%u,\"count\":%llu,\"dtype\":%d,\"op\":%d,\"peer\":%d,\"is_send\":%d,"
            "\"algo\":%d,\"state\":%d,\"status\":%d,\"for_s\":%.3f}", e.kind, e.seq, (unsigned long long)e.count,
            e.dtype, e.op, e.peer, e.is_send, e.algo == 255 ? -1 : e.algo, e.state, e.status, now - e.t_start.s);
        if (in_call) put(t, ",\"steps_done\":%u", ccl__status_steps(comm) - e.steps0);
        else put(t, ",\"outside_for_s\":%.3f", now - e.t_end.s);
    } else {
        put(t, ",\"recorder\":true,\"calls\":0,\"in_call\":false");
    }
    int32_t peer = atomic_load_explicit(&comm->wait_peer, memory_order_relaxed);
    if (peer) {
        double since = (double)atomic_load_explicit(&comm->wait_since_us, memory_order_relaxed) * 1e-6;
        put(t, ",\"waiting_on\":%d,\"waiting_for_s\":%.3f", peer - 2, ccl__now() - since);
    }
    int failed = atomic_load(&comm->failed_status), culprit = atomic_load(&comm->culprit);
    put(t, ",\"failed\":%d,\"culprit\":%d,\"error\":", failed, culprit - 1);
    pthread_mutex_lock(&comm->err_lock);
    put_str(t, comm->last_error);
    pthread_mutex_unlock(&comm->err_lock);
    if (a->ask->what == CCL__STATUS_DUMP && comm->flight) {
        int bad = ccl__flight_dump(comm, CCL__FLIGHT_ASKED);
        put(t, ",\"dump\":");
        put_str(t, bad ? "" : comm->flight->path);
    }
    put(t, ",\"peers\":[");
    for (int r = 0; r < comm->nranks && comm->peers; r++) {
        char addr[80] = "";
        if (comm->peers[r].status_addr.sa.sa_family) ccl__sa_str(&comm->peers[r].status_addr, addr, sizeof addr);
        put(t, "%s[%d,", r ? "," : "", r);
        put_str(t, addr);
        put(t, ",");
        put_str(t, comm->peers[r].hostname);
        put(t, ",%d]", comm->peers[r].pid);
    }
    put(t, "]}");
}

static void serve(int fd) {
    struct ccl__status_ask ask;
    if (ccl__sock_recv_all(fd, &ask, sizeof ask, ccl__now() + ASK_WAIT_S) != CCL_OK ||
        memcmp(ask.magic, CCL__STATUS_MAGIC, sizeof ask.magic) != 0 ||
        (ask.what != CCL__STATUS_ASK && ask.what != CCL__STATUS_DUMP)) {
        CCL_DROP(CCL__SUB_INIT, -1, dropped, "status server: dropped a connection that did not ask as ccl-status does");
        return;
    }
    struct asked a = {.ask = &ask};
    put(&a.out, "{\"ranks\":[");
    ccl__registry_each(describe, &a);
    put(&a.out, "]}");
    explicit_bzero(&ask, sizeof ask);
    if (!a.matched) {
        CCL_DROP(CCL__SUB_INIT, -1, dropped, "status server: dropped a client without this job's secret or "
                 "communicator");
    } else if (a.out.p) {
        uint32_t n = (uint32_t)a.out.len;
        if (ccl__sock_send_all(fd, &n, sizeof n, ccl__now() + ASK_WAIT_S) == CCL_OK)
            (void)ccl__sock_send_all(fd, a.out.p, n, ccl__now() + ASK_WAIT_S);
    }
    free(a.out.p);
}

static void *server_main(void *arg) {
    (void)arg;
    for (;;) {
        struct pollfd fds[2] = {{.fd = lfd, .events = POLLIN}, {.fd = stop_pipe[0], .events = POLLIN}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
        if (fds[1].revents) break;
        if (!(fds[0].revents & POLLIN)) continue;
        int fd;
        if (ccl__sock_accept(lfd, ccl__now() + ASK_WAIT_S, &fd) != CCL_OK) continue;
        serve(fd);
        close(fd);
    }
    return NULL;
}

/* ---- starting, publishing, stopping ---- */

static void at_fork_once(void) { pthread_atfork(NULL, NULL, forked_child); }

void ccl__status_listen(struct ccl_comm *comm, union ccl__sa *addr) {
    memset(addr, 0, sizeof *addr);
    if (!ccl__params_get()->status) return;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, at_fork_once);
    pthread_mutex_lock(&server_lock);
    if (!users) {
        char host[80];
        snprintf(host, sizeof host, strchr(comm->boot_addr, ':') ? "[%s]:0" : "%s:0", comm->boot_addr);
        union ccl__sa a;
        int fd = -1;
        if (ccl__sa_parse(host, &a) != CCL_OK || ccl__sock_listen(&a, &fd) != CCL_OK) {
            CCL_WARN(CCL__SUB_INIT, comm->rank, "status server: cannot listen on %s: ccl-status cannot see this "
                     "process", comm->boot_addr);
            pthread_mutex_unlock(&server_lock);
            return;
        }
        lfd = fd; /* before the thread, which polls it */
        if (pipe2(stop_pipe, O_CLOEXEC) != 0 || pthread_create(&thread, NULL, server_main, NULL) != 0) {
            CCL_WARN(CCL__SUB_INIT, comm->rank, "status server: cannot start its thread: ccl-status cannot see this "
                     "process");
            close(fd);
            if (stop_pipe[0] >= 0) close(stop_pipe[0]), close(stop_pipe[1]);
            lfd = stop_pipe[0] = stop_pipe[1] = -1;
            pthread_mutex_unlock(&server_lock);
            return;
        }
        where = a;
    }
    users++;
    comm->status_on = generation + 1;
    *addr = where;
    pthread_mutex_unlock(&server_lock);
}

void ccl__status_publish(struct ccl_comm *comm) {
    if (!comm->status_on) return;
    char dir[400], addr[80], secret[2 * CCL__SECRET_BYTES + 1];
    if (ccl__params_private_dir(ccl__params_get()->status_dir, "CCL_STATUS_DIR", "ccl-status", dir, sizeof dir) != 0)
        return;
    (void)mkdir(dir, 0700);
    snprintf(comm->status_file, sizeof comm->status_file, "%s/%016llx.%d.status", dir,
             (unsigned long long)comm->comm_id, comm->rank);
    ccl__sa_str(&comm->peers[comm->rank].status_addr, addr, sizeof addr);
    for (int i = 0; i < CCL__SECRET_BYTES; i++) snprintf(secret + 2 * i, 3, "%02x", comm->secret[i]);
    /* Written whole under another name, then renamed: a reader never sees half of it. */
    char tmp[sizeof comm->status_file + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", comm->status_file);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        CCL_WARN(CCL__SUB_INIT, comm->rank, "status server: cannot write %s (%s)", tmp, strerror(errno));
        comm->status_file[0] = 0;
        return;
    }
    fprintf(f, "libccl-status 1\ncomm %016llx\nrank %d\nnranks %d\nhost %s\npid %d\naddr %s\nsecret %s\n",
            (unsigned long long)comm->comm_id, comm->rank, comm->nranks, comm->peers[comm->rank].hostname,
            (int)getpid(), addr, secret);
    explicit_bzero(secret, sizeof secret);
    int bad = fclose(f) != 0;
    if (bad || rename(tmp, comm->status_file) != 0) {
        unlink(tmp);
        comm->status_file[0] = 0;
    }
}

void ccl__status_release(struct ccl_comm *comm) {
    if (comm->status_file[0]) unlink(comm->status_file);
    comm->status_file[0] = 0;
    if (!comm->status_on) return;
    pthread_mutex_lock(&server_lock);
    int counted = comm->status_on == generation + 1;
    comm->status_on = 0;
    if (counted && --users == 0) {
        (void)!write(stop_pipe[1], "x", 1);
        pthread_join(thread, NULL);
        close(lfd);
        close(stop_pipe[0]);
        close(stop_pipe[1]);
        lfd = stop_pipe[0] = stop_pipe[1] = -1;
    }
    pthread_mutex_unlock(&server_lock);
}
