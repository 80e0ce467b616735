/*
 * Tracing on a communicator: start and stop, and the merged file. Stopping
 * pauses recording through the executor (so every operation issued before
 * is recorded and none after), gathers every rank's events to rank 0 over
 * the communicator itself, and rank 0 writes one Chrome trace event file
 * (docs/trace-format.md).
 */
#include <limits.h>
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/coll.h"
#include "core/hash.h"
#include "core/pattern.h"
#include "core/trace.h"
#include "transports/transport.h"

static const char *const phase_names[] = {"reduce-scatter", "all-gather", "broadcast", "reduce", "p2p"};
static const char *const algo_names[] = {"ring", "chain", "direct", "tree", "rd", "rhd", "bruck", "pairwise", "hier"};
#define NUM_ALGO_NAMES (sizeof algo_names / sizeof algo_names[0])
static const char *const kind_names[] = {"send", "recv", "reduce"};

/* "%p" -> pid, "%c" -> communicator id: several traced communicators (or
 * jobs) then write different files. A path too long is refused, never
 * cut; the check uses the widest pid, so every rank of a job decides alike
 * before the trace's collective. */
static ccl_status_t expand_path(struct ccl_comm *comm, const char *pattern, int pid, char *out, size_t n) {
    char p[16], c[24];
    snprintf(p, sizeof p, "%d", pid);
    snprintf(c, sizeof c, "%016llx", (unsigned long long)comm->comm_id);
    const char *values[] = {p, c};
    if (ccl__pattern_expand(pattern, "pc", values, out, n) != 0)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "trace: the file name %.64s... would be longer than %zu "
                              "bytes", pattern, n - 1);
    return CCL_OK;
}

/* The trace files this process has written. A pattern without %c names
 * one file for every communicator of the process, and the last one
 * destroyed would silently replace the others' traces: a second
 * communicator writes beside the first, under its own id, and says so.
 * Process-wide by nature (the file system is), so a lock and a small
 * table, the one mutable static of this file. */
#define WRITTEN_MAX 256
static pthread_mutex_t written_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t written[WRITTEN_MAX];
static int nwritten;

static uint64_t path_hash(const char *s) { return ccl__fnv1a(CCL__FNV_OFFSET, s, strlen(s)); }

/* 1 if this process already wrote path (then it is not claimed again). */
static int claim_path(const char *path) {
    uint64_t h = path_hash(path);
    int seen = 0;
    pthread_mutex_lock(&written_lock);
    for (int i = 0; i < nwritten && !seen; i++) seen = written[i] == h;
    if (!seen && nwritten < WRITTEN_MAX) written[nwritten++] = h;
    pthread_mutex_unlock(&written_lock);
    return seen;
}

/* path taken: "dir/t.json" -> "dir/t.<comm id>.json" */
static void beside_taken(const struct ccl_comm *comm, char *path, size_t n) {
    char taken[PATH_MAX];
    snprintf(taken, sizeof taken, "%s", path);
    const char *slash = strrchr(taken, '/'), *dot = strrchr(taken, '.');
    size_t stem = dot && (!slash || dot > slash) ? (size_t)(dot - taken) : strlen(taken);
    snprintf(path, n, "%.*s.%016llx%s", (int)stem, taken, (unsigned long long)comm->comm_id, taken + stem);
    CCL_WARN(CCL__SUB_INIT, comm->rank,
             "trace: %s already holds another communicator's trace from this process; this one's goes to %s "
             "(put %%c in CCL_TRACE to name each communicator's file)", taken, path);
}

static void set_trace(struct ccl_comm *comm, void *arg) { comm->trace = arg; }

ccl_status_t ccl__trace_begin(struct ccl_comm *comm) {
    if (comm->trace) return CCL_OK;
    struct ccl__trace *t = ccl__trace_create(comm->nranks, comm->params.trace_max_events);
    if (!t) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "trace: out of memory");
    ccl__exec_call(comm, set_trace, t);
    return CCL_OK;
}

CCL_API ccl_status_t ccl_comm_trace_start(ccl_comm_t *comm) {
    CCL_CHECK(ccl__check_comm(comm, "trace_start"));
    return ccl__trace_begin(comm);
}

