/* ctest: TIMEOUT 600 */
/*
 * Point-to-point and groups, on the short configuration list: blocking
 * send/recv that fits in the transport's buffering (every dtype, count 0
 * too), a cyclic pipeline of large messages in a group (would deadlock if
 * the group ran its calls one after another), many sends and receives to
 * every peer (self included) in one group, matched in issue order per pair,
 * thousands of small messages to one peer and to self in one group,
 * a group mixing a collective with p2p, nested groups, and receives from
 * any source (ccl_recv_any).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"
#include "util.h"

/* A payload per (sender, receiver, message number). */
static uint64_t msg_seed(int src, int dst, int k) {
    return ref_mix(0x9292, (uint64_t)(src * 1000 + dst), (uint64_t)k);
}

/* buf must hold the payload of message (src, dst, k) of `bytes` bytes. */
static void expect_payload(struct harness_tally *t, const char *what, const uint8_t *buf, size_t bytes, int src,
                           int dst, int k, uint8_t *scratch) {
    ref_bytes(msg_seed(src, dst, k), 0, 0, bytes, scratch);
    size_t i = 0;
    while (i < bytes && buf[i] == scratch[i]) i++;
    EXPECT(t, i == bytes, "%s: message %d from rank %d (%zu bytes) differs at byte %zu: 0x%02x, expected 0x%02x",
           what, k, src, bytes, i, i < bytes ? buf[i] : 0, i < bytes ? scratch[i] : 0);
}

/* ---- blocking, small ---- */

#define SMALL_COUNT 37

static int body_blocking(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    uint8_t out[SMALL_COUNT * 8], in[SMALL_COUNT * 8 + 16], scratch[SMALL_COUNT * 8];
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        ccl_dtype_t dt = (ccl_dtype_t)d;
        size_t bytes = SMALL_COUNT * ccl_dtype_size(dt);
        char what[96];
        /* Star: rank 0 sends to everyone, then everyone answers. */
        snprintf(what, sizeof what, "blocking star %s", ccl_dtype_name(dt));
        if (rank == 0) {
            for (int p = 1; p < nranks; p++) {
                ref_bytes(msg_seed(0, p, d), 0, 0, bytes, out);
                if (EXPECT_OK(&t, ccl_send(out, SMALL_COUNT, dt, p, comm)) != CCL_OK) return t.fails;
            }
            for (int p = 1; p < nranks; p++) {
                memset(in, 0xcd, sizeof in);
                if (EXPECT_OK(&t, ccl_recv(in, SMALL_COUNT, dt, p, comm)) != CCL_OK) return t.fails;
                expect_payload(&t, what, in, bytes, p, 0, d, scratch);
                EXPECT(&t, in[bytes] == 0xcd, "%s: recv wrote past its count", what);
            }
        } else {
            memset(in, 0xcd, sizeof in);
            if (EXPECT_OK(&t, ccl_recv(in, SMALL_COUNT, dt, 0, comm)) != CCL_OK) return t.fails;
            expect_payload(&t, what, in, bytes, 0, rank, d, scratch);
            ref_bytes(msg_seed(rank, 0, d), 0, 0, bytes, out);
            if (EXPECT_OK(&t, ccl_send(out, SMALL_COUNT, dt, 0, comm)) != CCL_OK) return t.fails;
        }
        /* Everyone sends before receiving: only buffering makes this work. */
        snprintf(what, sizeof what, "blocking send-then-recv ring %s", ccl_dtype_name(dt));
        ref_bytes(msg_seed(rank, next, 100 + d), 0, 0, bytes, out);
        if (EXPECT_OK(&t, ccl_send(out, SMALL_COUNT, dt, next, comm)) != CCL_OK) return t.fails;
        memset(in, 0xcd, sizeof in);
        if (EXPECT_OK(&t, ccl_recv(in, SMALL_COUNT, dt, prev, comm)) != CCL_OK) return t.fails;
        expect_payload(&t, what, in, bytes, prev, rank, 100 + d, scratch);
    }
    /* Count 0: completes, touches nothing. */
    memset(in, 0xcd, sizeof in);
    EXPECT_OK(&t, ccl_send(out, 0, CCL_FLOAT32, next, comm));
    EXPECT_OK(&t, ccl_recv(in, 0, CCL_FLOAT32, prev, comm));
    EXPECT(&t, in[0] == 0xcd, "recv of count 0 wrote to its buffer");
    EXPECT_OK(&t, ccl_send(NULL, 0, CCL_INT8, next, comm));
    EXPECT_OK(&t, ccl_recv(NULL, 0, CCL_INT8, prev, comm));
    /* Still in step: a collective after all of it. */
    int one = 1, sum = 0;
    EXPECT_OK(&t, ccl_all_reduce(&one, &sum, 1, CCL_INT32, CCL_SUM, comm));
    EXPECT(&t, sum == nranks, "all_reduce after p2p gave %d", sum);
    if (rank == 0) fprintf(stderr, "[p2p] blocking, %s: done\n", ctx->cfg->name);
    return t.fails;
}

