/* memcpy on several cores at once: forked processes, one per core, each
 * with buffers of its own, started together through a shared page. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/measure.h"
#include "roofline.h"

/* Enough copies per run to last a while whatever the buffer size. */
#define BYTES_PER_RUN ((size_t)256 << 20)

struct board {
    _Atomic int ready, go;
    double secs[ROOFLINE_MAX_CPUS];
};

static void copier(struct board *b, int i, int cpu, size_t bytes, size_t copies) {
    roofline_pin(cpu);
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) _exit(1);
    memset(src, 1, bytes);
    memcpy(dst, src, bytes); /* every page touched before the clock starts */
    atomic_fetch_add(&b->ready, 1);
    while (!atomic_load(&b->go)) sched_yield();
    b->secs[i] = bench_time_copies(dst, src, bytes, copies);
    free(src);
    free(dst);
    _exit(0);
}

/* One run: the bytes all k copied over the slowest one's time, or 0. */
static double one_run(struct board *b, const int *cpus, int k, size_t bytes, size_t copies) {
    memset(b, 0, sizeof *b);
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
    atomic_store(&b->go, 1);
    for (int i = 0; i < started; i++) {
        int status;
        if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ok = 0;
    }
    double slowest = 0;
    for (int i = 0; i < k && ok; i++)
        if (b->secs[i] > slowest) slowest = b->secs[i];
    return ok && slowest > 0 ? (double)k * (double)bytes * (double)copies / slowest / 1e9 : 0;
}

double roofline_copy_gbps(const int *cpus, int k, size_t bytes, int reps) {
    if (k < 1 || k > ROOFLINE_MAX_CPUS || reps < 1 || reps > 99) return 0;
    struct board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) return 0;
    size_t copies = BYTES_PER_RUN / bytes ? BYTES_PER_RUN / bytes : 1;
    double runs[99];
    int n = 0;
    for (int r = 0; r < reps; r++) {
        double g = one_run(b, cpus, k, bytes, copies);
        if (g <= 0) break;
        runs[n++] = g;
    }
    munmap(b, sizeof *b);
    return n == reps ? bench_stats_of(runs, n).median : 0;
}
