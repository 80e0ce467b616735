#include "transports/manager.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bootstrap.h"
#include "core/log.h"
#include "transports/transport.h"

ccl_status_t ccl__conns_alloc(struct ccl_comm *comm) {
    comm->tstate = calloc((size_t)ccl__ntransports, sizeof(*comm->tstate));
    comm->tknobs = calloc((size_t)ccl__ntransports, sizeof(*comm->tknobs));
    if (!comm->tstate || !comm->tknobs) return CCL_ERR_NO_MEMORY;
    for (int t = 0; t < ccl__ntransports; t++) {
        const struct ccl__transport *tr = ccl__transports[t];
        const void *read = ccl__transport_knobs(tr);
        if (!read || !(comm->tknobs[t] = malloc(tr->knobs_bytes))) return CCL_ERR_NO_MEMORY;
        memcpy(comm->tknobs[t], read, tr->knobs_bytes);
    }
    return CCL_OK;
}

void ccl__conns_free(struct ccl_comm *comm) {
    for (int t = 0; comm->tknobs && t < ccl__ntransports; t++) free(comm->tknobs[t]);
    free(comm->tknobs);
    free(comm->tstate);
    comm->tknobs = NULL;
    comm->tstate = NULL;
}

static size_t blobs_bytes(void) { return (size_t)ccl__ntransports * CCL__TRANSPORT_BLOB_BYTES; }

size_t ccl__conns_record_bytes(void) { return sizeof(struct ccl__peer_info) + blobs_bytes(); }

ccl_status_t ccl__conns_join(struct ccl_comm *comm, int root_fd, struct ccl__peer_info *self) {
    size_t rb = ccl__conns_record_bytes(), n = (size_t)comm->nranks;
    uint8_t *record = calloc(1, rb);
    if (!record) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    uint8_t *mine = record + sizeof(*self);
    for (int t = 0; t < ccl__ntransports; t++) {
        ccl_status_t st = ccl__transports[t]->local_init(comm, mine + (size_t)t * CCL__TRANSPORT_BLOB_BYTES);
        if (st == CCL_OK) self->transport_mask |= 1u << t;
        else CCL_INFO(CCL__SUB_INIT, comm->rank, "transport %s unavailable here (%s)", ccl__transports[t]->name,
                      ccl_status_string(st));
    }
    memcpy(record, self, sizeof(*self));
    void *table = NULL;
    ccl_status_t st = ccl__boot_exchange(comm, root_fd, record, rb, &table);
    free(record);
    if (st != CCL_OK) return st;
    comm->peers = calloc(n, sizeof(*comm->peers));
    comm->blobs = calloc(n, blobs_bytes());
    if (!comm->peers || !comm->blobs) {
        free(table);
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory for the peer table");
    }
    for (size_t p = 0; p < n; p++) {
        const uint8_t *r = (const uint8_t *)table + p * rb;
        memcpy(&comm->peers[p], r, sizeof(*comm->peers));
        memcpy(comm->blobs + p * blobs_bytes(), r + sizeof(*comm->peers), blobs_bytes());
    }
    free(table);
    return CCL_OK;
}

void ccl__conns_share_wake(struct ccl_comm *comm) {
    uint32_t mine = comm->peers[comm->rank].transport_mask;
    for (int t = 0; t < ccl__ntransports; t++) {
        const struct ccl__transport *tr = ccl__transports[t];
        struct ccl__wake_words *w = (mine & (1u << t)) && tr->shared_wake ? tr->shared_wake(comm) : NULL;
        if (!w) continue;
        ccl__wake_copy(w, &comm->local_wake);
        comm->wake = w;
        return;
    }
}

void ccl__conns_private_wake(struct ccl_comm *comm) {
    struct ccl__wake_words *w = comm->wake, *lw = &comm->local_wake;
    if (w == lw) return;
    ccl__wake_copy(lw, w);
    comm->wake = lw;
}

ccl_status_t ccl__conns_setup(struct ccl_comm *comm, int root_fd, ccl_status_t planned, uint8_t *const *use) {
    uint32_t mine = comm->peers[comm->rank].transport_mask; /* the ones whose local_init worked */
    ccl_status_t st = planned;
    ccl__test_fault_point(comm, "joined");
    for (int t = 0; t < ccl__ntransports && st == CCL_OK; t++)
        if (mine & (1u << t)) st = ccl__transports[t]->setup(comm, use[t]);
    if (st == CCL_OK) ccl__conns_share_wake(comm);
    ccl__test_fault_point(comm, "setup");
    CCL_CHECK(ccl__boot_round(comm, root_fd, st));
    ccl__test_fault_point(comm, "connecting");
    for (int t = 0; t < ccl__ntransports && st == CCL_OK; t++)
        if (mine & (1u << t)) st = ccl__transports[t]->connect(comm, use[t], comm->conns);
    ccl__test_fault_point(comm, "connected");
    CCL_CHECK(ccl__boot_round(comm, root_fd, st));
    for (int t = 0; t < ccl__ntransports && st == CCL_OK; t++)
        if (mine & (1u << t)) st = ccl__transports[t]->setup_done(comm);
    CCL_CHECK(ccl__boot_round(comm, root_fd, st));
    comm->set_up = 1;
    return CCL_OK;
}

int ccl__conns_served(const struct ccl_comm *comm, int t) {
    int peers = 0;
    for (int p = 0; p < comm->nranks; p++) peers += comm->conns[p] && comm->conns[p]->t == ccl__transports[t];
    return peers;
}

void ccl__conns_summary(const struct ccl_comm *comm, char *buf, size_t n) {
    size_t o = 0;
    if (n) buf[0] = 0;
    for (int t = 0; t < ccl__ntransports && o < n; t++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s to %d peers", t ? ", " : "", ccl__transports[t]->name,
                              ccl__conns_served(comm, t));
}

void ccl__conns_poison(struct ccl_comm *comm, ccl_status_t status) {
    if (!comm->tstate) return;
    for (int t = 0; t < ccl__ntransports; t++)
        if (comm->tstate[t]) ccl__transports[t]->poison(comm, status);
}

void ccl__conns_teardown(struct ccl_comm *comm) {
    ccl__conns_private_wake(comm);
    for (int t = 0; comm->tstate && t < ccl__ntransports; t++)
        if (comm->tstate[t]) ccl__transports[t]->teardown(comm);
    ccl__conns_free(comm);
}
