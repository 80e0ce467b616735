/* ctest: TIMEOUT 600 */
/*
 * Shared allocations (ccl_mem_alloc) and the zero-copy path over them
 * (algo/zero_copy.c), on 1, 2, 3 and 5 ranks over shm:
 *   - every collective the path runs (all-reduce, reduce, reduce-scatter,
 *     all-gather, broadcast) x every dtype x every op that applies, in
 *     place and out, at counts 1, 7, 1001 and 65537 + 3 (and 0), with the
 *     buffers at odd offsets in their allocations: bit-exact against the
 *     reference on every rank, guard bytes around each output untouched,
 *     and ccl_comm_describe counting a zero-copy call for every call that
 *     could take the path (CCL_ZERO_COPY_MIN=0 here), none for the others;
 *   - ranks that disagree: one rank's buffers in ordinary memory (every
 *     rank runs the call the usual way, right), different sizes to
 *     ccl_mem_alloc, a foreign pointer and a double free to ccl_mem_free
 *     (the culprit named, nothing changed), a free while an asynchronous
 *     call still runs on the memory (the free waits for it);
 *   - ccl_mem_release, one rank's own, from any thread: an allocation
 *     every rank released goes at the next ccl_mem_alloc, which reuses it
 *     where it fits (the same address, zeroed again, zero-copy on it); one
 *     released by some ranks only stays, usable by the others; a second
 *     release, a foreign pointer and a free of released memory are
 *     refused;
 *   - CCL_ZERO_COPY=0: the same calls, right, none zero-copy;
 *   - a rank killed in the middle of zero-copy all-reduces: every other
 *     rank fails within CCL_TIMEOUT naming it, and nothing is left in
 *     /dev/shm.
 */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "ref.h"
#include "util.h"

#define GUARD 64
#define GUARD_BYTE 0xa5

static long zero_copy_calls(ccl_comm_t *comm) {
    char d[2048];
    if (ccl_comm_describe(comm, d, sizeof d) != CCL_OK) return -1;
    const char *z = strstr(d, "zero_copy_calls=");
    return z ? atol(z + strlen("zero_copy_calls=")) : -1;
}

enum kind { ALL_REDUCE, REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, NKINDS };
static const char *const kind_names[NKINDS] = {"all_reduce", "reduce", "reduce_scatter", "all_gather", "broadcast"};

static int kind_reduces(int k) { return k == ALL_REDUCE || k == REDUCE || k == REDUCE_SCATTER; }

/* Elements of the send and receive buffers on rank r. */
static void extents(int k, size_t count, int nranks, int r, int root, size_t *sn, size_t *rn) {
    size_t n = (size_t)nranks;
    switch (k) {
    case REDUCE_SCATTER: *sn = count * n, *rn = count; break;
    case ALL_GATHER: *sn = count, *rn = count * n; break;
    case BROADCAST: *sn = r == root ? count : 0, *rn = count; break;
    case REDUCE: *sn = count, *rn = r == root ? count : 0; break;
    default: *sn = count, *rn = count; break;
    }
}

static ccl_status_t call(int k, const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_op_t op, int root,
                         ccl_comm_t *comm) {
    switch (k) {
    case ALL_REDUCE: return ccl_all_reduce(s, r, count, dt, op, comm);
    case REDUCE: return ccl_reduce(s, r, count, dt, op, root, comm);
    case REDUCE_SCATTER: return ccl_reduce_scatter(s, r, count, dt, op, comm);
    case ALL_GATHER: return ccl_all_gather(s, r, count, dt, comm);
    default: return ccl_broadcast(s, r, count, dt, root, comm);
    }
}

struct zc_arena {
    char *base; /* a shared allocation */
    size_t bytes;
};

/* One call on buffers in the arena (own: in ordinary memory instead),
 * checked against the reference. Returns 1 when it could take the path. */
