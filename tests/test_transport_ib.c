/* ctest: TIMEOUT 300 */
/*
 * The RDMA transport from the outside. Where this machine has no RDMA
 * device (most), CCL_TRANSPORT=ib must fail init on every rank with an
 * error that says ib is not available and where; the rest needs a device
 * and reports itself skipped without one (tools/rdma-vm.sh runs this suite
 * inside a VM with two soft-RoCE devices, through ctest's rdma_vm): many
 * calls in a row over a few slots keep credits and slots in step.
 */
#define _GNU_SOURCE
#include <check.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"
#include "harness.h"
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

static Suite *ib_suite(void) {
    Suite *s = suite_create("transport_ib");
    TCase *c = tcase_create("ib");
    tcase_set_timeout(c, 280);
    tcase_add_test(c, forced_without_device);
    tcase_add_test(c, steady_many_calls);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return harness_main(ib_suite()); }
