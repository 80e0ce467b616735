/*
 * The large point of cross-memory attach, measured as the single-copy
 * algorithm reads (algo/single_copy.c): a peer's buffer, written by its
 * owner before the call, read through the kernel 64 KiB a call into a
 * piece of scratch that stays in this core's cache, every rank reading at
 * once. At 64 MiB a buffer is in no cache, so the point is the speed of
 * memory through the kernel's copy, which init's 64 KiB probe (of bytes
 * its owner has just written) cannot see.
 */
#define _GNU_SOURCE
#include "tune_cma.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/cma.h"
#include "core/socket.h" /* ccl__now */
#include "plan/tune.h"

#define PIECE (64u << 10) /* single_copy.c's PIECE_BYTES */
#define MAX_PROCS 64
#define MAX_REPS 99

/* What the processes share: where each buffer lies, a barrier's count,
 * each read's time, the first error. */
struct board {
    uint64_t addr[MAX_PROCS];
    pid_t pid[MAX_PROCS];
    int arrived, err;
    double us[MAX_REPS][MAX_PROCS];
};

/* Every process arrives at barrier k (counting from 1) once all n have;
 * a process that died leaves the others to the parent's kill. */
static void barrier(struct board *b, int n, int k) {
    __atomic_add_fetch(&b->arrived, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&b->arrived, __ATOMIC_SEQ_CST) < n * k) sched_yield();
}

static void fail(struct board *b, int err) {
    int none = 0;
    __atomic_compare_exchange_n(&b->err, &none, err, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static void reader(struct board *b, int n, int me, size_t bytes, int reps) {
    char *buf = aligned_alloc(4096, bytes), *piece = aligned_alloc(64, PIECE);
    if (!buf || !piece) fail(b, ENOMEM);
    b->addr[me] = (uint64_t)(uintptr_t)buf;
    b->pid[me] = getpid();
    int k = 1, next = (me + 1) % n;
    barrier(b, n, k++);
    for (int rep = 0; rep < reps; rep++) {
        if (buf) memset(buf, rep + 1, bytes);
        barrier(b, n, k++); /* every buffer written */
        int err = __atomic_load_n(&b->err, __ATOMIC_SEQ_CST);
        double t0 = ccl__now();
        for (size_t off = 0; !err && off < bytes; off += PIECE)
            err = piece && b->addr[next] ? ccl__cma_read(b->pid[next], piece, b->addr[next] + off,
                                                         bytes - off < PIECE ? bytes - off : PIECE)
                                         : ENOMEM;
        b->us[rep][me] = (ccl__now() - t0) * 1e6;
        if (err) fail(b, err);
        barrier(b, n, k++); /* every read over: no buffer is written while read */
    }
    free(buf), free(piece);
}

int ccl__tune_cma_large(int n, size_t bytes, int reps, double *bytes_per_us) {
    if (n < 2 || n > MAX_PROCS || reps < 1 || reps > MAX_REPS || bytes < PIECE) return EINVAL;
    struct board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) return errno;
    pid_t pid[MAX_PROCS];
    int started = 0, bad = 0;
    for (; started < n; started++) {
        pid[started] = fork();
        if (pid[started] < 0) break;
        if (pid[started] == 0) {
            reader(b, n, started, bytes, reps);
            _exit(0);
        }
    }
    /* One that could not start, or one that died, leaves the others
     * waiting at a barrier: they go too. */
    if (started < n) {
        bad = 1;
        for (int i = 0; i < started; i++) kill(pid[i], SIGKILL);
    }
    for (int i = 0; i < started; i++) {
        int st;
        pid_t who = wait(&st);
        if (who > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !bad) {
            bad = 1;
            for (int j = 0; j < started; j++) kill(pid[j], SIGKILL);
        }
    }
    int err = bad ? -1 : b->err;
    if (!err) {
        double speed[MAX_REPS * MAX_PROCS];
        int k = 0;
        for (int rep = 0; rep < reps; rep++)
            for (int r = 0; r < n; r++) speed[k++] = (double)bytes / b->us[rep][r];
        *bytes_per_us = ccl__tune_median(speed, k);
    }
    munmap(b, sizeof *b);
    return err;
}
