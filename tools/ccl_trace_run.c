/*
 * ccl_trace_run: runs one collective for real on N local ranks with
 * CCL_TRACE on, checks the result, and writes the inputs and outputs of every
 * rank to a text file, so `ccl-trace explain` can show a real run chunk by
 * chunk with real values.
 *
 * Processes: this program never calls libccl itself. Each run gets a
 * coordinator child, which forks the N ranks first and only then calls
 * ccl_get_unique_id (a process that had called into the library before
 * fork() would hand its already-parsed environment, and its root thread's
 * state, to the ranks) and passes the id to them over pipes. Each rank sets
 * CCL_TRACE and CCL_TRANSPORT before its first library call. Ranks put their
 * status and output into memory shared with this process.
 *
 * Inputs, chosen so every contribution stays visible in a sum:
 *   "digits" (when a sum of N of them fits the type: N <= 18 for int64,
 *   N <= 9 for int32): rank r's element i is (i % 9 + 1) * 10^r, so decimal
 *   digit r of any sum is non-zero exactly when rank r contributed (element
 *   0 of r0+r2 is 101, element 1 is 202);
 *   "offset" (otherwise): (r+1)*1000 + i % 1000.
 * The operation is always CCL_SUM.
 *
 * --compare-untraced runs the collective a second time without tracing and
 * fails unless every rank's output is bit-identical to the traced run's.
 *
 * Values file (one item per line, '#' starts a comment):
 *   coll C / ranks N / count C / dtype D / root R / transport T / pattern P
 *   in RANK v0 v1 ...    the rank's input buffer (absent where it has none)
 *   out RANK v0 v1 ...   the rank's output buffer (absent where it has none)
 * Exit status: 0 correct, 1 a rank failed / wrong result / no trace, 2 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ccl.h"
#include "ccl_spawn.h"

#define MAX_RANKS 256
#define ERR_LEN 240

enum coll { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE, ALL_TO_ALL };
static const char *const coll_names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
                                         "all_to_all"};
enum pattern { DIGITS, OFFSET };
static const char *const pattern_names[] = {"digits", "offset"};

struct opts {
    int ranks, root, compare_untraced, timeout_s;
    size_t count;
    enum coll coll;
    ccl_dtype_t dtype;
    enum pattern pattern;
    const char *out, *values, *transport;
    int ranks_per_host; /* 0: one host; else CCL_HOST_ID = rank / this */
};

/* What one rank reports back, followed in the shared map by its output. */
struct rank_result {
    int done;   /* 1 once the rank wrote its result */
    int status; /* ccl_status_t of the first failing call, CCL_OK */
    char err[ERR_LEN];
};

struct shared {
    char *base;
    size_t stride, out_bytes, size;
};

static void usage(FILE *f) {
    fprintf(f, "Usage: ccl_trace_run --ranks N --count C --coll COLL --out FILE.json [--dtype int64|int32]\n"
               "                     [--transport shm|tcp] [--ranks-per-host K] [--root R] [--values FILE.txt]\n"
               "                     [--compare-untraced] [--timeout SECONDS]\n"
               "COLL: all_reduce, reduce_scatter, all_gather, broadcast, reduce (op: sum), all_to_all.\n"
               "C is the call's count argument: all elements for all_reduce/broadcast/reduce,\n"
               "the per-rank block for reduce_scatter (recvcount), all_gather (sendcount) and\n"
               "all_to_all (the block each rank sends each rank).\n");
}

static int bad_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "ccl_trace_run: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage(stderr);
    return 2;
}

