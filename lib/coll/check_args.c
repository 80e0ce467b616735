/*
 * CCL_CHECK=1: before every collective the ranks all-gather what each one
 * was called with and compare, so ranks that disagree (another count,
 * dtype, op or root, another forced algorithm (ccl_comm_set_algo on some
 * ranks only), or another collective altogether) all get
 * CCL_ERR_INVALID_USAGE, naming two ranks and both calls, instead of
 * mixing data, returning different results or waiting out CCL_TIMEOUT.
 * Nothing of the call itself has moved, so the communicator stays usable.
 * The price is one small ring all-gather per collective.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"

/* The check's all-gather is stamped with the call's number and
 * CCL__SEQ_CHECK (algo.h), so its slots can never pass for a user call's:
 * a rank without CCL_CHECK facing one with it fails on the stamp instead
 * of taking the record as data. */

struct call_record {
    int32_t kind;
    uint32_t seq;
    uint64_t count;
    int32_t dtype, op, root;
    int32_t algo; /* the forced algorithm, -1: the planner's choice */
};

static int rooted(int kind) {
    return kind == CCL__K_BROADCAST || kind == CCL__K_REDUCE || kind == CCL__K_GATHER || kind == CCL__K_SCATTER;
}

/* The fields that must agree for this kind of call; the rest are zero. */
static struct call_record record_of(const struct ccl_comm *comm, const struct ccl__coll_args *a) {
    const struct ccl__coll_id *id = &a->id;
    struct call_record r = {.kind = id->kind, .seq = id->seq, .algo = a->planner_only ? -1 : comm->algo_forced[id->kind]};
    if (id->kind == CCL__K_BARRIER) return r;
    r.count = id->count;
    r.dtype = (int32_t)id->dtype;
    if (ccl__kind_reduces(id->kind)) r.op = (int32_t)id->op;
    if (rooted(id->kind)) r.root = id->root;
    return r;
}

static int same(const struct call_record *a, const struct call_record *b) {
    return a->kind == b->kind && a->seq == b->seq && a->count == b->count && a->dtype == b->dtype &&
           a->op == b->op && a->root == b->root && a->algo == b->algo;
}

static void describe(const struct call_record *r, char *buf, size_t n) {
    int k = r->kind;
    if ((unsigned)k >= CCL__NUM_OP_KINDS || !ccl__op_kind_name(k)) {
        snprintf(buf, n, "an unknown call (kind %d)", k);
        return;
    }
    const char *algo = r->algo < 0 ? "auto" : (unsigned)r->algo < CCL__NUM_ALGOS ? ccl__algo_names[r->algo] : "?";
    /* gather, scatter and all_to_all_v have no algorithm to choose */
    int o = ccl__kind_is_exchange(k) ? snprintf(buf, n, "%s #%u", ccl__op_kind_name(k), r->seq)
                                     : snprintf(buf, n, "%s #%u with algorithm %s", ccl__op_kind_name(k), r->seq, algo);
    if (k == CCL__K_BARRIER || o < 0 || (size_t)o >= n) return;
    if (k == CCL__K_ALL_TO_ALL_V) { /* its counts are per pair: the transfers compare them */
        snprintf(buf + o, n - (size_t)o, " (%s)", (unsigned)r->dtype < CCL_NUM_DTYPES ? ccl_dtype_name((ccl_dtype_t)r->dtype) : "?");
        return;
    }
    o += snprintf(buf + o, n - (size_t)o, " (count %llu, %s", (unsigned long long)r->count,
                  (unsigned)r->dtype < CCL_NUM_DTYPES ? ccl_dtype_name((ccl_dtype_t)r->dtype) : "?");
    if (ccl__kind_reduces(k) && (size_t)o < n)
        o += snprintf(buf + o, n - (size_t)o, ", %s", ccl_op_name((ccl_op_t)r->op)); /* "premul_sum" too */
    if (rooted(k) && (size_t)o < n) o += snprintf(buf + o, n - (size_t)o, ", root %d", r->root);
    if ((size_t)o < n) snprintf(buf + o, n - (size_t)o, ")");
}

ccl_status_t ccl__check_args_agree(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    int n = comm->nranks;
    struct call_record mine = record_of(comm, a), *all = malloc(sizeof(*all) * (size_t)n);
    if (!all) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "CCL_CHECK: out of memory");
    /* The records live in host memory, whatever memory the call's buffers are. */
    ccl_status_t st = ccl__ring_gather_bytes(comm, a->id.seq | CCL__SEQ_CHECK, &mine, all, sizeof(mine));
    for (int q = 1; q < n && st == CCL_OK; q++) {
        if (same(&all[0], &all[q])) continue;
        char first[160], other[160];
        describe(&all[0], first, sizeof first);
        describe(&all[q], other, sizeof other);
        st = ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                            "CCL_CHECK: the ranks disagree: rank 0 called %s, rank %d called %s; nothing was sent",
                            first, q, other);
    }
    free(all);
    return st;
}

/* all_to_all_v's counts: every rank brings what it sends to and receives
 * from each peer, and every rank checks every pair, so all of them refuse
 * alike. */
ccl_status_t ccl__check_counts_agree(struct ccl_comm *comm, uint32_t seq, const uint64_t *send, const uint64_t *recv) {
    size_t n = (size_t)comm->nranks, row = 2 * n;
    uint64_t *mine = malloc(sizeof(uint64_t) * row), *all = malloc(sizeof(uint64_t) * row * n);
    ccl_status_t st = mine && all ? CCL_OK : ccl__set_error(comm, CCL_ERR_NO_MEMORY, "CCL_CHECK: out of memory");
    if (st == CCL_OK) {
        memcpy(mine, send, sizeof(uint64_t) * n);
        memcpy(mine + n, recv, sizeof(uint64_t) * n);
        /* the second record of this call: its own stamp */
        st = ccl__ring_gather_bytes(comm, seq | CCL__SEQ_CHECK | CCL__SEQ_CHECK_COUNTS, mine, all,
                                    sizeof(uint64_t) * row);
    }
    for (size_t p = 0; p < n && st == CCL_OK; p++)
        for (size_t q = 0; q < n && st == CCL_OK; q++) {
            uint64_t sent = all[p * row + q], taken = all[q * row + n + p];
            if (sent != taken)
                st = ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                    "CCL_CHECK: all_to_all_v #%u: rank %zu sends %llu elements to rank %zu, which "
                                    "receives %llu from it; nothing was sent",
                                    seq, p, (unsigned long long)sent, q, (unsigned long long)taken);
        }
    free(mine), free(all);
    return st;
}
