/*
 * The API layer's shared pieces: argument checks, turning a call into an
 * operation, and the one issue path (issue.c): recorded into a group, or
 * dispatched as a group of its own.
 */
#ifndef CCL_COLL_H
#define CCL_COLL_H

#include "algo/algo.h"
#include "core/comm.h"
#include "core/exec.h"
#include "device/call.h"
#include "prims/prims.h"

/* The collectives that take a reduction op. */
static inline int ccl__kind_reduces(int kind) {
    return kind == CCL__K_ALL_REDUCE || kind == CCL__K_REDUCE_SCATTER || kind == CCL__K_REDUCE;
}

/* NULL or unknown comm -> status (and message for a known one). */
ccl_status_t ccl__check_comm(const struct ccl_comm *comm, const char *what);
/* A reducing call's op (coll/ops.c): a built-in op that fits the dtype
 * passes; an op of ccl_op_create_premul_sum becomes CCL__OP_PREMUL_SUM with
 * its scalar copied into a->premul; anything else is refused. */
ccl_status_t ccl__op_take(struct ccl_comm *comm, struct ccl__coll_args *a, const char *what);
/* Where a premultiplied sum runs: scales this rank's input (into recvbuf,
 * or a buffer returned in *scratch for the caller to free) and leaves a
 * plain CCL_SUM reading it. */
ccl_status_t ccl__premul_apply(struct ccl_comm *comm, struct ccl__coll_args *a, void **scratch);
/* Validates a collective call; sets the comm's last error on failure. */
ccl_status_t ccl__check_coll(struct ccl_comm *comm, const struct ccl__coll_args *a, const char *what);
/* dtype is one of ccl_dtype_t; count * its size * mult (0: 1) fits in
 * size_t and in the wire format. */
ccl_status_t ccl__check_dtype(struct ccl_comm *comm, ccl_dtype_t dtype, const char *what);
ccl_status_t ccl__check_count(struct ccl_comm *comm, size_t count, size_t mult, ccl_dtype_t dtype, const char *what);
ccl_status_t ccl__check_p2p(struct ccl_comm *comm, const void *buf, size_t count, ccl_dtype_t dtype, int peer,
                            const char *what);

/* CCL_CHECK=1 (check_args.c): the ranks compare this collective's
 * arguments before it runs; a difference is CCL_ERR_INVALID_USAGE on every
 * rank, naming two ranks and both calls. */
ccl_status_t ccl__check_args_agree(struct ccl_comm *comm, const struct ccl__coll_args *a);
/* The same for all_to_all_v's counts (nranks each): what this rank sends
 * to and receives from every peer. */
ccl_status_t ccl__check_counts_agree(struct ccl_comm *comm, uint32_t seq, const uint64_t *send, const uint64_t *recv);

/* Issue a validated call: recorded if a group is open on this thread,
 * else dispatched at once (a group of its own). With req_out, returns at
 * once with a request. */
ccl_status_t ccl__issue(struct ccl__call *call, ccl_request_t **req_out);

/* How a group ends: on a stream (ccl_group_end_stream, a _stream twin's
 * own group) or not. */
struct ccl__group_end {
    int on_stream;
    void *stream;
};
/* One communicator's calls at a group's end (or one call outside any
 * group): the GPU-resident try, the stream link, then one batch, inline
 * when alone (the group's only communicator) and waited for, else queued.
 * When *must_wait is set, the caller waits on w for the blocking calls.
 * Calls that did not get to run complete their requests with the failure. */
ccl_status_t ccl__dispatch(struct ccl_comm *comm, struct ccl__call *calls, int n, const struct ccl__group_end *end,
                           int alone, struct ccl_request *w, int *must_wait, const char *what);
/* A call that ran already or never will: its request, if any, completes
 * with st. */
void ccl__call_complete(struct ccl__call *call, ccl_status_t st);
/* The allocation-free path (batch.c): one blocking host call, run in this
 * thread on a communicator ccl__exec_try_inline claimed. */
ccl_status_t ccl__run_inline(struct ccl__call *call);

/* A blocking all-gather of `bytes` per rank that the library makes for
 * itself: the planner picks its algorithm even where CCL_ALGO or
 * ccl_comm_set_algo forces one that could not run it (rd on 3 ranks). */
ccl_status_t ccl__own_all_gather(const void *sendbuf, void *recvbuf, size_t bytes, ccl_comm_t *comm,
                                 const char *what);
/* The library's own point-to-point messages (a new group's id handed from
 * its leader), checked and issued as a user's are but without the public
 * layer; bytes of CCL_UINT8. */