static int parse_long(const char *s, long lo, long hi, long *v) {
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o) {
    *o = (struct opts){.ranks = 0, .root = 0, .coll = ALL_REDUCE, .dtype = CCL_INT64, .timeout_s = 60};
    int have_count = 0, have_coll = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--compare-untraced")) {
            o->compare_untraced = 1;
            continue;
        }
        if (i + 1 >= argc) return bad_usage("%s needs a value", a);
        const char *v = argv[++i];
        long x;
        if (!strcmp(a, "--ranks")) {
            if (parse_long(v, 1, MAX_RANKS, &x)) return bad_usage("--ranks must be 1..256, not '%s'", v);
            o->ranks = (int)x;
        } else if (!strcmp(a, "--count")) {
            if (parse_long(v, 1, 1L << 26, &x)) return bad_usage("--count must be 1..2^26, not '%s'", v);
            o->count = (size_t)x;
            have_count = 1;
        } else if (!strcmp(a, "--root")) {
            if (parse_long(v, 0, MAX_RANKS - 1, &x)) return bad_usage("--root must be a rank, not '%s'", v);
            o->root = (int)x;
        } else if (!strcmp(a, "--ranks-per-host")) {
            if (parse_long(v, 1, MAX_RANKS, &x)) return bad_usage("--ranks-per-host must be 1..256, not '%s'", v);
            o->ranks_per_host = (int)x;
        } else if (!strcmp(a, "--timeout")) {
            if (parse_long(v, 1, 3600, &x)) return bad_usage("--timeout must be 1..3600 seconds, not '%s'", v);
            o->timeout_s = (int)x;
        } else if (!strcmp(a, "--coll")) {
            int found = -1;
            for (int c = 0; c < (int)(sizeof coll_names / sizeof *coll_names); c++)
                if (!strcmp(v, coll_names[c])) found = c;
            if (found < 0) return bad_usage("unknown --coll '%s'", v);
            o->coll = (enum coll)found;
            have_coll = 1;
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "int64")) o->dtype = CCL_INT64;
            else if (!strcmp(v, "int32")) o->dtype = CCL_INT32;
            else return bad_usage("--dtype must be int64 or int32, not '%s'", v);
        } else if (!strcmp(a, "--transport")) {
            if (strcmp(v, "shm") && strcmp(v, "tcp")) return bad_usage("--transport must be shm or tcp, not '%s'", v);
            o->transport = v;
        } else if (!strcmp(a, "--out")) {
            /* the library would expand %p/%c and we could not find the file */
            if (!*v || strchr(v, '%')) return bad_usage("--out must be a plain file name (no %%), not '%s'", v);
            o->out = v;
        } else if (!strcmp(a, "--values")) {
            o->values = v;
        } else {
            return bad_usage("unknown option '%s'", a);
        }
    }
    if (!o->ranks || !have_count || !have_coll || !o->out)
        return bad_usage("%s", "--ranks, --count, --coll and --out are required");
    if (o->root >= o->ranks) return bad_usage("%s", "--root must be below --ranks");
    return 0;
}

/* ---- buffers and the reference ---- */

static size_t in_elems(const struct opts *o) {
    return o->coll == REDUCE_SCATTER || o->coll == ALL_TO_ALL ? o->count * (size_t)o->ranks : o->count;
}

static size_t out_elems(const struct opts *o) {
    return o->coll == ALL_GATHER || o->coll == ALL_TO_ALL ? o->count * (size_t)o->ranks : o->count;
}

static int has_input(const struct opts *o, int r) { return o->coll != BROADCAST || r == o->root; }
static int has_output(const struct opts *o, int r) { return o->coll != REDUCE || r == o->root; }

/* Digits when the largest sum, sum_r 9 * 10^r = 10^N - 1, fits the type. */
static enum pattern choose_pattern(const struct opts *o) {
    int64_t limit = o->dtype == CCL_INT32 ? INT32_MAX : INT64_MAX, p = 1;
    for (int r = 0; r < o->ranks; r++) {
        if (p > limit / 10) return OFFSET;
        p *= 10;
    }
    return DIGITS;
}

static int64_t input_value(const struct opts *o, int r, size_t i) {
    if (o->pattern == OFFSET) return (int64_t)(r + 1) * 1000 + (int64_t)(i % 1000);
    int64_t v = (int64_t)(i % 9 + 1);
    for (int k = 0; k < r; k++) v *= 10;
    return v;
}

