/* ctest: TIMEOUT 300 */
/*
 * The RDMA transport from the outside. Where this machine has no RDMA
 * device (most), CCL_TRANSPORT=ib must fail init on every rank with an
 * error that says ib is not available and where; the rest needs a device
 * and reports itself skipped without one (tools/rdma-vm.sh runs this suite
 * inside a VM with two soft-RoCE devices, through ctest's rdma_vm): many
 * calls in a row over a few slots keep credits and slots in step; large
 * send/recv and all-to-all go zero-copy (the receiver reads the buffer the
 * sender offered) and arrive exact, as do the all-gather halves of
 * ring all-reduce and all-gather, whose blocks go the same way;
 * ccl_comm_register pins memory that later transfers reuse; a receiver that expected another size fails, and
 * the sender hears of it at once through the failure notice, as a peer of
 * a rank that aborts does; a receive that fails is not written to after; a link taken down or gone silent mid-loop fails
 * both ranks long before CCL_TIMEOUT; pairs that init leaves for their
 * first use (CCL_CONNECT=lazy) link inside the call that first needs them,
 * the same pairs on both sides, and carry every byte exact; without CCL_IB_HCA each rank takes the active
 * device hwloc places nearest (plan/topo.c's order is unit-tested on a
 * described machine in test_plan_topo).
 */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <infiniband/verbs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ccl.h"
#include "core/comm.h"
#include "core/trace.h"
#include "harness.h"
#include "plan/plan.h"
#include "transports/ib/ib.h"
#include "prims/regcache.h"
#include "util.h"

static int rdma_devices(void) {
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list) ibv_free_device_list(list);
    return list ? n : 0;
}

/* ---- no device: a clear error ---- */

static int init_refused(int rank, ccl_status_t st, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    const char *why = ccl_comm_last_error(NULL);
    EXPECT(&t, st == CCL_ERR_INVALID_USAGE, "init with CCL_TRANSPORT=ib and no RDMA device returned %s",
           ccl_status_string(st));
    EXPECT(&t, strstr(why, "CCL_TRANSPORT=ib") && strstr(why, "ib is not available on rank"),
           "the error does not say that ib is not available, and where: '%s'", why);
    return t.fails;
}

START_TEST(forced_without_device) {
    if (rdma_devices() > 0) {
        fprintf(stderr, "SKIP forced_without_device: this machine has an RDMA device\n");
        return;
    }
    struct harness_run run = {.nranks = 2, .transport = "ib", .host_per_rank = 1, .init_check = init_refused,
                              .deadline_s = 60};
    util_run_clean(&run, 0, "CCL_TRANSPORT=ib without a device");
}
END_TEST

/* ---- with a device ---- */

#define STEADY_CALLS 400
#define STEADY_COUNT 3001 /* floats: two slots of 8 KiB and a bit */

/* Many small and mid-size calls in a row over 2 slots of 8 KiB: credits
 * come back, slots are reused hundreds of times; every result exact. */
static int body_steady(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int32_t *buf = malloc(STEADY_COUNT * sizeof(int32_t));
    if (!buf) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    for (int call = 0; call < STEADY_CALLS && !t.fails; call++) {
        size_t count = (size_t)(call * 7919) % STEADY_COUNT;
        for (size_t i = 0; i < count; i++) buf[i] = (int32_t)(rank * 1000003 + call * 31 + (int)i);
        ccl_status_t st = ccl_all_reduce(buf, buf, count, CCL_INT32, CCL_SUM, comm);
        EXPECT(&t, st == CCL_OK, "call %d (%zu ints): %s: %s", call, count, ccl_status_string(st),
               ccl_comm_last_error(comm));
        for (size_t i = 0; i < count && st == CCL_OK; i++) {
            int64_t want = 0;
            for (int r = 0; r < nranks; r++) want += r * 1000003 + call * 31 + (int)i;
            if (buf[i] != (int32_t)want) {
                harness_fail(&t, __FILE__, __LINE__, "call %d element %zu: %d, expected %d", call, i, buf[i],
                             (int32_t)want);
                break;
            }
        }
    }
    free(buf);
    return t.fails;
}

START_TEST(steady_many_calls) {
    if (rdma_devices() == 0) {
        fprintf(stderr, "SKIP steady_many_calls: no RDMA device here (tools/rdma-vm.sh runs it in a VM)\n");
        return;
    }
    struct harness_run run = {.nranks = 3, .transport = "ib", .host_per_rank = 1, .body = body_steady,
                              .env = "CCL_SLOTS=2 CCL_IB_SLOT_BYTES=8192", .deadline_s = 240};
    util_run_clean(&run, 0, "3 ranks ib, 2 slots of 8 KiB");
}
END_TEST

static int need_device(const char *test) {
    if (rdma_devices() > 0) return 1;
    fprintf(stderr, "SKIP %s: no RDMA device here (tools/rdma-vm.sh runs it in a VM)\n", test);
    return 0;
}

/* Byte i of rank r's message number k: a pattern no shift or mix-up keeps. */
static uint8_t pattern(int r, int k, size_t i) { return (uint8_t)(r * 131 + k * 17 + i * 7 + (i >> 11)); }

static void fill(uint8_t *b, size_t n, int r, int k) {
    for (size_t i = 0; i < n; i++) b[i] = pattern(r, k, i);
}

/* The first byte of b that is not rank r's message k, or -1. */
static long first_wrong(const uint8_t *b, size_t n, int r, int k) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern(r, k, i)) return (long)i;
    return -1;
}

/* ---- credits ---- */

#define CREDIT_ROUNDS 300
#define CREDIT_STREAM 200
#define CREDIT_BYTES 100

/* Over 4 slots: a ping-pong, whose credits all ride back in the slots going
 * the other way (no credit write of its own, past a few); then a stream one
 * way with nothing coming back, received only after the sender has filled
 * the FIFO and waits for credits, which must come back in writes of their
 * own; the sender destroys its communicator as soon as its last send
 * returns, with that slot possibly still on the wire. Every byte exact. */
static int body_credits(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    int peer = 1 - rank;
    uint8_t buf[CREDIT_BYTES];
    for (int k = 0; k < CREDIT_ROUNDS && !t.fails; k++) {
        int mine = k % 2 == rank; /* rank 0 sends on even rounds */
        if (mine) fill(buf, sizeof buf, rank, k);
        ccl_status_t st = mine ? ccl_send(buf, sizeof buf, CCL_UINT8, peer, comm)
                               : ccl_recv(buf, sizeof buf, CCL_UINT8, peer, comm);
        EXPECT(&t, st == CCL_OK, "round %d: %s: %s", k, ccl_status_string(st), ccl_comm_last_error(comm));
        if (!mine && st == CCL_OK) EXPECT(&t, first_wrong(buf, sizeof buf, peer, k) < 0, "round %d: wrong bytes", k);
    }
    struct ccl__ib_state *s = ccl__ib_state(comm);
    uint64_t writes = s && s->conns[peer] ? s->conns[peer]->credit_writes : 0;
    EXPECT(&t, s && s->conns[peer] && writes <= 4,
           "a ping-pong of %d rounds returned credits in %llu writes of their own (they ride in slots)",
           CREDIT_ROUNDS, (unsigned long long)writes);
    for (int k = 0; k < CREDIT_STREAM && !t.fails; k++) {
        if (rank == 1 && k == 0) usleep(300 * 1000); /* let the sender fill the FIFO and wait */
        if (rank == 0) fill(buf, sizeof buf, 0, 1000 + k);
        ccl_status_t st = rank == 0 ? ccl_send(buf, sizeof buf, CCL_UINT8, 1, comm)
                                    : ccl_recv(buf, sizeof buf, CCL_UINT8, 0, comm);
        EXPECT(&t, st == CCL_OK, "stream message %d: %s: %s", k, ccl_status_string(st), ccl_comm_last_error(comm));
        if (rank == 1 && st == CCL_OK)
            EXPECT(&t, first_wrong(buf, sizeof buf, 0, 1000 + k) < 0, "stream message %d: wrong bytes", k);
    }
    if (rank == 1 && s && s->conns[peer])
        EXPECT(&t, s->conns[peer]->credit_writes > writes, "a one-way stream of %d messages over 4 slots got "
               "its credits back without a credit write", CREDIT_STREAM);
    return t.fails;
}

