/* The per-communicator queue and progress thread. */
#include "core/exec.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"

struct ccl__exec {
    pthread_mutex_t lock;
    pthread_cond_t work;  /* queue gained an op, or runner became free, or stop */
    pthread_cond_t done;  /* some request completed */
    /* The queue, changed under the lock; head and stop are atomic so that
     * the inline path (ccl__exec_try_inline, ccl__exec_inline_done) can
     * read them without it. */
    _Atomic(struct ccl__op *) head;
    struct ccl__op *tail;
    /* An op is running (thread or inline). Claimed by compare-and-swap:
     * a blocking call on an idle communicator takes and gives back the
     * runner without two lock round trips (bench/NOTES.md, "The call path
     * without locks"). */
    _Atomic int busy;
    _Atomic int stop;
    int thread_started;
    pthread_t thread;
};

ccl_status_t ccl__exec_create(struct ccl_comm *comm) {
    struct ccl__exec *e = calloc(1, sizeof(*e));
    if (!e) return CCL_ERR_NO_MEMORY;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->done, NULL);
    comm->exec = e;
    return CCL_OK;
}

void ccl__request_init(struct ccl_request *req, struct ccl_comm *comm) {
    atomic_init(&req->done, 0);
    req->status = CCL_OK;
    req->exec = comm->exec;
    atomic_init(&req->magic, 0);
}

/* Retired user requests, oldest first (see ccl__request_new). */
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static struct retired {
    struct retired *next;
} *retired_head, *retired_tail;
static int retired_n;
_Static_assert(sizeof(struct ccl_request) >= sizeof(struct retired), "a retired request holds the queue link");

struct ccl_request *ccl__request_new(struct ccl_comm *comm) {
    struct ccl_request *req = NULL;
    pthread_mutex_lock(&retired_lock);
    if (retired_n > CCL__REQUESTS_KEPT) {
        struct retired *r = retired_head;
        retired_head = r->next;
        if (!retired_head) retired_tail = NULL;
        retired_n--;
        req = (struct ccl_request *)(void *)r;
    }
    pthread_mutex_unlock(&retired_lock);
    if (!req && !(req = malloc(sizeof(*req)))) return NULL;
    ccl__request_init(req, comm);
    atomic_store(&req->magic, CCL__REQUEST_LIVE);
    return req;
}

int ccl__request_live(const struct ccl_request *req) { return atomic_load(&req->magic) == CCL__REQUEST_LIVE; }

int ccl__request_claim(struct ccl_request *req) {
    uint32_t live = CCL__REQUEST_LIVE;
    return atomic_compare_exchange_strong(&req->magic, &live, CCL__REQUEST_CLAIMED);
}

void ccl__request_retire(struct ccl_request *req) {
    /* The link overlays the request's first bytes; the magic stays cleared. */
    memset(req, 0, sizeof(*req));
    struct retired *r = (struct retired *)(void *)req;
    pthread_mutex_lock(&retired_lock);
    if (retired_tail) retired_tail->next = r;
    else retired_head = r;
    retired_tail = r;
    retired_n++;
    pthread_mutex_unlock(&retired_lock);
}

/* Called with the lock held. */
static void complete(struct ccl__exec *e, struct ccl__op *op, ccl_status_t st) {
    /* A blocking caller's request (and op) may live on its stack and be
     * gone as soon as its done flag is set: it is always the last request,
     * and nothing of op is read after setting it. */
    int n = op->nreqs;
    struct ccl_request **reqs = op->reqs;
    for (int i = 0; i < n; i++) {
        struct ccl_request *r = reqs[i];
        r->status = st;
        atomic_store_explicit(&r->done, 1, memory_order_release);
    }
    pthread_cond_broadcast(&e->done);
}

/* Takes the runner: 1 when this caller now runs ops. */
static int claim(struct ccl__exec *e) {
    int idle = 0;
    return atomic_compare_exchange_strong(&e->busy, &idle, 1);
}

/* The queue's first op, taken off it. Called with the lock held. */
static struct ccl__op *pop(struct ccl__exec *e) {
    struct ccl__op *op = e->head;
    e->head = op->next;
    if (!e->head) e->tail = NULL;
    return op;
}

static void run_op(struct ccl__exec *e, struct ccl__op *op) {
    ccl_status_t health = op->even_if_failed ? CCL_OK : ccl__comm_health(op->comm);
    ccl_status_t st = health < 0 ? health : op->run(op);
    /* Once complete, a waiter may return and free a stack-allocated op:
     * read what we still need first. */
    void (*release)(struct ccl__op *) = op->release;
    pthread_mutex_lock(&e->lock);
    complete(e, op, st);
    atomic_store(&e->busy, 0);
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->lock);
    release(op);
}

static void *progress_main(void *arg) {
    struct ccl__exec *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!atomic_load(&e->stop) && (!e->head || atomic_load(&e->busy))) pthread_cond_wait(&e->work, &e->lock);
        if (!e->head || !claim(e)) {
            /* An inline runner took it first: its end rings work, since
             * the queue is not empty. */
            if (atomic_load(&e->stop) && !atomic_load(&e->busy)) break;
            continue;
        }
        struct ccl__op *op = pop(e);
        pthread_mutex_unlock(&e->lock);
        run_op(e, op);
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

