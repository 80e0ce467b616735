/*
 * Slot writes from the caller's memory over a transport whose adapter
 * reads it after the commit (prims/caller_mem.c), against a transport
 * that counts registrations and completes its reads when told: a call
 * buffer is registered whole, once, only when that pays (as large as a
 * zero-copy message, or registered already), and let go when the call
 * ends; a step that would write memory still being read is told which
 * connection to wait on, and only while the reads are outstanding and
 * only where they overlap; a transport that copies is never waited on.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/params.h"
#include "harness.h"
#include "prims/prims.h"
#include "prims/regcache.h"
#include "transports/transport.h"

#define ZC_BYTES (1u << 20)

static struct {
    int regs, deregs, progressed;
    int reads_left;      /* posted writes whose reads have not completed */
    int done_on_progress; /* each progress completes one */
} fake;

static ccl_status_t fake_reg(struct ccl_comm *comm, void *addr, size_t bytes, void **handle) {
    (void)comm, (void)addr, (void)bytes;
    *handle = (void *)(uintptr_t)++fake.regs;
    return CCL_OK;
}
static void fake_dereg(struct ccl_comm *comm, void *handle) {
    (void)comm, (void)handle;
    fake.deregs++;
}
static size_t fake_zc_min(const void *knobs) {
    (void)knobs;
    return ZC_BYTES;
}
static ccl_status_t fake_commit_from(struct ccl__conn *c, const struct ccl__slot_meta *m, const void *payload,
                                     void *reg) {
    (void)c, (void)m, (void)payload, (void)reg;
    return CCL_OK;
}
static int fake_flushed(struct ccl__conn *c) {
    (void)c;
    return fake.reads_left == 0;
}
static ccl_status_t fake_progress(struct ccl__conn *c, int *moved) {
    (void)c;
    fake.progressed++;
    if (fake.done_on_progress && fake.reads_left > 0) fake.reads_left--;
    *moved = 1;
    return CCL_OK;
}

/* reads the caller's memory later (as ib) */
static const struct ccl__transport reading = {.name = "reading", .reg = fake_reg, .dereg = fake_dereg,
                                              .zc_min_bytes = fake_zc_min, .send_commit_from = fake_commit_from,
                                              .flushed = fake_flushed, .progress = fake_progress};
/* copies it before the commit returns (as tcp) */
static const struct ccl__transport copying = {.name = "copying", .send_commit_from = fake_commit_from,
                                              .flushed = fake_flushed, .progress = fake_progress};

static struct ccl__conn conn_reading = {.t = &reading, .peer = 1}, conn_copying = {.t = &copying, .peer = 2};
static struct ccl__conn *staged[2];

static struct ccl_comm *comm_new(void) {
    memset(&fake, 0, sizeof fake);
    struct ccl_comm *comm = calloc(1, sizeof(*comm));
    ck_assert_ptr_nonnull(comm);
    comm->boot_fd = -1;
    comm->magic = CCL__COMM_MAGIC;
    comm->nranks = 3;
    comm->params = *ccl__params_get();
    comm->params.reg_cache = 0;
    comm->wake = &comm->local_wake;
    comm->event_fd = -1;
    comm->staged = staged;
    pthread_mutex_init(&comm->err_lock, NULL);
    return comm;
}

/* c holds committed writes, reads_left of them still reading. */
static void stage_one(struct ccl_comm *comm, struct ccl__conn *c, int reads_left) {
    staged[0] = c;
    comm->nstaged = 1;
    fake.reads_left = reads_left;
}

static void comm_free(struct ccl_comm *comm) {
    ccl__reg_clear(comm);
    ck_assert_int_eq(fake.regs, fake.deregs); /* nothing left registered */
    pthread_mutex_destroy(&comm->err_lock);
    free(comm);
}

START_TEST(registers_large_buffers_once_per_call) {
    struct ccl_comm *comm = comm_new();
    size_t big = 2 * ZC_BYTES, small = ZC_BYTES / 4;
    uint8_t *send = malloc(big), *recv = malloc(small);
    ck_assert_ptr_nonnull(send);
    ck_assert_ptr_nonnull(recv);
    for (int call = 0; call < 2; call++) {
        ccl__prims_call_bufs(comm, send, big, recv, small);
        void *h = ccl__prims_caller_reg(comm, &reading, send + 4096, 65536);
        ck_assert_ptr_nonnull(h);
        /* every later piece of the same buffer: the same registration */
        ck_assert_ptr_eq(ccl__prims_caller_reg(comm, &reading, send + big - 65536, 65536), h);
        ck_assert_int_eq(fake.regs, call + 1);
        /* too small to pay for a registration: copied into slots */
        ck_assert_ptr_null(ccl__prims_caller_reg(comm, &reading, recv, 4096));
        /* memory outside the call's buffers is never registered */
        uint8_t other[64];
        ck_assert_ptr_null(ccl__prims_caller_reg(comm, &reading, other, sizeof other));
        ck_assert_int_eq(fake.regs, call + 1);
        ccl__prims_call_bufs_end(comm);
        /* CCL_REG_CACHE=0: the registration goes with the call */
        ck_assert_int_eq(fake.deregs, call + 1);
    }
    free(send);
    free(recv);
    comm_free(comm);
}
END_TEST

