/* The flight recorder (flight.h). */
#include "core/flight.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/log.h"
#include "core/params.h"
#include "core/socket.h"

#define MAX_COMMS 1024 /* communicators the signal can reach at once */

/* ---- communicators the signal handler dumps ---- */

static _Atomic(struct ccl_comm *) live[MAX_COMMS];
static _Atomic int handlers_running; /* a free waits for handlers that may be reading */

static void live_add(struct ccl_comm *comm) {
    for (int i = 0; i < MAX_COMMS; i++) {
        struct ccl_comm *empty = NULL;
        if (atomic_compare_exchange_strong(&live[i], &empty, comm)) return;
    }
    CCL_WARN(CCL__SUB_INIT, comm->rank, "flight recorder: more than %d communicators: the signal will not dump "
             "this one (it still dumps on failure)", MAX_COMMS);
}

static void live_remove(struct ccl_comm *comm) {
    for (int i = 0; i < MAX_COMMS; i++) {
        struct ccl_comm *was = comm;
        if (atomic_compare_exchange_strong(&live[i], &was, NULL)) break;
    }
    /* Not ccl__wait: nothing of a peer's is waited for, only a signal
     * handler on another thread of this process that may still read comm
     * (it writes a file and returns; it never waits on anything). */
    while (atomic_load(&handlers_running)) sched_yield();
}

static void on_signal(int sig) {
    (void)sig;
    int saved = errno;
    atomic_fetch_add(&handlers_running, 1);
    for (int i = 0; i < MAX_COMMS; i++) {
        struct ccl_comm *comm = atomic_load(&live[i]);
        if (comm) (void)ccl__flight_dump(comm, CCL__FLIGHT_SIGNAL);
    }
    atomic_fetch_sub(&handlers_running, 1);
    errno = saved;
}

static int signal_number(const char *name) {
    if (!strcmp(name, "USR1") || !strcmp(name, "SIGUSR1")) return SIGUSR1;
    if (!strcmp(name, "USR2") || !strcmp(name, "SIGUSR2")) return SIGUSR2;
    char *end;
    long n = strtol(name, &end, 10);
    return *name && !*end && n >= 0 && n < NSIG ? (int)n : -1;
}

/* Once per process: the user's signal dumps every recorder, unless the
 * program handles that signal itself (then it is left alone). */