void ccl__exec_submit(struct ccl_comm *comm, struct ccl__op *op, int inline_ok) {
    struct ccl__exec *e = comm->exec;
    op->next = NULL;
    pthread_mutex_lock(&e->lock);
    if (inline_ok && !e->head && claim(e)) {
        pthread_mutex_unlock(&e->lock);
        run_op(e, op);
        return;
    }
    if (e->tail) e->tail->next = op;
    else e->head = op;
    e->tail = op;
    if (!e->thread_started) {
        if (pthread_create(&e->thread, NULL, progress_main, e) == 0) {
            e->thread_started = 1;
        } else {
            /* No thread: run the queue here, in order, rather than never. */
            CCL_WARN(CCL__SUB_INIT, comm->rank, "cannot start a progress thread; running operations inline");
            while (e->head && claim(e)) {
                struct ccl__op *first = pop(e);
                pthread_mutex_unlock(&e->lock);
                run_op(e, first);
                pthread_mutex_lock(&e->lock);
            }
        }
    }
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->lock);
}

/* Queued ops go first (a caller's earlier async calls run before its
 * blocking one); a claim that finds some queued after it gives the runner
 * back, which rings the thread. */
int ccl__exec_try_inline(struct ccl_comm *comm) {
    struct ccl__exec *e = comm->exec;
    if (atomic_load(&e->head) || !claim(e)) return 0;
    if (!atomic_load(&e->head)) return 1;
    ccl__exec_inline_done(comm);
    return 0;
}

/* busy is cleared, then head and stop read, all sequentially
 * consistent; whoever queues or stops sets those, then (under the lock)
 * reads busy. So either this sees their change and rings them under the
 * lock, or they see the runner free: none waits for a runner that is
 * gone. Only the progress thread with work queued behind this call, or a
 * destroy, waits for the runner: the small-message path skips the lock
 * otherwise. */
void ccl__exec_inline_done(struct ccl_comm *comm) {
    struct ccl__exec *e = comm->exec;
    atomic_store(&e->busy, 0);
    int queued = atomic_load(&e->head) != NULL, stop = atomic_load(&e->stop);
    if (!queued && !stop) return;
    pthread_mutex_lock(&e->lock);
    pthread_cond_broadcast(&e->work);
    if (stop) pthread_cond_broadcast(&e->done);
    pthread_mutex_unlock(&e->lock);
}

/* Not through ccl__wait (which lies above core): a request completes
 * when its operation ends, and every wait inside an operation goes
 * through ccl__wait with its deadline and failure checks, so this one
 * ends when they do. */
ccl_status_t ccl__request_wait(struct ccl_request *req) {
    if (!atomic_load_explicit(&req->done, memory_order_acquire)) {
        struct ccl__exec *e = req->exec;
        pthread_mutex_lock(&e->lock);
        while (!atomic_load_explicit(&req->done, memory_order_acquire)) pthread_cond_wait(&e->done, &e->lock);
        pthread_mutex_unlock(&e->lock);
    }
    return req->status;
}

struct call_op {
    struct ccl__op base;
    void (*fn)(struct ccl_comm *comm, void *arg);
    void *arg;
    struct ccl_request *req;
};

static ccl_status_t call_run(struct ccl__op *op) {
    struct call_op *c = (struct call_op *)op;
    c->fn(op->comm, c->arg);
    return CCL_OK;
}

static void call_release(struct ccl__op *op) { (void)op; /* lives on the caller's stack */ }

void ccl__exec_call(struct ccl_comm *comm, void (*fn)(struct ccl_comm *comm, void *arg), void *arg) {
    struct ccl_request req;
    ccl__request_init(&req, comm);
    struct ccl_request *reqs[1] = {&req};
    /* These run even on a failed communicator: destroy pauses tracing
     * through here whatever state the communicator is in. */
    struct call_op c = {.base = {.comm = comm, .run = call_run, .release = call_release, .reqs = reqs, .nreqs = 1,
                                 .even_if_failed = 1},
                        .fn = fn, .arg = arg};
    ccl__exec_submit(comm, &c.base, 1);
    ccl__request_wait(&req);
}

void ccl__exec_kick(struct ccl_comm *comm) {
    struct ccl__exec *e = comm->exec;
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->lock);
}

void ccl__exec_destroy(struct ccl_comm *comm) {
    struct ccl__exec *e = comm->exec;
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    atomic_store(&e->stop, 1);
    pthread_cond_broadcast(&e->work);
    int started = e->thread_started;
    /* Without a thread, wait for an inline runner to finish. */
    while (!started && atomic_load(&e->busy)) pthread_cond_wait(&e->done, &e->lock);
    pthread_mutex_unlock(&e->lock);
    if (started) pthread_join(e->thread, NULL);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->done);
    free(e);
    comm->exec = NULL;
}