static int64_t expected_value(const struct opts *o, int r, size_t i) {
    int64_t sum = 0;
    switch (o->coll) {
    case ALL_REDUCE:
    case REDUCE:
        for (int q = 0; q < o->ranks; q++) sum += input_value(o, q, i);
        return sum;
    case REDUCE_SCATTER:
        for (int q = 0; q < o->ranks; q++) sum += input_value(o, q, (size_t)r * o->count + i);
        return sum;
    case ALL_GATHER:
        return input_value(o, (int)(i / o->count), i % o->count);
    case BROADCAST:
        return input_value(o, o->root, i);
    case ALL_TO_ALL: /* block q of the output is rank q's block r */
        return input_value(o, (int)(i / o->count), (size_t)r * o->count + i % o->count);
    }
    return 0;
}

static int64_t load(const struct opts *o, const void *buf, size_t i) {
    return o->dtype == CCL_INT32 ? ((const int32_t *)buf)[i] : ((const int64_t *)buf)[i];
}

static void store(const struct opts *o, void *buf, size_t i, int64_t v) {
    if (o->dtype == CCL_INT32) ((int32_t *)buf)[i] = (int32_t)v;
    else ((int64_t *)buf)[i] = v;
}

/* ---- one rank ---- */

static struct rank_result *result_of(const struct shared *sh, int r) {
    return (struct rank_result *)(sh->base + (size_t)r * sh->stride);
}
static void *output_of(const struct shared *sh, int r) { return sh->base + (size_t)r * sh->stride + sizeof(struct rank_result); }

static int report(struct rank_result *res, ccl_status_t st, const char *what, ccl_comm_t *comm) {
    res->status = st;
    snprintf(res->err, ERR_LEN, "%s: %s%s%s", what, ccl_status_string(st), comm ? ": " : "",
             comm ? ccl_comm_last_error(comm) : "");
    res->done = 1;
    return 1;
}

static ccl_status_t run_coll(const struct opts *o, const void *in, void *out, ccl_comm_t *comm) {
    switch (o->coll) {
    case ALL_REDUCE: return ccl_all_reduce(in, out, o->count, o->dtype, CCL_SUM, comm);
    case REDUCE_SCATTER: return ccl_reduce_scatter(in, out, o->count, o->dtype, CCL_SUM, comm);
    case ALL_GATHER: return ccl_all_gather(in, out, o->count, o->dtype, comm);
    case BROADCAST: return ccl_broadcast(in, out, o->count, o->dtype, o->root, comm);
    case REDUCE: return ccl_reduce(in, out, o->count, o->dtype, CCL_SUM, o->root, comm);
    case ALL_TO_ALL: return ccl_all_to_all(in, out, o->count, o->dtype, comm);
    }
    return CCL_ERR_INVALID_ARGUMENT;
}

static int rank_main(const struct opts *o, const struct ccl_spawned *me, const char *trace, const struct shared *sh) {
    int r = me->rank;
    struct rank_result *res = result_of(sh, r);
    /* before the first library call: the library reads its environment once */
    if (trace) setenv("CCL_TRACE", trace, 1);
    else unsetenv("CCL_TRACE");
    if (o->transport) setenv("CCL_TRANSPORT", o->transport, 1);
    if (o->ranks_per_host) {
        char host[32];
        snprintf(host, sizeof host, "trace-host%d", r / o->ranks_per_host);
        setenv("CCL_HOST_ID", host, 1);
    }
    ccl_unique_id_t id;
    if (ccl_spawn_take_id(me, &id, sizeof id) != 0)
        return report(res, CCL_ERR_SYSTEM, "no unique id from the coordinator", NULL);
    close(me->fd);
    ccl_comm_t *comm = NULL;
    ccl_status_t st = ccl_comm_init_rank(&comm, o->ranks, id, r);
    if (st != CCL_OK) return report(res, st, "ccl_comm_init_rank", comm);
    size_t es = ccl_dtype_size(o->dtype);
    void *in = has_input(o, r) ? calloc(in_elems(o), es) : NULL;
    void *out = has_output(o, r) ? calloc(out_elems(o), es) : NULL;
    if ((has_input(o, r) && !in) || (has_output(o, r) && !out)) {
        free(in);
        free(out);
        ccl_comm_destroy(comm);
        return report(res, CCL_ERR_NO_MEMORY, "buffers", NULL);
    }
    for (size_t i = 0; in && i < in_elems(o); i++) store(o, in, i, input_value(o, r, i));
    /* a receiver the collective forgot to write shows up as -1, not 0 */
    for (size_t i = 0; out && i < out_elems(o); i++) store(o, out, i, -1);
    st = run_coll(o, in, out, comm);
    if (st != CCL_OK) report(res, st, coll_names[o->coll], comm);
    if (out) memcpy(output_of(sh, r), out, out_elems(o) * es);
    free(in);
    free(out);
    /* destroy writes the trace (rank 0), so it runs even after a failure */
    ccl_status_t dst = ccl_comm_destroy(comm);
    if (st == CCL_OK && dst != CCL_OK) return report(res, dst, "ccl_comm_destroy", NULL);
    if (st != CCL_OK) return 1;
    res->status = CCL_OK;
    res->done = 1;
    return 0;
}

