/*
 * The MPI backend: the same programs over MPI's collectives, so that a
 * machine's MPI can be measured with the same flags, timing and columns.
 *
 * Where MPI's semantics differ from NCCL's, this does what a user porting
 * NCCL code would do: an out-of-place broadcast copies the root's send
 * buffer into its receive buffer first (the in-place column is MPI's own
 * broadcast), and an in-place reduce-scatter moves the result from the
 * start of the buffer to this rank's block (waiting for it first, when
 * non-blocking). MPI has no float16, bfloat16
 * or average: those combinations are skipped with a note.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bench.h"
#include "common/values.h"

struct bench_comm {
    int rank, size;
    char error[MPI_MAX_ERROR_STRING + 64];
    MPI_Request *reqs; /* -m calls, two requests each for sendrecv */
    MPI_Status *statuses; /* not MPI_STATUSES_IGNORE: GCC misreads MPICH's (MPI_Status *)1 as a buffer */
    int *vcounts; /* alltoallv's counts and displacements as MPI takes them (4 * size ints) */
};

static struct bench_comm *mpi_start(const struct bench_options *o, int *exit_status) {
    struct bench_comm *c = calloc(1, sizeof(*c));
    if (c) c->reqs = calloc(2 * (size_t)o->agg, sizeof(*c->reqs));
    if (c) c->statuses = calloc(2 * (size_t)o->agg, sizeof(*c->statuses));
    if (!c || !c->reqs || !c->statuses || MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        fprintf(stderr, "%s: MPI_Init failed\n", o->prog);
        if (c) free(c->reqs), free(c->statuses);
        free(c);
        *exit_status = BENCH_EXIT_ERROR;
        return NULL;
    }
    /* Errors come back as codes, to be reported like libccl's. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    c->vcounts = calloc(4 * (size_t)c->size, sizeof(int));
    if (!c->vcounts) {
        fprintf(stderr, "%s: out of memory\n", o->prog);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return c;
}

static int mpi_rank_of(const struct bench_comm *c) { return c->rank; }
static int mpi_size_of(const struct bench_comm *c) { return c->size; }

static int count_hosts(int nranks) {
    char name[MPI_MAX_PROCESSOR_NAME] = "";
    int len, hosts = 0;
    MPI_Get_processor_name(name, &len);
    char *all = calloc((size_t)nranks, MPI_MAX_PROCESSOR_NAME);
    if (!all) return 0;
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < nranks; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = strcmp(all + (size_t)q * MPI_MAX_PROCESSOR_NAME, all + (size_t)r * MPI_MAX_PROCESSOR_NAME) == 0;
        hosts += !seen;
    }
    free(all);
    return hosts;
}

/* Open MPI's byte transfer layers as mpirun --mca btl chose them ("vader",
 * "tcp"), without "self"; "auto" when the library picks. */
static void transport_name(char *out, size_t n) {
    const char *btl = getenv("OMPI_MCA_btl");
    char copy[128];
    size_t o = 0;
    out[0] = '\0';
    if (btl && snprintf(copy, sizeof copy, "%s", btl) < (int)sizeof copy) {
        char *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t && o < n; t = strtok_r(NULL, ",", &save))
            if (strcmp(t, "self") != 0) o += (size_t)snprintf(out + o, n - o, "%s%s", o ? "+" : "", t);
    }
    if (!o) snprintf(out, n, "auto");
}

