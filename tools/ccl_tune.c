/*
 * ccl-tune: measures this machine for the cost model on purpose and writes
 * its tuning file. Each measurement is a real job of local ranks whose init
 * finds no figures and probes (the code every init runs); ccl-tune repeats
 * each job and keeps the median of every figure (the large point: the
 * best), so one slow moment of the machine does not stay in the file, as
 * it may when an init under load wrote it.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ccl.h"
#include "ccl_spawn.h"
#include "core/params.h"
#include "plan/tune.h"

static const char usage[] = "Usage: ccl-tune [--ranks N] [--reps R] [--output PATH]\n"
                            "  measures shared memory (N ranks, default 2) and TCP (N ranks posing as hosts) R times\n"
                            "  (default 5), the shared-memory jobs also cross-memory attach of 64 MiB buffers, and\n"
                            "  writes the medians (of the large steps, the best) to PATH\n"
                            "  (default: CCL_TUNING_FILE, else ~/.cache/libccl/tuning-<host>)\n";

/* One job of n ranks (transport shm or tcp) whose init writes its figures
 * to path. 0 when every rank succeeded. The job's coordinator starts its
 * ranks through the project's spawner (fork first, then the id). */
static int one_job(int n, const char *transport, const char *path) {
    pid_t job = fork();
    if (job < 0) return -1;
    if (job == 0) {
        setenv("CCL_TUNING_FILE", path, 1);
        setenv("CCL_TRANSPORT", transport, 1);
        setenv("CCL_BIND", "core", 1);
        /* Cross-memory attach's large point: peer buffers in no cache. */
        if (strcmp(transport, "shm") == 0) setenv("CCL_CMA_LARGE_PROBE", "64M", 1);
        static struct ccl_spawn s;
        struct ccl_spawned me;
        int forked = ccl_spawn_fork(&s, n, CCL_SPAWN_PIPE, &me), bad = forked != 0, st;
        if (forked == 1) {
            ccl_unique_id_t id;
            if (ccl_spawn_take_id(&me, &id, sizeof id) != 0) _exit(3);
            close(me.fd);
            char host[32];
            snprintf(host, sizeof host, "ccl-tune-host%d", me.rank);
            if (strcmp(transport, "tcp") == 0) setenv("CCL_HOST_ID", host, 1);
            ccl_comm_t *comm;
            if (ccl_comm_init_rank(&comm, n, id, me.rank) != CCL_OK) _exit(4);
            _exit(ccl_comm_destroy(comm) == CCL_OK ? 0 : 5);
        }
        ccl_unique_id_t id;
        bad |= bad || ccl_get_unique_id(&id) != CCL_OK;
        bad |= ccl_spawn_hand_id(&s, bad ? NULL : &id, sizeof id, 1) != 0;
        while (wait(&st) > 0) bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        _exit(bad);
    }
    int st;
    if (waitpid(job, &st, 0) < 0) return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    static const struct option longs[] = {
        {"ranks", 1, 0, 'n'}, {"reps", 1, 0, 'r'}, {"output", 1, 0, 'o'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int n = 2, reps = 5, c;
    const char *out = NULL;
    while ((c = getopt_long(argc, argv, "n:r:o:h", longs, NULL)) != -1) {
        switch (c) {
        case 'n': n = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'o': out = optarg; break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (optind < argc || n < 2 || n > 64 || reps < 1 || reps > 99) {
        fputs(usage, stderr);
        return 2;
    }
    /* The default path, read before any job sets CCL_TUNING_FILE; not
     * through ccl__params_get, which would fix this process's values and
     * make every forked job read the user's file instead of its own. */
    char target[600];
    if (out) snprintf(target, sizeof target, "%s", out);
    else ccl__params_tuning_file(target, sizeof target);
    if (strcmp(target, "none") == 0) {
        fprintf(stderr, "ccl-tune: CCL_TUNING_FILE=none: say where to write with --output\n");
        return 2;
    }
    char key[160], why[200], dir[] = "/tmp/ccl-tune-XXXXXX";
    ccl__tune_machine_key(key, sizeof key);
    if (!mkdtemp(dir)) return perror("ccl-tune: mkdtemp"), 1;

    static const char *const transports[] = {"shm", "tcp"};
    static const int classes[] = {CCL__LINK_NUMA, CCL__LINK_TCP};
    struct ccl__figures result;
    ccl__cost_defaults(&result);
    double alpha[2][99], speed[2][99], large[2][99], copy[198], reduce[198], call[198], cma[198], cma_large[198];
    int got[2] = {0, 0}, nlocal = 0, ncma = 0, ncma_large = 0;
    for (int i = 0; i < reps; i++)
        for (int t = 0; t < 2; t++) {
            char path[700];
            snprintf(path, sizeof path, "%s/%s-%d", dir, transports[t], i);
            struct ccl__figures f;
            ccl__cost_defaults(&f);
            int ok = one_job(n, transports[t], path) == 0 &&
                     ccl__tune_file_read(path, key, &f, why, sizeof why) == 1 && (f.measured >> classes[t] & 1u);
            unlink(path); /* read or not: the directory goes at the end */
            if (!ok) {
                fprintf(stderr, "ccl-tune: %d-rank %s job %d measured nothing\n", n, transports[t], i + 1);
                continue;
            }
            const struct ccl__link_figure *l = &f.link[classes[t]];
            alpha[t][got[t]] = l->alpha_us;
            large[t][got[t]] = l->large_bytes > 0 ? l->large_bytes_per_us : 0;
            speed[t][got[t]++] = l->bytes_per_us;
            /* Every job of a transport runs the same slots: one size. */
            if (l->large_bytes > 0) result.link[classes[t]].large_bytes = l->large_bytes;
            if (f.measured & CCL__FIG_LOCAL)
                copy[nlocal] = f.copy_bytes_per_us, reduce[nlocal++] = f.reduce_bytes_per_us;
            if (f.measured & CCL__FIG_CMA) call[ncma] = f.cma_call_us, cma[ncma++] = f.cma_bytes_per_us;
            if (f.measured & CCL__FIG_CMA_LARGE) {
                result.cma_large_bytes = f.cma_large_bytes; /* every job asks for one size */
                cma_large[ncma_large++] = f.cma_large_bytes_per_us;
            }
            printf("ccl-tune: %s job %d/%d: alpha %.2f us, %.0f bytes/us", transports[t], i + 1, reps, l->alpha_us,
                   l->bytes_per_us);
            if (l->large_bytes > 0) printf(", %.0f at %.0f-byte steps", l->large_bytes_per_us, l->large_bytes);
            printf("\n");
            fflush(stdout);
        }
    rmdir(dir);
    for (int t = 0; t < 2; t++)
        if (got[t]) {
            result.link[classes[t]].alpha_us = ccl__tune_median(alpha[t], got[t]);
            result.link[classes[t]].bytes_per_us = ccl__tune_median(speed[t], got[t]);
            /* The large point is the fastest job's: there this machine's
             * loopback TCP shows its two states most (the same minute's
             * jobs: 2.3 or 6 GB/s at 512 KiB, 64 KiB steps 2.1 or 3.4), and
             * benchmarks keep the fast one (bench/README.md, "--steady").
             * Shared memory's (steps of 4 chunks, where the ranks have
             * cores of their own) likewise. A slow state's point lies on
             * the small steps' line, where the model loses what the point
             * is for. */
            for (int k = 0; k < got[t]; k++)
                if (large[t][k] > result.link[classes[t]].large_bytes_per_us)
                    result.link[classes[t]].large_bytes_per_us = large[t][k];
            result.measured |= 1u << classes[t];
        }
    if (nlocal) {
        result.copy_bytes_per_us = ccl__tune_median(copy, nlocal);
        result.reduce_bytes_per_us = ccl__tune_median(reduce, nlocal);
        result.measured |= CCL__FIG_LOCAL;
    }
    if (ncma) {
        result.cma_call_us = ccl__tune_median(call, ncma);
        result.cma_bytes_per_us = ccl__tune_median(cma, ncma);
        result.measured |= CCL__FIG_CMA;
    }
    if (ncma_large) {
        result.cma_large_bytes_per_us = ccl__tune_median(cma_large, ncma_large);
        result.measured |= CCL__FIG_CMA_LARGE;
    } else {
        printf("ccl-tune: cross-memory attach of 64 MiB buffers not measured (CCL_DEBUG=INFO says why the "
               "single-copy path is off)\n");
    }
    if (!result.measured) {
        fprintf(stderr, "ccl-tune: every job failed; %s left as it was\n", target);
        return 1;
    }
    if (ccl__tune_file_write(target, key, &result, why, sizeof why) != 0) {
        fprintf(stderr, "ccl-tune: cannot write %s: %s\n", target, why);
        return 1;
    }
    char line[600];
    ccl__tune_describe(&result, (1u << CCL__LINK_NUMA) | (1u << CCL__LINK_TCP), line, sizeof line);
    printf("ccl-tune: wrote %s: %s\n", target, line);
    return 0;
}