START_TEST(blocking_small) { matrix_run_short(_i, body_blocking, "blocking p2p", NULL); }
END_TEST

/* ---- cyclic pipeline of large messages ---- */

#define PIPE_BYTES ((size_t)16 << 20 | 12)
#define PIPE_ROUNDS 3

static int body_pipeline(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    uint8_t *out = malloc(PIPE_BYTES), *in = malloc(PIPE_BYTES), *scratch = malloc(PIPE_BYTES);
    if (!out || !in || !scratch) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (int round = 0; round < PIPE_ROUNDS; round++) {
        /* Round 1 is a chain (the last stage sends nothing, the first
         * receives nothing); the others close the cycle. */
        int cyclic = round != 1;
        int sends = cyclic || rank < nranks - 1, recvs = cyclic || rank > 0;
        ref_bytes(msg_seed(rank, next, round), 0, 0, PIPE_BYTES, out);
        memset(in, 0xcd, PIPE_BYTES);
        if (EXPECT_OK(&t, ccl_group_start()) != CCL_OK) goto out;
        if (sends) EXPECT_OK(&t, ccl_send(out, PIPE_BYTES / 4, CCL_FLOAT32, next, comm));
        if (recvs) EXPECT_OK(&t, ccl_recv(in, PIPE_BYTES / 4, CCL_FLOAT32, prev, comm));
        if (EXPECT_OK(&t, ccl_group_end()) != CCL_OK) goto out;
        if (recvs) expect_payload(&t, cyclic ? "cyclic pipeline" : "chain pipeline", in, PIPE_BYTES / 4 * 4, prev,
                                  rank, round, scratch);
    }
out:
    free(out);
    free(in);
    free(scratch);
    return t.fails;
}

START_TEST(pipeline_large) { matrix_run_short(_i, body_pipeline, "pipeline", NULL); }
END_TEST

/* A cycle whose sends all fit in the staging slots: every send is done
 * (committed) long before its bytes leave, and every rank then waits only
 * on its receive. The staged bytes must keep moving while a rank waits on
 * something else, or the cycle deadlocks once the socket buffers fill. */
#define STAGED_BYTES ((size_t)64 << 20)
#define STAGED_ROUNDS 4

