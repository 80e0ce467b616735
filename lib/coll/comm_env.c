/*
 * Communicators from the launcher's environment, and splitting one.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/bootstrap.h"
#include "core/log.h"
#include "transports/manager.h"

/* First variable of the list that is set. */
static const char *env_first(const char *const *names, const char **which) {
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && *v) {
            *which = *names;
            return v;
        }
    }
    return NULL;
}

static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > 1 << 24) return -1;
    *out = (int)v;
    return 0;
}

/* CCL_SECRET as hex; without it, a secret derived from the root address and
 * the launcher's job id. The derived one keeps ranks of different jobs apart;
 * it is no protection against someone who can read the environment: set
 * CCL_SECRET (cclrun does) where that matters. */
static void job_secret(const char *root, uint8_t out[CCL__SECRET_BYTES]) {
    const char *hex = getenv("CCL_SECRET");
    memset(out, 0, CCL__SECRET_BYTES);
    if (hex && *hex) {
        size_t n = strlen(hex);
        for (size_t i = 0; i + 1 < n && i / 2 < CCL__SECRET_BYTES; i += 2) {
            unsigned b;
            if (sscanf(hex + i, "%2x", &b) == 1) out[i / 2] = (uint8_t)b;
        }
        return;
    }
    static const char *const ids[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_orte_ess_jobid",
                                      "PMIX_NAMESPACE", "PMI_JOBID", NULL};
    const char *which = "", *job = env_first(ids, &which);
    char seed[512];
    snprintf(seed, sizeof(seed), "libccl|%s|%s", root, job ? job : "");
    /* FNV-1a, re-seeded per 8-byte lane: a fixed mapping, not cryptography. */
    for (int lane = 0; lane < CCL__SECRET_BYTES / 8; lane++) {
        uint64_t h = 1469598103934665603ull ^ (uint64_t)lane;
        for (const char *p = seed; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
        memcpy(out + lane * 8, &h, 8);
    }
}

CCL_API ccl_status_t ccl_comm_init_env(ccl_comm_t **comm) {
    if (!comm) return CCL_ERR_INVALID_ARGUMENT;
    *comm = NULL;
    static const char *const rank_vars[] = {"CCL_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL};
    static const char *const size_vars[] = {"CCL_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
                                            "PMI_SIZE", NULL};
    const char *rv_name = "", *sv_name = "";
    const char *rv = env_first(rank_vars, &rv_name), *sv = env_first(size_vars, &sv_name);
    int rank, size;
    if (!rv || !sv || parse_int(rv, &rank) || parse_int(sv, &size) || size < 1 || rank >= size) {
        CCL_WARN(CCL__SUB_INIT, -1,
                 "ccl_comm_init_env: no usable rank/size in the environment (%s=%s, %s=%s); set CCL_RANK and "
                 "CCL_WORLD_SIZE, or run under torchrun, Slurm, mpirun or cclrun",
                 rv ? rv_name : "rank", rv ? rv : "unset", sv ? sv_name : "size", sv ? sv : "unset");
        return CCL_ERR_INVALID_ARGUMENT;
    }
    char root[256];
    const char *ra = getenv("CCL_ROOT_ADDR"), *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
    if (ra && *ra) snprintf(root, sizeof(root), "%s", ra);
    else if (ma && *ma && mp && *mp) snprintf(root, sizeof(root), strchr(ma, ':') ? "[%s]:%s" : "%s:%s", ma, mp);
    else {
        CCL_WARN(CCL__SUB_INIT, rank, "ccl_comm_init_env: set CCL_ROOT_ADDR=host:port (or MASTER_ADDR and MASTER_PORT)");
        return CCL_ERR_INVALID_ARGUMENT;
    }
    struct ccl__unique_id uid = {.magic = CCL__UID_MAGIC};
    if (ccl__sa_parse(root, &uid.root) != CCL_OK) {
        CCL_WARN(CCL__SUB_INIT, rank, "ccl_comm_init_env: cannot resolve the root address '%s'", root);
        return CCL_ERR_INVALID_ARGUMENT;
    }
    job_secret(root, uid.secret);
    CCL_INFO(CCL__SUB_INIT, rank, "init from environment: rank %d of %d (%s, %s), root %s", rank, size, rv_name,
             sv_name, root);
    if (rank == 0) {
        const struct ccl__params *prm = ccl__params_get();
        union ccl__sa bind_addr = uid.root;
        ccl_status_t st = ccl__boot_root_start(&bind_addr, uid.secret, prm->timeout_s, ccl__conns_record_bytes());
        if (st != CCL_OK) {
            /* The name may resolve to an address of this host that cannot be
             * bound (e.g. behind NAT): listen on every address instead. */
            union ccl__sa any = uid.root;
            if (any.sa.sa_family == AF_INET6) any.in6.sin6_addr = in6addr_any;
            else any.in.sin_addr.s_addr = htonl(INADDR_ANY);
            st = ccl__boot_root_start(&any, uid.secret, prm->timeout_s, ccl__conns_record_bytes());
        }
        if (st != CCL_OK) {
            CCL_WARN(CCL__SUB_INIT, rank, "ccl_comm_init_env: cannot listen on %s (%s)", root, ccl_status_string(st));
            return st;
        }
    }
    return ccl__comm_create(comm, size, &uid, rank);
}

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
    ccl_unique_id_t *ids = calloc((size_t)n, sizeof(*ids));
    ccl_status_t st = all && ids ? CCL_OK : CCL_ERR_NO_MEMORY;
    if (st == CCL_OK) st = ccl_all_gather(&me, all, sizeof(me), CCL_UINT8, comm);
    /* My new rank: members of my color ordered by (key, old rank). */
    int newrank = 0, size = 0, leader = -1;
    for (int r = 0; r < n && st == CCL_OK && color >= 0; r++) {
        if (all[r].color != color) continue;
        size++;
        int before = all[r].key < key || (all[r].key == key && r < comm->rank);
        newrank += before;
        if (leader < 0 || all[r].key < all[leader].key) leader = r;
    }
    ccl_unique_id_t mine;
    memset(&mine, 0, sizeof(mine));
    if (st == CCL_OK) {
        /* A leader that cannot make an id still joins the gather (with a zero
         * id) so no rank is left waiting; its members then fail cleanly. */
        if (color >= 0 && leader == comm->rank && ccl_get_unique_id(&mine) != CCL_OK) memset(&mine, 0, sizeof(mine));
        st = ccl_all_gather(&mine, ids, sizeof(mine), CCL_UINT8, comm);
    }
    if (st == CCL_OK && color >= 0) {
        struct ccl__unique_id uid;
        memcpy(&uid, ids[leader].internal, sizeof(uid));
        if (uid.magic != CCL__UID_MAGIC)
            st = ccl__set_error(comm, CCL_ERR_REMOTE, "comm_split: rank %d could not create the new communicator",
                                leader);
        else st = ccl__comm_create(newcomm, size, &uid, newrank);
    }
    free(all);
    free(ids);
    return st;
}
