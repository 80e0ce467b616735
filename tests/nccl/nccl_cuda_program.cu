/*
 * A CUDA program written against NCCL's API and the CUDA runtime, as a
 * trainer is: built with nvcc and linked against libccl-nccl, it must run
 * as it would on NCCL. Every rank (a process; all on GPU 0) puts its
 * buffers in device memory (cudaMalloc) and issues, on one stream of its
 * own with no host synchronisation in between, for three rounds:
 *   a kernel that writes the inputs -> a collective -> a kernel that checks
 *   the output against the value it must have,
 * for all-reduce (out of place and in place), reduce-scatter, all-gather,
 * broadcast, reduce and send/recv in a group. A collective that ran before
 * the kernel that writes its input, or a check kernel that ran before the
 * collective, sees another round's values and counts a mismatch. The
 * mismatch counter is read once, at the end.
 *
 * With "legacy" the stream is the legacy default stream (stream 0), as
 * simple programs pass it.
 *
 * Exits 77 (ctest: skipped), saying why, where there is no GPU.
 *   nccl_cuda_program [NRANKS [legacy]]   (default 2)
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl.h"
#include "nccl/check.h"
#include "spawn_ranks.h"

static int rank, nranks, fails, legacy;

#define CUDA_OK(call)                                                                 \
    do {                                                                              \
        cudaError_t e_ = (call);                                                      \
        CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));            \
    } while (0)

/* Element i of rank r's input in a round: integers, so float sums are exact
 * in any order. */
__host__ __device__ static float value(int r, size_t i, int round) {
    return (float)((r + 1) * (int)((i * 7 + (size_t)round * 13) % 1000) - 300 * round);
}

enum kind { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE, SENDRECV };

__global__ void produce(float *x, size_t n, int r, int round) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = value(r, i, round);
}

/* What element i of rank r's output must hold: c is the per-rank count. */
__device__ static float expected(enum kind k, int r, int nr, size_t i, size_t c, int round) {
    float s = 0;
    switch (k) {
    case ALL_REDUCE:
    case REDUCE:
        for (int q = 0; q < nr; q++) s += value(q, i, round);
        return s;
    case REDUCE_SCATTER:
        for (int q = 0; q < nr; q++) s += value(q, (size_t)r * c + i, round);
        return s;
    case ALL_GATHER: return value((int)(i / c), i % c, round);
    case BROADCAST: return value(nr - 1, i, round);
    default: return value((r + nr - 1) % nr, i, round);
    }
}

__global__ void check(const float *x, size_t n, enum kind k, int r, int nr, size_t c, int round, unsigned *bad) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (x[i] != expected(k, r, nr, i, c, round)) atomicAdd(&bad[k], 1u);
}

#define COUNT ((size_t)(1 << 20) + 5) /* per rank: divisible by nothing useful */

