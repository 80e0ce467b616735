/*
 * Device buffers on a GPU: 2 ranks (processes) on device 0, every
 * collective x dtype x op on cuMemAlloc'd buffers, in place and out, counts
 * 0, 1, 1001 and 4 MiB + 3 elements, each result compared bit for bit with
 * the same call on host buffers (the host path is checked against its own
 * reference by the rest of the suite); then the same through a stream
 * (ccl_all_reduce_stream) with no host synchronisation between the copy
 * that writes the input, the collective and the copy that reads the output.
 *
 * Every rank is on one GPU, so the calls take the GPU-resident path (one
 * kernel reads and writes every rank's buffers), which folds in rank order
 * as the host's direct algorithm does: the host calls compared with it
 * are forced to that algorithm, and ccl_comm_describe must count the
 * calls that ran on the GPU. With "staged" (CCL_CUDA_DIRECT=0) the device
 * calls are staged through host memory instead, the host calls run the
 * planner's algorithms, and none may run on the GPU.
 *
 * With "kill": every rank all-reduces 16 MiB device buffers in a loop and
 * the last one kills itself (SIGKILL) a few milliseconds into its third
 * call, wherever that call is (on the GPU-resident path: trading records,
 * the leader's kernel, waiting for it); every
 * other rank must see a remote failure or a timeout within CCL_TIMEOUT
 * plus 5 s, fail its next call at once, and nothing may be left in
 * /dev/shm.
 *
 * Exits 77 (ctest: skipped), saying why, where no CUDA driver or no GPU is
 * present. It loads the driver itself, as libccl does, so it builds
 * anywhere.   cuda_device [NRANKS [kill | staged]]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ccl.h"
#include "coll_kinds.h"
#include "gpu_resident_calls.h"
#include "spawn_ranks.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, int);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*Memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamSynchronize)(CUstream);
} cu;

static int load(char *why, size_t n) {
    void *h = dlopen(getenv("CCL_CUDA_LIBRARY") ? getenv("CCL_CUDA_LIBRARY") : "libcuda.so.1", RTLD_NOW);
    if (!h) return snprintf(why, n, "no CUDA driver: %s", dlerror()), -1;
    const char *names[] = {"cuInit", "cuDeviceGetCount", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc_v2",
                           "cuMemFree_v2", "cuMemcpy", "cuMemcpyAsync", "cuStreamCreate", "cuStreamSynchronize"};
    void **slots = (void **)&cu;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(slots[i] = dlsym(h, names[i]))) return snprintf(why, n, "the CUDA driver has no %s", names[i]), -1;
    int count = 0;
    if (cu.Init(0) != 0 || cu.DeviceGetCount(&count) != 0 || count == 0) return snprintf(why, n, "no GPU (cuInit or cuDeviceGetCount)"), -1;
    return 0;
}

static int fails;
#define CHECK(c, ...) \
    do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); fails++; } } while (0)

static void fill(void *p, size_t bytes, int rank, int salt) {
    unsigned char *b = p;
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank * 131 + salt + 1);
    for (size_t i = 0; i < bytes; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, b[i] = (unsigned char)(x >> 24);
}

/* Device 0's context made current, then the rank's communicator; 0 or 1. */
static int open_rank(int rank, int nranks, ccl_unique_id_t id, ccl_comm_t **comm) {
    CUcontext ctx;
    if (cu.DevicePrimaryCtxRetain(&ctx, 0) != 0 || cu.CtxSetCurrent(ctx) != 0)
        return fprintf(stderr, "rank %d: no context on device 0\n", rank), 1;
    return ccl_comm_init_rank(comm, nranks, id, rank) != CCL_OK;
}

static int staged; /* CCL_CUDA_DIRECT=0 */

