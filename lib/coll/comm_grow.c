/*
 * Grow: newcomers join a communicator's ranks in a larger one
 * (docs/elastic.md).
 *
 * Rank 0 starts a root that admits two kinds of hello: a newcomer's, with
 * the id's secret (the id rank 0 hands out), for ranks from the old size
 * up; and a member's, which must also carry a token that only comm's
 * ranks receive (over comm itself, authenticated like all its traffic).
 * A process that was left out by an earlier shrink, or a stale one that
 * got hold of the newcomers' id, cannot claim a member's rank: the root
 * refuses it, names it in the log, and waits on for the real one.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/bootstrap.h"
#include "core/log.h"
#include "transports/manager.h"

CCL_API ccl_status_t ccl_comm_grow_id(ccl_comm_t *comm, ccl_unique_id_t *id) {
    CCL_CHECK(ccl__check_comm(comm, "comm_grow_id"));
    if (!id) return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_grow_id: id is NULL");
    if (comm->rank != 0)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "comm_grow_id: rank %d called it: rank 0 makes the "
                              "newcomers' id, and hands it to them", comm->rank);
    struct ccl__unique_id *uid = calloc(1, sizeof(*uid));
    if (!uid) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "comm_grow_id: out of memory");
    ccl_status_t st = ccl__boot_make_grow_id(uid, comm->nranks, comm->params.ifname, comm->params.timeout_s,
                                             ccl__conns_record_bytes());
    if (st != CCL_OK) {
        free(uid);
        return ccl__set_error(comm, st, "comm_grow_id: cannot start the grow's rendezvous (%s)",
                              ccl_status_string(st));
    }
    if (comm->grow_uid) explicit_bzero(comm->grow_uid, sizeof(*comm->grow_uid));
    free(comm->grow_uid); /* an earlier id not used: its root times out alone */
    comm->grow_uid = uid;
    struct ccl__unique_id theirs = *uid;
    memset(theirs.member_token, 0, sizeof(theirs.member_token));
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &theirs, sizeof(theirs));
    explicit_bzero(&theirs, sizeof(theirs));
    return CCL_OK;
}

/* What rank 0 tells comm's ranks: the members' id, or why there is none. */
struct grow_offer {
    int32_t status;
    int32_t nranks;
    struct ccl__unique_id id;
};

static ccl_status_t grow_member(ccl_comm_t *comm, int nranks, const ccl_unique_id_t *id, ccl_comm_t **newcomm) {
    struct grow_offer offer = {.status = CCL_OK, .nranks = nranks};
    if (comm->rank == 0) {
        struct ccl__unique_id given;
        if (id) memcpy(&given, id->internal, sizeof(given));
        if (!comm->grow_uid) offer.status = CCL_ERR_INVALID_USAGE;
        else if (!id || !ccl__secret_equal(given.secret, comm->grow_uid->secret, CCL__SECRET_BYTES))
            offer.status = CCL_ERR_INVALID_ARGUMENT;
        else offer.id = *comm->grow_uid;
        if (id) explicit_bzero(&given, sizeof(given));
    }
    struct grow_offer *offers = malloc(sizeof(*offers) * (size_t)comm->nranks);
    ccl_status_t st = offers ? CCL_OK : ccl__set_error(comm, CCL_ERR_NO_MEMORY, "comm_grow: out of memory");
    /* One gather carries rank 0's offer and every rank's size: ranks that
     * disagree all fail here, before any of them waits at the root. */
    if (st == CCL_OK) st = ccl__own_all_gather(&offer, offers, sizeof(offer), comm, "comm_grow");
    int differs = -1, asked = 0, asked0 = 0;
    for (int r = 0; st == CCL_OK && r < comm->nranks; r++)
        if (offers[r].nranks != offers[0].nranks && differs < 0)
            differs = r, asked = offers[r].nranks, asked0 = offers[0].nranks;
    if (st == CCL_OK) {
        offer = offers[0];
        if (offer.status == CCL_ERR_INVALID_USAGE)
            st = ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "comm_grow: rank 0 made no grow id (ccl_comm_grow_id "
                                "first, on rank 0)");
        else if (offer.status == CCL_ERR_INVALID_ARGUMENT)
            st = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_grow: rank 0 passed %s",
                                "an id that is not its last ccl_comm_grow_id's (or NULL)");
        else if (differs >= 0)
            st = ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "comm_grow: rank %d asked for %d ranks, rank 0 for %d",
                                differs, asked, asked0);
        else if (nranks <= comm->nranks)
            st = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_grow: %d ranks is not more than the %d it has",
                                nranks, comm->nranks);
    }
    for (int r = 0; offers && r < comm->nranks; r++) explicit_bzero(&offers[r], sizeof(offers[r]));
    free(offers);
    if (comm->rank == 0 && st == CCL_OK) {
        /* One use: a second grow needs a new id. */
        explicit_bzero(comm->grow_uid, sizeof(*comm->grow_uid));
        free(comm->grow_uid);
        comm->grow_uid = NULL;
    }
    if (st == CCL_OK) {
        CCL_INFO(CCL__SUB_INIT, comm->rank, "comm_grow: %d ranks become %d", comm->nranks, nranks);
        st = ccl__comm_create_from(comm, newcomm, nranks, &offer.id, comm->rank, 0);
    }
    explicit_bzero(&offer, sizeof(offer));
    return st;
}

CCL_API ccl_status_t ccl_comm_grow(ccl_comm_t *comm, int nranks, const ccl_unique_id_t *id, int rank,
                                   ccl_comm_t **newcomm) {
    if (comm) {
        CCL_CHECK(ccl__check_comm(comm, "comm_grow"));
        if (!newcomm) return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_grow: newcomm is NULL");
        *newcomm = NULL;
        if (ccl__group_open())
            return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "comm_grow: inside a group (it waits on the other "
                                  "ranks)");
        return grow_member(comm, nranks, id, newcomm);
    }
    if (!newcomm || !id)
        return ccl__init_failed(rank, CCL_ERR_INVALID_ARGUMENT, "", "comm_grow: %s is NULL (a newcomer passes the id "
                                "of ccl_comm_grow_id and gets the new communicator)", !id ? "id" : "newcomm");
    *newcomm = NULL;
    if (nranks <= 0 || rank < 0 || rank >= nranks)
        return ccl__init_failed(rank, CCL_ERR_INVALID_ARGUMENT, "", "comm_grow: rank %d is out of range for %d ranks",
                                rank, nranks);
    struct ccl__unique_id uid;
    memcpy(&uid, id->internal, sizeof(uid));
    if (uid.magic != CCL__UID_MAGIC)
        return ccl__init_failed(rank, CCL_ERR_INVALID_ARGUMENT, "", "comm_grow: the id was not made by "
                                "ccl_comm_grow_id (a foreign or corrupted id)");
    ccl_status_t st = ccl__comm_create(newcomm, nranks, &uid, rank, NULL);
    explicit_bzero(&uid, sizeof(uid));
    return st;
}