static int run_rank(ncclUniqueId id) {
    CUDA_OK(cudaSetDevice(0));
#ifdef SWAPPED_UNDER_LIBCCL
    /* Built against NVIDIA's nccl.h and libnccl.so.2, run with libccl's
     * drop-in in its place: the version that answers must be libccl's. */
    int version = 0;
    NCCL_OK(ncclGetVersion(&version));
    CHECK(version == SWAPPED_UNDER_LIBCCL, "ncclGetVersion says %d: NVIDIA's NCCL answered, not libccl's drop-in (%d)",
          version, SWAPPED_UNDER_LIBCCL);
#endif
    ncclComm_t comm;
    NCCL_OK(ncclCommInitRank(&comm, nranks, id, rank));
    if (fails) return 1;
    int dev = -1;
    NCCL_OK(ncclCommCuDevice(comm, &dev));
    CHECK(dev == 0, "ncclCommCuDevice: %d, expected 0", dev);
    cudaStream_t s = cudaStreamLegacy;
    if (!legacy) CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    size_t c = COUNT, all = c * (size_t)nranks;
    float *in, *out;
    unsigned *bad;
    CUDA_OK(cudaMalloc(&in, all * sizeof(float)));
    CUDA_OK(cudaMalloc(&out, all * sizeof(float)));
    CUDA_OK(cudaMalloc(&bad, 8 * sizeof(unsigned)));
    CUDA_OK(cudaMemsetAsync(bad, 0, 8 * sizeof(unsigned), s));
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    for (int round = 0; round < 3; round++) {
        produce<<<264, 256, 0, s>>>(in, all, rank, round);
        NCCL_OK(ncclAllReduce(in, out, c, ncclFloat32, ncclSum, comm, s));
        check<<<264, 256, 0, s>>>(out, c, ALL_REDUCE, rank, nranks, c, round, bad);
        produce<<<264, 256, 0, s>>>(out, c, rank, round);
        NCCL_OK(ncclAllReduce(out, out, c, ncclFloat32, ncclSum, comm, s)); /* in place */
        check<<<264, 256, 0, s>>>(out, c, ALL_REDUCE, rank, nranks, c, round, bad);
        produce<<<264, 256, 0, s>>>(in, all, rank, round);
        NCCL_OK(ncclReduceScatter(in, out, c, ncclFloat32, ncclSum, comm, s));
        check<<<264, 256, 0, s>>>(out, c, REDUCE_SCATTER, rank, nranks, c, round, bad);
        NCCL_OK(ncclAllGather(in, out, c, ncclFloat32, comm, s));
        check<<<264, 256, 0, s>>>(out, all, ALL_GATHER, rank, nranks, c, round, bad);
        NCCL_OK(ncclBroadcast(in, out, c, ncclFloat32, nranks - 1, comm, s));
        check<<<264, 256, 0, s>>>(out, c, BROADCAST, rank, nranks, c, round, bad);
        NCCL_OK(ncclReduce(in, out, c, ncclFloat32, ncclSum, 0, comm, s));
        if (rank == 0) check<<<264, 256, 0, s>>>(out, c, REDUCE, rank, nranks, c, round, bad);
        NCCL_OK(ncclGroupStart());
        NCCL_OK(ncclSend(in, c, ncclFloat32, next, comm, s));
        NCCL_OK(ncclRecv(out, c, ncclFloat32, prev, comm, s));
        NCCL_OK(ncclGroupEnd());
        check<<<264, 256, 0, s>>>(out, c, SENDRECV, rank, nranks, c, round, bad);
        CUDA_OK(cudaGetLastError());
    }
    unsigned got[8];
    CUDA_OK(cudaMemcpyAsync(got, bad, sizeof got, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    static const char *const names[] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast", "reduce", "send/recv"};
    for (int k = 0; k <= SENDRECV; k++)
        CHECK(got[k] == 0, "%s: %u elements wrong over 3 rounds (the stream's order was not kept, or the data is wrong)",
              names[k], got[k]);
    ncclResult_t async = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclSuccess, "ncclCommGetAsyncError: %s", ncclGetErrorString(async));
    /* ncclMemAlloc in a program with the CUDA runtime: device memory, good for a call on the stream */
    float *dm = NULL, host[4] = {0};
    NCCL_OK(ncclMemAlloc((void **)&dm, 1 << 20));
    if (dm) {
        cudaPointerAttributes attr;
        CUDA_OK(cudaPointerGetAttributes(&attr, dm));
        CHECK(attr.type == cudaMemoryTypeDevice, "ncclMemAlloc gave memory of type %d, not device memory", (int)attr.type);
        float ones[4] = {1, 1, 1, 1};
        CUDA_OK(cudaMemcpyAsync(dm, ones, sizeof ones, cudaMemcpyHostToDevice, s));
        NCCL_OK(ncclAllReduce(dm, dm, 4, ncclFloat32, ncclSum, comm, s));
        CUDA_OK(cudaMemcpyAsync(host, dm, sizeof host, cudaMemcpyDeviceToHost, s));
        CUDA_OK(cudaStreamSynchronize(s));
        CHECK(host[3] == (float)nranks, "an all-reduce on ncclMemAlloc's memory gave %g", host[3]);
        NCCL_OK(ncclMemFree(dm));
    }
    CUDA_OK(cudaFree(in));
    CUDA_OK(cudaFree(out));
    CUDA_OK(cudaFree(bad));
    if (!legacy) CUDA_OK(cudaStreamDestroy(s));
    NCCL_OK(ncclCommDestroy(comm));
    return fails != 0;
}

static int make_id(void *id) {
    if (ncclGetUniqueId((ncclUniqueId *)id) == ncclSuccess) return 0;
    fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
    return 1;
}

static int rank_main(int r, const void *id) {
    rank = r;
    return run_rank(*(const ncclUniqueId *)id);
}

/* Whether there is a GPU, asked in a child: a process that has initialised
 * CUDA cannot hand it to the ranks it forks. */
static int gpu_count(char *why, size_t n) {
    int p[2];
    if (pipe(p) != 0) return snprintf(why, n, "pipe failed"), -1;
    pid_t pid = fork();
    if (pid == 0) {
        int count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        char msg[200];
        int len = snprintf(msg, sizeof msg, "%d %s", e == cudaSuccess ? count : 0,
                           e == cudaSuccess ? "GPUs" : cudaGetErrorString(e));
        _exit(write(p[1], msg, (size_t)len) == len ? 0 : 1);
    }
    close(p[1]);
    char msg[200] = "";
    ssize_t got = pid > 0 ? read(p[0], msg, sizeof msg - 1) : -1;
    close(p[0]);
    int st = 0;
    if (pid > 0) waitpid(pid, &st, 0);
    if (got <= 0) return snprintf(why, n, "the probe for a GPU failed (status 0x%x)", st), -1;
    msg[got] = 0;
    int count = atoi(msg);
    snprintf(why, n, "%s", strchr(msg, ' ') ? strchr(msg, ' ') + 1 : msg);
    return count;
}

int main(int argc, char **argv) {
    nranks = argc > 1 ? atoi(argv[1]) : 2;
    legacy = argc > 2 && strcmp(argv[2], "legacy") == 0;
    if (nranks < 1 || nranks > 8 || (argc > 2 && !legacy)) {
        fprintf(stderr, "usage: nccl_cuda_program [NRANKS, 1 to 8 [legacy]]\n");
        return 2;
    }
    char why[256];
    int gpus = gpu_count(why, sizeof why);
    if (gpus < 0) return fprintf(stderr, "nccl_cuda_program: %s\n", why), 1;
    if (gpus == 0) {
        printf("SKIP: device buffers need a GPU and its driver: %s\n", why);
        return 77;
    }
    int bad = spawn_ranks(nranks, sizeof(ncclUniqueId), make_id, rank_main, 300);
    printf("nccl_cuda_program: %d ranks on one GPU, %s stream: %s\n", nranks, legacy ? "the legacy default" : "a created",
           bad ? "FAILED" : "every check passed");
    return bad;
}
