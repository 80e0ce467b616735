/* The libccl backend: how a benchmark process becomes a libccl rank and
 * issues calls, blocking or through the _async twins, grouped with -m. */
#define _GNU_SOURCE
#include "backend_ccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/colls.h"
#include "common/device_mem.h"
#include "common/values.h"
#include "launch.h"
#include "split.h"

struct bench_comm {
    ccl_comm_t *comm;      /* the run's: combining numbers, and every call without -A's list */
    ccl_comm_t *active;    /* what calls, barriers and waits run on */
    /* -A's list: one communicator over the same ranks whose algorithm
     * ccl_comm_set_algo switches, so every algorithm runs over the same
     * links, FIFOs and buffers (its own communicators would each bring
     * their FIFOs into the caches); c->comm combines the numbers, so a
     * forced algorithm never runs the benchmark's own bookkeeping. */
    ccl_comm_t *measured;
    ccl_comm_t *world; /* NCCL_TESTS_SPLIT: the whole job (c->comm is this rank's group) */
    int world_rank;
    char split[160];
    const char *const *algo_names;
    int nalgos;
    int rank, size;
    ccl_status_t last; /* the last failure */
    char error[512];
    ccl_request_t **reqs; /* -m calls, two requests each for sendrecv */
};

/* Rank variables of the launchers ccl_comm_init_env understands. */
static int launched_by_env(void) {
    static const char *const vars[] = {"CCL_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

static ccl_status_t open_measured_comm(struct bench_comm *c, const struct bench_options *o);
static ccl_status_t split_into_groups(struct bench_comm *c, const struct bench_options *o);
static int failed(struct bench_comm *c, ccl_status_t st, const char *what);

static struct bench_comm *ccl_start(const struct bench_options *o, int *exit_status) {
    /* Before anything reads the library's environment. */
    if (o->transport) setenv("CCL_TRANSPORT", o->transport, 1);
    if (o->algo) setenv("CCL_ALGO", o->algo, 1);
    char timeout[32];
    snprintf(timeout, sizeof timeout, "%g", o->timeout_s);
    if (o->timeout_s > 0) setenv("CCL_TIMEOUT", timeout, 1);
    int local = o->ranks > 0 || !launched_by_env();
    if (local) setenv("CCL_SOCKET_IFNAME", "lo", 0); /* every rank is on this machine */
    ccl_unique_id_t id;
    int rank = 0, nranks = o->ranks > 0 ? o->ranks : 1;
    if (o->ranks > 0 && !bench_fork_ranks(o->ranks, o->host_per_rank, &rank, &id, exit_status)) return NULL;
    struct bench_comm *c = calloc(1, sizeof(*c));
    ccl_request_t **reqs = calloc(2 * (size_t)o->agg, sizeof(*reqs));
    ccl_status_t st = c && reqs ? CCL_OK : CCL_ERR_NO_MEMORY;
    const char *what = "ccl_comm_init_rank";
    /* A communicator belongs to the GPU current at its creation, and the
     * GPU-resident path needs every rank's: --device opens it first. A
     * failure here is reported by the sweep's own open, on every rank. */
    char why[300];
    if (o->device && local) (void)bench_device_open(rank, why, sizeof why);
    if (st == CCL_OK && !local) {
        what = "ccl_comm_init_env";
        st = ccl_comm_init_env(&c->comm);
    } else if (st == CCL_OK) {
        if (o->ranks == 0) st = ccl_get_unique_id(&id);
        if (st == CCL_OK) st = ccl_comm_init_rank(&c->comm, nranks, id, rank);
    }
    if (st == CCL_OK) st = ccl_comm_rank(c->comm, &c->rank);
    if (st == CCL_OK) st = ccl_comm_size(c->comm, &c->size);
    if (st != CCL_OK) {
        fprintf(stderr, "[rank %d] %s: %s: %s\n", rank, o->prog, what, ccl_status_string(st));
        if (c && c->comm) ccl_comm_destroy(c->comm);
        free(c);
        free(reqs);
        *exit_status = BENCH_EXIT_ERROR;
        return NULL;
    }
    c->reqs = reqs;
    c->active = c->comm;
    c->world_rank = c->rank;
    if (split_into_groups(c, o) != CCL_OK) {
        fprintf(stderr, "[rank %d] %s: %s\n", rank, o->prog, c->error);
        *exit_status = c->last == CCL_ERR_INVALID_ARGUMENT ? BENCH_EXIT_USAGE : BENCH_EXIT_ERROR;
        if (c->world) ccl_comm_destroy(c->world);
        ccl_comm_destroy(c->comm);
        free(c);
        free(reqs);
        return NULL;
    }
    if (o->nalgos && open_measured_comm(c, o) != CCL_OK) {
        fprintf(stderr, "[rank %d] %s: the communicator of -A's algorithms: %s\n", rank, o->prog, c->error);
        if (c->measured) ccl_comm_destroy(c->measured);
        ccl_comm_destroy(c->comm);
        free(c);
        free(reqs);
        *exit_status = BENCH_EXIT_ERROR;
        return NULL;
    }
    return c;
}

/* NCCL_TESTS_SPLIT: c->comm becomes this rank's group (split by color,
 * in rank order), the whole job kept in c->world. */
static ccl_status_t split_into_groups(struct bench_comm *c, const struct bench_options *o) {
    int color = 0;
    char why[200];
    int set = bench_split_color(c->rank, &color, c->split, sizeof c->split, why, sizeof why);
    if (set == 1) return CCL_OK;
    if (set < 0) {
        snprintf(c->error, sizeof c->error, "%s", why);
        return c->last = CCL_ERR_INVALID_ARGUMENT;
    }
    (void)o;
    int *colors = calloc((size_t)c->size, sizeof(int));
    ccl_comm_t *group = NULL;
    ccl_status_t st = colors ? ccl_all_gather(&color, colors, 1, CCL_INT32, c->comm) : CCL_ERR_NO_MEMORY;
    if (st == CCL_OK) st = ccl_comm_split(c->comm, color, c->rank, &group);
    int groups = 0;
    for (int r = 0; st == CCL_OK && r < c->size; r++) {
        int first = 1;
        for (int q = 0; q < r && first; q++) first = colors[q] != colors[r];
        groups += first;
    }
    free(colors);
    if (st != CCL_OK) {
        snprintf(c->error, sizeof c->error, "splitting the ranks (%s): %s: %s", c->split, ccl_status_string(st),
                 ccl_comm_last_error(c->comm));
        return c->last = st;
    }
    size_t len = strlen(c->split);
    snprintf(c->split + len, sizeof c->split - len, ": %d groups run at once; the rows are world rank 0's group's",
             groups);
    c->world = c->comm;
    c->comm = c->active = group;
    ccl_comm_rank(group, &c->rank);
    ccl_comm_size(group, &c->size);
    return CCL_OK;
}

/* -A's list: the measured communicator, over the same ranks (its id made
 * by rank 0 and broadcast over the run's communicator), starting with the
 * list's first algorithm. */
static ccl_status_t open_measured_comm(struct bench_comm *c, const struct bench_options *o) {
    c->algo_names = o->algos;
    c->nalgos = o->nalgos;
    ccl_unique_id_t id;
    memset(&id, 0, sizeof id);
    ccl_status_t st = c->rank == 0 ? ccl_get_unique_id(&id) : CCL_OK;
    /* a rank 0 without an id still broadcasts (zeros): the others then fail at init, not hang */
    ccl_status_t bst = ccl_broadcast(&id, &id, sizeof id, CCL_UINT8, 0, c->comm);
    if (st == CCL_OK) st = bst;
    ccl_config_t cfg = CCL_CONFIG_INIT;
    cfg.algo = o->algos[0];
    if (st == CCL_OK) st = ccl_comm_init_rank_config(&c->measured, c->size, id, c->rank, &cfg);
    if (st != CCL_OK) snprintf(c->error, sizeof c->error, "%s: %s", ccl_status_string(st), ccl_comm_last_error(NULL));
    else c->active = c->measured;
    return st;
}

static int ccl_use_algo(struct bench_comm *c, int i) {
    if (i < 0 || i >= c->nalgos) {
        snprintf(c->error, sizeof c->error, "no algorithm %d in -A's list", i);
        return -1;
    }
    return failed(c, ccl_comm_set_algo(c->measured, c->algo_names[i]), "ccl_comm_set_algo") ? -1 : 0;
}

static int ccl_rank_of(const struct bench_comm *c) { return c->rank; }
static int ccl_reports(const struct bench_comm *c) { return c->world_rank == 0; }
static int ccl_size_of(const struct bench_comm *c) { return c->size; }

/* "key=value" from ccl_comm_describe's text. */
static void field(const char *desc, const char *key, char *out, size_t n) {
    size_t klen = strlen(key);
    out[0] = '\0';
    for (const char *p = desc; (p = strstr(p, key)) != NULL; p += klen) {
        if ((p != desc && p[-1] != ' ') || p[klen] != '=') continue;
        p += klen + 1;
        size_t len = strcspn(p, " ");
        snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), p);
        return;
    }
}

