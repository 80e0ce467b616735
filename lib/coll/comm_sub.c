/*
 * Communicators made from some of a parent's ranks: ccl_comm_split
 * (collective over every parent rank) and ccl_comm_create_group
 * (collective over the members alone). Either way a leader makes a fresh
 * unique id, the parent carries it to the members, and they rendezvous on
 * it like any init: the job's secret guards the new connections as it
 * guards every one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/hash.h"
#include "core/bootstrap.h"
#include "core/log.h"

ccl_status_t ccl__comm_create_from(ccl_comm_t *parent, ccl_comm_t **newcomm, int size, const struct ccl__unique_id *uid,
                                   int newrank, int every_rank_from_parent) {
    struct ccl__comm_options opt = {parent->params.timeout_s, parent->params.timeout_source, parent->params.algo,
                                    parent->params.algo_source, every_rank_from_parent ? parent : NULL};
    return ccl__comm_create(newcomm, size, uid, newrank, &opt);
}

static int id_valid(const struct ccl__unique_id *uid) { return uid->magic == CCL__UID_MAGIC; }

struct split_entry {
    int32_t color, key;
};

CCL_API ccl_status_t ccl_comm_split(ccl_comm_t *comm, int color, int key, ccl_comm_t **newcomm) {
    CCL_CHECK(ccl__check_comm(comm, "comm_split"));
    if (!newcomm) return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_split: newcomm is NULL");
    *newcomm = NULL;
    if (color < CCL_SPLIT_NOCOLOR)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_split: color %d (must be >= 0 or CCL_SPLIT_NOCOLOR)",
                              color);
    int n = comm->nranks;
    struct split_entry me = {color, key}, *all = malloc(sizeof(*all) * (size_t)n);
    struct ccl__unique_id *ids = calloc((size_t)n, sizeof(*ids));
    ccl_status_t st = all && ids ? CCL_OK : CCL_ERR_NO_MEMORY;
    if (st == CCL_OK) st = ccl__own_all_gather(&me, all, sizeof(me), comm, "comm_split");
    /* My new rank: members of my color ordered by (key, old rank). */
    int newrank = 0, size = 0, leader = -1;
    for (int r = 0; r < n && st == CCL_OK && color >= 0; r++) {
        if (all[r].color != color) continue;
        size++;
        int before = all[r].key < key || (all[r].key == key && r < comm->rank);
        newrank += before;
        if (leader < 0 || all[r].key < all[leader].key) leader = r;
    }
    struct ccl__unique_id mine;
    memset(&mine, 0, sizeof(mine));
    if (st == CCL_OK) {
        /* A leader that cannot make an id still joins the gather (with a zero
         * id) so no rank is left waiting; its members then fail cleanly. */
        if (color >= 0 && leader == comm->rank && ccl__make_id(&mine) != CCL_OK) memset(&mine, 0, sizeof(mine));
        st = ccl__own_all_gather(&mine, ids, sizeof(mine), comm, "comm_split");
    }
    if (st == CCL_OK && color >= 0) {
        if (!id_valid(&ids[leader]))
            st = ccl__set_error(comm, CCL_ERR_REMOTE, "comm_split: rank %d could not create the new communicator",
                                leader);
        else st = ccl__comm_create_from(comm, newcomm, size, &ids[leader], newrank, 1);
    }
    free(all);
    free(ids);
    return st;
}

/* What the leader (ranks[0]) offers each member: the member list it was
 * given, as its length and a hash, and the new communicator's id (a zero id:
 * the leader could not make one). */
struct group_offer {
    uint64_t list_hash;
    int32_t nranks;
    int32_t pad;
    struct ccl__unique_id id;
};

/* The leader's answer once every member has compared lists: go, or why
 * not and (for a member) which one. */
struct group_answer {
    int32_t outcome;
    int32_t rank;
};
enum { GROUP_GO, GROUP_NO_ID, GROUP_DISAGREES, GROUP_UNREACHABLE };

/* Over the length and the ranks, in order. */
static uint64_t list_hash(const int *ranks, int n) {
    return ccl__fnv1a(ccl__fnv1a(CCL__FNV_OFFSET, &n, sizeof n), ranks, sizeof(*ranks) * (size_t)n);
}

static ccl_status_t send_bytes(const void *p, size_t n, int peer, ccl_comm_t *comm) {
    return ccl__own_send(p, n, peer, comm, "comm_create_group");
}
static ccl_status_t recv_bytes(void *p, size_t n, int peer, ccl_comm_t *comm) {
    return ccl__own_recv(p, n, peer, comm, "comm_create_group");
}

/* The leader: offer, hear every member's verdict, then answer each one.
 * It goes on past a member it cannot reach so that the rest hear the
 * outcome instead of waiting out their timeout. */
