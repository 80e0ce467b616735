/*
 * The registration cache against a transport that counts what it is asked
 * to register and deregister: hits inside a registered range, misses
 * outside it, page alignment, least-recently-used eviction that never
 * touches an entry in use (with CCL_REG_CACHE=1), registrations that last
 * one use by default, pinned ones (ccl_comm_register) that stay until
 * unpinned, forgetting freed memory (at once, or at the last put when in
 * use), registrations that linger after their last use when the
 * transport asks, a failing registration that caches nothing, and teardown that
 * leaves nothing registered.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/params.h"
#include "harness.h"
#include "prims/regcache.h"
#include "transports/transport.h"

/* ---- a transport that only registers ---- */

#define MAX_LIVE 256

static struct {
    int regs, deregs, fail_next;
    uintptr_t lo[MAX_LIVE], hi[MAX_LIVE]; /* live registrations, by handle - 1 */
    int live[MAX_LIVE];
} fake;

static ccl_status_t fake_reg(struct ccl_comm *comm, void *addr, size_t bytes, void **handle) {
    if (fake.fail_next) {
        fake.fail_next = 0;
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "fake: cannot pin %zu bytes", bytes);
    }
    int k = fake.regs++;
    ck_assert_int_lt(k, MAX_LIVE);
    fake.lo[k] = (uintptr_t)addr;
    fake.hi[k] = (uintptr_t)addr + bytes;
    fake.live[k] = 1;
    *handle = (void *)(uintptr_t)(k + 1);
    return CCL_OK;
}

static void fake_dereg(struct ccl_comm *comm, void *handle) {
    (void)comm;
    int k = (int)(uintptr_t)handle - 1;
    ck_assert_msg(k >= 0 && k < fake.regs && fake.live[k], "deregistered handle %d twice or never registered", k);
    fake.live[k] = 0;
    fake.deregs++;
}

static const struct ccl__transport fake_transport = {.name = "fake", .reg = fake_reg, .dereg = fake_dereg};
static const struct ccl__transport plain_transport = {.name = "plain"};
#define LINGER_S 0.2
static const struct ccl__transport lingering_transport = {
    .name = "lingering", .reg = fake_reg, .dereg = fake_dereg, .reg_linger_s = LINGER_S};

/* keep: CCL_REG_CACHE (unused registrations kept between uses). */
static struct ccl_comm *comm_keeping(int keep) {
    memset(&fake, 0, sizeof fake);
    struct ccl_comm *comm = calloc(1, sizeof(*comm));
    ck_assert_ptr_nonnull(comm);
    comm->boot_fd = -1; /* no bootstrap root: set-up steps have nobody to hear from */
    comm->magic = CCL__COMM_MAGIC;
    comm->nranks = 1;
    comm->params = *ccl__params_get();
    comm->params.reg_cache = keep;
    comm->wake = &comm->local_wake;
    comm->event_fd = -1;
    pthread_mutex_init(&comm->err_lock, NULL);
    return comm;
}

static struct ccl_comm *comm_new(void) { return comm_keeping(1); }

static void comm_free(struct ccl_comm *comm) {
    ccl__reg_clear(comm);
    ck_assert_int_eq(fake.regs, fake.deregs); /* nothing left registered */
    pthread_mutex_destroy(&comm->err_lock);
    free(comm);
}

static uintptr_t page(void) { return (uintptr_t)sysconf(_SC_PAGESIZE); }

/* ---- tests ---- */

START_TEST(hit_inside_miss_outside) {
    struct ccl_comm *comm = comm_new();
    size_t ps = page();
    uint8_t *buf = aligned_alloc(ps, 8 * ps);
    struct ccl__reg *a, *b, *c;
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf + 100, 3 * ps, &a), CCL_OK);
    /* Page-aligned: the range covers whole pages around the buffer. */
    ck_assert_uint_eq(a->lo, (uintptr_t)buf);
    ck_assert_uint_eq(a->hi, (uintptr_t)buf + 4 * ps);
    ck_assert_uint_eq(fake.lo[0], a->lo);
    ck_assert_uint_eq(fake.hi[0], a->hi);
    /* Inside: the same registration, no new one. */
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf + ps, ps, &b), CCL_OK);
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(a->refs, 2);
    /* Overlapping but not covered: a new one. */
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf + 3 * ps, 2 * ps, &c), CCL_OK);
    ck_assert_ptr_ne(a, c);
    ck_assert_int_eq(fake.regs, 2);
    struct ccl__regcache_stats s = ccl__reg_stats(comm);
    ck_assert_uint_eq(s.hits, 1);
    ck_assert_uint_eq(s.misses, 2);
    ck_assert_uint_eq(s.live, 2);
    ccl__reg_put(comm, a);
    ccl__reg_put(comm, b);
    ccl__reg_put(comm, c);
    /* Unused but kept: the next lookup still hits. */
    ck_assert_int_eq(fake.deregs, 0);
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf + 200, 10, &a), CCL_OK);
    ck_assert_int_eq(fake.regs, 2);
    ccl__reg_put(comm, a);
    comm_free(comm);
    free(buf);
}
END_TEST

