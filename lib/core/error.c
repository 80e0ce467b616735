/* Per-communicator error state, failure propagation and the registry of
 * live communicators. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/boot_pair.h"
#include "core/comm.h"
#include "core/flight.h"
#include "core/log.h"

static ccl_status_t keep_error(struct ccl_comm *comm, ccl_status_t st, int replace, const char *fmt, va_list ap) {
    char msg[CCL__ERR_BYTES];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (!comm) {
        CCL_WARN(CCL__SUB_ALL, -1, "%s", msg);
        return st;
    }
    /* A failed communicator keeps the message of the failure: later errors
     * are consequences of it (a peer hanging up after we told it). */
    pthread_mutex_lock(&comm->err_lock);
    if (replace || atomic_load(&comm->failed_status) == CCL_OK) memcpy(comm->last_error, msg, sizeof(msg));
    pthread_mutex_unlock(&comm->err_lock);
    CCL_INFO(CCL__SUB_ALL, comm->rank, "error (%s): %s", ccl_status_string(st), msg);
    return st;
}

ccl_status_t ccl__set_error(struct ccl_comm *comm, ccl_status_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st = keep_error(comm, st, 0, fmt, ap);
    va_end(ap);
    return st;
}

ccl_status_t ccl__replace_error(struct ccl_comm *comm, ccl_status_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    st = keep_error(comm, st, 1, fmt, ap);
    va_end(ap);
    return st;
}

void ccl__test_fault_point(const struct ccl_comm *comm, const char *phase) {
    if (strcmp(comm->params.test_stall_at, phase) == 0) {
        CCL_WARN(CCL__SUB_INIT, comm->rank, "CCL_TEST_STALL_AT=%s: this process sleeps 0.2 s", phase);
        nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL);
    }
    if (strcmp(comm->params.test_kill_at, phase) != 0) return;
    CCL_WARN(CCL__SUB_INIT, comm->rank, "CCL_TEST_KILL_AT=%s: this process kills itself now", phase);
    raise(SIGKILL);
}

/* A peer that hung up may have revoked the communicator: it said so on
 * the pair channel before it shut its links (ccl_comm_revoke), so a
 * failure seen as a peer's departure is the revoke it is. Transports that
 * carry the status (shm's wake words) say it themselves. */
static ccl_status_t revoked_by_peer(struct ccl_comm *comm, ccl_status_t st) {
    int from = -1;
    int32_t who = -1;
    if (st != CCL_ERR_REMOTE || atomic_load(&comm->failed_status) != CCL_OK || !comm->pairs ||
        !ccl__pair_poll(comm, CCL__PAIR_TAG_REVOKE, &from, &who, sizeof who))
        return st;
    ccl__comm_blame(comm, from, CCL__CULPRIT_FAILED);
    return ccl__set_error(comm, CCL_ERR_REVOKED, "rank %d revoked the communicator (ccl_comm_revoke): shrink it or "
                                                 "destroy it", from);
}

ccl_status_t ccl__comm_fail(struct ccl_comm *comm, ccl_status_t st) {
    st = revoked_by_peer(comm, st);
    /* First failure wins; everything after reports it (an abort stays an
     * abort even if the peers then drop their connections). */
    int expected = CCL_OK;
    if (!atomic_compare_exchange_strong(&comm->failed_status, &expected, st)) return ccl__comm_health(comm);
    pthread_mutex_lock(&comm->err_lock);
    CCL_WARN(CCL__SUB_ALL, comm->rank, "communicator failed (%s): %s", ccl_status_string(st), comm->last_error);
    pthread_mutex_unlock(&comm->err_lock);
    if (comm->on_fail) comm->on_fail(comm, st);
    if (comm->flight) {
        if (ccl__flight_dump(comm, CCL__FLIGHT_FAILURE) == 0)
            CCL_WARN(CCL__SUB_ALL, comm->rank, "flight recorder written to %s (ccl-trace flight %s)", comm->flight->path,
                     comm->flight->dir);
        else
            CCL_WARN(CCL__SUB_ALL, comm->rank, "flight recorder: could not write %s (%s)", comm->flight->path,
                     strerror(errno));
    }
    return st;
}

/* Why this thread's last communicator creation failed: there is no
 * communicator to hold the sentence. */
static _Thread_local char init_error[256];

void ccl__note_init_failure(const char *msg) { snprintf(init_error, sizeof(init_error), "%s", msg); }

ccl_status_t ccl__init_failed(int rank, ccl_status_t st, const char *log_prefix, const char *fmt, ...) {
    char msg[sizeof init_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    CCL_WARN(CCL__SUB_INIT, rank, "%s%s", log_prefix, msg);
    ccl__note_init_failure(msg);
    return st;
}

CCL_API const char *ccl_comm_last_error(const ccl_comm_t *comm) {
    if (!comm) return init_error[0] ? init_error : "communicator is NULL";
    if (!ccl__registry_has(comm)) return "not a live communicator (destroyed or never created)";
    /* The string is only ever replaced whole, under the lock; returning the
     * buffer is what NCCL's ncclGetLastError does too. */
    return comm->last_error;
}

/* The registry: a small mutex-protected array. It is the one piece of
 * process-wide mutable state besides logging and params, and it is what
 * lets a call on a destroyed communicator fail cleanly. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct ccl_comm **registry;
static size_t registry_len, registry_cap;
/* Every call checks its communicator, and the lock cost a small message
 * a tenth of its time: each thread remembers the last communicator it
 * found and the registry's generation then. Any change to the registry
 * (a destroy above all) moves the generation, so the memory is never
 * trusted past one. */
static _Atomic uint64_t registry_gen = 1;
static _Thread_local const struct ccl_comm *found_comm;
static _Thread_local uint64_t found_gen;

ccl_status_t ccl__registry_add(struct ccl_comm *comm) {
    pthread_mutex_lock(&registry_lock);
    if (registry_len == registry_cap) {
        size_t cap = registry_cap ? registry_cap * 2 : 16;
        const struct ccl_comm **grown = realloc(registry, cap * sizeof(*grown));
        if (!grown) {
            pthread_mutex_unlock(&registry_lock);
            return CCL_ERR_NO_MEMORY;
        }
        registry = grown;
        registry_cap = cap;
    }
    registry[registry_len++] = comm;
    atomic_fetch_add(&registry_gen, 1);
    pthread_mutex_unlock(&registry_lock);
    return CCL_OK;
}

void ccl__registry_remove(struct ccl_comm *comm) {
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_len; i++)
        if (registry[i] == comm) {
            registry[i] = registry[--registry_len];
            break;
        }
    atomic_fetch_add(&registry_gen, 1);
    if (registry_len == 0) {
        free(registry);
        registry = NULL;
        registry_cap = 0;
    }
    pthread_mutex_unlock(&registry_lock);
}

void ccl__registry_each(void (*fn)(struct ccl_comm *comm, void *arg), void *arg) {
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_len; i++) fn((struct ccl_comm *)registry[i], arg);
    pthread_mutex_unlock(&registry_lock);
}

int ccl__registry_has(const struct ccl_comm *comm) {
    if (comm && comm == found_comm && atomic_load(&registry_gen) == found_gen) return 1;
    int found = 0;
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_len && !found; i++) found = registry[i] == comm;
    if (found) {
        found_comm = comm;
        found_gen = atomic_load(&registry_gen);
    }
    pthread_mutex_unlock(&registry_lock);
    return found;
}