static void install_signal_once(void) {
    static _Atomic int done;
    if (atomic_exchange(&done, 1)) return;
    const char *name = ccl__params_get()->flight_signal;
    int sig = signal_number(name);
    if (sig < 0) {
        CCL_WARN(CCL__SUB_ENV, -1, "ignoring CCL_FLIGHT_SIGNAL='%s' (USR1, USR2, a number, or 0 for none)", name);
        sig = SIGUSR2;
    }
    if (sig == 0) return;
    struct sigaction old;
    if (sigaction(sig, NULL, &old) != 0) return;
    if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) {
        CCL_INFO(CCL__SUB_INIT, -1, "flight recorder: signal %d has a handler of the program's: it does not dump", sig);
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

/* ---- recording ---- */

int ccl__flight_init(struct ccl_comm *comm) {
    long n = ccl__params_get()->flight_recorder;
    if (n == 0) return 0;
    uint32_t cap = 1;
    while (cap < (uint32_t)n) cap <<= 1;
    struct ccl__flight *f = calloc(1, sizeof *f);
    if (!f || !(f->e = calloc(cap, sizeof *f->e))) {
        free(f);
        return -1;
    }
    f->capacity = cap;
    f->tick0 = ccl__flight_ticks();
    f->real0 = ccl__wall_now();
    /* Where dumps go: CCL_FLIGHT_DIR, else the user's own; nowhere (a
     * dump fails, saying so) when that is not private. */
    ccl__params_private_dir(ccl__params_get()->flight_dir, "CCL_FLIGHT_DIR", "ccl-flight", f->dir, sizeof f->dir);
    snprintf(f->path, sizeof f->path, "%s/%016llx.%d.flight", f->dir[0] ? f->dir : "/nonexistent/ccl-flight",
             (unsigned long long)comm->comm_id, comm->rank);
    for (int r = 0; r < 4; r++) snprintf(f->tmp[r], sizeof f->tmp[r], "%s.%d.tmp", f->path, r);
    gethostname(f->host, sizeof f->host - 1);
    comm->flight = f;
    install_signal_once();
    live_add(comm);
    return 0;
}

void ccl__flight_free(struct ccl_comm *comm) {
    if (!comm->flight) return;
    live_remove(comm);
    free(comm->flight->e);
    free(comm->flight);
    comm->flight = NULL;
}

#define GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

/* One entry as the file has it: read field by field, times in seconds. */
static void entry_out(const struct ccl__flight *f, const struct ccl__flight_entry *e, double tick_s,
                      struct ccl__flight_entry *c) {
    memset(c, 0, sizeof *c);
    c->state = __atomic_load_n(&e->state, __ATOMIC_ACQUIRE);
    c->index = GET(e->index);
    c->count = GET(e->count);
    uint64_t t0 = GET(e->t_start.ticks), t1 = GET(e->t_end.ticks);
    c->seq = GET(e->seq);
    c->peer = GET(e->peer);
    c->status = GET(e->status);
    c->kind = GET(e->kind);
    c->algo = GET(e->algo);
    c->is_send = GET(e->is_send);
    c->dtype = GET(e->dtype);
    c->op = GET(e->op);
    c->steps0 = GET(e->steps0);
    c->t_start.s = f->real0 + ((double)t0 - (double)f->tick0) * tick_s;
    c->t_end.s = t1 ? f->real0 + ((double)t1 - (double)f->tick0) * tick_s : 0;
}

/* Seconds per tick, over the recorder's life so far (the counter's rate
 * is not written anywhere the process can read cheaply); 0 too early. */
static double tick_seconds(const struct ccl__flight *f, uint64_t ticks, double now) {
    return ticks > f->tick0 && now > f->real0 ? (now - f->real0) / (double)(ticks - f->tick0) : 0;
}

int ccl__flight_newest(struct ccl_comm *comm, struct ccl__flight_entry *out) {
    struct ccl__flight *f = comm->flight;
    uint64_t n = f ? atomic_load(&f->next) : 0;
    if (!n) return 0;
    uint64_t ticks = ccl__flight_ticks();
    entry_out(f, &f->e[(n - 1) & (f->capacity - 1)], tick_seconds(f, ticks, ccl__wall_now()), out);
    return out->state != 0;
}

/* ---- dumping (async-signal-safe from here on) ---- */

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void copy_text(char *dst, size_t n, const char *src) {
    size_t i = 0;
    for (; i + 1 < n && src[i]; i++) dst[i] = src[i];
    dst[i] = 0;
}

int ccl__flight_dump(struct ccl_comm *comm, int reason) {
    struct ccl__flight *f = comm->flight;
    if (!f) return 0;
    uint64_t ticks = ccl__flight_ticks();
    double now = ccl__wall_now();
    double tick_s = tick_seconds(f, ticks, now);
    struct ccl__flight_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CCL__FLIGHT_MAGIC, sizeof h.magic);
    h.version = CCL__FLIGHT_VERSION;
    h.header_bytes = sizeof h;
    h.entry_bytes = sizeof(struct ccl__flight_entry);
    h.capacity = f->capacity;
    h.rank = comm->rank;
    h.nranks = comm->nranks;
    h.comm_id = comm->comm_id;
    h.recorded = atomic_load(&f->next);
    h.pid = (int32_t)getpid();
    h.reason = reason;
    h.failed_status = atomic_load(&comm->failed_status);
    h.culprit = atomic_load(&comm->culprit);
    h.dumped_at = now;
    h.timeout_s = comm->params.timeout_s;
    copy_text(h.host, sizeof h.host, f->host);
    /* A signal handler cannot take the lock: a torn sentence at worst. */
    if (reason != CCL__FLIGHT_SIGNAL) pthread_mutex_lock(&comm->err_lock);
    copy_text(h.last_error, sizeof h.last_error, comm->last_error);
    if (reason != CCL__FLIGHT_SIGNAL) pthread_mutex_unlock(&comm->err_lock);
    (void)mkdir(f->dir, 0700);
    const char *tmp = f->tmp[reason >= 0 && reason < 4 ? reason : 0];
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    int bad = write_all(fd, &h, sizeof h);
    struct ccl__flight_entry chunk[32];
    for (uint32_t k = 0; k < f->capacity && !bad; k += 32) {
        uint32_t m = f->capacity - k < 32 ? f->capacity - k : 32;
        for (uint32_t j = 0; j < m; j++) /* oldest first */
            entry_out(f, &f->e[(h.recorded + k + j) & (f->capacity - 1)], tick_s, &chunk[j]);
        bad = write_all(fd, chunk, m * sizeof *chunk);
    }
    int saved = errno;
    close(fd);
    if (!bad && rename(tmp, f->path) != 0) bad = 1, saved = errno;
    if (bad) unlink(tmp);
    errno = saved;
    return bad ? -1 : 0;
}
