/*
 * Shrink: the survivors of a communicator agree on who is gone and form a
 * new communicator without them (docs/elastic.md).
 *
 * The data path cannot carry the agreement (it failed, or it waits on the
 * ranks being left out), so it runs on the pair channel, which outlives
 * the failure. The coordinator is the lowest rank a survivor believes
 * alive. Every other survivor reports to it (with the ranks it was told to
 * exclude) and waits for its decision; the coordinator waits for a report
 * from every rank not known gone, finding dead ones by dialling them (a
 * dead process refuses at once) and giving up on silent ones at the
 * communicator's timeout. Its decision (who is out, and a fresh id for the
 * new communicator) goes to every rank still there, silent ones included,
 * so that one resumed later learns it was left out. A coordinator that
 * dies is found by its reporters (its end of the channel closes, or it
 * refuses) and the next lowest takes its place. Creating the new
 * communicator ends with a round through its root that every member
 * passes or fails together; when a member died in it, everyone agrees
 * again, without it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/boot_pair.h"
#include "core/bootstrap.h"
#include "core/hash.h"
#include "core/log.h"

#define MAX_ATTEMPTS 8    /* creations tried before giving up */
#define PROBE_EVERY_S 0.05 /* how often the coordinator dials ranks that have not reported */
#define DIAL_S 0.5        /* how long one dial may take: only a cut link takes that long */

struct report {
    int32_t attempt;
    int32_t pad;
    uint64_t list_hash; /* of the caller's exclude list (0: none) */
    /* then nranks bytes: 1 for a rank this survivor knows is out */
};

struct decision {
    int32_t attempt;
    int32_t status;     /* CCL_OK, or why every survivor fails */
    int32_t disagrees;  /* the status is CCL_ERR_INVALID_USAGE: this rank's list differs */
    int32_t pad;
    struct ccl__unique_id id;
    /* then nranks bytes: 1 for a rank left out */
};

struct shrink {
    ccl_comm_t *comm;
    int n, me;
    uint8_t *out;       /* [n]: ranks known to be out */
    uint8_t *silent;    /* [n]: left out for saying nothing in time (alive, perhaps stopped) */
    uint64_t list_hash;
    int attempt;
    size_t report_bytes, decision_bytes;
    uint8_t *msg;       /* one message of either kind */
};

static int lowest_in(const struct shrink *s) {
    for (int r = 0; r < s->n; r++)
        if (!s->out[r]) return r;
    return -1;
}

/* A decision from whichever rank coordinated (one that left this rank
 * out, too), waiting up to ms: 1 with d, *by and s->out filled. One from
 * a creation that failed (an older attempt) is dropped. */
static int take_decision(struct shrink *s, struct decision *d, int *by, int ms) {
    while (ccl__pair_recv_any(s->comm, CCL__PAIR_TAG_SHRINK_DECIDE, by, s->msg, s->decision_bytes, ms)) {
        memcpy(d, s->msg, sizeof(*d));
        if (d->attempt >= s->attempt) {
            memcpy(s->out, s->msg + sizeof(*d), (size_t)s->n);
            return 1;
        }
        ms = 0;
    }
    return 0;
}

static ccl_status_t left_out_error(struct shrink *s, int by) {
    return ccl__replace_error(s->comm, CCL_ERR_REVOKED, "comm_shrink: this rank (%d) was left out of the shrink "
                              "coordinated by rank %d: it did not answer within the communicator's timeout (%g s)",
                              s->me, by, s->comm->params.timeout_s);
}

/* The coordinator: waits for every rank's report, then decides and tells
 * them. Returns 1 when it decided, 0 when another rank's decision came
 * first (in d and *by: adopted), or an error. */