static void mpi_describe(struct bench_comm *c, struct bench_wiring *w) {
#if defined(OPEN_MPI)
    snprintf(w->library, sizeof w->library, "mpi-openmpi");
    snprintf(w->version, sizeof w->version, "%d.%d.%d", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#elif defined(MPICH_VERSION)
    snprintf(w->library, sizeof w->library, "mpi-mpich");
    snprintf(w->version, sizeof w->version, "%s", MPICH_VERSION);
#else
    snprintf(w->library, sizeof w->library, "mpi");
    snprintf(w->version, sizeof w->version, "%d.%d", MPI_VERSION, MPI_SUBVERSION);
#endif
    w->nhosts = count_hosts(c->size);
    transport_name(w->transport, sizeof w->transport);
    snprintf(w->algo, sizeof w->algo, "auto");
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    snprintf(w->detail, sizeof w->detail, "ranks=%d hosts=%d transport=%s %.*s", c->size, w->nhosts, w->transport,
             (int)strcspn(lib, "\n,"), lib);
    for (char *p = w->detail; *p; p++)
        if (*p == '\t') *p = ' ';
}

static MPI_Datatype mpi_type(ccl_dtype_t d) {
    switch (d) {
    case CCL_INT8: return MPI_INT8_T;
    case CCL_UINT8: return MPI_UINT8_T;
    case CCL_INT32: return MPI_INT32_T;
    case CCL_UINT32: return MPI_UINT32_T;
    case CCL_INT64: return MPI_INT64_T;
    case CCL_UINT64: return MPI_UINT64_T;
    case CCL_FLOAT32: return MPI_FLOAT;
    case CCL_FLOAT64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(ccl_op_t op) {
    static const MPI_Op ops[] = {[CCL_SUM] = MPI_SUM, [CCL_PROD] = MPI_PROD, [CCL_MAX] = MPI_MAX, [CCL_MIN] = MPI_MIN};
    return op == CCL_AVG ? MPI_OP_NULL : ops[op];
}

static const char *mpi_unsupported(const struct bench_comm *c, enum bench_coll coll, ccl_dtype_t dtype,
                                   ccl_op_t redop) {
    if (coll == BENCH_BARRIER) return NULL;
    if (mpi_type(dtype) == MPI_DATATYPE_NULL) return "MPI has no such type";
    if (coll != BENCH_ALL_REDUCE && coll != BENCH_REDUCE && coll != BENCH_REDUCE_SCATTER) return NULL;
    return redop == CCL_AVG ? "MPI has no average operation" : NULL;
}

static int mpi_failed(struct bench_comm *c, int err, const char *what) {
    if (err == MPI_SUCCESS) return 0;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, text, &len);
    snprintf(c->error, sizeof c->error, "%s: %.*s", what, len, text);
    return 1;
}

/* One call; with r non-NULL through the non-blocking form, leaving its
 * requests there (*nreq counts them). */
static int issue(struct bench_comm *c, const struct bench_call *k, MPI_Request *r, int *nreq) {
    MPI_Comm w = MPI_COMM_WORLD;
    MPI_Datatype t = mpi_type(k->dtype);
    MPI_Op op = mpi_op(k->redop);
    int n = (int)k->count, err;
    size_t es = bench_dtype_size(k->dtype);
    const void *in_place_or_send = k->send == k->recv ? MPI_IN_PLACE : k->send;
    switch (k->coll) {
    case BENCH_ALL_REDUCE:
        err = r ? MPI_Iallreduce(in_place_or_send, k->recv, n, t, op, w, r) : MPI_Allreduce(in_place_or_send, k->recv, n, t, op, w);
        break;
    case BENCH_REDUCE_SCATTER: {
        /* In place, NCCL's result is this rank's block; MPI's the first. */
        int in_place = (const char *)k->recv == (const char *)k->send + (size_t)c->rank * k->count * es;
        void *out = in_place ? (void *)k->send : k->recv;
        const void *in = in_place ? MPI_IN_PLACE : k->send;
        err = r ? MPI_Ireduce_scatter_block(in, out, n, t, op, w, r) : MPI_Reduce_scatter_block(in, out, n, t, op, w);
        if (in_place && r && err == MPI_SUCCESS) err = MPI_Wait(r, MPI_STATUS_IGNORE), r = NULL;
        if (in_place && c->rank && err == MPI_SUCCESS) memmove(k->recv, out, k->count * es);
        break;
    }
    case BENCH_ALL_GATHER: {
        int in_place = (const char *)k->send == (const char *)k->recv + (size_t)c->rank * k->count * es;
        const void *in = in_place ? MPI_IN_PLACE : k->send;
        err = r ? MPI_Iallgather(in, n, t, k->recv, n, t, w, r) : MPI_Allgather(in, n, t, k->recv, n, t, w);
        break;
    }
    case BENCH_BROADCAST:
        if (c->rank == k->root && k->send != k->recv) memcpy(k->recv, k->send, k->count * es);
        err = r ? MPI_Ibcast(k->recv, n, t, k->root, w, r) : MPI_Bcast(k->recv, n, t, k->root, w);
        break;
    case BENCH_REDUCE: {
        const void *in = c->rank == k->root ? in_place_or_send : k->send; /* MPI_IN_PLACE is for the root only */
        err = r ? MPI_Ireduce(in, k->recv, n, t, op, k->root, w, r) : MPI_Reduce(in, k->recv, n, t, op, k->root, w);
        break;
    }
    case BENCH_GATHER: { /* in place at the root: its block is already at recv + root * count */
        int in_place = c->rank == k->root && (const char *)k->send == (const char *)k->recv + (size_t)k->root * k->count * es;
        const void *in = in_place ? MPI_IN_PLACE : k->send;
        err = r ? MPI_Igather(in, n, t, k->recv, n, t, k->root, w, r) : MPI_Gather(in, n, t, k->recv, n, t, k->root, w);
        break;
    }
    case BENCH_SCATTER: { /* in place at the root: its block stays at send + root * count */
        int in_place = c->rank == k->root && (const char *)k->recv == (const char *)k->send + (size_t)k->root * k->count * es;
        void *out = in_place ? MPI_IN_PLACE : k->recv;
        err = r ? MPI_Iscatter(k->send, n, t, out, n, t, k->root, w, r) : MPI_Scatter(k->send, n, t, out, n, t, k->root, w);
        break;
    }
    case BENCH_ALLTOALLV: { /* MPI's counts are ints */
        int *v = c->vcounts;
        for (int i = 0; i < 4 * c->size; i++) v[i] = (int)k->vcounts[i];
        int *sc = v, *sd = v + c->size, *rc = v + 2 * c->size, *rd = v + 3 * c->size;
        err = r ? MPI_Ialltoallv(k->send, sc, sd, t, k->recv, rc, rd, t, w, r)
                : MPI_Alltoallv(k->send, sc, sd, t, k->recv, rc, rd, t, w);
        break;
    }
    case BENCH_HYPERCUBE: { /* blocking (options.c): its rounds wait on each other */
        size_t block = k->count * es;
        char *out = k->recv;
        if (out + (size_t)c->rank * block != (const char *)k->send) memcpy(out + (size_t)c->rank * block, k->send, block);
        err = MPI_SUCCESS;
        for (int mask = 1; mask < c->size && err == MPI_SUCCESS; mask <<= 1) {
            int mine = c->rank & ~(mask - 1), theirs = mine ^ mask;
            err = MPI_Sendrecv(out + (size_t)mine * block, n * mask, t, c->rank ^ mask, 0, out + (size_t)theirs * block,
                               n * mask, t, c->rank ^ mask, 0, w, MPI_STATUS_IGNORE);
        }
        break;
    }
    case BENCH_ALL_TO_ALL:
        err = r ? MPI_Ialltoall(k->send, n, t, k->recv, n, t, w, r) : MPI_Alltoall(k->send, n, t, k->recv, n, t, w);
        break;
    case BENCH_PINGPONG: { /* blocking calls only (options.c), one after the other */
        int partner = c->rank ^ 1, even = c->rank % 2 == 0;
        err = MPI_SUCCESS;
        if (partner >= c->size) break;
        err = even ? MPI_Send(k->send, n, t, partner, 0, w) : MPI_Recv(k->recv, n, t, partner, 0, w, MPI_STATUS_IGNORE);
        if (err == MPI_SUCCESS)
            err = even ? MPI_Recv(k->recv, n, t, partner, 0, w, MPI_STATUS_IGNORE) : MPI_Send(k->send, n, t, partner, 0, w);
        break;
    }
    case BENCH_SENDRECV: {
        int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
        if (!r) {
            err = MPI_Sendrecv(k->send, n, t, next, 0, k->recv, n, t, prev, 0, w, MPI_STATUS_IGNORE);
            break;
        }
        err = MPI_Irecv(k->recv, n, t, prev, 0, w, r);
        if (err == MPI_SUCCESS) (*nreq)++, r++;
        if (err == MPI_SUCCESS) err = MPI_Isend(k->send, n, t, next, 0, w, r);
        break;
    }
    default:
        err = r ? MPI_Ibarrier(w, r) : MPI_Barrier(w);
        break;
    }
    if (r && err == MPI_SUCCESS) (*nreq)++;
    return mpi_failed(c, err, "call");
}

/* Blocking calls one after another; non-blocking ones all issued, then
 * waited for together (MPI's nearest thing to a group). */
static int mpi_run(struct bench_comm *c, const struct bench_call *calls, int n, int nonblocking) {
    int nreq = 0, bad = 0;
    for (int i = 0; i < n && !bad; i++) bad = issue(c, &calls[i], nonblocking ? &c->reqs[nreq] : NULL, &nreq);
    if (nreq && mpi_failed(c, MPI_Waitall(nreq, c->reqs, c->statuses), "MPI_Waitall")) bad = 1;
    return bad ? -1 : 0;
}

static int mpi_barrier(struct bench_comm *c) { return mpi_failed(c, MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier") ? -1 : 0; }

static int mpi_combine(struct bench_comm *c, double *vals, int n, enum bench_reduce_how how) {
    MPI_Op op = how == BENCH_COMBINE_MIN ? MPI_MIN : how == BENCH_COMBINE_MAX ? MPI_MAX : MPI_SUM;
    return mpi_failed(c, MPI_Allreduce(MPI_IN_PLACE, vals, n, MPI_DOUBLE, op, MPI_COMM_WORLD), "combine") ? -1 : 0;
}

static const char *mpi_error_text(const struct bench_comm *c) { return c->error; }

static void mpi_give_up(struct bench_comm *c) { MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_ERROR); }

static int mpi_finish(struct bench_comm *c, int exit_status) {
    MPI_Finalize();
    free(c->reqs);
    free(c->vcounts);
    free(c->statuses);
    free(c);
    return exit_status;
}

const struct bench_backend bench_mpi_backend = {
    .launch_flags = 0,
    .device_buffers = 0,
    .start = mpi_start,
    .rank = mpi_rank_of,
    .size = mpi_size_of,
    .describe = mpi_describe,
    .unsupported = mpi_unsupported,
    .run = mpi_run,
    .barrier = mpi_barrier,
    .combine = mpi_combine,
    .last_error = mpi_error_text,
    .abort = mpi_give_up,
    .finish = mpi_finish,
};
