/*
 * roofline: what this machine lets any collective library reach, measured
 * with no library at all, so that a benchmark's busbw can be held against
 * the machine and not only against another library:
 *
 *   build/bench/roofline [--ranks 2,4,8] [-b 64K] [-e 64M] [-f 4] [--blocks 3] [--block-bytes 128M]
 *                        [--copy-bytes 64M] [--reps 5] [--sockbuf 4M] [--no-tcp]
 *
 * memcpy on 1 core and on k cores at once (forked processes, one per core,
 * buffers of their own). An all-reduce of N ranks on one host must at least
 * read every rank's input and write every rank's output once: N memcpys of
 * the buffer, shared by the min(N, cpus) cores they run on. Its busbw,
 * 2(N-1)/N x size / time, is therefore at most 2(N-1)/N^2 x what those
 * cores copy in all, however it moves its data; a real algorithm moves more.
 *
 * The zero-copy path reads more than that bound counts (each rank reads
 * its peers' finished slices too) but copies nothing into shared memory
 * first: its own figure, its bytes read and written at memcpy's rate, is
 * printed beside (a reduction reads two streams for each it writes, and
 * reading costs less than copying, so the path can pass it).
 *
 * TCP over the loopback between two processes (each on a core of its own
 * when there are two): one way, and both ways at once, per size, the
 * fastest of every way tried (socket buffers, waiting asleep or spinning,
 * calls of all that is left or of a slot's 512 KiB). A 2-rank
 * all-reduce of S bytes must send and receive S bytes on each rank, so its
 * busbw (S / time) is at most the fastest both-ways rate of any piece size
 * up to S.
 *
 * --per-size also times memcpy at every size of the sweep (-b, -e, -f) on
 * min(N, cpus) cores at once, and bounds each collective there by the
 * bytes it must copy, however it moves them (S the benchmark's size):
 *   all-reduce  N x S (every input read, every output written): busbw
 *               (2(N-1)/N x S/t) at most 2(N-1)/N^2 x the cores' rate
 *   all-gather  out of place, N x S (each rank writes its whole output):
 *               busbw ((N-1)/N x S/t) at most (N-1)/N^2 x the rate of
 *               the "gather" column, which writes an S buffer as N blocks
 *               copied from one source of a block's size (an all-gather's
 *               footprint, its own block in the caches: the fastest such
 *               writes can come; memcpy or streaming stores, the faster);
 *               in place, (N-1) x S (the N-1 blocks of the others): at
 *               most 1/N x memcpy's rate
 *   broadcast   (N-1) x S (every rank but the root writes S): busbw (S/t)
 *               at most 1/(N-1) x the rate
 * In the caches (small S) these are far above what any library reaches:
 * there the time goes to synchronisation, not to bytes.
 *
 * The kernel's copy between processes (process_vm_readv, each process
 * reading the next one's buffer) is printed beside, as the rate at which
 * reads of another rank's ordinary buffer (mapped by no other process)
 * can come in one copy. It is no bound of its own: ordinary buffers can
 * also go through shared windows small enough for the caches, whose
 * copies add work but no memory traffic, so no collective on them has a
 * tighter bound from bytes than the one above. (A bound that counted
 * every staged copy at memcpy's rate was printed here once; libccl's
 * 4-rank all-reduce of 64 MiB passed it, 3.21 GB/s where it said 2.45.)
 *
 * Exit status: 0; 2 for bad flags; 3 when a measurement could not run.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/options.h"
#include "roofline.h"

#define MAX_RANK_COUNTS 16
#define MAX_SIZES 64

struct opts {
    int ranks[MAX_RANK_COUNTS], nranks;
    size_t min, max, copy_bytes, sockbuf, block_bytes;
    int factor, blocks, reps, tcp, per_size;
};

static int usage(FILE *f, const char *msg) {
    if (msg) fprintf(f, "roofline: %s\n", msg);
    fprintf(f, "usage: roofline [--ranks N,N,...] [-b MIN] [-e MAX] [-f F] [--blocks N] [--block-bytes N]\n"
               "                [--copy-bytes N] [--reps N] [--sockbuf N] [--no-tcp] [--per-size]\n"
               "  --ranks       rank counts to bound a shared-memory all-reduce for (2,4,8)\n"
               "  -b, -e, -f    the sweeps: smallest and largest size, step factor (64K, 64M, 4)\n"
               "  --per-size    memcpy at every size of the sweep, and each collective's bound there\n"
               "  --blocks      timed blocks per TCP size and way of running it; the fastest counts (3)\n"
               "  --block-bytes bytes one way in a TCP block (128M)\n"
               "  --copy-bytes  memcpy buffer size (64M)\n"
               "  --reps        memcpy runs; the median counts (5)\n"
               "  --sockbuf     TCP socket buffers tried besides autotuning, 0: none (4M, libccl's)\n"
               "  --no-tcp      memcpy only\n");
    return msg ? 2 : 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_ranks(const char *s, struct opts *o) {
    char buf[256];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    o->nranks = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (o->nranks == MAX_RANK_COUNTS || parse_int(t, 1, 1 << 20, &o->ranks[o->nranks++])) return -1;
    return o->nranks ? 0 : -1;
}

/* 0: run; 1: help printed; 2: bad flags (the message printed). */
static int parse(int argc, char **argv, struct opts *o) {
    *o = (struct opts){.ranks = {2, 4, 8}, .nranks = 3, .min = 64 << 10, .max = 64 << 20, .copy_bytes = 64 << 20,
                       .sockbuf = 4 << 20, .block_bytes = 128 << 20, .factor = 4, .blocks = 3, .reps = 5, .tcp = 1};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) return usage(stdout, NULL), 1;
        if (!strcmp(f, "--no-tcp")) {
            o->tcp = 0;
            continue;
        }
        if (!strcmp(f, "--per-size")) {
            o->per_size = 1;
            continue;
        }
        if (!v) return usage(stderr, "a flag without its value, or an unknown flag");
        int bad;
        if (!strcmp(f, "--ranks")) bad = parse_ranks(v, o);
        else if (!strcmp(f, "-b")) bad = bench_parse_size(v, &o->min) || !o->min;
        else if (!strcmp(f, "-e")) bad = bench_parse_size(v, &o->max) || !o->max;
        else if (!strcmp(f, "-f")) bad = parse_int(v, 2, 1024, &o->factor);
        else if (!strcmp(f, "--blocks")) bad = parse_int(v, 1, 99, &o->blocks);
        else if (!strcmp(f, "--reps")) bad = parse_int(v, 1, 99, &o->reps);
        else if (!strcmp(f, "--copy-bytes")) bad = bench_parse_size(v, &o->copy_bytes) || o->copy_bytes < 4096;
        else if (!strcmp(f, "--block-bytes")) bad = bench_parse_size(v, &o->block_bytes) || !o->block_bytes;
        else if (!strcmp(f, "--sockbuf")) bad = bench_parse_size(v, &o->sockbuf) || o->sockbuf > (1u << 30);
        else return usage(stderr, "unknown flag");
        if (bad) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s: '%s' is not a value it takes", f, v);
            return usage(stderr, msg);
        }
        i++;
    }
    if (o->min > o->max) return usage(stderr, "-b is above -e");
    return 0;
}