static int one_call(struct harness_tally *t, ccl_comm_t *comm, int rank, int nranks, const struct zc_arena *a,
                    int k, ccl_dtype_t dt, ccl_op_t op, size_t count, int in_place, int root, int ordinary,
                    size_t min_bytes) {
    size_t es = ccl_dtype_size(dt), sn, rn;
    extents(k, count, nranks, rank, root, &sn, &rn);
    char combo[160];
    snprintf(combo, sizeof combo, "%s %s %s count=%zu %s root=%d%s", kind_names[k], ccl_dtype_name(dt),
             kind_reduces(k) ? ccl_op_name(op) : "-", count, in_place ? "in-place" : "out-of-place", root,
             ordinary ? " (ordinary memory)" : "");
    /* One area at an odd offset past a guard: out of place, the output
     * (its guard after it) then the input; in place, the larger buffer,
     * the other inside it where the collective expects it. */
    size_t rsz = (rn ? rn : count) * es, ssz = (sn ? sn : count) * es;
    size_t area = in_place ? (rsz > ssz ? rsz : ssz) : rsz;
    size_t span = GUARD + 8 + area + GUARD + (in_place ? 0 : GUARD + ssz + GUARD);
    EXPECT(t, span <= a->bytes, "%s: the test's arena is too small (%zu bytes for %zu)", combo, a->bytes, span);
    char *mem = span > a->bytes ? NULL : ordinary ? malloc(a->bytes) : a->base;
    if (!mem) return 0;
    memset(mem, GUARD_BYTE, span);
    char *lo = mem + GUARD + 8, *recv = lo, *send = lo + area + 2 * GUARD;
    uint64_t seed = ((uint64_t)k << 40) ^ ((uint64_t)dt << 32) ^ ((uint64_t)op << 24) ^ count ^ ((uint64_t)in_place << 60);
    struct ref_case rc = {dt, op, nranks, seed};
    if (in_place) {
        send = recv = lo;
        if (k == ALL_GATHER) send = lo + (size_t)rank * count * es;
        if (k == REDUCE_SCATTER) recv = lo + (size_t)rank * count * es;
    }
    if (kind_reduces(k)) ref_reduce_input(&rc, rank, 0, sn, send);
    else if (sn) ref_bytes(seed, rank, 0, sn * es, send);
    if (!in_place && rn) memset(recv, 0x5a, rn * es);
    ccl_status_t st = call(k, send, recv, count, dt, op, root, comm);
    EXPECT(t, st == CCL_OK, "%s: %s (%s)", combo, ccl_status_string(st), ccl_comm_last_error(comm));
    if (st == CCL_OK && rn) {
        char *want = malloc(rn * es + 1);
        if (k == ALL_REDUCE || k == REDUCE) ref_reduce_expected(&rc, 0, count, want);
        else if (k == REDUCE_SCATTER) ref_reduce_expected(&rc, (size_t)rank * count, count, want);
        else if (k == ALL_GATHER)
            for (int q = 0; q < nranks; q++) ref_bytes(seed, q, 0, count * es, want + (size_t)q * count * es);
        else ref_bytes(seed, root, 0, count * es, want);
        size_t at = ref_first_diff(dt, recv, want, rn);
        EXPECT(t, at == (size_t)-1 || at >= rn, "%s: rank %d's output differs at element %zu", combo, rank, at);
        free(want);
    }
    /* The guards around the area the collective may write. */
    for (int g = 0; g < GUARD; g++)
        if ((unsigned char)lo[-GUARD + g] != GUARD_BYTE || (unsigned char)lo[area + g] != GUARD_BYTE) {
            EXPECT(t, 0, "%s: a guard around the output was written", combo);
            break;
        }
    if (ordinary) free(mem);
    return nranks > 1 && count > 0 && count * es >= min_bytes;
}

static const size_t counts[] = {0, 1, 7, 1001, 65537 + 3};
#define BIG_COUNT (65537 + 3)

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    int on = *(const int *)arg; /* the path is on (else CCL_ZERO_COPY=0) */
    struct harness_tally t = {.rank = rank};
    struct zc_arena a = {.bytes = (size_t)BIG_COUNT * 8 * (size_t)(nranks + 1) + 4096};
    if (EXPECT_OK(&t, ccl_mem_alloc(comm, a.bytes, (void **)&a.base)) != CCL_OK) return t.fails;
    long expected = 0, before = zero_copy_calls(comm);
    EXPECT(&t, before == 0, "zero_copy_calls=%ld before any call", before);
    for (int k = 0; k < NKINDS; k++)
        for (int dt = 0; dt < CCL_NUM_DTYPES; dt++)
            for (int op = 0; op < CCL_NUM_OPS; op++) {
                if (kind_reduces(k) ? !ref_op_applies((ccl_dtype_t)dt, (ccl_op_t)op) : op != CCL_SUM) continue;
                for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                    size_t count = counts[c];
                    /* The big count: one op and placement per dtype. */
                    int big = count == BIG_COUNT;
                    for (int in_place = 0; in_place < 2; in_place++) {
                        if (big && (kind_reduces(k) ? (op + dt + in_place) % 3 != 0 : in_place != dt % 2)) continue;
                        int root = (int)((count + (size_t)dt) % (size_t)nranks);
                        expected += one_call(&t, comm, rank, nranks, &a, k, (ccl_dtype_t)dt, (ccl_op_t)op, count,
                                             in_place, root, 0, 0) && on;
                    }
                }
            }
    long got = zero_copy_calls(comm);
    EXPECT(&t, got == expected, "zero_copy_calls=%ld, expected %ld", got, expected);
    EXPECT_OK(&t, ccl_mem_free(comm, a.base));
    return t.fails;
}