START_TEST(credits_both_ways) {
    if (!need_device("credits_both_ways")) return;
    struct harness_run run = {.nranks = 2, .transport = "ib", .host_per_rank = 1, .body = body_credits,
                              .env = "CCL_SLOTS=4", .deadline_s = 120};
    util_run_clean(&run, 0, "2 ranks ib, credits in slots and in writes");
}
END_TEST

/* ---- slot lanes ---- */

/* Rank r's element i of an integer all-reduce (also the zero-copy ring's). */
static int32_t ring_input(int r, size_t i) { return (int32_t)((uint32_t)(r + 1) * 2654435761u ^ (uint32_t)i * 40503u); }

#define LANES_CALLS 24
#define LANES_COUNT 262147u /* int32: a MiB and a bit, 128 slots of 8 KiB */

/* Slots spread over 4 queue pairs per direction (CCL_IB_QPS=4), 8 slots
 * of 8 KiB, zero-copy off so that every byte travels in slots: the steady
 * run of small calls, then all-reduces of a MiB whose slots land on the
 * four lanes out of order with each other; every result exact, and every
 * lane of every connection carried slots both ways. */
static int body_lanes(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    struct harness_tally t = {rank, body_steady(comm, rank, nranks, arg)};
    int32_t *v = malloc(sizeof(int32_t) * LANES_COUNT);
    if (!v) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    for (int call = 0; call < LANES_CALLS && !t.fails; call++) {
        for (size_t i = 0; i < LANES_COUNT; i++) v[i] = ring_input(rank + call, i);
        if (EXPECT_OK(&t, ccl_all_reduce(v, v, LANES_COUNT, CCL_INT32, CCL_SUM, comm)) != CCL_OK) break;
        for (size_t i = 0; i < LANES_COUNT; i++) {
            uint32_t want = 0;
            for (int r = 0; r < nranks; r++) want += (uint32_t)ring_input(r + call, i);
            if ((uint32_t)v[i] != want) {
                EXPECT(&t, 0, "call %d element %zu is %d, expected %d", call, i, v[i], (int32_t)want);
                break;
            }
        }
    }
    free(v);
    /* The ring's calls write to the next rank and read from the one before. */
    struct ccl__ib_state *s = ccl__ib_state(comm);
    int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    const struct ccl__ib_conn *out = s ? s->conns[to] : NULL, *in = s ? s->conns[from] : NULL;
    if (!out || !in) {
        harness_fail(&t, __FILE__, __LINE__, "no ib connection to rank %d or %d", to, from);
        return t.fails;
    }
    EXPECT(&t, out->lanes == 4 && in->lanes == 4, "the connections have %u and %u lanes, not 4", out->lanes,
           in->lanes);
    for (unsigned k = 0; k < out->lanes && k < in->lanes; k++) {
        EXPECT(&t, out->lane_sent[k] >= LANES_CALLS && out->lane_done[k] <= out->lane_sent[k],
               "lane %u to rank %d: %llu slots sent, %llu completed", k, to, (unsigned long long)out->lane_sent[k],
               (unsigned long long)out->lane_done[k]);
        EXPECT(&t, in->lane_arrived[k] >= LANES_CALLS, "lane %u from rank %d: %llu slots arrived", k, from,
               (unsigned long long)in->lane_arrived[k]);
    }
    return t.fails;
}

START_TEST(slot_lanes) {
    if (!need_device("slot_lanes")) return;
    struct harness_run run = {.nranks = 3, .transport = "ib", .host_per_rank = 1, .body = body_lanes,
                              .env = "CCL_SLOTS=8 CCL_IB_SLOT_BYTES=8192 CCL_IB_QPS=4 CCL_IB_ZCOPY_BYTES=0",
                              .deadline_s = 240};
    util_run_clean(&run, 0, "3 ranks ib, slots over 4 queue pairs");
}
END_TEST

/* Ranks that spread slots over different numbers of queue pairs cannot
 * talk: init fails on every rank with the same sentence, naming the
 * ranks and the variable. */
static int init_lanes_refused(int rank, ccl_status_t st, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    const char *why = ccl_comm_last_error(NULL);
    EXPECT(&t, st == CCL_ERR_INVALID_USAGE, "init with CCL_IB_QPS=2 on rank 1 and 4 elsewhere returned %s: %s",
           ccl_status_string(st), why);
    EXPECT(&t, strstr(why, "rank 0 spreads slots over 4 queue pairs, rank 1 over 2 (CCL_IB_QPS") != NULL,
           "the error does not name the ranks and CCL_IB_QPS: '%s'", why);
    return t.fails;
}

START_TEST(slot_lanes_disagree) {
    if (!need_device("slot_lanes_disagree")) return;
    static const char *const rank_env[] = {NULL, "CCL_IB_QPS=2", NULL};
    struct harness_run run = {.nranks = 3, .transport = "ib", .host_per_rank = 1, .init_check = init_lanes_refused,
                              .env = "CCL_IB_QPS=4", .rank_env = rank_env, .deadline_s = 120};
    util_run_clean(&run, 0, "3 ranks ib, rank 1 with other lanes");
}
END_TEST

/* ---- zero-copy ---- */

/* Sizes over the 1 MiB threshold, odd ones and one above 4 MiB, as
 * messages around a ring (every rank sends and receives at once), then an
 * all-to-all of 1 MiB + 3 bytes per peer; each exact, and each made of
 * registrations (the cache saw misses: the zero-copy path ran). */
static const size_t zc_sizes[] = {(1u << 20) + 7, 3u * (1u << 20) + 1, (4u << 20) + 4093};
#define NZC (sizeof(zc_sizes) / sizeof(zc_sizes[0]))