/* What k cores copy at once, measured once per k (cache[k - 1], 0: not yet). */
static double copy_at(const int *cpus, int k, const struct opts *o, double *cache) {
    if (cache[k - 1] == 0) cache[k - 1] = roofline_copy_gbps(cpus, k, o->copy_bytes, o->reps);
    return cache[k - 1];
}

static int report_copy(const int *cpus, int ncpus, const struct opts *o) {
    double *cache = calloc((size_t)ncpus, sizeof *cache);
    if (!cache) return 3;
    char sz[32];
    bench_format_bytes(o->copy_bytes, sz, sizeof sz);
    printf("# memcpy of %s buffers, each core its own; median of %d runs; GB/s (10^9 bytes copied per second)\n", sz,
           o->reps);
    printf("#  cores at once     in all   per core   in all / one core\n");
    int ks[MAX_RANK_COUNTS + 2], nk = 0;
    ks[nk++] = 1;
    for (int i = 0; i < o->nranks; i++) ks[nk++] = o->ranks[i] < ncpus ? o->ranks[i] : ncpus;
    ks[nk++] = ncpus;
    int rc = 0;
    for (int i = 0; i < nk && !rc; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= ks[j] == ks[i];
        if (seen) continue;
        double one = copy_at(cpus, 1, o, cache), all = copy_at(cpus, ks[i], o, cache);
        if (one <= 0 || all <= 0) rc = 3;
        else printf("%16d %10.2f %10.2f %19.2f\n", ks[i], all, all / ks[i], all / one);
    }
    if (!rc) {
        printf("#\n# all-reduce over shared memory, N ranks on %d cpus: busbw at most 2(N-1)/N^2 x what\n"
               "# min(N, cpus) cores copy in all (every rank's input read and output written once)\n",
               ncpus);
        printf("#  ranks   cores   busbw at most   / memcpy one core\n");
        double one = cache[0];
        for (int i = 0; i < o->nranks; i++) {
            int n = o->ranks[i], k = n < ncpus ? n : ncpus;
            double bound = 2.0 * (n - 1) / ((double)n * n) * copy_at(cpus, k, o, cache);
            printf("%8d %7d %15.2f %19.2f\n", n, k, bound, bound / one);
        }
        /* The zero-copy path (ccl_mem_alloc buffers, docs/design.md): a rank
         * reads N slices of every input and N - 1 slices of the others'
         * outputs, (2N - 1)/N x size, and writes its output once; counting a
         * memcpy as one read and one write, the N ranks move (3N - 1)/2 x
         * size of memcpy, so busbw is at most 4(N-1)/(N(3N-1)) x the rate. */
        printf("#\n# zero-copy all-reduce (ccl_mem_alloc buffers: each rank reads (2N-1)/N x size and writes\n"
               "# size once, no staging): its bytes at memcpy's rate, a read and a write per byte, give\n"
               "# busbw 4(N-1)/(N(3N-1)) x what min(N, cpus) cores copy (a read costs less than that, so\n"
               "# the path can pass this figure)\n");
        printf("#  ranks   cores   busbw at most   / memcpy one core\n");
        for (int i = 0; i < o->nranks; i++) {
            int n = o->ranks[i], k = n < ncpus ? n : ncpus;
            double bound = 4.0 * (n - 1) / ((double)n * (3 * n - 1)) * copy_at(cpus, k, o, cache);
            printf("%8d %7d %15.2f %19.2f\n", n, k, bound, bound / one);
        }
    }
    free(cache);
    if (rc) fprintf(stderr, "roofline: memcpy: a copying process could not run (out of memory?)\n");
    return rc;
}