static void run_matrix_env(int nranks, int on, const char *env) {
    struct harness_run run = {.nranks = nranks, .transport = "shm", .body = body_matrix, .arg = &on, .env = env,
                              .deadline_s = 500};
    HARNESS_RUN_OK(&run);
}

static void run_matrix(int nranks, int on) { run_matrix_env(nranks, on, on ? "CCL_ZERO_COPY_MIN=0" : "CCL_ZERO_COPY=0"); }

static const int matrix_ranks[] = {1, 2, 3, 5};
START_TEST(every_collective_dtype_op) { run_matrix(matrix_ranks[_i], 1); }
END_TEST
START_TEST(turned_off) { run_matrix(3, 0); }
END_TEST
/* Every output written past the caches (non-temporal stores), from any
 * byte: unaligned heads and tails of every block. */
START_TEST(streaming_outputs) { run_matrix_env(3, 1, "CCL_ZERO_COPY_MIN=0 CCL_STREAM_OUTPUT_BYTES=1"); }
END_TEST

/* Ranks that disagree, and misuse. */
static int body_misuse(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    size_t bytes = 1 << 20;
    struct zc_arena a = {.bytes = bytes};
    if (EXPECT_OK(&t, ccl_mem_alloc(comm, bytes, (void **)&a.base)) != CCL_OK) return t.fails;
    EXPECT(&t, ((uintptr_t)a.base & 4095) == 0, "the allocation is not page-aligned: %p", (void *)a.base);
    for (size_t i = 0; i < bytes; i += 4096) EXPECT(&t, a.base[i] == 0, "the allocation is not zeroed at %zu", i);
    /* One rank's buffers in ordinary memory: every rank runs the call its
     * usual way, with the same result. */
    long z0 = zero_copy_calls(comm);
    one_call(&t, comm, rank, nranks, &a, ALL_REDUCE, CCL_FLOAT32, CCL_SUM, 20000, 0, 0, rank == nranks - 1, 0);
    EXPECT(&t, zero_copy_calls(comm) == z0, "a call with one rank's buffers in ordinary memory ran zero-copy");
    one_call(&t, comm, rank, nranks, &a, ALL_REDUCE, CCL_FLOAT32, CCL_SUM, 20000, 0, 0, 0, 0);
    EXPECT(&t, zero_copy_calls(comm) == z0 + 1, "a call on shared memory everywhere did not run zero-copy");
    /* Different sizes: every rank refuses, and nothing is allocated. */
    void *p = (void *)1;
    ccl_status_t st = ccl_mem_alloc(comm, rank == 1 ? 8192 : 4096, &p);
    EXPECT(&t, st == CCL_ERR_INVALID_USAGE && p == NULL, "sizes that differ: %s, %p", ccl_status_string(st), p);
    EXPECT(&t, strstr(ccl_comm_last_error(comm), "rank 1") != NULL, "the culprit is not named: %s",
           ccl_comm_last_error(comm));
    /* Zero bytes on one rank: that rank is told why, the others who. */
    st = ccl_mem_alloc(comm, rank == 0 ? 0 : 4096, &p);
    EXPECT(&t, st == (rank == 0 ? CCL_ERR_INVALID_ARGUMENT : CCL_ERR_INVALID_USAGE), "0 bytes on rank 0: %s",
           ccl_status_string(st));
    /* A foreign pointer on the last rank: it is told so, the others name it;
     * nothing is freed (the memory still works). */
    char local[64];
    st = ccl_mem_free(comm, rank == nranks - 1 ? (void *)local : (void *)a.base);
    EXPECT(&t, st == (rank == nranks - 1 ? CCL_ERR_INVALID_ARGUMENT : CCL_ERR_INVALID_USAGE), "a foreign pointer: %s",
           ccl_status_string(st));
    if (rank != nranks - 1) {
        char want[32];
        snprintf(want, sizeof want, "rank %d", nranks - 1);
        EXPECT(&t, strstr(ccl_comm_last_error(comm), want) != NULL, "the culprit is not named: %s",
               ccl_comm_last_error(comm));
    }
    one_call(&t, comm, rank, nranks, &a, ALL_GATHER, CCL_INT32, CCL_SUM, 5000, 1, 0, 0, 0);
    /* A free while an asynchronous call runs on the memory: the free waits
     * for it. Out of place into ordinary memory, where the result shows;
     * then in place, zero-copy. */
    size_t n = 1 << 18;
    float *b = NULL, *out = malloc(n * sizeof(float));
    EXPECT_OK(&t, ccl_mem_alloc(comm, n * sizeof(float), (void **)&b));
    for (size_t i = 0; b && out && i < n; i++) b[i] = (float)(rank + 1);
    ccl_request_t *req = NULL;
    if (b && out) EXPECT_OK(&t, ccl_all_reduce_async(b, out, n, CCL_FLOAT32, CCL_SUM, comm, &req));
    EXPECT_OK(&t, ccl_mem_free(comm, b));
    if (req) EXPECT_OK(&t, ccl_wait(req));
    float want = (float)(nranks * (nranks + 1) / 2);
    EXPECT(&t, out && out[0] == want && out[n - 1] == want, "the async all-reduce gave %g", out ? (double)out[n - 1] : 0.0);
    free(out);
    EXPECT_OK(&t, ccl_mem_alloc(comm, n * sizeof(float), (void **)&b));
    req = NULL;
    long z1 = zero_copy_calls(comm);
    if (b) EXPECT_OK(&t, ccl_all_reduce_async(b, b, n, CCL_FLOAT32, CCL_SUM, comm, &req));
    EXPECT_OK(&t, ccl_mem_free(comm, b));
    if (req) EXPECT_OK(&t, ccl_wait(req));
    EXPECT(&t, zero_copy_calls(comm) == z1 + 1, "the async in-place call on shared memory did not run zero-copy");
    EXPECT_OK(&t, ccl_mem_free(comm, a.base));
    /* A double free: refused on the rank that does it, named by the others. */
    st = ccl_mem_free(comm, a.base);
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT, "a double free: %s", ccl_status_string(st));
    /* Inside a group: refused at once (it is collective and runs now). */
    EXPECT_OK(&t, ccl_group_start());
    st = ccl_mem_alloc(comm, 4096, &p);
    EXPECT(&t, st == CCL_ERR_INVALID_USAGE, "inside a group: %s", ccl_status_string(st));
    EXPECT_OK(&t, ccl_group_end());
    /* The communicator still works. */
    EXPECT_OK(&t, ccl_barrier(comm));
    return t.fails;
}

