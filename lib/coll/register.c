/* ccl_comm_register / ccl_comm_deregister: a handle pins one registration
 * per transport of the communicator that registers memory (the cache in
 * prims/regcache.h keeps pinned entries until unpinned). Handles are
 * listed on the communicator so that destroy releases forgotten ones and
 * a stale or foreign handle is refused instead of followed. */
#include <pthread.h>
#include <stdlib.h>

#include "coll/coll.h"
#include "prims/regcache.h"
#include "transports/manager.h"
#include "transports/transport.h"

#define USER_REG_MAGIC 0x52454743u /* "REGC" */

struct ccl__user_reg {
    uint32_t magic;
    struct ccl__user_reg *next;
    int n;
    struct ccl__reg *regs[]; /* [n]: one per registering transport */
};

/* Guards every communicator's handle list (register calls are rare). */
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;

static void release(struct ccl_comm *comm, struct ccl__user_reg *h) {
    for (int i = 0; i < h->n; i++) ccl__reg_unpin(comm, h->regs[i]);
    h->magic = 0;
    free(h);
}

CCL_API ccl_status_t ccl_comm_register(ccl_comm_t *comm, void *buf, size_t bytes, void **handle) {
    CCL_CHECK(ccl__check_comm(comm, "comm_register"));
    if (!handle) return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_register: handle is NULL");
    *handle = NULL;
    uintptr_t a = (uintptr_t)buf;
    if (!buf || bytes == 0 || a + bytes < a)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_register: %zu bytes at %p is not a buffer", bytes,
                              buf);
    struct ccl__user_reg *h = calloc(1, sizeof(*h) + sizeof(h->regs[0]) * (size_t)ccl__ntransports);
    if (!h) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "comm_register: out of memory");
    h->magic = USER_REG_MAGIC;
    for (int t = 0; t < ccl__ntransports; t++) {
        const struct ccl__transport *tr = ccl__transports[t];
        if (!tr->reg || !ccl__conns_served(comm, t)) continue;
        ccl_status_t st = ccl__reg_pin(comm, tr, buf, bytes, &h->regs[h->n]);
        if (st != CCL_OK) {
            release(comm, h); /* the transport said why */
            return st;
        }
        h->n++;
    }
    pthread_mutex_lock(&list_lock);
    h->next = comm->user_regs;
    comm->user_regs = h;
    pthread_mutex_unlock(&list_lock);
    *handle = h;
    return CCL_OK;
}

CCL_API ccl_status_t ccl_comm_deregister(ccl_comm_t *comm, void *handle) {
    CCL_CHECK(ccl__check_comm(comm, "comm_deregister"));
    pthread_mutex_lock(&list_lock);
    struct ccl__user_reg **at = &comm->user_regs;
    while (*at && *at != handle) at = &(*at)->next;
    struct ccl__user_reg *h = *at;
    if (h) *at = h->next;
    pthread_mutex_unlock(&list_lock);
    if (!h)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "comm_deregister: %p is not a live handle of this communicator's ccl_comm_register",
                              handle);
    release(comm, h);
    return CCL_OK;
}

void ccl__user_regs_free(struct ccl_comm *comm) {
    pthread_mutex_lock(&list_lock);
    struct ccl__user_reg *h = comm->user_regs;
    comm->user_regs = NULL;
    pthread_mutex_unlock(&list_lock);
    while (h) {
        struct ccl__user_reg *next = h->next;
        release(comm, h);
        h = next;
    }
}
