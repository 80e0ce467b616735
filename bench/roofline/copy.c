/* memcpy on several cores at once: forked processes, one per core, each
 * with buffers of its own, started together through a shared page; or the
 * kernel's copy between processes (process_vm_readv), each process reading
 * the next one's buffer into its own, as a library moves ordinary buffers
 * between ranks in one copy; or an all-gather's writes: a buffer written
 * as blocks copied from a source of one block, with memcpy or with
 * streaming stores. */
#define _GNU_SOURCE
#include <sched.h>
#include <sys/uio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "common/measure.h"
#include "roofline.h"

/* Enough copies per run to last a while whatever the buffer size. */
#define BYTES_PER_RUN ((size_t)256 << 20)

enum way { MEMCPY, KERNEL, GATHER, GATHER_STREAMING };

struct board {
    _Atomic int ready, go, done;
    int way, k, nblocks;
    double secs[ROOFLINE_MAX_CPUS];
    pid_t pid[ROOFLINE_MAX_CPUS];
    uintptr_t src[ROOFLINE_MAX_CPUS];
};

/* copies reads of the whole of process `from`'s buffer into dst; the time,
 * or -1 when the kernel refuses. */
static double time_reads(struct board *b, int from, char *dst, size_t bytes, size_t copies) {
    struct iovec local = {dst, bytes}, remote = {(void *)b->src[from], bytes};
    double t0 = bench_now();
    for (size_t c = 0; c < copies; c++)
        if (process_vm_readv(b->pid[from], &local, 1, &remote, 1, 0) != (ssize_t)bytes) return -1;
    return bench_now() - t0;
}

/* dst <- src with stores that go past the caches (the 16-byte aligned
 * middle; memcpy for the ends), fenced as a library must before it says
 * the data is there. */
static void copy_streaming(char *dst, const char *src, size_t bytes) {
#if defined(__x86_64__)
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15, i;
    if (head > bytes) head = bytes;
    memcpy(dst, src, head);
    for (i = head; i + 16 <= bytes; i += 16)
        _mm_stream_si128((__m128i *)(void *)(dst + i), _mm_loadu_si128((const __m128i *)(const void *)(src + i)));
    _mm_sfence();
    memcpy(dst + i, src + i, bytes - i);
#else
    memcpy(dst, src, bytes);
#endif
}

/* copies writes of the whole of dst (bytes) as nblocks blocks, each
 * copied from src (one block: bytes / nblocks, the last takes the rest). */
static double time_gathers(char *dst, const char *src, size_t bytes, int nblocks, int streaming, size_t copies) {
    size_t block = bytes / (size_t)nblocks;
    double t0 = bench_now();
    for (size_t c = 0; c < copies; c++) {
        for (int k = 0; k < nblocks; k++) {
            size_t n = k == nblocks - 1 ? bytes - block * (size_t)k : block;
            if (streaming) copy_streaming(dst + block * (size_t)k, src, n);
            else memcpy(dst + block * (size_t)k, src, n);
        }
        __asm__ __volatile__("" : : "r"(dst) : "memory");
    }
    return bench_now() - t0;
}

static void copier(struct board *b, int i, int cpu, size_t bytes, size_t copies) {
    roofline_pin(cpu);
    int gather = b->way == GATHER || b->way == GATHER_STREAMING;
    /* a gather's source is one block (the last, the largest, rounded up) */
    size_t src_bytes = gather ? bytes - bytes / (size_t)b->nblocks * (size_t)(b->nblocks - 1) : bytes;
    char *src = malloc(src_bytes), *dst = malloc(bytes);
    if (!src || !dst) _exit(1);
    memset(src, 1, src_bytes);
    memset(dst, 2, bytes); /* every page touched before the clock starts */
    b->pid[i] = getpid(), b->src[i] = (uintptr_t)src;
    atomic_fetch_add(&b->ready, 1);
    while (!atomic_load(&b->go)) sched_yield();
    double t = b->way == KERNEL ? time_reads(b, (i + 1) % b->k, dst, bytes, copies)
               : gather        ? time_gathers(dst, src, bytes, b->nblocks, b->way == GATHER_STREAMING, copies)
                               : bench_time_copies(dst, src, bytes, copies);
    b->secs[i] = t;
    /* the others may still read this buffer */
    atomic_fetch_add(&b->done, 1);
    while (atomic_load(&b->done) < b->k) sched_yield();
    free(src);
    free(dst);
    _exit(t < 0 ? 2 : 0);
}

/* One run: the bytes all k copied over the slowest one's time, or 0. */
static double one_run(struct board *b, const int *cpus, int k, size_t bytes, size_t copies, int way, int nblocks) {
    memset(b, 0, sizeof *b);
    b->way = way, b->k = k, b->nblocks = nblocks;
    pid_t pids[ROOFLINE_MAX_CPUS];
    int started = 0, ok = 1;
    for (; started < k; started++) {
        pids[started] = fork();
        if (pids[started] < 0) break;
        if (pids[started] == 0) copier(b, started, cpus[started], bytes, copies);
    }
    if (started < k) ok = 0;
    while (ok && atomic_load(&b->ready) < k) {
        int status;
        /* a copier that died before it got ready (out of memory) would keep
         * this loop waiting for ever */
        if (waitpid(-1, &status, WNOHANG) > 0) ok = 0;
        else nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (!ok) atomic_store(&b->done, k); /* nobody waits for a copier that never came */
    atomic_store(&b->go, 1);
    for (int i = 0; i < started; i++) {
        int status;
        if (waitpid(-1, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            ok = 0;
            atomic_store(&b->done, k); /* the others wait for every copier's end: they end now */
        }
    }
    double slowest = 0;
    for (int i = 0; i < k && ok; i++)
        if (b->secs[i] > slowest) slowest = b->secs[i];
    return ok && slowest > 0 ? (double)k * (double)bytes * (double)copies / slowest / 1e9 : 0;
}

static double median_gbps(const int *cpus, int k, size_t bytes, int reps, int way, int nblocks) {
    if (k < 1 || k > ROOFLINE_MAX_CPUS || reps < 1 || reps > 99) return 0;
    struct board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) return 0;
    size_t copies = BYTES_PER_RUN / bytes ? BYTES_PER_RUN / bytes : 1;
    double runs[99];
    int n = 0;
    for (int r = 0; r < reps; r++) {
        double g = one_run(b, cpus, k, bytes, copies, way, nblocks);
        if (g <= 0) break;
        runs[n++] = g;
    }
    munmap(b, sizeof *b);
    return n == reps ? bench_stats_of(runs, n).median : 0;
}

double roofline_copy_gbps(const int *cpus, int k, size_t bytes, int reps) {
    return median_gbps(cpus, k, bytes, reps, MEMCPY, 1);
}

double roofline_cma_gbps(const int *cpus, int k, size_t bytes, int reps) {
    return median_gbps(cpus, k, bytes, reps, KERNEL, 1);
}

double roofline_gather_gbps(const int *cpus, int k, size_t bytes, int nblocks, int reps) {
    if (nblocks < 1 || (size_t)nblocks > bytes) return 0;
    double plain = median_gbps(cpus, k, bytes, reps, GATHER, nblocks);
    double streaming = median_gbps(cpus, k, bytes, reps, GATHER_STREAMING, nblocks);
    if (plain <= 0 || streaming <= 0) return 0;
    return plain > streaming ? plain : streaming;
}