static void write_event(FILE *f, const struct ccl__trace_event *e, int rank, double ts, double dur, int *first) {
    int tid = e->kind == CCL__TR_SEND ? 1 + e->peer : e->kind == CCL__TR_RECV ? 1001 + e->peer : 2001;
    const char *tr = e->transport == CCL__TR_LOCAL || e->transport >= ccl__ntransports
                         ? "local" : ccl__transports[e->transport]->name;
    fprintf(f,
            "%s\n{\"name\":\"%s c%d\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"coll\":\"%s\",\"seq\":%u,\"algo\":\"%s\",\"step\":%d,\"phase\":\"%s\",\"chunk\":%d,"
            "\"round\":%u,\"offset\":%llu,\"bytes\":%llu,\"peer\":%d,\"transport\":\"%s\",\"link_seq\":%llu}}",
            *first ? "" : ",", kind_names[e->kind], e->chunk, kind_names[e->kind], ts, dur, rank, tid,
            ccl__op_kind_name(e->coll), e->seq, algo_names[e->algo % NUM_ALGO_NAMES], e->step, phase_names[e->phase % 5], e->chunk,
            e->round, (unsigned long long)e->offset, (unsigned long long)e->bytes, e->peer, tr,
            (unsigned long long)e->link_seq);
    *first = 0;
    if (e->kind == CCL__TR_REDUCE) return;
    /* Flow arrow from the send to its receive: same (sender, receiver, n-th slot). */
    int from = e->kind == CCL__TR_SEND ? rank : e->peer, to = e->kind == CCL__TR_SEND ? e->peer : rank;
    fprintf(f, ",\n{\"name\":\"chunk\",\"cat\":\"flow\",\"ph\":\"%s\",%s\"id\":\"%d-%d-%llu\",\"ts\":%.3f,\"pid\":%d,\"tid\":%d}",
            e->kind == CCL__TR_SEND ? "s" : "f", e->kind == CCL__TR_SEND ? "" : "\"bp\":\"e\",", from, to,
            (unsigned long long)e->link_seq, ts + dur / 2, rank, tid);
}

static void write_tracks(FILE *f, int rank, int nranks, const struct ccl__trace_event *ev, size_t n) {
    fprintf(f, ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", rank, rank);
    fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", rank, rank);
    /* name only the tracks this rank used */
    for (int k = 0; k < 3; k++)
        for (int p = 0; p < (k == 2 ? 1 : nranks); p++) {
            int used = 0;
            for (size_t i = 0; i < n && !used; i++) used = ev[i].kind == k && (k == 2 || ev[i].peer == p);
            if (!used) continue;
            int tid = k == 0 ? 1 + p : k == 1 ? 1001 + p : 2001;
            char name[40];
            if (k == 0) snprintf(name, sizeof(name), "send -> rank %d", p);
            else if (k == 1) snprintf(name, sizeof(name), "recv <- rank %d", p);
            else snprintf(name, sizeof(name), "reduce");
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                    rank, tid, name);
        }
}

static ccl_status_t write_file(struct ccl_comm *comm, const char *path, struct ccl__trace_event *ev,
                               const uint64_t *counts, const double *offsets, uint64_t dropped) {
    FILE *f = fopen(path, "w");
    if (!f) return ccl__set_error(comm, CCL_ERR_SYSTEM, "trace: cannot write %s: %s", path, strerror(errno));
    /* Common clock: each rank's offset to the root applied; zero at the first event. */
    double base = 0;
    int have = 0;
    size_t k = 0;
    for (int r = 0; r < comm->nranks; r++)
        for (uint64_t i = 0; i < counts[r]; i++, k++)
            if (!have || ev[k].t0 + offsets[r] < base) base = ev[k].t0 + offsets[r], have = 1;
    fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"library\":\"libccl\",\"version\":\"%d.%d.%d\","
               "\"nranks\":%d,\"dropped_events\":%llu,\"clock\":\"microseconds since the first event, each rank's "
               "offset to the bootstrap root applied\",\"clock_offsets_us\":[",
            CCL_VERSION_MAJOR, CCL_VERSION_MINOR, CCL_VERSION_PATCH, comm->nranks, (unsigned long long)dropped);
    for (int r = 0; r < comm->nranks; r++) fprintf(f, "%s%.3f", r ? "," : "", offsets[r] * 1e6);
    fprintf(f, "]},\n\"traceEvents\":[");
    int first = 1;
    k = 0;
    for (int r = 0; r < comm->nranks; r++) {
        for (uint64_t i = 0; i < counts[r]; i++) {
            const struct ccl__trace_event *e = &ev[k + i];
            write_event(f, e, r, (e->t0 + offsets[r] - base) * 1e6, (e->t1 - e->t0) * 1e6, &first);
        }
        if (first) fprintf(f, "\n{\"name\":\"trace\",\"ph\":\"M\",\"pid\":0,\"args\":{}}"), first = 0;
        write_tracks(f, r, comm->nranks, ev + k, counts[r]);
        k += counts[r];
    }
    fprintf(f, "\n]}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return ccl__set_error(comm, CCL_ERR_SYSTEM, "trace: writing %s failed", path);
    return CCL_OK;
}

