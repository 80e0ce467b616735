/*
 * A program built for NVIDIA's NCCL, run on libccl by swapping one shared
 * library: compiled against CUDA's own nccl.h and linked against NVIDIA's
 * libnccl.so.2, it is run with LD_LIBRARY_PATH naming libccl's drop-in
 * libnccl.so.2, on host buffers. nccl_swap N: N ranks. It checks that
 * libccl answered (dladdr of ncclAllReduce), then calls NCCL 2.28's API
 * through both names (nccl*, pnccl*) and checks every result.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spawn_ranks.h"

#define COUNT 1031

static int rank, nranks, fails;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            fprintf(stderr, "[rank %d] nccl_swap: ", rank); \
            fprintf(stderr, __VA_ARGS__);                  \
            fprintf(stderr, "\n");                         \
            fails++;                                       \
        }                                                  \
    } while (0)
#define OK(call) CHECK((call) == ncclSuccess, "%s: %s", #call, ncclGetLastError(NULL))

static int32_t value(int r, size_t i) { return (int32_t)((r * 7 + (int)i * 3) % 11) - 3; }

static int run(ncclUniqueId id) {
    ncclComm_t comm = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER; /* 2.28's layout */
    OK(ncclCommInitRankConfig(&comm, nranks, id, rank, &config));
    if (!comm) return 1;
    int32_t *in = malloc(sizeof(int32_t) * COUNT * nranks), *out = malloc(sizeof(int32_t) * COUNT * nranks);
    for (size_t i = 0; i < (size_t)COUNT * nranks; i++) in[i] = value(rank, i);
    OK(ncclAllReduce(in, out, COUNT, ncclInt32, ncclSum, comm, NULL));
    for (size_t i = 0; i < COUNT; i++) {
        int32_t want = 0;
        for (int r = 0; r < nranks; r++) want += value(r, i);
        if (out[i] != want) {
            CHECK(0, "ncclAllReduce: element %zu is %d, not %d", i, out[i], want);
            break;
        }
    }
    OK(pncclAllGather(in, out, COUNT, ncclInt32, comm, NULL));
    for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < COUNT; i++)
            if (out[(size_t)r * COUNT + i] != value(r, i)) {
                CHECK(0, "pncclAllGather: rank %d's element %zu", r, i);
                break;
            }
    memcpy(out, in, sizeof(int32_t) * COUNT);
    OK(ncclBcast(out, COUNT, ncclInt32, nranks - 1, comm, NULL));
    for (size_t i = 0; i < COUNT; i++)
        if (out[i] != value(nranks - 1, i)) {
            CHECK(0, "ncclBcast: element %zu", i);
            break;
        }
    OK(ncclAlltoAll(in, out, COUNT, ncclInt32, comm, NULL));
    for (int r = 0; r < nranks; r++)
        if (out[(size_t)r * COUNT] != value(r, (size_t)rank * COUNT)) CHECK(0, "ncclAlltoAll: block of rank %d", r);
    OK(ncclGather(in, out, COUNT, ncclInt32, 0, comm, NULL));
    if (rank == 0)
        for (int r = 0; r < nranks; r++)
            if (out[(size_t)r * COUNT + 5] != value(r, 5)) CHECK(0, "ncclGather: block of rank %d", r);
    OK(ncclScatter(in, out, COUNT, ncclInt32, 0, comm, NULL));
    if (out[5] != value(0, (size_t)rank * COUNT + 5)) CHECK(0, "ncclScatter: element 5 is %d", out[5]);
    /* 2.28's fp8 types (nccl_fp8 checks them whole): 1.0 (0x38 in e4m3) summed over the ranks is nranks,
     * exact in e4m3 for these counts: 2^e (1 + m/8) */
    uint8_t ones[4] = {0x38, 0x38, 0x38, 0x38}, sum8[4] = {0};
    OK(ncclAllReduce(ones, sum8, 4, ncclFloat8e4m3, ncclSum, comm, NULL));
    int e = (sum8[0] >> 3) - 7, m = sum8[0] & 7;
    CHECK(sum8[0] == sum8[3] && (e >= 0 ? (8 + m) << e : 0) == 8 * nranks, "an fp8 sum of 1.0 on %d ranks is 0x%02x",
          nranks, sum8[0]);
    void *handle = NULL;
    OK(ncclCommRegister(comm, in, sizeof(int32_t) * COUNT, &handle));
    OK(ncclCommDeregister(comm, handle));
    void *mem = NULL;
    OK(ncclMemAlloc(&mem, 1 << 20)); /* no CUDA runtime here: host pages */
    if (mem) {
        memset(mem, 7, 1 << 20);
        OK(ncclAllGather(mem, out, 4, ncclInt32, comm, NULL));
        CHECK(out[0] == 0x07070707, "an all-gather from ncclMemAlloc's memory: 0x%x", (unsigned)out[0]);
        OK(ncclMemFree(mem));
    }
    if (nranks > 1) {
        int leaver = nranks - 1;
        ncclComm_t small = NULL;
        if (rank == leaver) {
            CHECK(ncclAllReduce(in, out, 1, ncclInt32, ncclSum, comm, NULL) == ncclRemoteError,
                  "the left-out rank's call");
        } else {
            OK(ncclCommShrink(comm, &leaver, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
            int n = 0;
            OK(ncclCommCount(small, &n));
            CHECK(n == nranks - 1, "ncclCommShrink: %d ranks", n);
            OK(ncclCommDestroy(small));
        }
    }
    OK(ncclCommFinalize(comm));
    ncclCommDestroy(comm);
    free(in);
    free(out);
    return fails != 0;
}

static int make_id(void *id) { return ncclGetUniqueId(id) == ncclSuccess ? 0 : 1; }

static int rank_main(int r, const void *id) {
    rank = r;
    return run(*(const ncclUniqueId *)id);
}

int main(int argc, char **argv) {
    nranks = argc > 1 ? atoi(argv[1]) : 3;
    if (nranks < 1 || nranks > SPAWN_MAX_RANKS) return 2;
    Dl_info where;
    if (!dladdr((void *)ncclAllReduce, &where) || !where.dli_fname || !strstr(where.dli_fname, "drop-in")) {
        fprintf(stderr, "nccl_swap: ncclAllReduce comes from %s, not libccl's drop-in libnccl.so.2 (set "
                        "LD_LIBRARY_PATH to it)\n", where.dli_fname ? where.dli_fname : "nowhere");
        return 1;
    }
    int version = 0;
    ncclGetVersion(&version);
    int bad = spawn_ranks(nranks, sizeof(ncclUniqueId), make_id, rank_main, 120);
    if (!bad)
        printf("nccl_swap: built against NCCL %d.%d's nccl.h and libnccl.so.2, ran on %s (version %d): %d ranks, "
               "every result right\n", NCCL_MAJOR, NCCL_MINOR, where.dli_fname, version, nranks);
    return bad;
}