static int body_zero_copy(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    size_t big = zc_sizes[NZC - 1];
    uint8_t *out = malloc(big), *in = malloc(big);
    if (!out || !in) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < NZC && !t.fails; k++) {
        size_t n = zc_sizes[k];
        fill(out, n, rank, (int)k);
        memset(in, 0xee, n);
        uint64_t misses = ccl__reg_stats(comm).misses;
        ccl_status_t st = ccl_group_start();
        if (st == CCL_OK) st = ccl_send(out, n, CCL_UINT8, to, comm);
        if (st == CCL_OK) st = ccl_recv(in, n, CCL_UINT8, from, comm);
        ccl_status_t end = ccl_group_end();
        EXPECT(&t, st == CCL_OK && end == CCL_OK, "%zu bytes around the ring: %s/%s: %s", n, ccl_status_string(st),
               ccl_status_string(end), ccl_comm_last_error(comm));
        long bad = first_wrong(in, n, from, (int)k);
        EXPECT(&t, bad < 0, "%zu bytes from rank %d: byte %ld is %u, expected %u", n, from, bad,
               bad >= 0 ? in[bad] : 0, bad >= 0 ? pattern(from, (int)k, (size_t)bad) : 0);
        EXPECT(&t, ccl__reg_stats(comm).misses >= misses + 2, "%zu bytes did not go zero-copy (no registration)", n);
        EXPECT(&t, ccl__reg_stats(comm).live == 0, "registrations outlive the call with CCL_REG_CACHE=0");
    }
    size_t per = (1u << 20) + 3;
    uint8_t *a_out = malloc(per * (size_t)nranks), *a_in = malloc(per * (size_t)nranks);
    if (!a_out || !a_in) harness_fail(&t, __FILE__, __LINE__, "out of memory");
    for (int p = 0; p < nranks && !t.fails; p++) fill(a_out + per * (size_t)p, per, rank, 100 + p);
    if (!t.fails) {
        ccl_status_t st = ccl_all_to_all(a_out, a_in, per, CCL_UINT8, comm);
        EXPECT(&t, st == CCL_OK, "all_to_all of %zu bytes per peer: %s: %s", per, ccl_status_string(st),
               ccl_comm_last_error(comm));
        for (int p = 0; p < nranks && st == CCL_OK; p++) {
            long bad = first_wrong(a_in + per * (size_t)p, per, p, 100 + rank);
            EXPECT(&t, bad < 0, "all_to_all block from rank %d: byte %ld wrong", p, bad);
        }
    }
    free(a_out);
    free(a_in);
done:
    free(out);
    free(in);
    return t.fails;
}

/* The ring's all-gather half over ib moves whole blocks zero-copy once a
 * block reaches CCL_IB_ZCOPY_BYTES: an in-place all-reduce of a prime
 * count of int32 (blocks of 333335 and 333334 elements, over 1 MiB),
 * twice (nothing of the first call's registrations is left to confuse
 * the second), an out-of-place float32 average (the owner divides its
 * block before the blocks move) and an out-of-place all-gather of 1.2 MB
 * per rank, each exact against a reference computed here, the integer
 * ones checked to be made of registrations. */
#define ZC_RING_COUNT 1000003u
#define ZC_GATHER_COUNT 300007u
/* Small integers: their float32 sums are exact in any order. */
static float avg_input(int r, size_t i) { return (float)((r + 1) * (int)(i % 1000)); }

/* v, after all_reduce #call summed every rank's ring_input(rank + call, i):
 * each element checked, the first wrong one reported. */
static void expect_ring_sum(struct harness_tally *t, const int32_t *v, int nranks, int call) {
    for (size_t i = 0; i < ZC_RING_COUNT; i++) {
        uint32_t want = 0; /* two's complement wraps alike in any order */
        for (int r = 0; r < nranks; r++) want += (uint32_t)ring_input(r + call, i);
        if ((uint32_t)v[i] != want) {
            EXPECT(t, 0, "all_reduce #%d element %zu is %d, expected %d", call, i, v[i], (int32_t)want);
            return;
        }
    }
}

static int body_zero_copy_ring(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int32_t *v = malloc(sizeof(int32_t) * ZC_RING_COUNT);
    int32_t *all = malloc(sizeof(int32_t) * ZC_GATHER_COUNT * (size_t)nranks);
    float *f = malloc(sizeof(float) * ZC_RING_COUNT), *g = malloc(sizeof(float) * ZC_RING_COUNT);
    if (!v || !all || !f || !g) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto done;
    }
    ccl_status_t st = CCL_OK;
    for (int call = 0; call < 2 && st == CCL_OK; call++) {
        for (size_t i = 0; i < ZC_RING_COUNT; i++) v[i] = ring_input(rank + call, i);
        struct ccl__regcache_stats before = ccl__reg_stats(comm);
        st = ccl_all_reduce(v, v, ZC_RING_COUNT, CCL_INT32, CCL_SUM, comm);
        EXPECT(&t, st == CCL_OK, "all_reduce #%d of %u int32: %s: %s", call, ZC_RING_COUNT, ccl_status_string(st),
               ccl_comm_last_error(comm));
        if (st == CCL_OK) expect_ring_sum(&t, v, nranks, call);
        /* Each zero-copy block looks up a registration on both sides (2
         * blocks each way here); without them a call makes one lookup at
         * most: its buffer's, for the slot writes that read it in place. */
        struct ccl__regcache_stats after = ccl__reg_stats(comm);
        EXPECT(&t, after.hits + after.misses >= before.hits + before.misses + 3,
               "all_reduce #%d's blocks did not go zero-copy (%llu registration lookups)", call,
               (unsigned long long)(after.hits + after.misses - before.hits - before.misses));
    }
    for (size_t i = 0; i < ZC_RING_COUNT; i++) f[i] = avg_input(rank, i);
    memset(g, 0xee, sizeof(float) * ZC_RING_COUNT);
    st = ccl_all_reduce(f, g, ZC_RING_COUNT, CCL_FLOAT32, CCL_AVG, comm);
    EXPECT(&t, st == CCL_OK, "all_reduce avg of %u float32: %s: %s", ZC_RING_COUNT, ccl_status_string(st),
           ccl_comm_last_error(comm));
    for (size_t i = 0; i < ZC_RING_COUNT && st == CCL_OK; i++) {
        float sum = 0;
        for (int r = 0; r < nranks; r++) sum += avg_input(r, i);
        float want = sum / (float)nranks;
        if (memcmp(&g[i], &want, sizeof want) != 0 || f[i] != avg_input(rank, i)) {
            EXPECT(&t, 0, "all_reduce avg element %zu is %a (input %a), expected %a", i, (double)g[i], (double)f[i],
                   (double)want);
            break;
        }
    }
    for (size_t i = 0; i < ZC_GATHER_COUNT; i++) v[i] = ring_input(rank + 7, i);
    memset(all, 0xee, sizeof(int32_t) * ZC_GATHER_COUNT * (size_t)nranks);
    uint64_t misses = ccl__reg_stats(comm).misses;
    st = ccl_all_gather(v, all, ZC_GATHER_COUNT, CCL_INT32, comm);
    EXPECT(&t, st == CCL_OK, "all_gather of %u int32 per rank: %s: %s", ZC_GATHER_COUNT, ccl_status_string(st),
           ccl_comm_last_error(comm));
    for (int r = 0; r < nranks && st == CCL_OK; r++)
        for (size_t i = 0; i < ZC_GATHER_COUNT; i++)
            if (all[(size_t)r * ZC_GATHER_COUNT + i] != ring_input(r + 7, i)) {
                EXPECT(&t, 0, "all_gather: rank %d's element %zu is wrong", r, i);
                break;
            }
    EXPECT(&t, ccl__reg_stats(comm).misses >= misses + 2, "the all-gather's blocks did not go zero-copy");
