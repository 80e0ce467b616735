/* Finding a communicator's shared allocations (the list coll/shared_mem.c
 * keeps; the zero-copy path looks them up below the API layer). */
#include <stdint.h>

#include "core/comm.h"

struct ccl__mem *ccl__mem_by_serial(const struct ccl_comm *comm, uint64_t serial) {
    for (struct ccl__mem *m = comm->mems; m; m = m->next)
        if (m->serial == serial) return m;
    return NULL;
}

struct ccl__mem *ccl__mem_holding(const struct ccl_comm *comm, const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    for (struct ccl__mem *m = comm->mems; m; m = m->next) {
        uintptr_t lo = (uintptr_t)m->base;
        if (a >= lo && a - lo <= m->bytes && bytes <= m->bytes - (a - lo) && (bytes || a - lo < m->bytes)) return m;
    }
    return NULL;
}