static int rank_main(int rank, int nranks, ccl_unique_id_t id) {
    ccl_comm_t *comm;
    if (open_rank(rank, nranks, id, &comm)) return 1;
    if (!staged && nranks > 1)
        CHECK(ccl_comm_set_algo(comm, "allreduce:direct,reducescatter:direct,allgather:direct,broadcast:direct,"
                                      "reduce:direct") == CCL_OK,
              "rank %d: ccl_comm_set_algo: %s", rank, ccl_comm_last_error(comm));
    const size_t counts[] = {0, 1, 1001, (4u << 20) + 3};
    size_t maxb = ((4u << 20) + 3) * 8 * (size_t)nranks;
    char *hin = malloc(maxb), *hout = malloc(maxb), *dres = malloc(maxb);
    CUdeviceptr din, dout;
    cu.MemAlloc(&din, maxb);
    cu.MemAlloc(&dout, maxb);
    for (int k = 0; k < COLL_KINDS; k++)
        for (int dt = 0; dt < CCL_NUM_DTYPES; dt++)
            for (int op = 0; op < CCL_NUM_OPS; op++) {
                if ((k == COLL_AG || k == COLL_BC || k == COLL_A2A) && op) continue;
                if (op >= CCL_BAND && dt >= CCL_FLOAT16) continue; /* bitwise ops: integers only */
                for (size_t ci = 0; ci < 4; ci++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        size_t n = counts[ci], es = ccl_dtype_size(dt);
                        if (n > 1001 && (dt != CCL_FLOAT32 || op)) continue; /* the big count: float32 sum */
                        size_t in_b, out_b;
                        coll_kind_bytes(k, n, nranks, es, &in_b, &out_b);
                        size_t buf_b = in_b > out_b ? in_b : out_b;
                        fill(hin, buf_b, rank, k * 100 + dt * 10 + op);
                        memcpy(hout, hin, buf_b);
                        cu.Memcpy(din, (CUdeviceptr)(uintptr_t)hin, buf_b);
                        cu.Memcpy(dout, (CUdeviceptr)(uintptr_t)hin, buf_b);
                        const void *hs = hin, *ds = (void *)(uintptr_t)din;
                        void *hr = inplace ? hin : hout, *dr = inplace ? (void *)(uintptr_t)din : (void *)(uintptr_t)dout;
                        if (inplace && k == COLL_AG) hs = hin + rank * n * es, ds = (char *)(uintptr_t)din + rank * n * es;
                        if (inplace && (k == COLL_RS || k == COLL_A2A)) continue; /* in place only where the API has it */
                        ccl_status_t a = coll_kind_call(k, hs, hr, n, dt, op, comm), b = coll_kind_call(k, ds, dr, n, dt, op, comm);
                        CHECK(a == CCL_OK && b == CCL_OK, "kind %d dtype %d op %d: %s / %s", k, dt, op,
                              ccl_status_string(a), ccl_status_string(b));
                        cu.Memcpy((CUdeviceptr)(uintptr_t)dres, (CUdeviceptr)(uintptr_t)dr, out_b);
                        if (!(k == COLL_RD && rank != 0))
                            CHECK(memcmp(dres, hr, out_b) == 0, "kind %d dtype %d op %d count %zu in place %d: device "
                                  "result differs from host", k, dt, op, n, inplace);
                    }
            }
    /* Stream order: copy in, all-reduce, copy out, one stream, no host sync between. */
    CUstream s;
    cu.StreamCreate(&s, 1);
    size_t n = (1u << 20) + 7;
    fill(hin, n * 4, rank, 999);
    for (int round = 0; round < 3; round++) {
        cu.MemcpyAsync(din, (CUdeviceptr)(uintptr_t)hin, n * 4, s);
        CHECK(ccl_all_reduce_stream((void *)(uintptr_t)din, (void *)(uintptr_t)dout, n, CCL_INT32, CCL_SUM, comm, s) == CCL_OK,
              "all_reduce_stream: %s", ccl_comm_last_error(comm));
        cu.MemcpyAsync((CUdeviceptr)(uintptr_t)dres, dout, n * 4, s);
        cu.StreamSynchronize(s);
        CHECK(ccl_all_reduce(hin, hout, n, CCL_INT32, CCL_SUM, comm) == CCL_OK, "host all_reduce");
        CHECK(memcmp(dres, hout, n * 4) == 0, "stream-ordered all_reduce, round %d: differs", round);
    }
    long ran = gpu_resident_calls(comm);
    if (staged || nranks == 1)
        CHECK(ran == -1, "rank %d: %ld calls ran on the GPU, where none should", rank, ran);
    else
        CHECK(ran > 0, "rank %d: no call ran on the GPU (gpu_resident_calls %ld)", rank, ran);
    if (rank == 0) fprintf(stderr, "cuda_device: %ld calls on the GPU-resident path\n", ran < 0 ? 0 : ran);
    cu.MemFree(din);
    cu.MemFree(dout);
    ccl_comm_destroy(comm);
    return fails != 0;
}

#define KILL_TIMEOUT_S 20 /* CCL_TIMEOUT of the kill runs */
#define KILL_LOOP_S 120.0
#define KILL_COUNT ((size_t)4 << 20) /* 16 MiB of float32 per call */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile double *death_time; /* shared by every rank: when the victim died */

static void *die_soon(void *arg) {
    nanosleep(&(struct timespec){0, (long)(uintptr_t)arg * 1000000L}, NULL);
    *death_time = now_s();
    raise(SIGKILL);
    return NULL;
}