static int coordinate(struct shrink *s, struct decision *d, int *by) {
    ccl_comm_t *comm = s->comm;
    uint8_t *reported = calloc((size_t)s->n, 1);
    if (!reported) return ccl__replace_error(comm, CCL_ERR_NO_MEMORY, "comm_shrink: out of memory");
    reported[s->me] = 1;
    int disagrees = -1;
    double deadline = ccl__now() + comm->params.timeout_s, next_probe = 0;
    struct report *rep = (struct report *)s->msg;
    for (;;) {
        int waiting = 0;
        for (int r = 0; r < s->n; r++) waiting += !s->out[r] && !reported[r];
        if (!waiting) break;
        if (take_decision(s, d, by, 0)) {
            free(reported);
            return 0;
        }
        double now = ccl__now();
        if (now > deadline) {
            for (int r = 0; r < s->n; r++)
                if (!s->out[r] && !reported[r]) {
                    s->out[r] = s->silent[r] = 1;
                    CCL_WARN(CCL__SUB_INIT, s->me, "comm_shrink: rank %d said nothing within %g s (CCL_TIMEOUT): "
                             "left out", r, comm->params.timeout_s);
                }
            break;
        }
        if (now >= next_probe) {
            for (int r = 0; r < s->n; r++)
                if (!s->out[r] && !reported[r] && !ccl__pair_alive(comm, r, DIAL_S)) s->out[r] = 1;
            next_probe = ccl__now() + PROBE_EVERY_S;
            continue;
        }
        int from;
        if (!ccl__pair_recv_any(comm, CCL__PAIR_TAG_SHRINK_REPORT, &from, s->msg, s->report_bytes, 10)) continue;
        if (rep->attempt < s->attempt) continue; /* from a creation that failed: reported again since */
        reported[from] = 1;
        if (rep->list_hash != s->list_hash) {
            /* Its list is not ours: what it leaves out is no guide to who
             * is coming, and everyone who reports will hear of it. */
            if (disagrees < 0) disagrees = from;
            continue;
        }
        const uint8_t *gone = (const uint8_t *)(rep + 1);
        for (int r = 0; r < s->n; r++) s->out[r] |= gone[r];
    }
    /* A rank that reported and died since is out too (one more dial each). */
    for (int r = 0; r < s->n; r++)
        if (reported[r] && r != s->me && !s->out[r] && !ccl__pair_alive(comm, r, DIAL_S)) s->out[r] = 1;
    memset(d, 0, sizeof(*d));
    d->attempt = s->attempt;
    d->disagrees = disagrees;
    if (disagrees >= 0) d->status = CCL_ERR_INVALID_USAGE;
    else d->status = ccl__make_id(&d->id);
    *by = s->me;
    ccl__test_fault_point(comm, "shrink-decide");
    memcpy(s->msg, d, sizeof(*d));
    memcpy(s->msg + sizeof(*d), s->out, (size_t)s->n);
    /* Everyone who reported hears, and so do silent ranks: a rank left
     * out learns it, whenever it looks; its copy has no id, so it holds
     * no secret of the new communicator. */
    for (int r = 0; r < s->n; r++)
        if (r != s->me && s->out[r] && (s->silent[r] || reported[r])) {
            memset(s->msg + offsetof(struct decision, id), 0, sizeof d->id);
            (void)ccl__pair_send_within(comm, r, CCL__PAIR_TAG_SHRINK_DECIDE, s->msg, s->decision_bytes, DIAL_S);
        }
    memcpy(s->msg, d, sizeof(*d));
    for (int r = 0; r < s->n; r++)
        if (r != s->me && !s->out[r])
            (void)ccl__pair_send_within(comm, r, CCL__PAIR_TAG_SHRINK_DECIDE, s->msg, s->decision_bytes, DIAL_S);
    explicit_bzero(s->msg, s->decision_bytes);
    free(reported);
    ccl__test_fault_point(comm, "shrink-decided");
    return 1;
}

/* Any other survivor: reports to coord and waits for a decision (its, or
 * another coordinator's that counts this rank in). 1: got one; 0: coord
 * is gone or silent past the time it may take (now marked out): try the
 * next. */