static int body_staged_cycle(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    uint8_t *out = malloc(STAGED_BYTES), *in = malloc(STAGED_BYTES), *scratch = malloc(STAGED_BYTES);
    if (!out || !in || !scratch) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (int round = 0; round < STAGED_ROUNDS; round++) {
        ref_bytes(msg_seed(rank, next, round), 0, 0, STAGED_BYTES, out);
        memset(in, 0xcd, STAGED_BYTES);
        /* Start together, so that every rank stages its whole send before
         * its successor starts reading. */
        if (EXPECT_OK(&t, ccl_barrier(comm)) != CCL_OK) goto out;
        if (EXPECT_OK(&t, ccl_group_start()) != CCL_OK) goto out;
        EXPECT_OK(&t, ccl_send(out, STAGED_BYTES, CCL_UINT8, next, comm));
        EXPECT_OK(&t, ccl_recv(in, STAGED_BYTES, CCL_UINT8, prev, comm));
        if (EXPECT_OK(&t, ccl_group_end()) != CCL_OK) goto out;
        expect_payload(&t, "staged cycle", in, STAGED_BYTES, prev, rank, round, scratch);
    }
out:
    free(out);
    free(in);
    free(scratch);
    return t.fails;
}

START_TEST(staged_cycle_tcp) {
    struct harness_run run = {
        .nranks = 3,
        .body = body_staged_cycle,
        .transport = "tcp",
        .ccl_timeout = "20",
        .deadline_s = 120,
        .env = "CCL_SLOTS=64 CCL_TCP_SLOT_BYTES=1048576",
    };
    util_run_clean(&run, 0, "a cycle of fully staged sends on 3 ranks tcp");
}
END_TEST

/* ---- many messages to every peer in one group ---- */

#define MSGS_PER_PEER 4
static const size_t msg_counts[MSGS_PER_PEER] = {0, 1000, 3, 300007};

static int body_many(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    size_t slot = msg_counts[3] * 8 + 64; /* room to see an overrun */
    size_t all = slot * MSGS_PER_PEER * (size_t)nranks;
    uint8_t *out = malloc(all), *in = malloc(all);
    uint8_t *scratch = malloc(slot);
    if (!out || !in || !scratch) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (int round = 0; round < 2; round++) {
        memset(in, 0xcd, all);
        if (EXPECT_OK(&t, ccl_group_start()) != CCL_OK) goto out;
        /* Sends in peer order, receives in the reverse peer order: only the
         * order per pair has to match. dtypes rotate with the message. */
        for (int p = 0; p < nranks; p++)
            for (int k = 0; k < MSGS_PER_PEER; k++) {
                ccl_dtype_t dt = (ccl_dtype_t)((p + k + round) % CCL_NUM_DTYPES);
                uint8_t *buf = out + ((size_t)p * MSGS_PER_PEER + (size_t)k) * slot;
                ref_bytes(msg_seed(rank, p, k + 10 * round), 0, 0, msg_counts[k] * ccl_dtype_size(dt), buf);
                EXPECT_OK(&t, ccl_send(buf, msg_counts[k], dt, p, comm));
            }
        for (int p = nranks - 1; p >= 0; p--)
            for (int k = 0; k < MSGS_PER_PEER; k++) {
                ccl_dtype_t dt = (ccl_dtype_t)((rank + k + round) % CCL_NUM_DTYPES);
                EXPECT_OK(&t, ccl_recv(in + ((size_t)p * MSGS_PER_PEER + (size_t)k) * slot, msg_counts[k], dt, p,
                                       comm));
            }
        if (EXPECT_OK(&t, ccl_group_end()) != CCL_OK) goto out;
        for (int p = 0; p < nranks; p++)
            for (int k = 0; k < MSGS_PER_PEER; k++) {
                ccl_dtype_t dt = (ccl_dtype_t)((rank + k + round) % CCL_NUM_DTYPES);
                size_t bytes = msg_counts[k] * ccl_dtype_size(dt);
                const uint8_t *buf = in + ((size_t)p * MSGS_PER_PEER + (size_t)k) * slot;
                char what[64];
                snprintf(what, sizeof what, "grouped exchange %s", ccl_dtype_name(dt));
                expect_payload(&t, what, buf, bytes, p, rank, k + 10 * round, scratch);
                EXPECT(&t, buf[bytes] == 0xcd, "%s: message %d from %d overran its count", what, k, p);
            }
    }
out:
    free(out);
    free(in);
    free(scratch);
    return t.fails;
}