START_TEST(registered_buffers_are_used_whatever_their_size) {
    struct ccl_comm *comm = comm_new();
    size_t small = ZC_BYTES / 4;
    uint8_t *buf = malloc(small);
    ck_assert_ptr_nonnull(buf);
    struct ccl__reg *pin = NULL;
    ck_assert_int_eq(ccl__reg_pin(comm, &reading, buf, small, &pin), CCL_OK);
    ccl__prims_call_bufs(comm, buf, small, buf, small);
    void *h = ccl__prims_caller_reg(comm, &reading, buf + 100, 1000);
    ck_assert_ptr_eq(h, pin->handle);
    ck_assert_int_eq(fake.regs, 1);
    ccl__prims_call_bufs_end(comm);
    ck_assert_int_eq(fake.deregs, 0); /* the application's pin holds it */
    ccl__reg_unpin(comm, pin);
    free(buf);
    comm_free(comm);
}
END_TEST

START_TEST(writes_wait_for_overlapping_reads) {
    struct ccl_comm *comm = comm_new();
    uint8_t buf[8192];
    stage_one(comm, &conn_reading, 2);
    ccl__prims_call_bufs(comm, buf, sizeof buf, buf, sizeof buf); /* in place */
    ccl__prims_note_reading(comm, buf + 1024, 1024);
    ccl__prims_note_reading(comm, buf + 4096, 512);
    /* memory outside every read: written at once, nothing progressed */
    ck_assert_ptr_null(ccl__prims_still_reading(comm, buf, 1024));
    ck_assert_ptr_null(ccl__prims_still_reading(comm, buf + 4608, 1024));
    ck_assert_int_eq(fake.progressed, 0);
    /* one byte in: wait on the connection, after looking at it */
    ck_assert_ptr_eq(ccl__prims_still_reading(comm, buf, 1025), &conn_reading);
    ck_assert_ptr_eq(ccl__prims_still_reading(comm, buf + 4607, 1), &conn_reading);
    ck_assert_int_eq(fake.progressed, 2);
    /* progress that completes the reads ends the wait, and the record */
    fake.done_on_progress = 1;
    ck_assert_ptr_eq(ccl__prims_still_reading(comm, buf + 1024, 8), &conn_reading);
    ck_assert_ptr_null(ccl__prims_still_reading(comm, buf + 1024, 8));
    ck_assert_int_eq(fake.reads_left, 0);
    ck_assert_int_eq(comm->reading, 0);
    ccl__prims_call_bufs_end(comm);
    comm->nstaged = 0;
    comm_free(comm);
}
END_TEST

/* Reads of one buffer never hold up writes of the other, wherever the two
 * lie: out of place, a ring reads sendbuf while it writes recvbuf. */
START_TEST(reads_are_kept_per_buffer) {
    struct ccl_comm *comm = comm_new();
    uint8_t *both = malloc(3 * 4096), *send = both + 2 * 4096, *recv = both;
    ck_assert_ptr_nonnull(both);
    stage_one(comm, &conn_reading, 1);
    ccl__prims_call_bufs(comm, send, 4096, recv, 4096);
    ccl__prims_note_reading(comm, send, 512);
    ccl__prims_note_reading(comm, recv, 512);
    /* between the two reads, in recvbuf: free */
    ck_assert_ptr_null(ccl__prims_still_reading(comm, recv + 512, 4096 - 512));
    ck_assert_int_eq(fake.progressed, 0);
    ck_assert_ptr_eq(ccl__prims_still_reading(comm, recv + 511, 1), &conn_reading);
    /* memory outside the call's buffers is never read in place */
    ccl__prims_note_reading(comm, both + 4096, 64);
    ck_assert_ptr_null(ccl__prims_still_reading(comm, both + 4096, 4096));
    fake.reads_left = 0;
    ccl__prims_call_bufs_end(comm);
    comm->nstaged = 0;
    free(both);
    comm_free(comm);
}
END_TEST

START_TEST(copying_transports_are_not_waited_on) {
    struct ccl_comm *comm = comm_new();
    uint8_t buf[4096];
    stage_one(comm, &conn_copying, 1); /* bytes still staged in its slots: none of them the caller's */
    ccl__prims_call_bufs(comm, buf, sizeof buf, buf, sizeof buf);
    ccl__prims_note_reading(comm, buf, sizeof buf);
    ck_assert_ptr_null(ccl__prims_still_reading(comm, buf, sizeof buf));
    ck_assert_int_eq(fake.progressed, 0);
    ccl__prims_call_bufs_end(comm);
    comm->nstaged = 0;
    comm_free(comm);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("caller_mem");
    TCase *tc = tcase_create("caller_mem");
    tcase_add_test(tc, registers_large_buffers_once_per_call);
    tcase_add_test(tc, registered_buffers_are_used_whatever_their_size);
    tcase_add_test(tc, writes_wait_for_overlapping_reads);
    tcase_add_test(tc, reads_are_kept_per_buffer);
    tcase_add_test(tc, copying_transports_are_not_waited_on);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
