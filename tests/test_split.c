/* ctest: TIMEOUT 600 */
/*
 * ccl_comm_split, on the short configuration list plus 8 ranks on shm:
 * odd and even halves running all_reduce at the same time, then the parent
 * again; ordering by key then parent rank (reversed keys, tied keys);
 * CCL_SPLIT_NOCOLOR giving NULL; a split of a split. ccl_comm_create_group
 * on the same configurations: two disjoint groups made and used at once,
 * one listed in reverse; groups of one; every refusal; members given
 * different lists, all told so, the parent usable after each.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"
#include "util.h"

#define SPLIT_COUNT 200003
#define HALF_ROUNDS 20

static const struct matrix_config split_configs[] = {
    {4, "shm", 0, "4 ranks shm", NULL},
    {3, "tcp", 0, "3 ranks tcp", NULL},
    {4, "tcp", 1, "4 ranks tcp, one host each", NULL},
    {5, NULL, 3, "5 ranks auto, hosts of 3 and 2 ranks", NULL},
    {8, "shm", 0, "8 ranks shm", NULL},
};
#define SPLIT_CONFIGS ((int)(sizeof split_configs / sizeof split_configs[0]))

/* rank and size of comm, checked against what the split promised. */
static void expect_shape(struct harness_tally *t, const char *what, ccl_comm_t *comm, int want_rank, int want_size) {
    int r = -1, n = -1;
    EXPECT_OK(t, ccl_comm_rank(comm, &r));
    EXPECT_OK(t, ccl_comm_size(comm, &n));
    EXPECT(t, r == want_rank && n == want_size, "%s: rank %d of %d, expected %d of %d", what, r, n, want_rank,
           want_size);
}

/* all_reduce SUM of (parent rank + 1) * (i % 101) over the members: the
 * expected sum of their parent ranks + 1 is member_sum. */
static void expect_allreduce(struct harness_tally *t, const char *what, ccl_comm_t *comm, int parent_rank,
                             int member_sum, int32_t *in, int32_t *out) {
    for (size_t i = 0; i < SPLIT_COUNT; i++) in[i] = (parent_rank + 1) * (int32_t)(i % 101);
    ccl_status_t st = ccl_all_reduce(in, out, SPLIT_COUNT, CCL_INT32, CCL_SUM, comm);
    if (st != CCL_OK) {
        harness_fail(t, __FILE__, __LINE__, "%s: all_reduce returned %s: %s", what, ccl_status_string(st),
                     ccl_comm_last_error(comm));
        return;
    }
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < SPLIT_COUNT; i++)
        if (out[i] != member_sum * (int32_t)(i % 101) && bad++ == 0) first = i;
    EXPECT(t, bad == 0, "%s: %zu elements wrong (first [%zu] = %d, expected %d)", what, bad, first, out[first],
           member_sum * (int32_t)(first % 101));
}

static int body_halves(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int32_t *in = malloc(SPLIT_COUNT * 4), *out = malloc(SPLIT_COUNT * 4);
    ccl_comm_t *half = NULL;
    if (!in || !out) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    int color = rank % 2;
    if (EXPECT_OK(&t, ccl_comm_split(comm, color, rank, &half)) != CCL_OK) goto out;
    EXPECT(&t, half != NULL, "split with a color gave a NULL communicator");
    if (!half) goto out;
    int half_size = (nranks + 1 - color) / 2;
    expect_shape(&t, "odd/even half", half, rank / 2, half_size);
    /* Members' parent ranks + 1: color + 1, color + 3, ... */
    int member_sum = 0;
    for (int r = color; r < nranks; r += 2) member_sum += r + 1;
    /* Both halves at once, many times, so their traffic interleaves. */
    for (int i = 0; i < HALF_ROUNDS && t.fails == 0; i++)
        expect_allreduce(&t, color ? "odd half" : "even half", half, rank, member_sum, in, out);
    /* The parent still works, and again after the half is gone. */
    expect_allreduce(&t, "parent after split", comm, rank, nranks * (nranks + 1) / 2, in, out);
    EXPECT_OK(&t, ccl_comm_destroy(half));
    half = NULL;
    expect_allreduce(&t, "parent after destroying the half", comm, rank, nranks * (nranks + 1) / 2, in, out);
out:
    if (half) ccl_comm_destroy(half);
    free(in);
    free(out);
    return t.fails;
}

START_TEST(odd_even_halves) { matrix_run_config(&split_configs[_i], body_halves, "odd/even split", NULL); }
END_TEST