static int report_per_size(const int *cpus, int ncpus, const struct opts *o) {
    printf("#\n# per size: memcpy of buffers of that size, the kernel's copy between processes, and an all-gather's\n"
           "# writes (gather: a buffer of that size written as N blocks from one source of a block, memcpy or\n"
           "# streaming stores, the faster), on min(N, cpus) cores at once (GB/s in all, median of %d runs);\n"
           "# then the busbw no library can pass there, on any buffers: all-reduce 2(N-1)/N^2 x memcpy,\n"
           "# all-gather out of place (N-1)/N^2 x gather, in place 1/N x memcpy, broadcast 1/(N-1) x memcpy\n"
           "# (the kernel's copy is what reads of an ordinary buffer's bytes cost in one copy, not a bound:\n"
           "# main.c says why; 0: refused here)\n",
           o->reps);
    printf("#       size  ranks  cores   memcpy   kernel   gather |  all-reduce all-gather ag-in-place broadcast\n");
    for (size_t sz = o->min; sz <= o->max; sz *= (size_t)o->factor) {
        double mem[ROOFLINE_MAX_CPUS + 1] = {0}, cma[ROOFLINE_MAX_CPUS + 1] = {0};
        for (int i = 0; i < o->nranks; i++) {
            int n = o->ranks[i], k = n < ncpus ? n : ncpus;
            if (n < 2) continue;
            if (mem[k] == 0) {
                mem[k] = roofline_copy_gbps(cpus, k, sz, o->reps);
                cma[k] = roofline_cma_gbps(cpus, k, sz, o->reps);
            }
            double r = mem[k];
            if (r <= 0) {
                fprintf(stderr, "roofline: memcpy of %zu bytes: a copying process could not run (out of memory?)\n",
                        sz);
                return 3;
            }
            double g = roofline_gather_gbps(cpus, k, sz, n, o->reps);
            if (g <= 0) {
                fprintf(stderr, "roofline: gathers of %zu bytes: a copying process could not run (out of memory?)\n",
                        sz);
                return 3;
            }
            printf("%12zu %6d %6d %8.2f %8.2f %8.2f | %11.2f %10.2f %11.2f %9.2f\n", sz, n, k, r, cma[k], g,
                   2.0 * (n - 1) / ((double)n * n) * r, (n - 1) / ((double)n * n) * g, r / n, r / (n - 1));
            fflush(stdout);
        }
        if (sz > SIZE_MAX / (size_t)o->factor) break;
    }
    return 0;
}