ccl_status_t ccl__own_send(const void *buf, size_t bytes, int peer, ccl_comm_t *comm, const char *what);
ccl_status_t ccl__own_recv(void *buf, size_t bytes, int peer, ccl_comm_t *comm, const char *what);
/* The same for n calls of comm that make one operation (gather, scatter,
 * all_to_all_v): one batch named what, one request (completing with the
 * group's end when a group is open). */
ccl_status_t ccl__issue_calls(struct ccl_comm *comm, struct ccl__call *calls, int n, ccl_request_t **req_out,
                              const char *what);
/* An async twin's req must not be NULL; clears *req. */
ccl_status_t ccl__check_req(struct ccl_comm *comm, int async, ccl_request_t **req, const char *what);

/* Groups (group.c). */
int ccl__group_open(void);
/* A _stream twin's own group: opened, then ended on its stream (the
 * public ccl_group_start/ccl_group_end_stream's work). */
void ccl__group_begin(void);
ccl_status_t ccl__group_end_on(void *stream);
ccl_status_t ccl__group_record(const struct ccl__call *call);
/* comm is being destroyed: drop this thread's recorded calls on it (their
 * requests complete with CCL_ERR_INVALID_USAGE, and so does the group's end). */
void ccl__group_forget(const struct ccl_comm *comm);
/* Batches (batch.c): runs calls of one communicator as one operation. With
 * inline_ok, an idle communicator runs it in this thread. what names its
 * point-to-point transfers in errors (NULL: "send/recv" or "group"). With
 * link, the batch is ordered on a CUDA stream (device/device.h; the batch
 * owns it from here, even on failure). */
struct ccl__stream_link;
ccl_status_t ccl__submit_batch(struct ccl_comm *comm, struct ccl__call *calls, int n, struct ccl_request *blocking_req,
                               int inline_ok, const char *what, struct ccl__stream_link *link);

/* What a communicator takes from its creator rather than from the
 * environment: a config's fields, or a split's parent's. */
struct ccl__comm_options {
    double timeout_s; /* > 0: overrides CCL_TIMEOUT */
    const char *timeout_source; /* what set it, for messages (NULL: "config.timeout_s") */
    const char *algo; /* non-NULL: overrides CCL_ALGO */
    const char *algo_source; /* what set it, for messages ("config.algo") */
    /* A communicator every one of whose ranks comes from this one (a
     * split's, a shrink's): its probes' figures are taken from it. */
    const struct ccl_comm *parent;
};

/* Creates a communicator from a unique id (comm_init.c): the one path
 * behind ccl_comm_init_rank(_config), ccl_comm_init_env and
 * ccl_comm_split. opt NULL: everything from the environment. */
struct ccl__unique_id;
ccl_status_t ccl__comm_create(ccl_comm_t **out, int nranks, const struct ccl__unique_id *uid, int rank,
                              const struct ccl__comm_options *opt);
/* A fresh id (ccl_get_unique_id's work): its root listens from now on. */
ccl_status_t ccl__make_id(struct ccl__unique_id *uid);
/* A communicator made from parent's ranks (split, create_group, shrink,
 * grow) keeps parent's timeout and algorithms, wherever they came from;
 * where every one of its ranks comes from parent (not a grow's), it takes
 * parent's probed figures too instead of probing again. */
/* Rank 0's root of an id made from an address (uid->root), where no
 * root runs yet (ccl_comm_init_env, ccl_unique_id_from_address); what
 * names the caller in the message, hint ends it. */
ccl_status_t ccl__root_start_at(const struct ccl__unique_id *uid, int rank, const char *what, const char *hint);
ccl_status_t ccl__comm_create_from(ccl_comm_t *parent, ccl_comm_t **newcomm, int size,
                                   const struct ccl__unique_id *uid, int newrank, int every_rank_from_parent);
/* Tells the peers of comm that this rank revoked it (they fail with
 * CCL_ERR_REVOKED; tell: [nranks], 1 for the peers to tell, NULL: all),
 * then fails it here with that status and wakes its waiters. Nothing is
 * sent when comm has failed already: its peers were told then. */
void ccl__comm_revoke(ccl_comm_t *comm, const uint8_t *tell, const char *why);
/* Wakes this process's waiters on comm (another thread's call, the
 * executor) to see that it failed. */
void ccl__comm_wake_waiters(ccl_comm_t *comm);

/* Unmaps every shared allocation still live (shared_mem.c): destroy,
 * once nothing runs. */
void ccl__mem_free_all(struct ccl_comm *comm);

/* Frees every ccl_comm_register handle still live (register.c): destroy. */
void ccl__user_regs_free(struct ccl_comm *comm);

/* Tracing (trace_out.c): begin on this rank; end is collective (gathers to
 * rank 0, which writes the file named by pattern). */
ccl_status_t ccl__trace_begin(struct ccl_comm *comm);
ccl_status_t ccl__trace_end(struct ccl_comm *comm, const char *pattern);

#endif