static int body_keys(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int32_t *in = malloc(SPLIT_COUNT * 4), *out = malloc(SPLIT_COUNT * 4);
    ccl_comm_t *c = NULL;
    if (!in || !out) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    int all = nranks * (nranks + 1) / 2;
    /* Reversed keys reverse the order. */
    if (EXPECT_OK(&t, ccl_comm_split(comm, 7, nranks - rank, &c)) == CCL_OK && c) {
        expect_shape(&t, "reversed keys", c, nranks - 1 - rank, nranks);
        expect_allreduce(&t, "reversed keys", c, rank, all, in, out);
        /* A broadcast from new rank 0 (parent rank nranks-1) shows the order
         * is real, not only reported. */
        int32_t v = rank, got = -1;
        EXPECT_OK(&t, ccl_broadcast(&v, &got, 1, CCL_INT32, 0, c));
        EXPECT(&t, got == nranks - 1, "reversed keys: broadcast from new rank 0 came from parent rank %d", got);
        EXPECT_OK(&t, ccl_comm_destroy(c));
    }
    c = NULL;
    /* Equal keys: parent rank order. */
    if (EXPECT_OK(&t, ccl_comm_split(comm, 0, 5, &c)) == CCL_OK && c) {
        expect_shape(&t, "equal keys", c, rank, nranks);
        EXPECT_OK(&t, ccl_comm_destroy(c));
    }
    c = NULL;
    /* Keys tied in pairs, reversed between pairs: key = -(rank / 2). */
    if (EXPECT_OK(&t, ccl_comm_split(comm, 0, -(rank / 2), &c)) == CCL_OK && c) {
        int want = 0;
        for (int r = 0; r < nranks; r++)
            if (-(r / 2) < -(rank / 2) || (-(r / 2) == -(rank / 2) && r < rank)) want++;
        expect_shape(&t, "keys tied in pairs", c, want, nranks);
        EXPECT_OK(&t, ccl_comm_destroy(c));
    }
    c = NULL;
    /* NOCOLOR: rank 0 opts out and gets NULL; the rest form a communicator. */
    c = (ccl_comm_t *)&c; /* must be overwritten */
    ccl_status_t st = ccl_comm_split(comm, rank == 0 ? CCL_SPLIT_NOCOLOR : 3, rank, &c);
    EXPECT(&t, st == CCL_OK, "split with NOCOLOR on rank 0 returned %s", ccl_status_string(st));
    if (st == CCL_OK && rank == 0) {
        EXPECT(&t, c == NULL, "CCL_SPLIT_NOCOLOR gave a communicator");
    } else if (st == CCL_OK) {
        EXPECT(&t, c != NULL && c != (ccl_comm_t *)&c, "split without rank 0 gave no communicator");
        if (c && c != (ccl_comm_t *)&c) {
            expect_shape(&t, "without rank 0", c, rank - 1, nranks - 1);
            expect_allreduce(&t, "without rank 0", c, rank, all - 1, in, out);
            EXPECT_OK(&t, ccl_comm_destroy(c));
        }
    }
    c = NULL;
    /* Split of a split: halves, then the lower half of each half. */
    ccl_comm_t *half = NULL, *quarter = NULL;
    if (EXPECT_OK(&t, ccl_comm_split(comm, rank % 2, rank, &half)) == CCL_OK && half) {
        int hrank = -1, hsize = -1;
        EXPECT_OK(&t, ccl_comm_rank(half, &hrank));
        EXPECT_OK(&t, ccl_comm_size(half, &hsize));
        int lower = hrank < (hsize + 1) / 2;
        if (EXPECT_OK(&t, ccl_comm_split(half, lower ? 0 : CCL_SPLIT_NOCOLOR, 0, &quarter)) == CCL_OK) {
            EXPECT(&t, (quarter != NULL) == lower, "split of a split: communicator %s", quarter ? "given" : "missing");
            if (quarter) {
                int sum = 0;
                for (int r = rank % 2, h = 0; r < nranks; r += 2, h++)
                    if (h < (hsize + 1) / 2) sum += r + 1;
                expect_allreduce(&t, "split of a split", quarter, rank, sum, in, out);
                EXPECT_OK(&t, ccl_comm_destroy(quarter));
            }
        }
        EXPECT_OK(&t, ccl_comm_destroy(half));
    }
    expect_allreduce(&t, "parent after all the splits", comm, rank, all, in, out);
out:
    free(in);
    free(out);
    return t.fails;
}

START_TEST(key_order_and_nocolor) { matrix_run_config(&split_configs[_i], body_keys, "split keys", NULL); }
END_TEST

/* Checks a group made from parent ranks list[0..n-1]: its shape, an
 * all_reduce, and a broadcast from its rank 0 that shows the order is real. */
