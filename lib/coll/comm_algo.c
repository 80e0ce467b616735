/* ccl_comm_set_algo and ccl_comm_set_timeout: a communicator's algorithms
 * or its timeout changed between calls (benchmarks comparing algorithms
 * over one set of links and buffers, a trainer trying them in turn, a
 * framework's "set this group's timeout"). */
#include <stdio.h>
#include <string.h>

#include "coll/coll.h"
#include "core/exec.h"
#include "plan/plan.h"

/* The plan reads comm->params.algo and comm->algo_forced while a call
 * runs, on whichever thread runs it; holding the runner (as a blocking
 * call on an idle communicator does) keeps every call out meanwhile. */
static ccl_status_t replace_algo(struct ccl_comm *comm, const char *algo) {
    char old_algo[sizeof comm->params.algo], old_source[sizeof comm->params.algo_source];
    signed char old_forced[CCL__MAX_OP_KINDS], old_last[CCL__MAX_OP_KINDS];
    memcpy(old_algo, comm->params.algo, sizeof old_algo);
    memcpy(old_source, comm->params.algo_source, sizeof old_source);
    memcpy(old_forced, comm->algo_forced, sizeof old_forced);
    memcpy(old_last, comm->algo_last, sizeof old_last);
    snprintf(comm->params.algo, sizeof comm->params.algo, "%s", algo);
    snprintf(comm->params.algo_source, sizeof comm->params.algo_source, "ccl_comm_set_algo");
    size_t old_too_long = comm->params.algo_too_long;
    comm->params.algo_too_long = 0;
    ccl_status_t st = ccl__plan_parse_algo(comm, "set_algo");
    if (st != CCL_OK) { /* the message names the bad spec; the old one stands */
        memcpy(comm->params.algo, old_algo, sizeof old_algo);
        memcpy(comm->params.algo_source, old_source, sizeof old_source);
        comm->params.algo_too_long = old_too_long;
        memcpy(comm->algo_forced, old_forced, sizeof old_forced);
        memcpy(comm->algo_last, old_last, sizeof old_last);
    }
    return st;
}

CCL_API ccl_status_t ccl_comm_set_algo(ccl_comm_t *comm, const char *algo) {
    CCL_CHECK(ccl__check_comm(comm, "comm_set_algo"));
    if (!algo) return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "set_algo: algo is NULL");
    if (strlen(algo) >= sizeof comm->params.algo)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "set_algo: '%.40s...' is longer than %zu characters",
                              algo, sizeof comm->params.algo - 1);
    CCL_CHECK(ccl__comm_health(comm));
    if (ccl__group_open())
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "set_algo: a group is open (its calls would run with the new algorithms): "
                              "call it before ccl_group_start or after ccl_group_end");
    if (!ccl__exec_try_inline(comm))
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "set_algo: operations are still in flight on rank %d: wait for them first", comm->rank);
    ccl_status_t st = replace_algo(comm, algo);
    ccl__exec_inline_done(comm);
    return st;
}

/* Waits read comm->params.timeout_s on whichever thread runs the call;
 * holding the runner keeps every call out while it changes. */
CCL_API ccl_status_t ccl_comm_set_timeout(ccl_comm_t *comm, double seconds) {
    CCL_CHECK(ccl__check_comm(comm, "comm_set_timeout"));
    if (!(seconds > 0) || !(seconds <= 1e9)) /* init's bound; NaN fails both */
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "set_timeout: %g is not a number of seconds above 0 "
                              "up to 1e9", seconds);
    CCL_CHECK(ccl__comm_health(comm));
    if (ccl__group_open())
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "set_timeout: a group is open: call it before ccl_group_start or after ccl_group_end");
    if (!ccl__exec_try_inline(comm))
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "set_timeout: operations are still in flight on rank %d: wait for them first",
                              comm->rank);
    comm->params.timeout_s = seconds;
    snprintf(comm->params.timeout_source, sizeof comm->params.timeout_source, "ccl_comm_set_timeout");
    ccl__exec_inline_done(comm);
    return CCL_OK;
}