static int follow(struct shrink *s, int coord, struct decision *d, int *by) {
    ccl_comm_t *comm = s->comm;
    ccl__test_fault_point(comm, "shrink-report");
    struct report rep = {.attempt = s->attempt, .list_hash = s->list_hash};
    memcpy(s->msg, &rep, sizeof rep);
    memcpy(s->msg + sizeof rep, s->out, (size_t)s->n);
    if (ccl__pair_send_within(comm, coord, CCL__PAIR_TAG_SHRINK_REPORT, s->msg, s->report_bytes, DIAL_S) == CCL_OK) {
        ccl__test_fault_point(comm, "shrink-wait");
        /* The coordinator may wait a timeout for a silent rank, and dial
         * the others before it: this rank waits longer than that. */
        double deadline = ccl__now() + 2 * comm->params.timeout_s + 1, next_probe = ccl__now() + PROBE_EVERY_S;
        for (;;) {
            if (take_decision(s, d, by, 10)) return 1;
            double now = ccl__now();
            if (now > deadline) break;
            if (now < next_probe) continue;
            if (!ccl__pair_alive(comm, coord, DIAL_S)) break;
            next_probe = ccl__now() + PROBE_EVERY_S;
        }
    }
    CCL_INFO(CCL__SUB_INIT, s->me, "comm_shrink: coordinator rank %d is gone or silent; the next lowest takes over",
             coord);
    s->out[coord] = 1;
    return 0;
}

/* Agree, then create; again without whoever died during the creation. */
static ccl_status_t agree_and_create(struct shrink *s, ccl_comm_t **newcomm) {
    ccl_comm_t *comm = s->comm;
    ccl_status_t st = CCL_ERR_INTERNAL;
    for (s->attempt = 0; s->attempt < MAX_ATTEMPTS; s->attempt++) {
        struct decision d;
        int by = -1;
        for (;;) {
            if (take_decision(s, &d, &by, 0)) break;
            int coord = lowest_in(s);
            if (coord == s->me) {
                int r = coordinate(s, &d, &by);
                if (r < 0) return (ccl_status_t)r;
                break;
            }
            if (follow(s, coord, &d, &by)) break;
        }
        if (s->out[s->me]) return left_out_error(s, by);
        if (d.status == CCL_ERR_INVALID_USAGE)
            return ccl__replace_error(comm, CCL_ERR_INVALID_USAGE, "comm_shrink: rank %d passed another exclude list "
                                      "than rank %d (every survivor must pass the same)", d.disagrees, by);
        if (d.status != CCL_OK)
            return ccl__replace_error(comm, (ccl_status_t)d.status, "comm_shrink: the coordinator (rank %d) could "
                                      "not make the new communicator's id (%s)", by,
                                      ccl_status_string((ccl_status_t)d.status));
        int size = 0, newrank = 0;
        for (int r = 0; r < s->n; r++) size += !s->out[r], newrank += r < s->me && !s->out[r];
        CCL_INFO(CCL__SUB_INIT, s->me, "comm_shrink: agreed with rank %d's decision: %d ranks, this one %d", by, size,
                 newrank);
        ccl__test_fault_point(comm, "shrink-create");
        st = ccl__comm_create_from(comm, newcomm, size, &d.id, newrank, 1);
        explicit_bzero(&d, sizeof d);
        if (st == CCL_OK) return CCL_OK;
        CCL_WARN(CCL__SUB_INIT, s->me, "comm_shrink: creating the %d-rank communicator failed (%s): agreeing again",
                 size, ccl_status_string(st));
    }
    return ccl__replace_error(comm, st, "comm_shrink: the new communicator could not be created in %d attempts (%s)",
                              MAX_ATTEMPTS, ccl_status_string(st));
}