done:
    free(v);
    free(all);
    free(f);
    free(g);
    return t.fails;
}

START_TEST(zero_copy_ring) {
    if (!need_device("zero_copy_ring")) return;
    struct harness_run run = {.nranks = 3, .transport = "ib", .host_per_rank = 1, .body = body_zero_copy_ring,
                              .env = "CCL_ALGO=allreduce:ring,allgather:ring", .deadline_s = 240};
    util_run_clean(&run, 0, "3 ranks ib, the ring's all-gather half zero-copy");
}
END_TEST

/* The same all-gather half, traced: its whole blocks show as the rounds
 * would show them, under the call's own number (not as point-to-point
 * calls of their own), in all-gather steps N-1 .. 2N-3, a send and a
 * receive in each on every rank; nothing of the call is filed as
 * point-to-point. CCL_TRACE=/dev/null: the events are read here. */
static int body_zero_copy_ring_traced(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int32_t *v = malloc(sizeof(int32_t) * ZC_RING_COUNT);
    if (!v || !comm->trace) {
        harness_fail(&t, __FILE__, __LINE__, v ? "CCL_TRACE is set but the communicator does not trace" : "out of memory");
        free(v);
        return t.fails;
    }
    for (size_t i = 0; i < ZC_RING_COUNT; i++) v[i] = ring_input(rank, i);
    size_t first = comm->trace->n;
    ccl_status_t st = ccl_all_reduce(v, v, ZC_RING_COUNT, CCL_INT32, CCL_SUM, comm);
    EXPECT(&t, st == CCL_OK, "all_reduce: %s: %s", ccl_status_string(st), ccl_comm_last_error(comm));
    if (st == CCL_OK) expect_ring_sum(&t, v, nranks, 0);
    int sends[2 * 8] = {0}, recvs[2 * 8] = {0};
    const struct ccl__trace_event *ev = comm->trace->ev;
    for (size_t e = first; e < comm->trace->n; e++) {
        EXPECT(&t, ev[e].seq == ev[first].seq && ev[e].coll == ev[first].coll,
               "event %zu: call %u of kind %u, the call's first event says call %u of kind %u", e, ev[e].seq,
               ev[e].coll, ev[first].seq, ev[first].coll);
        EXPECT(&t, ev[e].phase != CCL__TR_P2P, "event %zu (step %d, %llu bytes) is filed as point-to-point", e,
               ev[e].step, (unsigned long long)ev[e].bytes);
        if (ev[e].phase != CCL__TR_ALL_GATHER) continue;
        int step = ev[e].step;
        if (step < nranks - 1 || step > 2 * nranks - 3 || step >= 2 * 8) {
            EXPECT(&t, 0, "event %zu: all-gather step %d, outside %d .. %d", e, step, nranks - 1, 2 * nranks - 3);
            continue;
        }
        if (ev[e].kind == CCL__TR_SEND) sends[step]++;
        if (ev[e].kind == CCL__TR_RECV) recvs[step]++;
    }
    for (int step = nranks - 1; step <= 2 * nranks - 3; step++)
        EXPECT(&t, sends[step] >= 1 && recvs[step] >= 1, "all-gather step %d: %d sends and %d receives traced", step,
               sends[step], recvs[step]);
    free(v);
    return t.fails;
}

START_TEST(zero_copy_ring_traced) {
    if (!need_device("zero_copy_ring_traced")) return;
    struct harness_run run = {.nranks = 3, .transport = "ib", .host_per_rank = 1, .body = body_zero_copy_ring_traced,
                              .env = "CCL_ALGO=allreduce:ring CCL_TRACE=/dev/null", .deadline_s = 240};
    util_run_clean(&run, 0, "3 ranks ib, the ring's zero-copy all-gather half traced");
}
END_TEST

START_TEST(zero_copy_exact) {
    if (!need_device("zero_copy_exact")) return;
    struct harness_run run = {.nranks = 3, .transport = "ib", .host_per_rank = 1, .body = body_zero_copy,
                              .deadline_s = 240};
    util_run_clean(&run, 0, "3 ranks ib, zero-copy send/recv and all-to-all");
}
END_TEST

/* One registration of 8 MiB, then 24 transfers of 2 MiB at moving offsets
 * inside it (zero-copy although CCL_IB_ZCOPY_BYTES=0: registered memory
 * always is) and an all-to-all in it: one registration made, every later
 * lookup a hit. After deregistering, nothing stays registered. */
#define REG_BYTES (8u << 20)
#define REG_MSG (2u << 20)
#define REG_ROUNDS 24

static int body_registered(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int peer = 1 - rank;
    uint8_t *buf = malloc(REG_BYTES);
    void *h = NULL;
    if (!buf) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    ccl_status_t st = ccl_comm_register(comm, buf, REG_BYTES, &h);
    EXPECT(&t, st == CCL_OK && h, "ccl_comm_register of 8 MiB: %s: %s", ccl_status_string(st),
           ccl_comm_last_error(comm));
    EXPECT(&t, ccl__reg_stats(comm).misses == 1 && ccl__reg_stats(comm).live == 1,
           "register made %llu registrations, %llu live (expected 1, 1)",
           (unsigned long long)ccl__reg_stats(comm).misses, (unsigned long long)ccl__reg_stats(comm).live);
    for (int k = 0; k < REG_ROUNDS && !t.fails; k++) {
        size_t off = (size_t)(k * 262147) % (REG_BYTES / 2 - REG_MSG);
        uint8_t *mine = buf + off, *theirs = buf + REG_BYTES / 2 + off;
        fill(mine, REG_MSG, rank, k);
        st = ccl_group_start();
        if (st == CCL_OK) st = ccl_send(mine, REG_MSG, CCL_UINT8, peer, comm);
        if (st == CCL_OK) st = ccl_recv(theirs, REG_MSG, CCL_UINT8, peer, comm);
        ccl_status_t end = ccl_group_end();
        EXPECT(&t, st == CCL_OK && end == CCL_OK, "round %d: %s/%s: %s", k, ccl_status_string(st),
               ccl_status_string(end), ccl_comm_last_error(comm));
        long bad = first_wrong(theirs, REG_MSG, peer, k);
        EXPECT(&t, bad < 0, "round %d: byte %ld from rank %d wrong", k, bad, peer);
    }
    struct ccl__regcache_stats s = ccl__reg_stats(comm);
    EXPECT(&t, s.misses == 1 && s.hits >= 2 * REG_ROUNDS,
           "%d rounds in registered memory: %llu registrations made, %llu reused (expected 1 and >= %d)", REG_ROUNDS,
           (unsigned long long)s.misses, (unsigned long long)s.hits, 2 * REG_ROUNDS);
    size_t per = REG_BYTES / 4 / (size_t)nranks;
    fill(buf, per * (size_t)nranks, rank, 7);
    st = ccl_all_to_all(buf, buf + REG_BYTES / 2, per, CCL_UINT8, comm);
    EXPECT(&t, st == CCL_OK, "all_to_all in registered memory: %s: %s", ccl_status_string(st),
           ccl_comm_last_error(comm));
    EXPECT(&t, ccl__reg_stats(comm).misses == 1, "all_to_all in registered memory registered again");
    for (int p = 0; p < nranks && st == CCL_OK; p++)
        for (size_t i = 0; i < per; i++)
            if (buf[REG_BYTES / 2 + per * (size_t)p + i] != pattern(p, 7, per * (size_t)rank + i)) {
                harness_fail(&t, __FILE__, __LINE__, "all_to_all block from rank %d: byte %zu wrong", p, i);
                break;
            }
    st = ccl_comm_deregister(comm, h);
    EXPECT(&t, st == CCL_OK, "deregister: %s", ccl_status_string(st));
    EXPECT(&t, ccl__reg_stats(comm).live == 0, "%llu registrations left after deregister",
           (unsigned long long)ccl__reg_stats(comm).live);
    st = ccl_comm_deregister(comm, h);
    EXPECT(&t, st == CCL_ERR_INVALID_ARGUMENT, "a second deregister of one handle returned %s",
           ccl_status_string(st));
    /* Unregistered and under the threshold (0: off): slots, no registration. */
    fill(buf, REG_MSG, rank, 99);
    st = ccl_group_start();
    if (st == CCL_OK) st = ccl_send(buf, REG_MSG, CCL_UINT8, peer, comm);
    if (st == CCL_OK) st = ccl_recv(buf + REG_BYTES / 2, REG_MSG, CCL_UINT8, peer, comm);
    ccl_status_t end = ccl_group_end();
    EXPECT(&t, st == CCL_OK && end == CCL_OK && first_wrong(buf + REG_BYTES / 2, REG_MSG, peer, 99) < 0,
           "2 MiB through slots after deregister: %s/%s", ccl_status_string(st), ccl_status_string(end));
    EXPECT(&t, ccl__reg_stats(comm).misses == 1, "CCL_IB_ZCOPY_BYTES=0 still registered unregistered memory");
    free(buf);
    return t.fails;
}