static void expect_group(struct harness_tally *t, const char *what, ccl_comm_t *g, const int *list, int n, int rank,
                         int32_t *in, int32_t *out) {
    int me = 0, sum = 0;
    for (int i = 0; i < n; i++) {
        if (list[i] == rank) me = i;
        sum += list[i] + 1;
    }
    expect_shape(t, what, g, me, n);
    expect_allreduce(t, what, g, rank, sum, in, out);
    int32_t v = rank, got = -1;
    EXPECT_OK(t, ccl_broadcast(&v, &got, 1, CCL_INT32, 0, g));
    EXPECT(t, got == list[0], "%s: broadcast from new rank 0 came from parent rank %d, not %d", what, got, list[0]);
}

static int body_create_group(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int32_t *in = malloc(SPLIT_COUNT * 4), *out = malloc(SPLIT_COUNT * 4);
    int *list = malloc(sizeof(int) * (size_t)nranks);
    ccl_comm_t *g = NULL;
    if (!in || !out || !list) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    int all = nranks * (nranks + 1) / 2;
    /* The lower half in order and the upper half reversed, made and used at
     * once: the other half makes no call. */
    int lower = nranks / 2, n = 0;
    if (rank < lower)
        for (int r = 0; r < lower; r++) list[n++] = r;
    else
        for (int r = nranks - 1; r >= lower; r--) list[n++] = r;
    if (EXPECT_OK(&t, ccl_comm_create_group(comm, list, n, &g)) == CCL_OK && g) {
        for (int i = 0; i < HALF_ROUNDS && t.fails == 0; i++)
            expect_group(&t, rank < lower ? "lower half" : "upper half reversed", g, list, n, rank, in, out);
        EXPECT_OK(&t, ccl_comm_destroy(g));
    }
    g = NULL;
    expect_allreduce(&t, "parent after two groups", comm, rank, all, in, out);
    /* Every rank a group of its own. */
    if (EXPECT_OK(&t, ccl_comm_create_group(comm, &rank, 1, &g)) == CCL_OK && g) {
        expect_group(&t, "group of one", g, &rank, 1, rank, in, out);
        EXPECT_OK(&t, ccl_comm_destroy(g));
    }
    g = NULL;
    /* Every rank, led by the last. */
    for (int i = 0; i < nranks; i++) list[i] = (nranks - 1 + i) % nranks;
    if (EXPECT_OK(&t, ccl_comm_create_group(comm, list, nranks, &g)) == CCL_OK && g) {
        expect_group(&t, "all, led by the last", g, list, nranks, rank, in, out);
        EXPECT_OK(&t, ccl_comm_destroy(g));
    }
    g = NULL;
    /* Refusals, local and at once. */
    int bad[3] = {rank, rank, nranks};
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_create_group(comm, NULL, 1, &g));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_create_group(comm, bad, 0, &g));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_create_group(comm, bad, nranks + 1, &g));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_create_group(comm, bad, 2, &g));
    EXPECT(&t, strstr(ccl_comm_last_error(comm), "are both") != NULL, "repeated rank: '%s'",
           ccl_comm_last_error(comm));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_create_group(comm, bad + 2, 1, &g));
    int other = (rank + 1) % nranks;
    EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_comm_create_group(comm, &other, 1, &g));
    EXPECT(&t, strstr(ccl_comm_last_error(comm), "is not in ranks") != NULL, "caller not listed: '%s'",
           ccl_comm_last_error(comm));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_create_group(comm, &rank, 1, NULL));
    EXPECT(&t, g == NULL, "a refused call gave a communicator");
    /* Members given different lists: ranks 0, 1, 2 (1 and 2 swapped on
     * rank 2); every one of them is told, and names rank 2. */
    if (rank < 3) {
        int mine[3] = {0, 1, 2}, swapped[3] = {0, 2, 1};
        ccl_status_t st = ccl_comm_create_group(comm, rank == 2 ? swapped : mine, 3, &g);
        EXPECT(&t, st == CCL_ERR_INVALID_USAGE && g == NULL, "different lists: %s", ccl_status_string(st));
        const char *why = ccl_comm_last_error(comm);
        EXPECT(&t, rank == 2 ? strstr(why, "the leader, rank 0, was given a different member list") != NULL
                             : strstr(why, "rank 2 was given a different member list") != NULL,
               "different lists, rank %d was told '%s'", rank, why);
    }
    expect_allreduce(&t, "parent after the refusals", comm, rank, all, in, out);
out:
    free(in);
    free(out);
    free(list);
    return t.fails;
}

START_TEST(create_group) { matrix_run_config(&split_configs[_i], body_create_group, "create_group", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("split");
    util_add_loop_case(s, "odd_even_halves", odd_even_halves, SPLIT_CONFIGS, 300);
    util_add_loop_case(s, "key_order_and_nocolor", key_order_and_nocolor, SPLIT_CONFIGS, 300);
    util_add_loop_case(s, "create_group", create_group, SPLIT_CONFIGS, 300);
    return s;
}

int main(void) { return harness_main(suite()); }
