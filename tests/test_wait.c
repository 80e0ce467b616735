/*
 * How long waits yield before sleeping (ccl__wait_next_yield): a sleep
 * that ended soon lengthens the yield past that stretch, a long one
 * shortens it, stretches that end awake bring it back towards its base,
 * and it never leaves [base, max]; a communicator whose yield may not
 * adapt keeps its yield. And how long one sleep may last
 * (ccl__wait_sleep_cap): shorter while an adapter works for the rank.
 * And whether waits spin at all (ccl__plan_spin_rule).
 */
#include <check.h>
#include <stdlib.h>

#include "harness.h"
#include "plan/plan.h"
#include "prims/wait.h"

#define BASE 200e-6
#define MAX 2e-3

START_TEST(short_sleep_lengthens) {
    /* woken 150 us after it slept: twice the stretch */
    ck_assert_double_eq_tol(ccl__wait_next_yield(BASE, BASE, MAX, 1, 400e-6), 800e-6, 1e-12);
    /* a stretch barely past the spin still doubles the yield */
    ck_assert_double_eq_tol(ccl__wait_next_yield(BASE, BASE, MAX, 1, 260e-6), 520e-6, 1e-12);
    ck_assert_double_eq_tol(ccl__wait_next_yield(300e-6, BASE, MAX, 1, 100e-6), 600e-6, 1e-12);
    /* never past max */
    ck_assert_double_eq_tol(ccl__wait_next_yield(BASE, BASE, MAX, 1, 1.5e-3), MAX, 1e-12);
    ck_assert_double_eq_tol(ccl__wait_next_yield(MAX, BASE, MAX, 1, 1e-3), MAX, 1e-12);
}
END_TEST

START_TEST(long_sleep_shortens) {
    ck_assert_double_eq_tol(ccl__wait_next_yield(MAX, BASE, MAX, 1, 5e-3), MAX / 2, 1e-12);
    ck_assert_double_eq_tol(ccl__wait_next_yield(300e-6, BASE, MAX, 1, 1.0), BASE, 1e-12);
    ck_assert_double_eq_tol(ccl__wait_next_yield(BASE, BASE, MAX, 1, 1.0), BASE, 1e-12);
}
END_TEST

START_TEST(awake_stretches_decay_to_base) {
    double y = MAX;
    for (int i = 0; i < 10000; i++) {
        double next = ccl__wait_next_yield(y, BASE, MAX, 0, 1e-6);
        ck_assert(next <= y);
        ck_assert(next >= BASE);
        y = next;
    }
    ck_assert_double_eq_tol(y, BASE, 1e-9);
    /* one awake stretch gives back only a little: a slow wake is not
     * forgotten at the next call */
    ck_assert(ccl__wait_next_yield(MAX, BASE, MAX, 0, 1e-6) > 0.95 * MAX);
}
END_TEST

START_TEST(fixed_when_it_may_not_adapt) {
    /* CCL_SPIN_US given, or a crowded machine: max == base */
    ck_assert_double_eq(ccl__wait_next_yield(BASE, BASE, BASE, 1, 300e-6), BASE);
    ck_assert_double_eq(ccl__wait_next_yield(BASE, BASE, BASE, 0, 1e-6), BASE);
    ck_assert_double_eq(ccl__wait_next_yield(BASE, BASE, BASE, 1, 1.0), BASE);
}
END_TEST

START_TEST(ceiling_follows_slow_links) {
    /* fast links (a 128 KiB chunk in tens of microseconds): the 2 ms stays */
    ck_assert_double_eq(ccl__plan_yield_ceiling(MAX, BASE, 30.0), MAX);
    ck_assert_double_eq(ccl__plan_yield_ceiling(MAX, BASE, 500.0), MAX);
    /* soft-RoCE's 2.7 ms chunk: four of them */
    ck_assert_double_eq_tol(ccl__plan_yield_ceiling(MAX, BASE, 2700.0), 10.8e-3, 1e-12);
    /* a link slower still: never past 50 ms */
    ck_assert_double_eq_tol(ccl__plan_yield_ceiling(MAX, BASE, 1e6), 50e-3, 1e-12);
    /* no figure: unchanged */
    ck_assert_double_eq(ccl__plan_yield_ceiling(MAX, BASE, 0.0), MAX);
    /* a yield that does not adapt stays fixed, however slow the link */
    ck_assert_double_eq(ccl__plan_yield_ceiling(BASE, BASE, 2700.0), BASE);
    /* and the grown ceiling is one the adaptation reaches */
    double top = ccl__plan_yield_ceiling(MAX, BASE, 2700.0);
    ck_assert_double_eq_tol(ccl__wait_next_yield(BASE, BASE, top, 1, 2.7e-3), 5.4e-3, 1e-12);
}
END_TEST