static int kill_main(int rank, int nranks, ccl_unique_id_t id) {
    ccl_comm_t *comm;
    if (open_rank(rank, nranks, id, &comm)) return 1;
    CUdeviceptr din, dout;
    if (cu.MemAlloc(&din, KILL_COUNT * 4) != 0 || cu.MemAlloc(&dout, KILL_COUNT * 4) != 0)
        return fprintf(stderr, "rank %d: cuMemAlloc failed\n", rank), 1;
    int victim = rank == nranks - 1, iterations = 0;
    ccl_status_t st = CCL_OK;
    for (double end = now_s() + KILL_LOOP_S; now_s() < end && st == CCL_OK; iterations++) {
        /* After its second call (whose result holds every rank's input, so
         * every rank is in the loop), a few ms into the third. */
        pthread_t th;
        if (victim && iterations == 2 && pthread_create(&th, NULL, die_soon, (void *)(uintptr_t)(1 + getpid() % 8)) != 0)
            raise(SIGKILL);
        st = ccl_all_reduce((void *)(uintptr_t)din, (void *)(uintptr_t)dout, KILL_COUNT, CCL_FLOAT32, CCL_SUM, comm);
    }
    double noticed = now_s() - *death_time;
    if (victim) return fprintf(stderr, "rank %d: the victim was not killed\n", rank), 1;
    CHECK(st == CCL_ERR_REMOTE || st == CCL_ERR_TIMEOUT, "rank %d: after %d calls the loop ended with %s, expected a "
          "remote failure or a timeout", rank, iterations, ccl_status_string(st));
    CHECK(ccl_comm_last_error(comm)[0] != '\0', "rank %d: no last error after %s", rank, ccl_status_string(st));
    CHECK(noticed < KILL_TIMEOUT_S + 5, "rank %d noticed the death after %.1f s", rank, noticed);
    double t0 = now_s();
    ccl_status_t later = ccl_all_reduce((void *)(uintptr_t)din, (void *)(uintptr_t)dout, 1, CCL_FLOAT32, CCL_SUM, comm);
    CHECK(later < 0 && now_s() - t0 < 5.0, "rank %d: a call after the failure returned %s after %.1f s", rank,
          ccl_status_string(later), now_s() - t0);
    fprintf(stderr, "cuda_device kill: rank %d saw \"%s\" %.3f s after the death, after %d calls: %s\n", rank,
            ccl_status_string(st), noticed, iterations, ccl_comm_last_error(comm));
    cu.MemFree(din);
    cu.MemFree(dout);
    ccl_comm_destroy(comm);
    return fails != 0;
}

/* /dev/shm entries whose names start with prefix. */
static int shm_count(const char *prefix) {
    DIR *d = opendir("/dev/shm");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d) closedir(d);
    return n;
}

static int make_id(void *id) { return ccl_get_unique_id(id) == CCL_OK ? 0 : 1; }

static int nranks, killing;
static int rank_process(int rank, const void *id) {
    char why[300];
    if (load(why, sizeof why) < 0) return fprintf(stderr, "rank %d: %s\n", rank, why), 1;
    return (killing ? kill_main : rank_main)(rank, nranks, *(const ccl_unique_id_t *)id);
}

/* Whether a GPU is there, asked in a child: CUDA initialised in this
 * process would not survive the fork of the ranks. */
static int probe(char *why, size_t n) {
    int p[2];
    if (pipe(p) != 0) return snprintf(why, n, "pipe failed"), -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        char w[300] = "";
        int rc = load(w, sizeof w);
        if (rc < 0 && write(p[1], w, strlen(w)) < 0) _exit(2);
        _exit(rc < 0);
    }
    close(p[1]);
    ssize_t got = pid > 0 ? read(p[0], why, n - 1) : -1;
    why[got > 0 ? got : 0] = 0;
    close(p[0]);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) > 1)
        return snprintf(why, n, "the probe for a GPU failed (status 0x%x)", st), -2;
    return WEXITSTATUS(st) ? -1 : 0;
}

int main(int argc, char **argv) {
    nranks = argc > 1 ? atoi(argv[1]) : 2;
    killing = argc > 2 && strcmp(argv[2], "kill") == 0;
    staged = argc > 2 && strcmp(argv[2], "staged") == 0;
    if (nranks < 1 || nranks > 8 || (argc > 2 && !killing && !staged) || (killing && nranks < 2))
        return fprintf(stderr, "usage: cuda_device [NRANKS, 1 to 8 [kill, with 2 or more | staged]]\n"), 2;
    if (staged) setenv("CCL_CUDA_DIRECT", "0", 1);
    char why[300];
    int found = probe(why, sizeof why);
    if (found == -1) {
        printf("SKIP: device buffers need a GPU: %s\n", why);
        return 77;
    }
    if (found < 0) return fprintf(stderr, "cuda_device: %s\n", why), 1;
    if (!killing) {
        int bad = spawn_ranks(nranks, sizeof(ccl_unique_id_t), make_id, rank_process, 600);
        printf("cuda_device: %d ranks: %s\n", nranks, bad ? "FAILED" : "every check passed");
        return bad;
    }
    char prefix[32], timeout[16];
    snprintf(prefix, sizeof prefix, "cclcudakill%d", (int)getpid());
    snprintf(timeout, sizeof timeout, "%d", KILL_TIMEOUT_S);
    setenv("CCL_SHM_PREFIX", prefix, 1);
    setenv("CCL_TIMEOUT", timeout, 1);
    death_time = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (death_time == MAP_FAILED) return fprintf(stderr, "cuda_device: mmap failed\n"), 1;
    *death_time = 0;
    int bad = spawn_ranks_one_killed(nranks, sizeof(ccl_unique_id_t), make_id, rank_process, 300, nranks - 1);
    int left = shm_count(prefix);
    if (left) fprintf(stderr, "cuda_device kill: %d /dev/shm entries named %s* left behind\n", left, prefix);
    printf("cuda_device kill: %d ranks, the last killed mid-call: %s\n", nranks, bad || left ? "FAILED" : "every check passed");
    return bad || left;
}