START_TEST(register_reuse) {
    if (!need_device("register_reuse")) return;
    struct harness_run run = {.nranks = 2, .transport = "ib", .host_per_rank = 1, .body = body_registered,
                              .env = "CCL_IB_ZCOPY_BYTES=0", .deadline_s = 240};
    util_run_clean(&run, 0, "2 ranks ib, ccl_comm_register reused");
}
END_TEST

/* Rank 0 sends 2 MiB, rank 1 expects one byte more: rank 1 reads the
 * offer's stamp and fails naming both counts; rank 0, waiting for its
 * offer to be read, hears of rank 1's failure from its notice and fails
 * long before CCL_TIMEOUT (60 s) would have ended its wait. */
static int body_mismatch(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    size_t n = 2u << 20;
    uint8_t *buf = calloc(1, n + 1);
    double t0 = harness_now();
    ccl_status_t st = rank == 0 ? ccl_send(buf, n, CCL_UINT8, 1, comm) : ccl_recv(buf, n + 1, CCL_UINT8, 0, comm);
    double took = harness_now() - t0;
    const char *why = ccl_comm_last_error(comm);
    if (rank == 1) {
        EXPECT(&t, st == CCL_ERR_INVALID_USAGE, "receiving %zu bytes of a %zu-byte send returned %s", n + 1, n,
               ccl_status_string(st));
        EXPECT(&t, strstr(why, "count 2097152") && strstr(why, "count 2097153"), "the error names no counts: '%s'",
               why);
    } else {
        EXPECT(&t, st == CCL_ERR_REMOTE, "the sender got %s, expected CCL_ERR_REMOTE", ccl_status_string(st));
        EXPECT(&t, strstr(why, "rank 1") && strstr(why, "failed"), "the sender's error does not name rank 1: '%s'",
               why);
        EXPECT(&t, took < 30, "the sender learnt of the failure after %.1f s (the notice did not arrive)", took);
    }
    free(buf);
    return t.fails;
}

START_TEST(zero_copy_size_mismatch) {
    if (!need_device("zero_copy_size_mismatch")) return;
    struct harness_run run = {.nranks = 2, .transport = "ib", .host_per_rank = 1, .body = body_mismatch,
                              .lenient_destroy = 1, .deadline_s = 120};
    util_run_clean(&run, 0, "2 ranks ib, receiver expects another size");
}
END_TEST

/* A receive that fails takes its buffer back: rank 0 sends 32 MiB of 0xa5
 * to rank 1 (seconds on soft-RoCE), and once the first bytes have landed
 * (a pull's reads complete in order), a thread of rank 1 aborts its
 * communicator while its reads are still in flight into its buffer: a
 * fixed delay instead found the whole message in place on a fast day. Once rank 1's receive has returned, the
 * memory is its own again: it fills the buffer with a sentinel and finds
 * it intact 2.5 s later (longer than a registration lingers), while rank 0
 * keeps its queue pairs up that long, as a slow peer would. */
#define REVOKE_BYTES (32u << 20)
struct revoke {
    ccl_comm_t *comm;
    const volatile uint8_t *buf;
};

static void *abort_once_landing(void *arg) {
    struct revoke *r = arg;
    struct timespec tick = {0, 1000 * 1000};
    for (int ms = 0; ms < 20000 && r->buf[0] == 0; ms++) nanosleep(&tick, NULL);
    ccl_comm_abort(r->comm);
    return NULL;
}

static int body_revoke(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    uint8_t *buf = malloc(REVOKE_BYTES);
    if (!buf) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    struct timespec linger = {2, 500 * 1000 * 1000};
    if (rank == 0) {
        memset(buf, 0xa5, REVOKE_BYTES);
        ccl_status_t st = ccl_send(buf, REVOKE_BYTES, CCL_UINT8, 1, comm);
        EXPECT(&t, st == CCL_ERR_REMOTE, "a send to a rank that aborted returned %s", ccl_status_string(st));
        nanosleep(&linger, NULL);
        free(buf);
        return t.fails;
    }
    memset(buf, 0, REVOKE_BYTES);
    pthread_t th;
    struct revoke r = {comm, buf};
    EXPECT(&t, pthread_create(&th, NULL, abort_once_landing, &r) == 0, "cannot start the aborting thread");
    ccl_status_t st = ccl_recv(buf, REVOKE_BYTES, CCL_UINT8, 0, comm);
    pthread_join(th, NULL);
    size_t landed = 0;
    for (size_t i = 0; i < REVOKE_BYTES; i++) landed += buf[i] != 0;
    memset(buf, 0x5a, REVOKE_BYTES);
    EXPECT(&t, st == CCL_ERR_ABORTED, "the aborted receive returned %s", ccl_status_string(st));
    nanosleep(&linger, NULL);
    size_t changed = 0;
    for (size_t i = 0; i < REVOKE_BYTES; i++) changed += buf[i] != 0x5a;
    EXPECT(&t, changed == 0, "%zu bytes of the buffer changed after the receive had failed (%zu had landed before)",
           changed, landed);
    free(buf);
    return t.fails;
}

START_TEST(revoked_after_failure) {
    if (!need_device("revoked_after_failure")) return;
    struct harness_run run = {.nranks = 2, .transport = "ib", .host_per_rank = 1, .body = body_revoke,
                              .lenient_destroy = 1, .deadline_s = 120};
    util_run_clean(&run, 0, "2 ranks ib, a failed receive's buffer is not written after");
}
END_TEST