START_TEST(many_in_one_group) { matrix_run_short(_i, body_many, "grouped exchange", NULL); }
END_TEST

/* ---- thousands of small messages to one peer (and to self) in one group ----
 * Per (peer, direction) the messages go strictly in issue order; the cost
 * of finding the next one must not grow with the group (it once grew with
 * its square per poll: 8000 pairs took about a minute, past the deadline). */

#define PAIRS 8000

static int body_many_small(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int peer = (rank + 1) % nranks;
    uint32_t *out = malloc(PAIRS * 4), *in = malloc(PAIRS * 4), *self_in = malloc(PAIRS * 4);
    if (!out || !in || !self_in) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < PAIRS; k++) out[k] = (uint32_t)rank * 1000003u + k * 7u;
    memset(in, 0xcd, PAIRS * 4);
    memset(self_in, 0xcd, PAIRS * 4);
    double t0 = harness_now();
    if (EXPECT_OK(&t, ccl_group_start()) != CCL_OK) goto out;
    for (int k = 0; k < PAIRS; k++) {
        EXPECT_OK(&t, ccl_send(&out[k], 1, CCL_UINT32, peer, comm));
        EXPECT_OK(&t, ccl_recv(&in[k], 1, CCL_UINT32, peer, comm));
        EXPECT_OK(&t, ccl_send(&out[k], 1, CCL_UINT32, rank, comm));
        EXPECT_OK(&t, ccl_recv(&self_in[k], 1, CCL_UINT32, rank, comm));
    }
    if (EXPECT_OK(&t, ccl_group_end()) != CCL_OK) goto out;
    if (rank == 0) fprintf(stderr, "[p2p] %d ranks: a group of %d sends and receives to a peer and to self: %.3f s\n",
                           nranks, PAIRS, harness_now() - t0);
    size_t bad = 0, bad_self = 0;
    for (uint32_t k = 0; k < PAIRS; k++) {
        bad += in[k] != (uint32_t)peer * 1000003u + k * 7u;
        bad_self += self_in[k] != out[k];
    }
    EXPECT(&t, bad == 0, "%zu of %d messages from rank %d wrong or out of order", bad, PAIRS, peer);
    EXPECT(&t, bad_self == 0, "%zu of %d messages to self wrong or out of order", bad_self, PAIRS);
out:
    free(out);
    free(in);
    free(self_in);
    return t.fails;
}

static const char *const many_small_transports[] = {"shm", "tcp"};

START_TEST(many_small_to_one_peer) {
    struct harness_run run = {.nranks = 2, .transport = many_small_transports[_i], .body = body_many_small,
                              .deadline_s = 30};
    HARNESS_RUN_OK(&run);
}
END_TEST

/* ---- a collective and p2p in one group; nested groups ---- */

#define MIX_COUNT 100003

