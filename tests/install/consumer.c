/*
 * A program built against an installed libccl (pkg-config or CMake, shared
 * or static): every rank all-reduces rank + 1 and checks the sum. Run it
 * under the installed cclrun, or alone as one rank.
 */
#include <ccl.h>
#include <stdio.h>

int main(void) {
    ccl_comm_t *comm;
    ccl_status_t st = ccl_comm_init_env(&comm);
    if (st != CCL_OK) {
        fprintf(stderr, "consumer: init: %s: %s\n", ccl_status_string(st), ccl_comm_last_error(NULL));
        return 1;
    }
    int rank = 0, size = 0;
    ccl_comm_rank(comm, &rank);
    ccl_comm_size(comm, &size);
    int v = rank + 1;
    st = ccl_all_reduce(&v, &v, 1, CCL_INT32, CCL_SUM, comm);
    int want = size * (size + 1) / 2, ok = st == CCL_OK && v == want;
    printf("consumer: rank %d of %d: sum %d, want %d: %s\n", rank, size, v, want, ok ? "ok" : "WRONG");
    ccl_comm_destroy(comm);
    return !ok;
}