/* Rank 1 aborts while rank 0 waits on a receive from it: rank 0 gets
 * CCL_ERR_REMOTE naming rank 1 from the notice, not from its timeout. */
static int body_abort(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    int32_t v = 0;
    if (rank == 1) {
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL); /* rank 0 is inside its receive by now */
        ccl_status_t st = ccl_comm_abort(comm);
        EXPECT(&t, st == CCL_OK, "abort: %s", ccl_status_string(st));
        return t.fails;
    }
    double t0 = harness_now();
    ccl_status_t st = ccl_recv(&v, 1, CCL_INT32, 1, comm);
    double took = harness_now() - t0;
    const char *why = ccl_comm_last_error(comm);
    EXPECT(&t, st == CCL_ERR_REMOTE, "a receive from a rank that aborted returned %s", ccl_status_string(st));
    EXPECT(&t, strstr(why, "rank 1") && strstr(why, "abort"), "the error does not say rank 1 aborted: '%s'", why);
    EXPECT(&t, took < 30, "rank 0 learnt of the abort after %.1f s", took);
    return t.fails;
}

START_TEST(abort_is_told) {
    if (!need_device("abort_is_told")) return;
    struct harness_run run = {.nranks = 2, .transport = "ib", .host_per_rank = 1, .body = body_abort,
                              .lenient_destroy = 1, .deadline_s = 120};
    util_run_clean(&run, 0, "2 ranks ib, one aborts");
}
END_TEST

/* ---- a link cut ----
 * CCL_TEST_CABLE names the network interface under one of the devices (the
 * VM's v1, under rxe1; traffic between rxe0 and rxe1 crosses the veth pair,
 * not the loopback). Two ranks all-reduce 1 MiB in a loop across the two
 * devices. Each tells the parent once a call has completed, so the link is
 * cut mid-loop however slow the machine is: the parent takes the interface
 * down (cable_pulled) or makes it drop every packet it sends (link_silent),
 * and answers each rank with the moment it did. Both ranks must then get
 * CCL_ERR_REMOTE, naming a rank, within CABLE_ERR_S of the cut
 * (CCL_LINK_TIMEOUT is 5 s, CCL_TIMEOUT 60 s), and leave nothing behind. A
 * rank whose own port went down fails its next send at once, or, idle,
 * once the port has stayed down for CCL_LINK_TIMEOUT; a silent link is
 * found by the adapters' retries alone. The parent restores the link once
 * they are done. */

#define CABLE_LINK_TIMEOUT "5"
#define CABLE_ERR_S 12.0

static int body_cable(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    size_t n = (1u << 20) / sizeof(float);
    float *buf = calloc(n, sizeof(float));
    ccl_status_t st = buf ? CCL_OK : CCL_ERR_NO_MEMORY;
    if (st == CCL_OK) st = ccl_all_reduce(buf, buf, n, CCL_FLOAT32, CCL_SUM, comm);
    EXPECT(&t, st == CCL_OK, "the first all-reduce, cable in, returned %s: '%s'", ccl_status_string(st),
           ccl_comm_last_error(comm));
    /* The parent pulls the cable once every rank has said this. */
    EXPECT(&t, harness_child_send("looping") == 0, "cannot tell the parent");
    char msg[64] = "";
    double cut_at = 0;
    int calls = 0;
    while (st == CCL_OK) {
        /* A look at the channel costs at most 1 ms; a call, tens. */
        if (!cut_at && harness_child_recv(msg, sizeof msg, 1e-3) == 0) sscanf(msg, "cut %lf", &cut_at);
        if (cut_at && harness_now() - cut_at > CABLE_ERR_S + 10) break;
        st = ccl_all_reduce(buf, buf, n, CCL_FLOAT32, CCL_SUM, comm);
        calls++;
    }
    /* The call in flight when the cable went can fail before the word. */
    if (!cut_at && harness_child_recv(msg, sizeof msg, 10) == 0) sscanf(msg, "cut %lf", &cut_at);
    double after = cut_at ? harness_now() - cut_at : -1;
    const char *why = ccl_comm_last_error(comm);
    EXPECT(&t, cut_at > 0, "never heard that the link was cut (%d calls)", calls);
    EXPECT(&t, st == CCL_ERR_REMOTE, "%.1f s after the cut (%d calls), the last all-reduce returned %s: '%s'", after,
           calls, ccl_status_string(st), why);
    EXPECT(&t, after <= CABLE_ERR_S, "the error came %.1f s after the cut (at most %.0f s)", after,
           CABLE_ERR_S);
    EXPECT(&t, strstr(why, "rank "), "the error names no rank: '%s'", why);
    fprintf(stderr, "[cable] rank %d: %s %.1f s after the cut, after %d calls: %s\n", rank, ccl_status_string(st),
            after, calls, why);
    free(buf);
    return t.fails;
}

/* Two ways to cut a link: take the interface down (both adapters see
 * their port go), or leave it up and drop every packet it would send (a
 * switch that dies silently: only retries tell). */
struct cut {
    const char *what, *cut, *restore; /* commands, %s the interface */
    const char *ifname;
};
static const struct cut PULL = {"the cable pulled", "ip link set %s down", "ip link set %s up", NULL};
static const struct cut SILENT = {"every packet dropped", "tc qdisc add dev %s root netem loss 100%%",
                                  "tc qdisc del dev %s root", NULL};

static int link_do(const char *fmt, const char *ifname) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, fmt, ifname);
    return system(cmd);
}

static int child_running(pid_t pid) {
    char path[64], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t got = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    const char *end = memchr(stat, ')', got);
    return end && end[1] == ' ' && end[2] != 'Z';
}

static int cut_link(struct harness_run *run, void *arg) {
    const struct cut *cut = arg;
    int fails = 0;
    char msg[64];
    for (int r = 0; r < run->nranks; r++)
        if (harness_recv(run, r, msg, sizeof msg, run->deadline - 20) != 0 || strcmp(msg, "looping") != 0) {
            fprintf(stderr, "parent: rank %d never reached its loop; the link stays as it is\n", r);
            return 1;
        }
    if (link_do(cut->cut, cut->ifname) != 0) {
        fprintf(stderr, "parent: cannot cut %s (%s)\n", cut->ifname, cut->what);
        fails++;
    }
    double t0 = harness_now();
    for (int r = 0; r < run->nranks; r++) harness_send(run, r, "cut %.6f", t0);
    struct timespec settle = {2, 0}, tick = {0, 100 * 1000 * 1000};
    for (int alive = 1; alive && harness_now() - t0 < CABLE_ERR_S + 20;) {
        nanosleep(&tick, NULL);
        alive = 0;
        for (int r = 0; r < run->nranks; r++) alive |= child_running(run->pid[r]);
    }
    fprintf(stderr, "parent: the ranks were done %.1f s after %s (%s)\n", harness_now() - t0, cut->what, cut->ifname);
    if (link_do(cut->restore, cut->ifname) != 0) fails++;
    nanosleep(&settle, NULL); /* the device's port comes back */
    return fails;
}

