/* Cross-process wake-ups on a futex word that may live in shared memory. */
#include "core/wake.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

void ccl__wake_ring(struct ccl__wake_words *w) {
    /* seq_cst pairs with the sleeper's store to `sleeping` then load of
     * `bell`: either it sees our bump, or we see it asleep and wake it. */
    atomic_fetch_add(&w->bell, 1);
    if (atomic_load(&w->sleeping)) syscall(SYS_futex, &w->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void ccl__wake_copy(struct ccl__wake_words *to, struct ccl__wake_words *from) {
    atomic_store(&to->fail_status, atomic_load(&from->fail_status));
    atomic_store(&to->fail_by, atomic_load(&from->fail_by));
    atomic_store(&to->fail_cause, atomic_load(&from->fail_cause));
    atomic_store(&to->fail_rank, atomic_load(&from->fail_rank));
    atomic_store(&to->bell, atomic_load(&from->bell));
}

void ccl__wake_fail(struct ccl__wake_words *w, int rank, int by, int status, enum ccl__culprit_cause cause) {
    int32_t none = 0;
    if (atomic_compare_exchange_strong(&w->fail_rank, &none, rank + 1)) {
        atomic_store(&w->fail_status, status);
        atomic_store(&w->fail_cause, (int32_t)cause);
        atomic_store(&w->fail_by, by + 1);
    }
    ccl__wake_ring(w);
}