static int body_mixed(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    int32_t *vals = malloc(MIX_COUNT * 4), *sum = malloc(MIX_COUNT * 4);
    uint8_t *out = malloc(MIX_COUNT * 4), *in = malloc(MIX_COUNT * 4), *scratch = malloc(MIX_COUNT * 4);
    if (!vals || !sum || !out || !in || !scratch) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < MIX_COUNT; i++) vals[i] = (int32_t)(i % 1000) * (rank + 1);
    ref_bytes(msg_seed(rank, next, 77), 0, 0, MIX_COUNT * 4, out);
    memset(in, 0xcd, MIX_COUNT * 4);
    if (EXPECT_OK(&t, ccl_group_start()) != CCL_OK) goto out;
    EXPECT_OK(&t, ccl_send(out, MIX_COUNT, CCL_UINT32, next, comm));
    EXPECT_OK(&t, ccl_all_reduce(vals, sum, MIX_COUNT, CCL_INT32, CCL_SUM, comm));
    EXPECT_OK(&t, ccl_recv(in, MIX_COUNT, CCL_UINT32, prev, comm));
    if (EXPECT_OK(&t, ccl_group_end()) != CCL_OK) goto out;
    int32_t factor = nranks * (nranks + 1) / 2;
    size_t bad = 0;
    for (size_t i = 0; i < MIX_COUNT; i++) bad += sum[i] != (int32_t)(i % 1000) * factor;
    EXPECT(&t, bad == 0, "all_reduce inside a group with p2p: %zu elements wrong", bad);
    expect_payload(&t, "p2p inside a group with all_reduce", in, MIX_COUNT * 4, prev, rank, 77, scratch);

    /* Nested: the inner end runs nothing, the outer one runs both. */
    ref_bytes(msg_seed(rank, next, 78), 0, 0, MIX_COUNT * 4, out);
    memset(in, 0xcd, MIX_COUNT * 4);
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_send(out, MIX_COUNT, CCL_UINT32, next, comm));
    EXPECT_OK(&t, ccl_group_end());
    EXPECT_OK(&t, ccl_recv(in, MIX_COUNT, CCL_UINT32, prev, comm));
    if (EXPECT_OK(&t, ccl_group_end()) != CCL_OK) goto out;
    expect_payload(&t, "nested groups", in, MIX_COUNT * 4, prev, rank, 78, scratch);

    /* An empty group is fine. */
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_group_end());
out:
    free(vals);
    free(sum);
    free(out);
    free(in);
    free(scratch);
    return t.fails;
}

START_TEST(collective_and_p2p_group) { matrix_run_short(_i, body_mixed, "mixed group", NULL); }
END_TEST

/* ---- receives from any source ---- */

/* Every other rank sends rank 0 two messages per round; rank 0 takes them
 * with ccl_recv_any: each sender's exactly twice, in the order sent, each
 * payload its sender's. A round per dtype (count 37), then one of
 * 2 Mi float32 (large: a zero-copy offer where the transport
 * has one), one through the async twin, and one where rank 0 first names
 * the last rank (recv_any then never picks it). A barrier ends each
 * round, so no round's message meets another round's receive. */
#define ANY_LARGE ((size_t)2 << 20)

static int any_round(struct harness_tally *t, ccl_comm_t *comm, int rank, int nranks, int round, ccl_dtype_t dt,
                     size_t count, int async, int named_last, uint8_t *buf, uint8_t *scratch) {
    size_t bytes = count * ccl_dtype_size(dt);
    char what[96];
    snprintf(what, sizeof what, "recv_any round %d (%zu x %s%s%s)", round, count, ccl_dtype_name(dt),
             async ? ", async" : "", named_last ? ", last rank named" : "");
    if (rank != 0) {
        for (int k = 0; k < 2; k++) {
            ref_bytes(msg_seed(rank, 0, 1000 * round + k), 0, 0, bytes, buf);
            if (EXPECT_OK(t, ccl_send(buf, count, dt, 0, comm)) != CCL_OK) return -1;
        }
    } else {
        int seen[HARNESS_MAX_RANKS] = {0};
        for (int m = 0; m < 2 * (nranks - 1); m++) {
            int src = -1;
            memset(buf, 0xcd, bytes + 1);
            ccl_status_t st;
            if (named_last && m < 2) {
                src = nranks - 1;
                st = ccl_recv(buf, count, dt, src, comm);
            } else if (async) {
                ccl_request_t *req = NULL;
                st = ccl_recv_any_async(buf, count, dt, comm, &src, &req);
                if (st == CCL_OK) st = ccl_wait(req);
            } else {
                st = ccl_recv_any(buf, count, dt, comm, &src);
            }
            if (EXPECT_OK(t, st) != CCL_OK) return -1;
            EXPECT(t, src > 0 && src < nranks, "%s: source %d is no sender", what, src);
            if (src <= 0 || src >= nranks) return -1;
            EXPECT(t, !(named_last && m >= 2 && src == nranks - 1), "%s: recv_any took a message the named "
                   "receives had taken", what);
            EXPECT(t, seen[src] < 2, "%s: a third message from rank %d", what, src);
            expect_payload(t, what, buf, bytes, src, 0, 1000 * round + seen[src]++, scratch);
            EXPECT(t, buf[bytes] == 0xcd, "%s: wrote past its count", what);
        }
        for (int p = 1; p < nranks; p++) EXPECT(t, seen[p] == 2, "%s: %d messages from rank %d", what, seen[p], p);
    }
    return EXPECT_OK(t, ccl_barrier(comm)) == CCL_OK ? 0 : -1;
}