/* ---- the coordinator: fork the ranks, then make and hand out the id ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int coordinator_main(const struct opts *o, const char *trace, const struct shared *sh) {
    static struct ccl_spawn sp;
    struct ccl_spawned me;
    int forked = ccl_spawn_fork(&sp, o->ranks, CCL_SPAWN_PIPE, &me);
    /* exit, not _exit: a fresh process whose sanitizers' exit checks (leaks) should run */
    if (forked == 1) exit(rank_main(o, &me, trace, sh));
    pid_t *pids = sp.pid;
    if (forked != 0) {
        ccl_spawn_hand_id(&sp, NULL, 0, 1); /* the ranks that started exit by themselves */
        while (waitpid(-1, NULL, 0) > 0) {
        }
        return 1;
    }
    ccl_unique_id_t id;
    ccl_status_t st = ccl_get_unique_id(&id);
    if (st != CCL_OK) fprintf(stderr, "ccl_trace_run: ccl_get_unique_id: %s\n", ccl_status_string(st));
    /* a rank that gets no id says so */
    if (ccl_spawn_hand_id(&sp, st == CCL_OK ? &id : NULL, sizeof id, 1) != 0)
        fprintf(stderr, "ccl_trace_run: cannot hand the id to every rank: %s\n", strerror(errno));
    int alive = o->ranks, failed = 0;
    double deadline = now_s() + o->timeout_s;
    while (alive > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            alive--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
            for (int r = 0; r < o->ranks; r++)
                if (pids[r] == pid) pids[r] = 0;
            continue;
        }
        if (now_s() > deadline) {
            fprintf(stderr, "ccl_trace_run: ranks still running after %d s: killing them\n", o->timeout_s);
            for (int r = 0; r < o->ranks; r++)
                if (pids[r] > 0) kill(pids[r], SIGKILL);
            while (waitpid(-1, NULL, 0) > 0) {
            }
            return 1;
        }
        nanosleep(&(struct timespec){.tv_nsec = 5 * 1000 * 1000}, NULL);
    }
    return failed || st != CCL_OK;
}

/* Runs the collective once; 0 when every rank finished with CCL_OK. */
static int run_once(const struct opts *o, const char *trace, const struct shared *sh) {
    memset(sh->base, 0, sh->size);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("ccl_trace_run: fork");
        return 1;
    }
    if (pid == 0) exit(coordinator_main(o, trace, sh));
    int status, bad = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 1;
    for (int r = 0; r < o->ranks; r++) {
        struct rank_result *res = result_of(sh, r);
        if (!res->done) {
            fprintf(stderr, "ccl_trace_run: rank %d did not finish\n", r);
            bad = 1;
        } else if (res->status != CCL_OK) {
            fprintf(stderr, "ccl_trace_run: rank %d: %s\n", r, res->err);
            bad = 1;
        }
    }
    return bad || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

static int check_outputs(const struct opts *o, const struct shared *sh) {
    int wrong = 0;
    for (int r = 0; r < o->ranks; r++) {
        if (!has_output(o, r)) continue;
        const void *out = output_of(sh, r);
        for (size_t i = 0; i < out_elems(o); i++) {
            int64_t got = load(o, out, i), want = expected_value(o, r, i);
            if (got == want) continue;
            if (wrong++ < 10)
                fprintf(stderr, "ccl_trace_run: rank %d element %zu: got %lld, expected %lld\n", r, i, (long long)got,
                        (long long)want);
        }
    }
    if (wrong) fprintf(stderr, "ccl_trace_run: %d wrong element(s)\n", wrong);
    return wrong != 0;
}

