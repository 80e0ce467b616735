/* ccl_group_start/end: calls in between are recorded per thread and run
 * together at the outermost end, one batch per communicator. */
#include <stdlib.h>

#include "coll/coll.h"
#include "core/log.h"
#include "plan/plan.h"

static _Thread_local int group_depth;
static _Thread_local struct ccl__call *group_calls;
static _Thread_local int group_n, group_cap;
static _Thread_local int group_lost; /* a recorded call's communicator was destroyed before the end */

/* One whose communicator was destroyed. */
static void lose_call(struct ccl__call *call) {
    ccl__call_complete(call, CCL_ERR_INVALID_USAGE);
    group_lost = 1;
}

void ccl__group_forget(const struct ccl_comm *comm) {
    int k = 0;
    for (int i = 0; i < group_n; i++) {
        if (group_calls[i].comm == comm) lose_call(&group_calls[i]);
        else group_calls[k++] = group_calls[i];
    }
    group_n = k;
}

int ccl__group_open(void) { return group_depth > 0; }

ccl_status_t ccl__group_record(const struct ccl__call *call) {
    if (group_n == group_cap) {
        int cap = group_cap ? group_cap * 2 : 16;
        struct ccl__call *grown = realloc(group_calls, sizeof(*grown) * (size_t)cap);
        if (!grown) return ccl__set_error(call->comm, CCL_ERR_NO_MEMORY, "group: out of memory recording a call");
        group_calls = grown;
        group_cap = cap;
    }
    group_calls[group_n++] = *call;
    return CCL_OK;
}

void ccl__group_begin(void) { group_depth++; }

CCL_API ccl_status_t ccl_group_start(void) {
    ccl__group_begin();
    return CCL_OK;
}

/* Dispatch one batch per communicator (all before waiting on any, so
 * groups spanning communicators progress together), then wait for the
 * batches that hold blocking calls. A batch whose calls name a stream (all
 * of stream, when the end names one) is ordered on it and nothing waits
 * for it (device/device.h). */
static ccl_status_t run_group(struct ccl__call *calls, int n, const struct ccl__group_end *end) {
    ccl_status_t first = CCL_OK;
    struct ccl_request *waits = calloc((size_t)n, sizeof(*waits));
    int *done = calloc((size_t)n, sizeof(int));
    struct ccl__call *batch = malloc(sizeof(*batch) * (size_t)n);
    int nwaits = 0, ncomms = 0;
    if (!waits || !done || !batch) {
        first = CCL_ERR_NO_MEMORY;
        goto out;
    }
    /* Calls recorded on another thread's communicator that was destroyed
     * since (this thread's own destroys removed theirs already). */
    int live = 0;
    for (int i = 0; i < n; i++) {
        if (ccl__registry_has(calls[i].comm)) calls[live++] = calls[i];
        else lose_call(&calls[i]);
    }
    n = live;
    /* Inline execution would finish one communicator's batch before the
     * next is queued: only safe when the group has one communicator. */
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int k = 0; k < i && !seen; k++) seen = calls[k].comm == calls[i].comm;
        ncomms += !seen;
    }
    for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        struct ccl_comm *comm = calls[i].comm;
        int m = 0;
        for (int k = i; k < n; k++)
            if (!done[k] && calls[k].comm == comm) {
                batch[m++] = calls[k];
                done[k] = 1;
            }
        int must_wait = 0;
        ccl_status_t st = ccl__dispatch(comm, batch, m, end, ncomms == 1, &waits[nwaits], &must_wait, NULL);
        nwaits += must_wait;
        if (st < 0 && first == CCL_OK) first = st;
    }
    for (int i = 0; i < nwaits; i++) {
        ccl_status_t st = ccl__request_wait(&waits[i]);
        if (st < 0 && first == CCL_OK) first = st;
    }
out:
    free(waits);
    free(done);
    free(batch);
    return first;
}

/* The outermost end runs the group, on stream when on_stream (device.h:
 * without CUDA in the process, the default stream means run now). */
static ccl_status_t group_end(int on_stream, void *stream) {
    if (group_depth == 0) return CCL_ERR_INVALID_USAGE;
    if (--group_depth > 0) return CCL_OK;
    const struct ccl__group_end end = {.on_stream = on_stream, .stream = stream};
    ccl_status_t st = group_n ? run_group(group_calls, group_n, &end) : CCL_OK;
    if (group_lost) {
        CCL_WARN(CCL__SUB_COLL, -1, "ccl_group_end: a communicator was destroyed after the group recorded calls on it; "
                                   "those calls did not run");
        if (st == CCL_OK) st = CCL_ERR_INVALID_USAGE;
    }
    free(group_calls);
    group_calls = NULL;
    group_n = group_cap = group_lost = 0;
    return st;
}

CCL_API ccl_status_t ccl_group_end(void) { return group_end(0, NULL); }

CCL_API ccl_status_t ccl_group_simulate_end(double *us) {
    if (!us) return CCL_ERR_INVALID_ARGUMENT;
    *us = 0;
    if (group_depth != 1) return CCL_ERR_INVALID_USAGE; /* no group, or a nested one */
    group_depth = 0;
    /* Per communicator, its calls one after another; communicators at once. */
    for (int i = 0; i < group_n; i++) {
        struct ccl_comm *comm = group_calls[i].comm;
        int first = 1;
        for (int k = 0; k < i && first; k++) first = group_calls[k].comm != comm;
        if (!first) continue;
        double sum = 0;
        for (int k = i; k < group_n; k++) {
            const struct ccl__call *c = &group_calls[k];
            if (c->comm != comm) continue;
            if (c->is_p2p)
                sum += ccl__plan_estimate_p2p_us(comm, c->xfer.peer, c->xfer.count * ccl_dtype_size(c->xfer.dtype));
            else
                sum += ccl__plan_estimate_us(comm, c->coll.id.kind, c->coll.id.count * ccl_dtype_size(c->coll.id.dtype));
        }
        if (sum > *us) *us = sum;
    }
    for (int i = 0; i < group_n; i++) {
        ccl__set_error(group_calls[i].comm, CCL_ERR_INVALID_USAGE, "this call was in a group that "
                       "ccl_group_simulate_end ended: it did not run");
        ccl__call_complete(&group_calls[i], CCL_ERR_INVALID_USAGE);
    }
    free(group_calls);
    group_calls = NULL;
    group_n = group_cap = group_lost = 0;
    return CCL_OK;
}

CCL_API ccl_status_t ccl_group_end_stream(ccl_stream_t stream) { return group_end(1, stream); }

ccl_status_t ccl__group_end_on(void *stream) { return group_end(1, stream); }