static int report_tcp(const int *cpus, int ncpus, const struct opts *o) {
    size_t sizes[MAX_SIZES];
    int n = 0;
    for (size_t s = o->min; s <= o->max && n < MAX_SIZES; s *= (size_t)o->factor) sizes[n++] = s;
    struct roofline_tcp res[MAX_SIZES];
    struct roofline_tcp_args a = {.cpus = cpus, .ncpus = ncpus, .sizes = sizes, .nsizes = n, .blocks = o->blocks,
                                  .block_bytes = o->block_bytes, .sockbuf = o->sockbuf};
    if (roofline_tcp_sweep(&a, res)) return 3;
    printf("#\n# tcp over the loopback, two processes");
    if (ncpus >= 2) printf(" on cpus %d and %d", cpus[0], cpus[1]);
    printf(", the best of %d timed blocks, socket buffers autotuned", o->blocks);
    if (o->sockbuf) printf(" or %zu bytes", o->sockbuf);
    printf(", waiting in poll()%s, calls of all that is left or of 512 KiB; whichever was fastest",
           ncpus >= 2 ? " or spinning" : "");
    printf("; GB/s\n# a 2-rank all-reduce's busbw is at most the fastest both-ways rate up to its size\n");
    printf("#       size    one way   both ways (each way)   2-rank all-reduce busbw at most\n");
    double best = 0;
    for (int i = 0; i < n; i++) {
        if (res[i].both_gbps > best) best = res[i].both_gbps;
        printf("%12zu %10.3f %22.3f %33.3f\n", sizes[i], res[i].one_way_gbps, res[i].both_gbps, best);
    }
    return 0;
}

int main(int argc, char **argv) {
    struct opts o;
    int p = parse(argc, argv, &o);
    if (p) return p == 1 ? 0 : 2;
    static int cpus[ROOFLINE_MAX_CPUS];
    int ncpus = roofline_cpus(cpus, ROOFLINE_MAX_CPUS);
    if (ncpus < 1) {
        fprintf(stderr, "roofline: cannot read which cpus this process may use\n");
        return 3;
    }
    printf("# roofline: what this machine lets any library reach, measured with no library\n# cpus: %d usable\n",
           ncpus);
    fflush(stdout);
    int rc = report_copy(cpus, ncpus, &o);
    fflush(stdout);
    if (!rc && o.per_size) rc = report_per_size(cpus, ncpus, &o);
    if (!rc && o.tcp) rc = report_tcp(cpus, ncpus, &o);
    return rc;
}