static ccl_status_t check_exclude(ccl_comm_t *comm, const int *exclude, int nexclude, uint8_t *out) {
    if (nexclude < 0 || (nexclude > 0 && !exclude))
        return ccl__replace_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_shrink: %s", nexclude < 0 ? "nexclude is negative"
                                                                                            : "exclude is NULL");
    for (int i = 0; i < nexclude; i++) {
        int r = exclude[i];
        if (r < 0 || r >= comm->nranks)
            return ccl__replace_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_shrink: exclude[%d] = %d is not a rank of "
                                  "this %d-rank communicator", i, r, comm->nranks);
        if (r == comm->rank)
            return ccl__replace_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_shrink: this rank (%d) is in exclude: ranks "
                                  "left out make no call", r);
        if (out[r])
            return ccl__replace_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_shrink: rank %d is in exclude twice", r);
        out[r] = 1;
    }
    return CCL_OK;
}

CCL_API ccl_status_t ccl_comm_shrink(ccl_comm_t *comm, const int *exclude, int nexclude, ccl_comm_t **newcomm) {
    CCL_CHECK(ccl__check_comm(comm, "comm_shrink"));
    if (!newcomm) return ccl__replace_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_shrink: newcomm is NULL");
    *newcomm = NULL;
    if (comm->left_out)
        return ccl__replace_error(comm, CCL_ERR_INVALID_USAGE, "comm_shrink: this communicator was shrunk already: "
                              "shrink the one that shrink made");
    if (ccl__group_open())
        return ccl__replace_error(comm, CCL_ERR_INVALID_USAGE, "comm_shrink: inside a group (it waits on the other "
                              "ranks)");
    struct shrink s = {.comm = comm, .n = comm->nranks, .me = comm->rank};
    s.report_bytes = sizeof(struct report) + (size_t)s.n;
    s.decision_bytes = sizeof(struct decision) + (size_t)s.n;
    s.out = calloc((size_t)s.n, 1);
    s.silent = calloc((size_t)s.n, 1);
    s.msg = malloc(s.decision_bytes > s.report_bytes ? s.decision_bytes : s.report_bytes);
    ccl_status_t st = s.out && s.silent && s.msg ? CCL_OK : ccl__replace_error(comm, CCL_ERR_NO_MEMORY, "comm_shrink: "
                                                                            "out of memory");
    if (st == CCL_OK && (exclude || nexclude)) st = check_exclude(comm, exclude, nexclude, s.out);
    if (st == CCL_OK && exclude) s.list_hash = ccl__fnv1a(CCL__FNV_OFFSET, s.out, (size_t)s.n) | 1;
    if (st == CCL_OK) {
        /* The agreement's channel goes on whatever happens to comm. */
        ccl__pair_outlive_failure(comm);
        double t0 = ccl__now();
        st = agree_and_create(&s, newcomm);
        /* Every survivor is here, done with comm: it is revoked now, and
         * the ranks left out that may be alive are told (their calls on it
         * fail with CCL_ERR_REVOKED). Not before: a survivor may still be
         * finishing a call that the ones that came here first are done
         * with. */
        char why[96], said[CCL__ERR_BYTES];
        snprintf(why, sizeof why, "rank %d shrank the communicator (ccl_comm_shrink)", comm->rank);
        for (int r = 0; r < s.n; r++) s.silent[r] |= exclude && s.out[r];
        if (st != CCL_OK) {
            pthread_mutex_lock(&comm->err_lock);
            memcpy(said, comm->last_error, sizeof said);
            pthread_mutex_unlock(&comm->err_lock);
        }
        ccl__comm_revoke(comm, s.silent, why);
        if (st != CCL_OK) ccl__replace_error(comm, st, "%s", said); /* the shrink's outcome, not the revoke's */
        if (st == CCL_OK) {
            comm->left_out = s.out, s.out = NULL;
            for (int r = 0; r < s.n; r++) comm->nleft_out += comm->left_out[r];
            CCL_INFO(CCL__SUB_INIT, comm->rank, "comm_shrink: %d of %d ranks go on (%d left out) after %.1f ms",
                     s.n - comm->nleft_out, s.n, comm->nleft_out, (ccl__now() - t0) * 1e3);
        }
    }
    free(s.out);
    free(s.silent);
    if (s.msg) explicit_bzero(s.msg, s.decision_bytes > s.report_bytes ? s.decision_bytes : s.report_bytes);
    free(s.msg);
    return st;
}