static void write_row(FILE *f, const struct opts *o, const char *tag, int r, size_t n, int from_output,
                      const struct shared *sh) {
    fprintf(f, "%s %d", tag, r);
    for (size_t i = 0; i < n; i++)
        fprintf(f, " %lld", (long long)(from_output ? load(o, output_of(sh, r), i) : input_value(o, r, i)));
    fputc('\n', f);
}

static int write_values(const struct opts *o, const struct shared *sh) {
    FILE *f = fopen(o->values, "w");
    if (!f) {
        fprintf(stderr, "ccl_trace_run: cannot write %s: %s\n", o->values, strerror(errno));
        return 1;
    }
    fprintf(f, "# ccl_trace_run values: inputs and outputs of one traced collective (op sum)\n");
    fprintf(f, "coll %s\nranks %d\ncount %zu\ndtype %s\nroot %d\ntransport %s\npattern %s\n", coll_names[o->coll],
            o->ranks, o->count, o->dtype == CCL_INT32 ? "int32" : "int64", o->root,
            o->transport ? o->transport : "auto", pattern_names[o->pattern]);
    if (o->pattern == DIGITS) fprintf(f, "# rank r's element i is (i %% 9 + 1) * 10^r\n");
    else fprintf(f, "# rank r's element i is (r+1)*1000 + i %% 1000\n");
    for (int r = 0; r < o->ranks; r++)
        if (has_input(o, r)) write_row(f, o, "in", r, in_elems(o), 0, sh);
    for (int r = 0; r < o->ranks; r++)
        if (has_output(o, r)) write_row(f, o, "out", r, out_elems(o), 1, sh);
    if (fclose(f)) {
        fprintf(stderr, "ccl_trace_run: cannot write %s: %s\n", o->values, strerror(errno));
        return 1;
    }
    return 0;
}

static int map_shared(const struct opts *o, struct shared *sh) {
    sh->out_bytes = out_elems(o) * ccl_dtype_size(o->dtype);
    sh->stride = (sizeof(struct rank_result) + sh->out_bytes + 63) / 64 * 64;
    sh->size = sh->stride * (size_t)o->ranks;
    sh->base = mmap(NULL, sh->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh->base == MAP_FAILED) {
        perror("ccl_trace_run: mmap");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    struct opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc;
    o.pattern = choose_pattern(&o);
    struct shared traced, plain = {0};
    if (map_shared(&o, &traced) || (o.compare_untraced && map_shared(&o, &plain))) return 1;
    /* a stale file from an earlier run must not pass for this run's trace */
    if (unlink(o.out) && errno != ENOENT) {
        fprintf(stderr, "ccl_trace_run: cannot replace %s: %s\n", o.out, strerror(errno));
        return 1;
    }
    int failed = run_once(&o, o.out, &traced);
    if (!failed) failed = check_outputs(&o, &traced);
    struct stat stt;
    if (!failed && stat(o.out, &stt)) {
        fprintf(stderr, "ccl_trace_run: rank 0 wrote no trace to %s (does this libccl record CCL_TRACE?)\n", o.out);
        failed = 1;
    }
    if (o.values && write_values(&o, &traced)) failed = 1;
    if (!failed && o.compare_untraced) {
        failed = run_once(&o, NULL, &plain);
        for (int r = 0; !failed && r < o.ranks; r++)
            if (has_output(&o, r) && memcmp(output_of(&traced, r), output_of(&plain, r), traced.out_bytes)) {
                fprintf(stderr, "ccl_trace_run: rank %d: output with tracing differs from output without\n", r);
                failed = 1;
            }
        if (!failed) printf("ccl_trace_run: untraced run gave bit-identical outputs on every rank\n");
    }
    if (!failed)
        printf("ccl_trace_run: %s of %zu %s on %d ranks: every rank's result is correct; trace in %s\n",
               coll_names[o.coll], o.count, o.dtype == CCL_INT32 ? "int32" : "int64", o.ranks, o.out);
    return failed ? 1 : 0;
}
