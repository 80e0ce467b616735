/* All-to-all as one batch of point-to-point transfers. */
#include <stdlib.h>

#include "algo/algo.h"

ccl_status_t ccl__direct_all_to_all(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    int n = comm->nranks;
    size_t bytes = a->id.count * ccl_dtype_size(a->id.dtype);
    if (bytes == 0) return CCL_OK;
    struct ccl__p2p_xfer *x = calloc((size_t)n * 2, sizeof(*x));
    if (!x) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "all_to_all: out of memory");
    /* Start with the next peer so that not every rank sends to rank 0 first. */
    for (int i = 0; i < n; i++) {
        int to = (comm->rank + i) % n, from = (comm->rank - i + n) % n;
        x[2 * i] = (struct ccl__p2p_xfer){.peer = to, .is_send = 1, .buf = (char *)a->sendbuf + (size_t)to * bytes,
                                          .count = a->id.count, .dtype = a->id.dtype};
        x[2 * i + 1] = (struct ccl__p2p_xfer){
            .peer = from, .is_send = 0, .buf = (char *)a->recvbuf + (size_t)from * bytes, .count = a->id.count,
            .dtype = a->id.dtype};
    }
    ccl_status_t st = ccl__p2p_run(comm, x, 2 * n, CCL__K_ALL_TO_ALL, "all_to_all");
    free(x);
    return st;
}