/* What each rank tells rank 0 before its events. */
struct trace_head {
    uint64_t events, dropped;
    double clock_offset;
};

/* Collective: every rank's events to rank 0, which writes the file. Only
 * point-to-point messages: a CCL_ALGO forced for the application's
 * collectives (rd gathers on 2^k ranks only) must not stop the trace.
 * Rank 0 takes the heads, then the events, rank after rank: a head is
 * small enough to wait in a slot, and a rank whose events are not taken
 * yet waits for its turn. */
static ccl_status_t gather_and_write(struct ccl_comm *comm, struct ccl__trace *t, const char *path) {
    int n = comm->nranks;
    size_t esz = sizeof(struct ccl__trace_event);
    struct trace_head mine = {t->n, t->dropped, comm->clock_offset};
    if (comm->rank != 0) {
        ccl_status_t st = ccl__own_send(&mine, sizeof(mine), 0, comm, "trace");
        if (st == CCL_OK) st = ccl__own_send(t->ev, t->n * esz, 0, comm, "trace");
        return st;
    }
    struct trace_head *heads = calloc((size_t)n, sizeof(*heads));
    uint64_t *per = calloc((size_t)n, sizeof(uint64_t));
    double *offsets = calloc((size_t)n, sizeof(double));
    struct ccl__trace_event *all = NULL;
    ccl_status_t st = heads && per && offsets ? CCL_OK : CCL_ERR_NO_MEMORY;
    if (st == CCL_OK) {
        heads[0] = mine;
        for (int r = 1; r < n && st == CCL_OK; r++) st = ccl__own_recv(&heads[r], sizeof(heads[r]), r, comm, "trace");
    }
    uint64_t total = 0, dropped = 0;
    for (int r = 0; r < n && st == CCL_OK; r++)
        per[r] = heads[r].events, offsets[r] = heads[r].clock_offset, total += per[r], dropped += heads[r].dropped;
    if (st == CCL_OK && !(all = malloc(esz * (total ? total : 1))))
        st = ccl__set_error(comm, CCL_ERR_NO_MEMORY, "trace: out of memory for %llu events", (unsigned long long)total);
    /* If rank 0 cannot hold the events, the others' sends fail on timeout:
     * acceptable for a diagnostic path, and every rank gets an error. */
    if (st == CCL_OK) {
        if (per[0]) memcpy(all, t->ev, esz * per[0]); /* no events: t->ev may be NULL */
        uint64_t at = per[0];
        for (int r = 1; r < n && st == CCL_OK; r++) {
            st = ccl__own_recv(all + at, per[r] * esz, r, comm, "trace");
            at += per[r];
        }
        if (st == CCL_OK) st = write_file(comm, path, all, per, offsets, dropped);
    }
    free(all);
    free(per);
    free(heads);
    free(offsets);
    return st;
}

ccl_status_t ccl__trace_end(struct ccl_comm *comm, const char *pattern) {
    struct ccl__trace *t = comm->trace;
    if (!t) return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "trace_stop: tracing is not on");
    ccl__exec_call(comm, set_trace, NULL); /* stops recording after what was issued */
    char path[PATH_MAX];
    const char *pat = pattern && *pattern ? pattern : "ccl-trace.json";
    /* The widest pid and the communicator id beside a taken name (below):
     * if those fit, this rank's name fits, and every rank finds the same. */
    ccl_status_t st = expand_path(comm, pat, INT32_MIN, path, sizeof path - 17);
    if (st == CCL_OK) st = expand_path(comm, pat, (int)getpid(), path, sizeof path);
    if (st != CCL_OK) {
        ccl__trace_destroy(t);
        return st;
    }
    /* CCL_TRACE names one file for the whole process; rank 0 writes it */
    if (pattern == comm->params.trace && comm->rank == 0 && claim_path(path)) beside_taken(comm, path, sizeof path);
    st = ccl__comm_health(comm);
    if (st == CCL_OK) st = gather_and_write(comm, t, path);
    ccl__trace_destroy(t);
    return st;
}

CCL_API ccl_status_t ccl_comm_trace_stop(ccl_comm_t *comm, const char *path) {
    CCL_CHECK(ccl__check_comm(comm, "trace_stop"));
    return ccl__trace_end(comm, path ? path : comm->params.trace);
}