START_TEST(eviction_is_lru_and_spares_users) {
    struct ccl_comm *comm = comm_new();
    size_t ps = page(), n = CCL__REGCACHE_KEEP + 8;
    uint8_t *buf = aligned_alloc(ps, (n + 1) * 2 * ps);
    struct ccl__reg *held, *r;
    /* One registration stays in use throughout. */
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf, ps, &held), CCL_OK);
    for (size_t i = 1; i <= n; i++) {
        ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf + 2 * i * ps, ps, &r), CCL_OK);
        ccl__reg_put(comm, r);
    }
    struct ccl__regcache_stats s = ccl__reg_stats(comm);
    ck_assert_uint_eq(s.evictions, n - CCL__REGCACHE_KEEP);
    ck_assert_uint_eq(s.live, CCL__REGCACHE_KEEP + 1);
    ck_assert_int_eq(fake.live[0], 1); /* in use: never evicted */
    for (size_t k = 1; k <= n; k++) /* the oldest unused went first */
        ck_assert_int_eq(fake.live[k], k > n - CCL__REGCACHE_KEEP);
    ccl__reg_put(comm, held);
    comm_free(comm);
    free(buf);
}
END_TEST

START_TEST(forget_drops_overlaps) {
    struct ccl_comm *comm = comm_new();
    size_t ps = page();
    uint8_t *buf = aligned_alloc(ps, 8 * ps);
    struct ccl__reg *a, *b, *again;
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf, ps, &a), CCL_OK);
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf + 4 * ps, ps, &b), CCL_OK);
    ccl__reg_put(comm, b);
    /* Freed memory covering both: the unused one goes now, the used one
     * when its user is done, and neither serves a lookup any more. */
    ccl__reg_forget(comm, buf + ps / 2, 5 * ps);
    ck_assert_int_eq(fake.live[1], 0);
    ck_assert_int_eq(fake.live[0], 1);
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf, 16, &again), CCL_OK);
    ck_assert_ptr_ne(again, a);
    ccl__reg_put(comm, a);
    ck_assert_int_eq(fake.live[0], 0);
    ccl__reg_put(comm, again);
    /* A range that overlaps nothing changes nothing. */
    ccl__reg_forget(comm, buf + 6 * ps, ps);
    ck_assert_int_eq(fake.live[2], 1);
    comm_free(comm);
    free(buf);
}
END_TEST

START_TEST(failures_cache_nothing) {
    struct ccl_comm *comm = comm_new();
    uint8_t buf[64];
    struct ccl__reg *r = (void *)1;
    fake.fail_next = 1;
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf, sizeof buf, &r), CCL_ERR_SYSTEM);
    ck_assert_ptr_null(r);
    ck_assert_ptr_nonnull(strstr(comm->last_error, "cannot pin"));
    ck_assert_uint_eq(ccl__reg_stats(comm).live, 0);
    /* The next try registers for real. */
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf, sizeof buf, &r), CCL_OK);
    ccl__reg_put(comm, r);
    /* Bad arguments and a transport without registration: clear errors. */
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, NULL, 8, &r), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf, 0, &r), CCL_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ccl__reg_get(comm, &plain_transport, buf, 8, &r), CCL_ERR_INVALID_USAGE);
    ck_assert_ptr_nonnull(strstr(comm->last_error, "plain"));
    /* Put of nothing, and clearing twice, are harmless. */
    ccl__reg_put(comm, NULL);
    ccl__reg_clear(comm);
    comm_free(comm);
}
END_TEST

/* CCL_REG_CACHE=0 (the default): the last put deregisters; a registration
 * shared by two users lives until both are done. */
START_TEST(default_lasts_one_use) {
    struct ccl_comm *comm = comm_keeping(0);
    size_t ps = page();
    uint8_t *buf = aligned_alloc(ps, 4 * ps);
    struct ccl__reg *a, *b;
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf, ps, &a), CCL_OK);
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf + 8, 8, &b), CCL_OK);
    ck_assert_ptr_eq(a, b);
    ccl__reg_put(comm, a);
    ck_assert_int_eq(fake.live[0], 1); /* b still uses it */
    ccl__reg_put(comm, b);
    ck_assert_int_eq(fake.live[0], 0);
    ck_assert_uint_eq(ccl__reg_stats(comm).live, 0);
    /* The same memory again: registered anew. */
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf, ps, &a), CCL_OK);
    ck_assert_int_eq(fake.regs, 2);
    ccl__reg_put(comm, a);
    comm_free(comm);
    free(buf);
}
END_TEST

/* A pinned registration serves every lookup inside it and survives puts;
 * unpinning lets it go (at once when unused, at the last put otherwise);
 * teardown releases pins left behind. */