static void run_cut(const char *test, struct cut cut) {
    if (!need_device(test)) return;
    cut.ifname = getenv("CCL_TEST_CABLE");
    if (!cut.ifname || !*cut.ifname) {
        fprintf(stderr, "SKIP %s: CCL_TEST_CABLE names no interface to cut\n", test);
        return;
    }
    struct harness_run run = {.nranks = 2, .transport = "ib", .host_per_rank = 1, .body = body_cable,
                              .parent = cut_link, .arg = &cut, .lenient_destroy = 1,
                              .env = "CCL_LINK_TIMEOUT=" CABLE_LINK_TIMEOUT, .deadline_s = 180};
    util_run_clean(&run, 0, "2 ranks ib, %s under rank 1's device", cut.what);
}

START_TEST(cable_pulled) {
    run_cut("cable_pulled", PULL);
}
END_TEST

START_TEST(link_silent) {
    run_cut("link_silent", SILENT);
}
END_TEST

/* One case per test, so that CK_RUN_CASE can pick one. */
static void add_case(Suite *s, const char *name, const TTest *test) {
    TCase *c = tcase_create(name);
    tcase_set_timeout(c, 280);
    tcase_add_test(c, test);
    suite_add_tcase(s, c);
}

/* ---- the device, when CCL_IB_HCA does not name one ---- */

static int port_active(struct ibv_device *dev) {
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx) return 0;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    int ok = 0;
    if (ibv_query_device(ctx, &da) == 0)
        for (int p = 1; p <= da.phys_port_cnt && !ok; p++)
            ok = ibv_query_port(ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE;
    ibv_close_device(ctx);
    return ok;
}

/* Each rank uses the active device the planner lists nearest (hwloc, for
 * the CPUs it may use: CCL_BIND=none keeps them what the test sees), verbs'
 * first among devices alike and when hwloc places none; the job runs on it. */
static int body_nearest(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    char near[128], err[CCL__ERR_BYTES], want[64] = "";
    EXPECT(&t, ccl__plan_rdma_order("", "", near, sizeof near, err, sizeof err) == CCL_OK, "%s", err);
    EXPECT(&t, strcmp(comm->rdma_near, near) == 0, "the communicator lists \"%s\", hwloc here \"%s\"",
           comm->rdma_near, near);
    struct ccl__ib_state *s = ccl__ib_state(comm);
    if (!s) {
        harness_fail(&t, __FILE__, __LINE__, "no ib state with CCL_TRANSPORT=ib");
        return t.fails;
    }
    int n = 0, best = 1 << 30;
    struct ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n; i++) {
        int at = ccl__list_place(near, ibv_get_device_name(list[i]));
        if (at < best && port_active(list[i])) best = at, snprintf(want, sizeof want, "%s", ibv_get_device_name(list[i]));
    }
    if (list) ibv_free_device_list(list);
    fprintf(stderr, "rank %d: hwloc lists \"%s\"; the transport uses %s\n", rank, near, s->dev);
    EXPECT(&t, strcmp(s->dev, want) == 0, "the transport uses %s, not %s", s->dev, want);
    float x[257], y[257];
    for (int i = 0; i < 257; i++) x[i] = (float)(rank + i);
    if (EXPECT_OK(&t, ccl_all_reduce(x, y, 257, CCL_FLOAT32, CCL_SUM, comm)) == CCL_OK)
        for (int i = 0; i < 257; i++)
            EXPECT(&t, y[i] == (float)(nranks * i + nranks * (nranks - 1) / 2), "y[%d] = %g", i, y[i]);
    return t.fails;
}

START_TEST(nearest_device) {
    if (!need_device("nearest_device")) return;
    struct harness_run run = {.nranks = 2, .transport = "ib", .host_per_rank = 1, .body = body_nearest,
                              .env = "CCL_IB_HCA= CCL_BIND=none", .deadline_s = 120};
    util_run_clean(&run, 0, "2 ranks ib, no CCL_IB_HCA");
}
END_TEST

/* The VM's adapters are soft-RoCE: the transport knows them for software
 * (sysfs keeps them in its virtual tree), and the planner counts their
 * work as a CPU's worth beside each rank's own: where that leaves too few
 * CPUs, the machine is crowded, so waits do not let their yield grow past
 * its first 200 us, and spin only while the adapter has no work of theirs
 * (unless CCL_SPIN_US says how long: `arg`, -1 when unset). With more
 * ranks than CPUs they would not spin at all. Either way a call still
 * runs exact. */
static int body_software_adapter(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    int spin_us = *(const int *)arg;
    struct harness_tally t = {rank, 0};
    struct ccl__ib_state *s = ccl__ib_state(comm);
    int peer = 1 - rank;
    EXPECT(&t, s && s->software, "the transport takes %s for hardware", s ? s->dev : "(no device)");
    EXPECT(&t, comm->conns[peer] && comm->conns[peer]->cpu_adapter, "the link to rank %d is not marked as "
           "running on this machine's CPUs", peer);
    int crowded = 2 * comm->machine_ranks > comm->machine_cpus;
    int by_ranks = comm->machine_ranks > comm->machine_cpus;
    double want = spin_us >= 0 ? spin_us : by_ranks ? 0 : 50;
    int want_unless = spin_us < 0 && crowded && !by_ranks;
    EXPECT(&t, fabs(comm->spin_s * 1e6 - want) < 0.5,
           "%d ranks and their software adapters on %d CPUs: waits spin %.0f us, expected %.0f", comm->machine_ranks,
           comm->machine_cpus, comm->spin_s * 1e6, want);
    EXPECT(&t, comm->spin_unless_in_flight == want_unless,
           "%d ranks and their software adapters on %d CPUs: waits %s while the adapter works for them, expected "
           "the opposite", comm->machine_ranks, comm->machine_cpus,
           comm->spin_unless_in_flight ? "skip the spin" : "spin");
    if (crowded || spin_us >= 0)
        EXPECT(&t, comm->yield_max_s == comm->yield_base_s, "waits may yield up to %.0f us before they sleep, not "
               "%.0f", comm->yield_max_s * 1e6, comm->yield_base_s * 1e6);
    int32_t x[1001], y[1001];
    for (int i = 0; i < 1001; i++) x[i] = rank * 7 + i;
    if (EXPECT_OK(&t, ccl_all_reduce(x, y, 1001, CCL_INT32, CCL_SUM, comm)) == CCL_OK)
        for (int i = 0; i < 1001; i++)
            EXPECT(&t, y[i] == nranks * i + 7 * nranks * (nranks - 1) / 2, "y[%d] = %d", i, y[i]);
    return t.fails;
}

static void run_software_adapter(const char *test, int spin_us, const char *env) {
    if (!need_device(test)) return;
    struct harness_run run = {.nranks = 2, .transport = "ib", .host_per_rank = 1, .body = body_software_adapter,
                              .arg = &spin_us, .env = env, .deadline_s = 120};
    util_run_clean(&run, 0, "%s", env);
}

START_TEST(software_adapter) { run_software_adapter("software_adapter", -1, "CCL_SPIN_US="); }
END_TEST

START_TEST(software_adapter_spin_given) { run_software_adapter("software_adapter_spin_given", 30, "CCL_SPIN_US=30"); }
END_TEST

/* ---- pairs linked on first use ---- */

#define FIRST_USE_RANKS 7
#define FIRST_USE_COUNT 1001            /* floats per peer in the all-to-all: divides nothing */
#define FIRST_USE_SEND_BYTES (1u << 20) /* above CCL_IB_ZCOPY_BYTES: the first use is a zero-copy offer */

