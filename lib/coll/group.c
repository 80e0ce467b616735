/* ccl_group_start/end: calls in between are recorded per thread and run
 * together at the outermost end, one batch per communicator. */
#include <stdlib.h>

#include "coll/coll.h"
#include "coll/device.h"
#include "coll/device_direct.h"
#include "core/log.h"

static _Thread_local int group_depth;
static _Thread_local struct ccl__call *group_calls;
static _Thread_local int group_n, group_cap;
static _Thread_local int group_lost; /* a recorded call's communicator was destroyed before the end */

/* A recorded call that will never run, or ran already: its request (if
 * any) completes with st, the status the group end returns. */
static void drop_call(struct ccl__call *call, ccl_status_t st) {
    if (call->req) {
        call->req->status = st;
        atomic_store_explicit(&call->req->done, 1, memory_order_release);
    }
}

/* One whose communicator was destroyed. */
static void lose_call(struct ccl__call *call) {
    drop_call(call, CCL_ERR_INVALID_USAGE);
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

CCL_API ccl_status_t ccl_group_start(void) {
    group_depth++;
    return CCL_OK;
}

/* The stream a batch is ordered on: the end's, else the one its calls
 * name (they must agree). *ordered = 0 runs it now: no stream, or the
 * default stream in a process without CUDA. */
static ccl_status_t batch_stream(struct ccl_comm *comm, struct ccl__call *b, int m, int end_on_stream,
                                 void *end_stream, int *ordered, struct ccl__stream_link **link) {
    int named = end_on_stream;
    void *stream = end_stream;
    for (int k = 0; k < m && !end_on_stream; k++) {
        if (!b[k].on_stream) continue;
        if (named && b[k].stream != stream)
            return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                  "group: calls on one communicator name two CUDA streams; a group orders each "
                                  "communicator's calls on one stream");
        named = 1;
        stream = b[k].stream;
    }
    *ordered = 0;
    if (!named) return CCL_OK;
    char why[700];
    ccl_status_t st = ccl__stream_usable(stream, ordered, why, sizeof why);
    if (st < 0) return ccl__set_error(comm, st, "%s", why);
    return *ordered ? ccl__stream_link_new(comm, stream, b, m, link) : CCL_OK;
}

/* A group's one collective on a communicator that the GPU-resident path
 * may take (device_direct.h), on the stream the group orders it on: its
 * status, or 1 when it did not take it. */
static ccl_status_t run_on_gpu(struct ccl_comm *comm, struct ccl__call *c, int end_on_stream, void *end_stream) {
    if (!comm->gpu_direct || c->is_p2p || c->coll.planner_only) return 1;
    int named = end_on_stream || c->on_stream, ordered = 0, done = 0;
    void *stream = end_on_stream ? end_stream : c->stream;
    char why[700];
    ccl_status_t st = named ? ccl__stream_usable(stream, &ordered, why, sizeof why) : CCL_OK;
    if (st < 0) return ccl__set_error(comm, st, "%s", why);
    st = ccl__gpu_direct_try(comm, c, ordered, stream, &done);
    return st < 0 || done ? st : 1;
}

/* Submit one batch per communicator (all before waiting on any, so groups
 * spanning communicators progress together), then wait for the batches
 * that hold blocking calls. A batch whose calls name a stream (all of
 * stream, when the end names one) is ordered on it and nothing waits for
 * it (device.h). */
static ccl_status_t run_group(struct ccl__call *calls, int n, int end_on_stream, void *end_stream) {
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
        int m = 0, blocking = 0;
        for (int k = i; k < n; k++)
            if (!done[k] && calls[k].comm == comm) {
                batch[m++] = calls[k];
                blocking |= calls[k].req == NULL;
                done[k] = 1;
            }
        struct ccl_request *w = NULL;
        struct ccl__stream_link *link = NULL;
        int ordered = 0;
        ccl_status_t st = m == 1 ? run_on_gpu(comm, batch, end_on_stream, end_stream) : 1;
        if (st != 1) {
            drop_call(&batch[0], st); /* it ran already */
            if (st < 0 && first == CCL_OK) first = st;
            continue;
        }
        st = batch_stream(comm, batch, m, end_on_stream, end_stream, &ordered, &link);
        if (st < 0) {
            for (int k = 0; k < m; k++) drop_call(&batch[k], st);
            if (first == CCL_OK) first = st;
            continue;
        }
        if (!ordered && blocking) {
            w = &waits[nwaits++];
            ccl__request_init(w, comm);
        }
        st = ccl__submit_batch(comm, batch, m, w, ncomms == 1 && !ordered, NULL, link);
        if (st < 0) {
            if (w) nwaits--;
            if (first == CCL_OK) first = st;
        }
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
    ccl_status_t st = group_n ? run_group(group_calls, group_n, on_stream, stream) : CCL_OK;
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

CCL_API ccl_status_t ccl_group_end_stream(ccl_stream_t stream) { return group_end(1, stream); }