static int body_any_source(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    uint8_t *buf = malloc(ANY_LARGE * 4 + 1), *scratch = malloc(ANY_LARGE * 4);
    int round = 0, src = -7, x = 0;
    if (!buf || !scratch) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (int d = 0; d < CCL_NUM_DTYPES; d++)
        if (any_round(&t, comm, rank, nranks, round++, (ccl_dtype_t)d, SMALL_COUNT, 0, 0, buf, scratch)) goto out;
    if (any_round(&t, comm, rank, nranks, round++, CCL_FLOAT32, ANY_LARGE, 0, 0, buf, scratch)) goto out;
    if (any_round(&t, comm, rank, nranks, round++, CCL_UINT64, SMALL_COUNT, 1, 0, buf, scratch)) goto out;
    if (any_round(&t, comm, rank, nranks, round++, CCL_INT32, SMALL_COUNT, 0, 1, buf, scratch)) goto out;
    /* Refused, on every rank, changing nothing. */
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_recv_any(&x, 1, CCL_INT32, comm, NULL));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_recv_any(&x, 0, CCL_INT32, comm, &src));
    EXPECT(&t, strstr(ccl_comm_last_error(comm), "count 0") != NULL, "recv_any of 0: %s", ccl_comm_last_error(comm));
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_recv_any(&x, 1, CCL_INT32, comm, &src));
    EXPECT(&t, strstr(ccl_comm_last_error(comm), "not inside a group") != NULL, "recv_any in a group: %s",
           ccl_comm_last_error(comm));
    EXPECT_OK(&t, ccl_group_end());
    EXPECT(&t, src == -7, "a refused recv_any wrote its source");
    EXPECT_OK(&t, ccl_barrier(comm));
    if (rank == 0) fprintf(stderr, "[p2p] recv_any, %s: %d rounds\n", ctx->cfg->name, round);
out:
    free(buf);
    free(scratch);
    return t.fails;
}

START_TEST(any_source) { matrix_run_short(_i, body_any_source, "recv_any", NULL); }
END_TEST

static int body_any_alone(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    (void)arg;
    struct harness_tally t = {rank, 0};
    int x = 0, src = -7;
    EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_recv_any(&x, 1, CCL_INT32, comm, &src));
    EXPECT(&t, strstr(ccl_comm_last_error(comm), "only rank") != NULL, "one rank: %s", ccl_comm_last_error(comm));
    EXPECT(&t, src == -7, "a refused recv_any wrote its source");
    return t.fails;
}

START_TEST(any_source_alone) {
    struct harness_run run = {.nranks = 1, .body = body_any_alone, .deadline_s = 60};
    HARNESS_RUN_OK(&run);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("p2p_group");
    matrix_add_short_loop(s, "blocking_small", blocking_small, 300);
    matrix_add_short_loop(s, "pipeline_large", pipeline_large, 300);
    matrix_add_short_loop(s, "many_in_one_group", many_in_one_group, 300);
    matrix_add_short_loop(s, "collective_and_p2p_group", collective_and_p2p_group, 300);
    matrix_add_short_loop(s, "any_source", any_source, 300);
    util_add_loop_case(s, "any_source_alone", any_source_alone, 1, 60);
    util_add_loop_case(s, "staged_cycle_tcp", staged_cycle_tcp, 1, 150);
    util_add_loop_case(s, "many_small_to_one_peer", many_small_to_one_peer, 2, 60);
    return s;
}

int main(void) { return harness_main(suite()); }