/* ---- releases ---- */

static void *release_on_a_thread(void *arg) {
    void **job = arg; /* comm, ptr */
    return (void *)(intptr_t)ccl_mem_release(job[0], job[1]);
}

static int body_release(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    size_t big = 1 << 20, small = 64 << 10;
    uint8_t *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    if (EXPECT_OK(&t, ccl_mem_alloc(comm, big, (void **)&a)) != CCL_OK ||
        EXPECT_OK(&t, ccl_mem_alloc(comm, small, (void **)&b)) != CCL_OK)
        return t.fails;
    memset(a, 0x5a, big);
    /* a: every rank, from a thread of its own; b: rank 0 alone */
    void *job[2] = {comm, a};
    pthread_t th;
    void *ret = NULL;
    EXPECT(&t, pthread_create(&th, NULL, release_on_a_thread, job) == 0, "pthread_create");
    pthread_join(th, &ret);
    EXPECT(&t, (ccl_status_t)(intptr_t)ret == CCL_OK, "a release from another thread: %s",
           ccl_status_string((ccl_status_t)(intptr_t)ret));
    if (rank == 0) EXPECT_OK(&t, ccl_mem_release(comm, b));
    ccl_status_t st = ccl_mem_release(comm, a);
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comm), "released already"),
           "a second release: %s (%s)", ccl_status_string(st), ccl_comm_last_error(comm));
    int local;
    st = ccl_mem_release(comm, &local);
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT, "a release of a foreign pointer: %s", ccl_status_string(st));
    /* c fits a's mapping: a is reused on every rank, zeroed */
    if (EXPECT_OK(&t, ccl_mem_alloc(comm, big - 100, (void **)&c)) != CCL_OK) return t.fails;
    EXPECT(&t, c == a, "an allocation that fits what every rank released got %p, not %p", (void *)c, (void *)a);
    size_t dirty = 0;
    for (size_t i = 0; i < big - 100; i++) dirty += c[i] != 0;
    EXPECT(&t, dirty == 0, "%zu bytes of the reused allocation are not zero", dirty);
    long z0 = zero_copy_calls(comm);
    float *f = (float *)c;
    size_t count = (big - 100) / sizeof(float);
    for (size_t i = 0; i < count; i++) f[i] = (float)(rank + 1);
    EXPECT_OK(&t, ccl_all_reduce(f, f, count, CCL_FLOAT32, CCL_SUM, comm));
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) bad += f[i] != (float)(nranks * (nranks + 1) / 2);
    EXPECT(&t, bad == 0, "%zu of %zu sums wrong on the reused allocation", bad, count);
    EXPECT(&t, zero_copy_calls(comm) == z0 + 1, "the call on the reused allocation did not run zero-copy");
    /* b, released by rank 0 alone, stayed: the others still use it */
    if (rank != 0) {
        memset(b, rank, small);
        EXPECT_OK(&t, ccl_mem_release(comm, b));
    }
    /* now released everywhere; too small for d: freed at d's allocation */
    if (EXPECT_OK(&t, ccl_mem_alloc(comm, 4 * big, (void **)&d)) != CCL_OK) return t.fails;
    st = ccl_mem_release(comm, b);
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comm), "freed already"),
           "b, released everywhere, was not freed at the next allocation: %s (%s)", ccl_status_string(st),
           ccl_comm_last_error(comm));
    /* a free of released memory is refused (collective: every rank alike) */
    EXPECT_OK(&t, ccl_mem_release(comm, d));
    st = ccl_mem_free(comm, d);
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT, "a free of released memory: %s", ccl_status_string(st));
    EXPECT_OK(&t, ccl_mem_free(comm, c));
    EXPECT_OK(&t, ccl_barrier(comm));
    return t.fails;
}

