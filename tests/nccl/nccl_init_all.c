/*
 * ncclCommInitAll: several ranks in one process, driven by one thread
 * inside groups, as single-process multi-GPU programs (and nccl-tests' -g)
 * use NCCL; on host buffers here. nccl_init_all N [timeout]: N ranks
 * (timeout: then a call that only rank 0 makes). Exits 1 on a wrong
 * result, naming it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

#define COUNT 1031

static int fails;
#define CHECK(cond, ...)                               \
    do {                                               \
        if (!(cond)) {                                 \
            fprintf(stderr, "nccl_init_all: " __VA_ARGS__); \
            fprintf(stderr, "\n");                     \
            fails++;                                   \
        }                                              \
    } while (0)

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    if (n < 1 || n > 16) return 2;
    ncclComm_t comms[16];
    ncclResult_t r = ncclCommInitAll(comms, n, NULL);
    if (r != ncclSuccess) {
        fprintf(stderr, "nccl_init_all: ncclCommInitAll: %s: %s\n", ncclGetErrorString(r), ncclGetLastError(NULL));
        return 1;
    }
    int32_t *in[16], *out[16];
    for (int i = 0; i < n; i++) {
        int count = -1, rank = -1;
        ncclCommCount(comms[i], &count);
        ncclCommUserRank(comms[i], &rank);
        CHECK(count == n && rank == i, "comm %d: rank %d of %d", i, rank, count);
        in[i] = malloc(sizeof(int32_t) * COUNT * n);
        out[i] = malloc(sizeof(int32_t) * COUNT * n);
        for (int k = 0; k < COUNT * n; k++) in[i][k] = (int32_t)(k * 7 + i * 13) % 101 - 50;
    }
    /* one all-reduce per rank, one group, one thread */
    for (int round = 0; round < 3; round++) {
        CHECK(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
        for (int i = 0; i < n; i++)
            CHECK(ncclAllReduce(in[i], out[i], COUNT, ncclInt32, ncclSum, comms[i], NULL) == ncclSuccess,
                  "ncclAllReduce on comm %d: %s", i, ncclGetLastError(comms[i]));
        r = ncclGroupEnd();
        CHECK(r == ncclSuccess, "ncclGroupEnd: %s", ncclGetLastError(NULL));
        for (int i = 0; i < n; i++)
            for (int k = 0; k < COUNT; k++) {
                int32_t want = 0;
                for (int j = 0; j < n; j++) want += in[j][k];
                if (out[i][k] != want) {
                    CHECK(0, "round %d: all-reduce element %d on rank %d is %d, not %d", round, k, i, out[i][k], want);
                    break;
                }
            }
    }
    /* all-gather and a broadcast from the last rank, in one group */
    CHECK(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
    for (int i = 0; i < n; i++) ncclAllGather(in[i], out[i], COUNT, ncclInt32, comms[i], NULL);
    CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd (all-gather): %s", ncclGetLastError(NULL));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            CHECK(memcmp(out[i] + j * COUNT, in[j], sizeof(int32_t) * COUNT) == 0, "all-gather: rank %d's block %d", i,
                  j);
    CHECK(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
    for (int i = 0; i < n; i++) ncclBcast(in[i], COUNT, ncclInt32, n - 1, comms[i], NULL);
    CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd (broadcast): %s", ncclGetLastError(NULL));
    for (int i = 0; i < n; i++) CHECK(memcmp(in[i], in[n - 1], sizeof(int32_t) * COUNT) == 0, "broadcast: rank %d", i);
    /* With "timeout" (ctest sets CCL_TIMEOUT=1): rank 0 calls alone, outside a group; the others never come.
     * It fails with ncclTimeout, and ncclGetLastError names rank 1 as not inside a libccl call. */
    if (argc > 2 && strcmp(argv[2], "timeout") == 0 && n > 1) {
        r = ncclAllReduce(in[0], out[0], COUNT, ncclInt32, ncclSum, comms[0], NULL);
        CHECK(r == ncclTimeout, "a call no other rank makes returned %s, not ncclTimeout", ncclGetErrorString(r));
        CHECK(strstr(ncclGetLastError(comms[0]), "rank 1") != NULL, "the timeout does not name rank 1: %s",
              ncclGetLastError(comms[0]));
        ncclResult_t async = ncclSuccess;
        CHECK(ncclCommGetAsyncError(comms[0], &async) == ncclSuccess && async == ncclTimeout, "async error %s",
              ncclGetErrorString(async));
        for (int i = 0; i < n; i++) ncclCommAbort(comms[i]), comms[i] = NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!comms[i]) {
            free(in[i]), free(out[i]);
            continue;
        }
        CHECK(ncclCommDestroy(comms[i]) == ncclSuccess, "ncclCommDestroy %d", i);
        free(in[i]), free(out[i]);
    }
    CHECK(ncclCommInitAll(comms, 0, NULL) == ncclInvalidArgument, "ndev 0 is refused");
    if (!fails) printf("nccl_init_all: %d ranks in one process, driven by one thread in groups: every result right\n", n);
    return fails != 0;
}