START_TEST(naps_while_in_flight) {
    /* nothing in flight: 50 ms at a time, never past the deadline */
    ck_assert_double_eq(ccl__wait_sleep_cap(300.0, 0), 0.05);
    ck_assert_double_eq(ccl__wait_sleep_cap(0.01, 0), 0.01);
    ck_assert_double_eq(ccl__wait_sleep_cap(-1.0, 0), 0.0);
    /* an adapter working for the rank: a millisecond at a time */
    ck_assert_double_eq(ccl__wait_sleep_cap(300.0, 1), 1e-3);
    ck_assert_double_eq(ccl__wait_sleep_cap(0.5e-3, 1), 0.5e-3);
    ck_assert_double_eq(ccl__wait_sleep_cap(0.0, 1), 0.0);
}
END_TEST

START_TEST(spin_follows_crowding) {
    /* a CPU for every rank, hardware adapters: spin */
    ck_assert_int_eq(ccl__plan_spin_rule(2, 2, 0, 0), CCL__SPIN_ALWAYS);
    ck_assert_int_eq(ccl__plan_spin_rule(1, 16, 1, 0), CCL__SPIN_ALWAYS);
    /* a software adapter's work too, and CPUs for all of it: spin */
    ck_assert_int_eq(ccl__plan_spin_rule(2, 4, 1, 0), CCL__SPIN_ALWAYS);
    /* CPUs for the ranks but not their adapters' work: spin only while
     * no adapter works for the wait */
    ck_assert_int_eq(ccl__plan_spin_rule(2, 2, 1, 0), CCL__SPIN_UNLESS_IN_FLIGHT);
    ck_assert_int_eq(ccl__plan_spin_rule(3, 4, 1, 0), CCL__SPIN_UNLESS_IN_FLIGHT);
    /* more ranks than CPUs: never, with or without such adapters */
    ck_assert_int_eq(ccl__plan_spin_rule(3, 2, 0, 0), CCL__SPIN_NEVER);
    ck_assert_int_eq(ccl__plan_spin_rule(3, 2, 1, 0), CCL__SPIN_NEVER);
    ck_assert_int_eq(ccl__plan_spin_rule(8, 2, 0, 0), CCL__SPIN_NEVER);
    /* CCL_SPIN_US set: the user's choice, whatever the crowding */
    ck_assert_int_eq(ccl__plan_spin_rule(8, 2, 1, 1), CCL__SPIN_ALWAYS);
    ck_assert_int_eq(ccl__plan_spin_rule(2, 2, 1, 1), CCL__SPIN_ALWAYS);
    /* CPUs unknown: not crowded */
    ck_assert_int_eq(ccl__plan_spin_rule(4, 0, 1, 0), CCL__SPIN_ALWAYS);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("wait");
    TCase *tc = tcase_create("yield");
    tcase_add_test(tc, short_sleep_lengthens);
    tcase_add_test(tc, long_sleep_shortens);
    tcase_add_test(tc, awake_stretches_decay_to_base);
    tcase_add_test(tc, fixed_when_it_may_not_adapt);
    tcase_add_test(tc, ceiling_follows_slow_links);
    suite_add_tcase(s, tc);
    tc = tcase_create("sleep");
    tcase_add_test(tc, naps_while_in_flight);
    suite_add_tcase(s, tc);
    tc = tcase_create("spin");
    tcase_add_test(tc, spin_follows_crowding);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