static void ccl_describe(struct bench_comm *c, struct bench_wiring *w) {
    char hosts[16], transports[128];
    int v = ccl_version();
    snprintf(w->library, sizeof w->library, "libccl");
    snprintf(w->split, sizeof w->split, "%s", c->split);
    snprintf(w->version, sizeof w->version, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    if (ccl_comm_describe(c->comm, w->detail, sizeof w->detail) != CCL_OK) snprintf(w->detail, sizeof w->detail, "?");
    field(w->detail, "hosts", hosts, sizeof hosts);
    w->nhosts = atoi(hosts);
    field(w->detail, "local", hosts, sizeof hosts);
    w->machine_ranks = atoi(hosts);
    field(w->detail, "cpus", hosts, sizeof hosts);
    w->machine_cpus = atoi(hosts);
    field(w->detail, "algo", w->algo, sizeof w->algo);
    size_t n = 0;
    for (int i = 0; i < c->nalgos && n < sizeof w->algo; i++) /* -A's list: "auto,ring,tree" */
        n += (size_t)snprintf(w->algo + n, sizeof w->algo - n, "%s%s", i ? "," : "", c->algo_names[i]);
    /* "shm:1,tcp:2" (peers per transport) -> "shm+tcp": one CSV field */
    field(w->detail, "transports", transports, sizeof transports);
    size_t o = 0;
    char *save = NULL;
    for (char *t = strtok_r(transports, ",", &save); t && o < sizeof w->transport; t = strtok_r(NULL, ",", &save))
        o += (size_t)snprintf(w->transport + o, sizeof w->transport - o, "%s%.*s", o ? "+" : "", (int)strcspn(t, ":"), t);
    if (!o) snprintf(w->transport, sizeof w->transport, "none");
}

/* From ccl_comm_describe's "last: all_reduce:ring (why), ..." */
static void ccl_ran_algo(struct bench_comm *c, enum bench_coll coll, char *out, size_t n) {
    char desc[1024], key[40];
    out[0] = '\0';
    if (ccl_comm_describe(c->active, desc, sizeof desc) != CCL_OK) return;
    const char *last = strstr(desc, " last: ");
    snprintf(key, sizeof key, "%s:", bench_coll_info(coll)->name);
    for (const char *p = last; p && (p = strstr(p + 1, key)) != NULL;) {
        if (p[-1] != ' ') continue;
        p += strlen(key);
        snprintf(out, n, "%.*s", (int)strcspn(p, " ,"), p);
        return;
    }
}

static const char *ccl_unsupported(const struct bench_comm *c, enum bench_coll coll, ccl_dtype_t dtype,
                                   ccl_op_t redop) {
    return NULL;
}

/* nccl-tests' hypercube: this rank's block into place, then in round k
 * (mask 2^k) a send of the mask blocks this rank holds to rank ^ mask and a
 * receive of that rank's, in a group; blocking (options.c: sequential). */
static ccl_status_t hypercube(struct bench_comm *c, const struct bench_call *k) {
    size_t block = k->count * bench_dtype_size(k->dtype);
    unsigned char *out = k->recv;
    if (out + (size_t)c->rank * block != (const unsigned char *)k->send)
        memcpy(out + (size_t)c->rank * block, k->send, block);
    for (int mask = 1; mask < c->size; mask <<= 1) {
        int mine = c->rank & ~(mask - 1), theirs = mine ^ mask;
        ccl_status_t st = ccl_group_start();
        if (st != CCL_OK) return st;
        st = ccl_send(out + (size_t)mine * block, k->count * (size_t)mask, k->dtype, c->rank ^ mask,
                                        c->active);
        if (st == CCL_OK) st = ccl_recv(out + (size_t)theirs * block, k->count * (size_t)mask, k->dtype,
                                        c->rank ^ mask, c->active);
        ccl_status_t end = ccl_group_end();
        if (st != CCL_OK || end != CCL_OK) return st != CCL_OK ? st : end;
    }
    return CCL_OK;
}

/* One call; *nreq counts the requests it left in c->reqs (non-blocking). */
static ccl_status_t issue(struct bench_comm *c, const struct bench_call *k, int nonblocking, int *nreq) {
#define CALL(fn, ...) \
    (nonblocking ? fn##_async(__VA_ARGS__, c->active, &c->reqs[*nreq]) : fn(__VA_ARGS__, c->active))
    ccl_status_t st;
    switch (k->coll) {
    case BENCH_ALL_REDUCE: st = CALL(ccl_all_reduce, k->send, k->recv, k->count, k->dtype, k->redop); break;
    case BENCH_REDUCE_SCATTER: st = CALL(ccl_reduce_scatter, k->send, k->recv, k->count, k->dtype, k->redop); break;
    case BENCH_ALL_GATHER: st = CALL(ccl_all_gather, k->send, k->recv, k->count, k->dtype); break;
    case BENCH_BROADCAST: st = CALL(ccl_broadcast, k->send, k->recv, k->count, k->dtype, k->root); break;
    case BENCH_REDUCE: st = CALL(ccl_reduce, k->send, k->recv, k->count, k->dtype, k->redop, k->root); break;
    case BENCH_ALL_TO_ALL: st = CALL(ccl_all_to_all, k->send, k->recv, k->count, k->dtype); break;
    case BENCH_GATHER: st = CALL(ccl_gather, k->send, k->recv, k->count, k->dtype, k->root); break;
    case BENCH_SCATTER: st = CALL(ccl_scatter, k->send, k->recv, k->count, k->dtype, k->root); break;
    case BENCH_SENDRECV: /* the ring neighbour exchange: to rank + 1, from rank - 1 */
        st = CALL(ccl_send, k->send, k->count, k->dtype, (c->rank + 1) % c->size);
        if (st != CCL_OK) return st;
        *nreq += nonblocking;
        st = CALL(ccl_recv, k->recv, k->count, k->dtype, (c->rank + c->size - 1) % c->size);
        break;
    case BENCH_ALLTOALLV: {
        const size_t *v = k->vcounts, n = (size_t)c->size;
        st = CALL(ccl_all_to_all_v, k->send, v, v + n, k->recv, v + 2 * n, v + 3 * n, k->dtype);
        break;
    }
    case BENCH_HYPERCUBE: return hypercube(c, k);
    case BENCH_PINGPONG: { /* blocking calls only (options.c), one after the other */
        int partner = c->rank ^ 1;
        if (partner >= c->size) return CCL_OK;
        if (c->rank % 2 == 0) st = ccl_send(k->send, k->count, k->dtype, partner, c->active);
        else st = ccl_recv(k->recv, k->count, k->dtype, partner, c->active);
        if (st != CCL_OK) return st;
        if (c->rank % 2 == 0) st = ccl_recv(k->recv, k->count, k->dtype, partner, c->active);
        else st = ccl_send(k->send, k->count, k->dtype, partner, c->active);
        break;
    }
    default: st = nonblocking ? ccl_barrier_async(c->active, &c->reqs[*nreq]) : ccl_barrier(c->active); break;
    }
#undef CALL
    if (st == CCL_OK) *nreq += nonblocking;
    return st;
}

static int failed(struct bench_comm *c, ccl_status_t st, const char *what) {
    if (st == CCL_OK || c->last != CCL_OK) return st != CCL_OK;
    c->last = st;
    snprintf(c->error, sizeof c->error, "%s: %s: %s", what, ccl_status_string(st), ccl_comm_last_error(c->active));
    return 1;
}

static int ccl_run(struct bench_comm *c, const struct bench_call *calls, int n, int nonblocking) {
    int grouped = n > 1 || calls[0].coll == BENCH_SENDRECV, nreq = 0, bad = 0;
    if (grouped) bad |= failed(c, ccl_group_start(), "ccl_group_start");
    for (int i = 0; i < n && !bad; i++) bad |= failed(c, issue(c, &calls[i], nonblocking, &nreq), "call");
    if (grouped) bad |= failed(c, ccl_group_end(), "ccl_group_end");
    for (int i = 0; i < nreq; i++) bad |= failed(c, ccl_wait(c->reqs[i]), "ccl_wait");
    return bad ? -1 : 0;
}

static int ccl_barrier_all(struct bench_comm *c) { return failed(c, ccl_barrier(c->active), "ccl_barrier") ? -1 : 0; }

static int ccl_combine(struct bench_comm *c, double *vals, int n, enum bench_reduce_how how) {
    ccl_op_t op = how == BENCH_COMBINE_MIN ? CCL_MIN : how == BENCH_COMBINE_MAX ? CCL_MAX : CCL_SUM;
    return failed(c, ccl_all_reduce(vals, vals, (size_t)n, CCL_FLOAT64, op, c->comm), "combine") ? -1 : 0;
}

static const char *ccl_error_text(const struct bench_comm *c) { return c->error; }

static void ccl_give_up(struct bench_comm *c) {
    if (c->measured) ccl_comm_abort(c->measured);
    ccl_comm_abort(c->comm);
    if (c->world) ccl_comm_abort(c->world);
}

static void *ccl_shared_alloc(struct bench_comm *c, size_t bytes) {
    void *p = NULL;
    return failed(c, ccl_mem_alloc(c->measured ? c->measured : c->comm, bytes, &p), "ccl_mem_alloc") ? NULL : p;
}

static void ccl_shared_free(struct bench_comm *c, void *p) {
    failed(c, ccl_mem_free(c->measured ? c->measured : c->comm, p), "ccl_mem_free");
}

static int ccl_register_buf(struct bench_comm *c, void *p, size_t bytes, void **handle) {
    return failed(c, ccl_comm_register(c->measured ? c->measured : c->comm, p, bytes, handle), "ccl_comm_register");
}

static void ccl_unregister_buf(struct bench_comm *c, void *handle) {
    failed(c, ccl_comm_deregister(c->measured ? c->measured : c->comm, handle), "ccl_comm_deregister");
}

static int ccl_finish(struct bench_comm *c, int exit_status) {
    ccl_status_t st = CCL_OK;
    if (c->measured) st = ccl_comm_destroy(c->measured);
    ccl_status_t sw = ccl_comm_destroy(c->comm);
    if (st == CCL_OK) st = sw;
    if (c->world && (sw = ccl_comm_destroy(c->world)) != CCL_OK && st == CCL_OK) st = sw;
    if (st != CCL_OK && exit_status == BENCH_EXIT_OK) {
        fprintf(stderr, "[rank %d] ccl_comm_destroy: %s\n", c->rank, ccl_status_string(st));
        exit_status = BENCH_EXIT_ERROR;
    }
    free(c->reqs);
    free(c);
    return exit_status;
}

const struct bench_backend bench_ccl_backend = {
    .launch_flags = 1,
    .device_buffers = 1,
    .start = ccl_start,
    .rank = ccl_rank_of,
    .reports = ccl_reports,
    .size = ccl_size_of,
    .describe = ccl_describe,
    .use_algo = ccl_use_algo,
    .unsupported = ccl_unsupported,
    .ran_algo = ccl_ran_algo,
    .run = ccl_run,
    .barrier = ccl_barrier_all,
    .combine = ccl_combine,
    .last_error = ccl_error_text,
    .abort = ccl_give_up,
    .shared_alloc = ccl_shared_alloc,
    .shared_free = ccl_shared_free,
    .register_buf = ccl_register_buf,
    .unregister_buf = ccl_unregister_buf,
    .finish = ccl_finish,
};