static ccl_status_t lead_group(ccl_comm_t *comm, const int *ranks, int nranks, struct group_offer *offer) {
    const char *what = "comm_create_group";
    struct group_answer answer = {id_valid(&offer->id) ? GROUP_GO : GROUP_NO_ID, ranks[0]};
    ccl_status_t first = CCL_OK;
    char *reached = calloc((size_t)nranks, 1);
    if (!reached) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory", what);
    for (int i = 1; i < nranks; i++) {
        ccl_status_t st = send_bytes(offer, sizeof(*offer), ranks[i], comm);
        reached[i] = st == CCL_OK;
        if (st != CCL_OK && answer.outcome == GROUP_GO) answer = (struct group_answer){GROUP_UNREACHABLE, ranks[i]};
        if (st != CCL_OK && first == CCL_OK) first = st;
    }
    for (int i = 1; i < nranks; i++) {
        if (!reached[i]) continue;
        int32_t verdict = 1;
        ccl_status_t st = recv_bytes(&verdict, sizeof(verdict), ranks[i], comm);
        if (st != CCL_OK) reached[i] = 0;
        if (st != CCL_OK && first == CCL_OK) first = st;
        if (answer.outcome == GROUP_GO && (st != CCL_OK || verdict != 0))
            answer = (struct group_answer){st != CCL_OK ? GROUP_UNREACHABLE : GROUP_DISAGREES, ranks[i]};
    }
    for (int i = 1; i < nranks; i++)
        if (reached[i]) (void)send_bytes(&answer, sizeof(answer), ranks[i], comm);
    free(reached);
    switch (answer.outcome) {
    case GROUP_GO: return CCL_OK;
    case GROUP_NO_ID:
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "%s: this rank (the leader, ranks[0]) could not make an id", what);
    case GROUP_DISAGREES:
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "%s: rank %d was given a different member list (every member passes the same ranks, "
                              "in the same order)",
                              what, (int)answer.rank);
    default: return first; /* the parent's call named the peer */
    }
}

/* A member: compare the leader's list with its own, then hear the
 * outcome. */
static ccl_status_t join_group(ccl_comm_t *comm, const int *ranks, int nranks, struct group_offer *offer) {
    const char *what = "comm_create_group";
    int leader = ranks[0];
    CCL_CHECK(recv_bytes(offer, sizeof(*offer), leader, comm));
    int32_t verdict = offer->list_hash == list_hash(ranks, nranks) && offer->nranks == nranks ? 0 : 1;
    CCL_CHECK(send_bytes(&verdict, sizeof(verdict), leader, comm));
    struct group_answer answer;
    CCL_CHECK(recv_bytes(&answer, sizeof(answer), leader, comm));
    switch (answer.outcome) {
    case GROUP_GO: return CCL_OK;
    case GROUP_NO_ID:
        return ccl__set_error(comm, CCL_ERR_REMOTE, "%s: the leader, rank %d, could not make an id", what, leader);
    case GROUP_DISAGREES:
        if (verdict != 0)
            return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                  "%s: the leader, rank %d, was given a different member list (%d ranks) than this "
                                  "rank (%d ranks)",
                                  what, leader, (int)offer->nranks, nranks);
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "%s: rank %d was given a different member list than the leader, rank %d", what,
                              (int)answer.rank, leader);
    case GROUP_UNREACHABLE:
        return ccl__set_error(comm, CCL_ERR_REMOTE, "%s: the leader, rank %d, could not reach rank %d", what, leader,
                              (int)answer.rank);
    default:
        return ccl__set_error(comm, CCL_ERR_REMOTE, "%s: an unknown answer (%d) from the leader, rank %d", what,
                              (int)answer.outcome, leader);
    }
}

CCL_API ccl_status_t ccl_comm_create_group(ccl_comm_t *comm, const int *ranks, int nranks, ccl_comm_t **newcomm) {
    const char *what = "comm_create_group";
    CCL_CHECK(ccl__check_comm(comm, what));
    if (!newcomm) return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: newcomm is NULL", what);
    *newcomm = NULL;
    if (!ranks || nranks < 1 || nranks > comm->nranks)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: %s (1 to %d ranks of comm)", what,
                              ranks ? "nranks out of range" : "ranks is NULL", comm->nranks);
    int me = -1;
    for (int i = 0; i < nranks; i++) {
        if (ranks[i] < 0 || ranks[i] >= comm->nranks)
            return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: ranks[%d] = %d is not a rank of comm (0 to %d)",
                                  what, i, ranks[i], comm->nranks - 1);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: ranks[%d] and ranks[%d] are both %d", what,
                                      j, i, ranks[i]);
        if (ranks[i] == comm->rank) me = i;
    }
    if (me < 0)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "%s: rank %d is not in ranks (only the new communicator's members call it)", what,
                              comm->rank);
    if (ccl__group_open())
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: not inside a group (it waits on the other members)",
                              what);
    struct group_offer offer;
    memset(&offer, 0, sizeof(offer));
    ccl_status_t st;
    if (me == 0) {
        offer.list_hash = list_hash(ranks, nranks);
        offer.nranks = nranks;
        if (ccl__make_id(&offer.id) != CCL_OK) memset(&offer.id, 0, sizeof(offer.id));
        st = lead_group(comm, ranks, nranks, &offer);
    } else {
        st = join_group(comm, ranks, nranks, &offer);
    }
    if (st != CCL_OK) return st;
    CCL_INFO(CCL__SUB_INIT, comm->rank, "%s: rank %d of %d in a communicator of parent ranks led by %d", what, me,
             nranks, ranks[0]);
    return ccl__comm_create_from(comm, newcomm, nranks, &offer.id, me, 1);
}