START_TEST(pinned_until_unpinned) {
    struct ccl_comm *comm = comm_keeping(0);
    size_t ps = page();
    uint8_t *buf = aligned_alloc(ps, 8 * ps);
    struct ccl__reg *pin, *r, *pin2;
    ck_assert_int_eq(ccl__reg_pin(comm, &fake_transport, buf, 4 * ps, &pin), CCL_OK);
    ck_assert(ccl__reg_is_pinned(comm, &fake_transport, buf + ps, ps));
    ck_assert(!ccl__reg_is_pinned(comm, &fake_transport, buf + 3 * ps, 2 * ps)); /* runs past it */
    ck_assert(!ccl__reg_is_pinned(comm, &plain_transport, buf, ps));
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf + (size_t)i * 100, 1000, &r), CCL_OK);
        ck_assert_ptr_eq(r, pin);
        ccl__reg_put(comm, r);
    }
    ck_assert_int_eq(fake.regs, 1);
    ck_assert_int_eq(fake.live[0], 1);
    /* In use when unpinned: deregistered at the user's put. */
    ck_assert_int_eq(ccl__reg_get(comm, &fake_transport, buf, 8, &r), CCL_OK);
    ccl__reg_unpin(comm, pin);
    ck_assert_int_eq(fake.live[0], 1);
    ck_assert(!ccl__reg_is_pinned(comm, &fake_transport, buf, 8));
    ccl__reg_put(comm, r);
    ck_assert_int_eq(fake.live[0], 0);
    /* A pin left at teardown is released there (comm_free checks). */
    ck_assert_int_eq(ccl__reg_pin(comm, &fake_transport, buf + 4 * ps, ps, &pin2), CCL_OK);
    ck_assert_uint_eq(ccl__reg_stats(comm).live, 1);
    comm_free(comm);
    free(buf);
}
END_TEST

/* A transport whose peers may touch memory after its last use (RDMA
 * duplicate reads): an unused registration stops serving lookups at once
 * but stays registered for reg_linger_s, then goes at the next get or
 * put; one evicted from a keeping cache or forgotten lingers too;
 * teardown drops lingering ones with the rest. */
START_TEST(lingers_after_last_use) {
    struct ccl_comm *comm = comm_keeping(0);
    size_t ps = page();
    uint8_t *buf = aligned_alloc(ps, 8 * ps);
    struct ccl__reg *a, *b;
    ck_assert_int_eq(ccl__reg_get(comm, &lingering_transport, buf, ps, &a), CCL_OK);
    ccl__reg_put(comm, a);
    ck_assert_int_eq(fake.live[0], 1);
    struct ccl__regcache_stats s = ccl__reg_stats(comm);
    ck_assert_uint_eq(s.live, 0);
    ck_assert_uint_eq(s.lingering, 1);
    /* The same memory again: a new registration, not the lingering one. */
    ck_assert_int_eq(ccl__reg_get(comm, &lingering_transport, buf, ps, &b), CCL_OK);
    ck_assert_ptr_ne(a, b);
    ck_assert_int_eq(fake.regs, 2);
    ccl__reg_put(comm, b);
    ck_assert_uint_eq(ccl__reg_stats(comm).lingering, 2);
    usleep((useconds_t)(LINGER_S * 1.5e6));
    ck_assert_int_eq(fake.live[0], 1); /* nothing swept without a call */
    ck_assert_int_eq(ccl__reg_get(comm, &lingering_transport, buf + 4 * ps, ps, &a), CCL_OK);
    ck_assert_int_eq(fake.live[0], 0);
    ck_assert_int_eq(fake.live[1], 0);
    s = ccl__reg_stats(comm);
    ck_assert_uint_eq(s.lingering, 0);
    ck_assert_uint_eq(s.live, 1);
    /* Forgotten while unused: it lingers as well. */
    ccl__reg_put(comm, a);
    ccl__reg_forget(comm, buf, 8 * ps);
    ck_assert_int_eq(fake.live[2], 1);
    ck_assert_uint_eq(ccl__reg_stats(comm).lingering, 1);
    comm_free(comm); /* teardown drops it now (comm_free checks) */
    free(buf);

    /* Evicted from a keeping cache: lingers, counted as an eviction. */
    comm = comm_keeping(1);
    uint8_t *many = aligned_alloc(ps, (CCL__REGCACHE_KEEP + 2) * 2 * ps);
    for (int i = 0; i <= CCL__REGCACHE_KEEP; i++) {
        ck_assert_int_eq(ccl__reg_get(comm, &lingering_transport, many + 2 * (size_t)i * ps, ps, &a), CCL_OK);
        ccl__reg_put(comm, a);
    }
    s = ccl__reg_stats(comm);
    ck_assert_uint_eq(s.evictions, 1);
    ck_assert_uint_eq(s.live, CCL__REGCACHE_KEEP);
    ck_assert_uint_eq(s.lingering, 1);
    ck_assert_int_eq(fake.live[0], 1);
    comm_free(comm);
    free(many);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("regcache");
    TCase *tc = tcase_create("cache");
    tcase_add_test(tc, hit_inside_miss_outside);
    tcase_add_test(tc, eviction_is_lru_and_spares_users);
    tcase_add_test(tc, forget_drops_overlaps);
    tcase_add_test(tc, lingers_after_last_use);
    tcase_add_test(tc, failures_cache_nothing);
    tcase_add_test(tc, default_lasts_one_use);
    tcase_add_test(tc, pinned_until_unpinned);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