/* Bit p: this rank's connection to p is not linked yet. */
static int32_t unlinked_mask(ccl_comm_t *comm, int rank, int nranks, struct harness_tally *t) {
    struct ccl__ib_state *s = ccl__ib_state(comm);
    int32_t mask = 0;
    for (int p = 0; p < nranks; p++) {
        if (p == rank) continue;
        struct ccl__ib_conn *c = s ? s->conns[p] : NULL;
        EXPECT(t, c != NULL, "no ib connection to rank %d", p);
        if (c && c->link != CCL__IB_LINKED) mask |= 1 << p;
    }
    return mask;
}

/* 7 ranks, a host each, over ib. CCL_CONNECT=lazy (the default): init
 * links the pairs the ring and the trees use and leaves some apart, the
 * same pairs on both sides; a large send between two ranks init left
 * apart (a zero-copy offer, whose read depth is the pair's) links their
 * pair and arrives exact; an all-to-all, which every pair takes part in,
 * links the rest, exact; an all-reduce over the fully linked pairs after.
 * CCL_CONNECT=all: every pair linked at init. */
static int body_first_use(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const int lazy = *(const int *)arg;
    struct harness_tally t = {rank, 0};
    int32_t masks[FIRST_USE_RANKS], mine = unlinked_mask(comm, rank, nranks, &t);
    EXPECT_OK(&t, ccl_all_gather(&mine, masks, 1, CCL_INT32, comm));
    int a = -1, b = -1, apart = 0;
    for (int i = 0; i < nranks; i++)
        for (int j = 0; j < nranks; j++) {
            EXPECT(&t, !(masks[i] >> j & 1) == !(masks[j] >> i & 1),
                   "rank %d has its pair with rank %d %s, rank %d not", i, j,
                   masks[i] >> j & 1 ? "apart" : "linked", j);
            if (i < j && masks[i] >> j & 1) {
                apart++;
                if (a < 0) a = i, b = j;
            }
        }
    if (!lazy) EXPECT(&t, apart == 0, "CCL_CONNECT=all left %d pairs unlinked at init", apart);
    else EXPECT(&t, apart > 0 && apart < nranks * (nranks - 1) / 2,
                "init left %d of %d pairs for their first use", apart, nranks * (nranks - 1) / 2);
    if (rank == 0)
        fprintf(stderr, "[ib] CCL_CONNECT=%s: init left %d of %d pairs for their first use (the first: %d-%d)\n",
                lazy ? "lazy" : "all", apart, nranks * (nranks - 1) / 2, a, b);
    if (a >= 0 && (rank == a || rank == b)) {
        uint8_t *buf = malloc(FIRST_USE_SEND_BYTES);
        if (rank == a) fill(buf, FIRST_USE_SEND_BYTES, a, 1);
        ccl_status_t st = rank == a ? ccl_send(buf, FIRST_USE_SEND_BYTES, CCL_UINT8, b, comm)
                                    : ccl_recv(buf, FIRST_USE_SEND_BYTES, CCL_UINT8, a, comm);
        EXPECT(&t, st == CCL_OK, "the first send between ranks %d and %d: %s: %s", a, b, ccl_status_string(st),
               ccl_comm_last_error(comm));
        if (rank == b && st == CCL_OK)
            EXPECT(&t, first_wrong(buf, FIRST_USE_SEND_BYTES, a, 1) < 0, "rank %d's first send: wrong bytes", a);
        struct ccl__ib_conn *c = ccl__ib_state(comm)->conns[rank == a ? b : a];
        EXPECT(&t, c->link == CCL__IB_LINKED, "the pair %d-%d is not linked after its first send", a, b);
        free(buf);
    }
    size_t n = (size_t)nranks * FIRST_USE_COUNT;
    float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float)), *sum = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) in[i] = (float)(rank * 100000 + (int)i);
    EXPECT_OK(&t, ccl_all_to_all(in, out, FIRST_USE_COUNT, CCL_FLOAT32, comm));
    for (int p = 0; p < nranks; p++)
        for (size_t i = 0; i < FIRST_USE_COUNT; i++) {
            float want = (float)(p * 100000 + (int)((size_t)rank * FIRST_USE_COUNT + i));
            if (out[(size_t)p * FIRST_USE_COUNT + i] != want) {
                EXPECT(&t, 0, "all-to-all: element %zu from rank %d is %g, expected %g", i, p,
                       (double)out[(size_t)p * FIRST_USE_COUNT + i], (double)want);
                p = nranks;
                break;
            }
        }
    EXPECT(&t, unlinked_mask(comm, rank, nranks, &t) == 0, "pairs still unlinked after an all-to-all");
    EXPECT_OK(&t, ccl_all_reduce(in, sum, n, CCL_FLOAT32, CCL_SUM, comm));
    for (size_t i = 0; i < n; i++) {
        /* integers below 2^24 summed over 7 ranks: exact in float32 */
        double want = 100000.0 * nranks * (nranks - 1) / 2 + (double)nranks * (double)i;
        if (sum[i] != (float)want) {
            EXPECT(&t, 0, "all-reduce: element %zu is %g, expected %g", i, (double)sum[i], want);
            break;
        }
    }
    free(in), free(out), free(sum);
    return t.fails;
}

START_TEST(linked_on_first_use) {
    static const int lazy[2] = {1, 0};
    if (!need_device("linked_on_first_use")) return;
    struct harness_run run = {.nranks = FIRST_USE_RANKS, .transport = "ib", .host_per_rank = 1,
                              .body = body_first_use, .arg = (void *)&lazy[_i],
                              .env = lazy[_i] ? "CCL_CONNECT=lazy" : "CCL_CONNECT=all", .deadline_s = 200};
    util_run_clean(&run, 0, "%d ranks ib, %s", FIRST_USE_RANKS, run.env);
}
END_TEST

static Suite *ib_suite(void) {
    Suite *s = suite_create("transport_ib");
    add_case(s, "forced_without_device", forced_without_device);
    add_case(s, "steady_many_calls", steady_many_calls);
    add_case(s, "credits_both_ways", credits_both_ways);
    add_case(s, "slot_lanes", slot_lanes);
    add_case(s, "slot_lanes_disagree", slot_lanes_disagree);
    add_case(s, "nearest_device", nearest_device);
    add_case(s, "software_adapter", software_adapter);
    add_case(s, "software_adapter_spin_given", software_adapter_spin_given);
    add_case(s, "zero_copy_exact", zero_copy_exact);
    add_case(s, "zero_copy_ring", zero_copy_ring);
    add_case(s, "zero_copy_ring_traced", zero_copy_ring_traced);
    add_case(s, "register_reuse", register_reuse);
    add_case(s, "zero_copy_size_mismatch", zero_copy_size_mismatch);
    add_case(s, "revoked_after_failure", revoked_after_failure);
    add_case(s, "abort_is_told", abort_is_told);
    add_case(s, "cable_pulled", cable_pulled);
    add_case(s, "link_silent", link_silent);
    util_add_loop_case(s, "linked_on_first_use", linked_on_first_use, 2, 240);
    return s;
}

int main(void) { return harness_main(ib_suite()); }