START_TEST(released_then_reclaimed) {
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_release, .env = "CCL_ZERO_COPY_MIN=0"};
    HARNESS_RUN_OK(&run);
}
END_TEST

START_TEST(misuse_and_disagreement) {
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_misuse, .env = "CCL_ZERO_COPY_MIN=0"};
    HARNESS_RUN_OK(&run);
}
END_TEST

/* A rank killed during zero-copy all-reduces of 8 MiB. */
#define KILL_TIMEOUT_S 10
#define KILL_COUNT (2u << 20)

static ccl_status_t all_reduce_in_place(ccl_comm_t *comm, void *x) {
    return ccl_all_reduce(x, x, KILL_COUNT, CCL_FLOAT32, CCL_SUM, comm);
}

static int body_killed(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    float *x = NULL;
    if (EXPECT_OK(&t, ccl_mem_alloc(comm, KILL_COUNT * sizeof(float), (void **)&x)) != CCL_OK) return t.fails;
    t.fails += util_outlive_victim(comm, rank, nranks, KILL_TIMEOUT_S, all_reduce_in_place, x);
    EXPECT(&t, ccl_all_reduce(x, x, 16, CCL_FLOAT32, CCL_SUM, comm) < 0, "a call after the failure succeeded");
    return t.fails;
}

START_TEST(rank_killed_during_calls) {
    static const int ranks[] = {2, 4};
    char timeout[8];
    snprintf(timeout, sizeof timeout, "%d", KILL_TIMEOUT_S);
    struct harness_run run = {.nranks = ranks[_i], .transport = "shm", .body = body_killed, .ccl_timeout = timeout,
                              .lenient_destroy = 1, .deadline_s = 120};
    util_run_with_victim(&run);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("zero_copy");
    TCase *tc = tcase_create("matrix");
    tcase_set_timeout(tc, 500);
    tcase_add_loop_test(tc, every_collective_dtype_op, 0, 4);
    tcase_add_test(tc, streaming_outputs);
    tcase_add_test(tc, turned_off);
    suite_add_tcase(s, tc);
    tc = tcase_create("misuse");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, misuse_and_disagreement);
    tcase_add_test(tc, released_then_reclaimed);
    suite_add_tcase(s, tc);
    tc = tcase_create("faults");
    tcase_set_timeout(tc, 150);
    tcase_add_loop_test(tc, rank_killed_during_calls, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
