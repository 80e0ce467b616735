/* Flags as nccl-tests spells them, meaning what they mean there, plus
 * libccl's own launching and output flags under names nccl-tests does not use. */
#define _GNU_SOURCE
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "colls.h"
#include "steady.h"
#include "values.h"

enum { OPT_JSON = 256, OPT_CSV, OPT_RANKS, OPT_HOST_PER_RANK, OPT_ROUNDS, OPT_STEADY, OPT_DEVICE, OPT_SHARED, OPT_FRESH, OPT_TRANSPORT,
       OPT_NONBLOCKING };

static void usage(FILE *f, const char *prog, const struct bench_backend *be) {
    fprintf(f,
            "Usage: %s [options]\n"
            "\n"
            "Measures one collective over a sweep of sizes and prints nccl-tests' columns.\n"
            "Sizes are total buffer bytes (K, M, G suffixes: powers of 1024).\n"
            "\n"
            "  -b, --minbytes N        smallest size (default 32M)\n"
            "  -e, --maxbytes N        largest size (default 32M)\n"
            "  -f, --stepfactor F      multiply the size by F each step (default 2)\n"
            "  -i, --stepbytes N       add N bytes each step instead\n"
            "  -n, --iters N           timed iterations per size (default 20)\n"
            "  -w, --warmup_iters N    untimed iterations first (default 1)\n"
            "  -m, --agg_iters N       operations per iteration, issued as one group (default 1)\n"
            "  -c, --check 0|1         check every result bit for bit before timing (default 1)\n"
            "  -d, --datatype T        int8 uint8 int32 uint32 int64 uint64 float16 bfloat16\n"
            "                          float32 float64, a comma list, or all (default float32)\n"
            "  -o, --op OP             sum prod max min avg, a comma list, or all (default sum)\n"
            "  -r, --root R            root rank, or all (default 0)\n"
            "  -a, --average 0..3      combine times across ranks: 0 rank 0, 1 average,\n"
            "                          2 min, 3 max (default 1)\n"
            "  -z, --blocking 0|1      as nccl-tests: 1 waits for each call (blocking calls, the\n"
            "                          default here); 0 issues each iteration's calls with the\n"
            "                          non-blocking twins and waits for them together\n"
            "      --nonblocking 0|1   the same as -z, inverted\n"
            "  -t, --nthreads 1        threads per process, as nccl-tests: libccl's benchmarks\n"
            "                          run one thread per rank (more ranks: --ranks N)\n"
            "  -g, --ngpus 1           GPUs per thread, as nccl-tests: one per rank (--device)\n"
            "  -N, --run_cycles N      repeat the whole sweep N times, 0 forever (default 1)\n"
            "  -I, --per_iter_timing [0|1]  (also --stats) time every iteration alone (after\n"
            "                          a barrier) and add min, median, p99 and max over them\n"
            "  -K, --per_iter_skip N   leave the first N iterations out of -I's statistics\n"
            "      --fresh             write every iteration's inputs just before it, as an\n"
            "                          application produces them (untimed; implies -I): a\n"
            "                          peer then reads lines its owner has just written, not\n"
            "                          ones the last iteration left in the reader's caches\n"
            "  -R, --local_register 0|1|2  1: register the buffers with the library\n"
            "                          (ccl_comm_register); 2: symmetric, the library's shared\n"
            "                          allocation (--shared-mem)\n"
            "  -T, --timeout S         a call that makes no progress for S seconds fails,\n"
            "                          naming the rank behind (CCL_TIMEOUT; 0: its default)\n"
            "  -C, --report_cputime 0|1  1: the time column is the process's CPU time per\n"
            "                          operation (every thread), not the wall clock's\n"
            "  -S, --report_timestamps 0|1  1: each row ends with the time it was measured\n"
            "  -J, --output_file FILE  write the results as JSON (as --json; .json only)\n"
            "  -M, --memory 0|1        1: report the buffers' and the process's memory at the end\n"
            "  -u, --unalign N         buffers start N elements past a page boundary\n"
            "  -y, -p, -x, -V          nccl-tests' stream, parallel-init, CTA-policy and CTA-count\n"
            "                          flags: taken, and meaningless on the host\n"
            "  -G, -D                  CUDA graph launches and NCCL's device implementation:\n"
            "                          only 0 (libccl calls cannot be captured in graphs yet)\n"
            "      --steady[=F]        bracket every timed block with a 1 MiB all-reduce probe\n"
            "                          and time it again when a probe took over F (1.5) times\n"
            "                          the fastest: results from a machine's usual speed only\n"
            "      --json FILE         also write the results as JSON\n"
            "      --csv FILE          also write the results as CSV\n",
            prog);
    if (be->launch_flags)
        fprintf(f,
                "      --transport T       force a transport: shm, tcp or ib (sets CCL_TRANSPORT)\n"
                "  -A, --algo NAME         force an algorithm: ring tree rd rhd bruck pairwise direct\n"
                "                          hier single_copy, or per collective (allreduce:tree);\n"
                "                          sets CCL_ALGO\n"
                "  -A auto,ring,tree,...   several names: each size is measured with each algorithm\n"
                "                          (auto: the planner's choice) in one run, their timed\n"
                "                          blocks taking turns; one row per algorithm\n"
                "      --rounds N          with several -A names: timed blocks per algorithm and\n"
                "                          size, the median reported (default 5)\n"
                "      --ranks N           fork N local ranks (otherwise: cclrun, torchrun, Slurm\n"
                "                          or mpirun's environment, or one rank)\n"
                "      --host-per-rank     with --ranks: each rank its own CCL_HOST_ID (TCP)\n");
    if (be->device_buffers)
        fprintf(f,
                "      --device            buffers in GPU memory (rank r on GPU r %% GPUs; the CUDA\n"
                "                          driver is loaded at run time); the roofline is then the\n"
                "                          GPU's device-to-device copy\n");
    if (be->shared_alloc)
        fprintf(f,
                "      --shared-mem        buffers from the library's shared allocation\n"
                "                          (ccl_mem_alloc): collectives on one host run zero-copy\n");
    fprintf(f,
            "  -h, --help              show this help\n"
            "\n"
            "Exit status: 0, 1 if any result was wrong, 2 for bad flags, 3 if the library failed.\n"
            "Self-test of the checker: CCL_BENCH_CORRUPT=1 makes rank 0 (the root, for reduce)\n"
            "flip one element of its output after every checked call; the program must then\n"
            "report #wrong > 0 and exit 1.\n");
}

__attribute__((format(printf, 2, 3))) static int usage_error(const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s -h' for more information.\n", prog);
    return -1;
}

int bench_parse_size(const char *s, size_t *out) {
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    unsigned shift = 0;
    if (*end) {
        const char *units = "KMG";
        const char *u = strchr(units, *end & ~0x20);
        if (!u || end[1]) return -1;
        shift = 10 * (unsigned)(u - units + 1);
    }
    if (shift && v > (~0ull >> shift)) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

/* The names CCL_ALGO takes (the library's docs list what each runs). */
static int is_algo_name(const char *s) {
    static const char *const names[] = {"ring",   "tree", "rd",          "rhd", "bruck",
                                        "pairwise", "direct", "hier", "single_copy", "auto"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0) return 1;
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* "all" or a comma list of names; parse returns the index or -1. */
static int parse_mask(const char *s, int count, int (*parse)(const char *), unsigned *mask) {
    if (!strcasecmp(s, "all")) {
        *mask = (1u << count) - 1;
        return 0;
    }
    char copy[256];
    if (snprintf(copy, sizeof copy, "%s", s) >= (int)sizeof copy) return -1;
    *mask = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int v = parse(tok);
        if (v < 0) return -1;
        *mask |= 1u << v;
    }
    return *mask ? 0 : -1;
}

static void set_defaults(struct bench_options *o, const char *prog) {
    memset(o, 0, sizeof(*o));
    o->prog = prog;
    o->min_bytes = o->max_bytes = 32u << 20;
    o->step_factor = 2;
    o->iters = 20;
    o->warmup = 1;
    o->agg = 1;
    o->cycles = 1;
    o->check = 1;
    o->combine = BENCH_TIME_AVG;
    o->dtype_mask = 1u << CCL_FLOAT32;
    o->redop_mask = 1u << CCL_SUM;
    o->rounds = 5;
}

static const struct option long_opts[] = {
    {"minbytes", required_argument, 0, 'b'},  {"maxbytes", required_argument, 0, 'e'},
    {"stepfactor", required_argument, 0, 'f'}, {"stepbytes", required_argument, 0, 'i'},
    {"iters", required_argument, 0, 'n'},     {"warmup_iters", required_argument, 0, 'w'},
    {"agg_iters", required_argument, 0, 'm'}, {"check", required_argument, 0, 'c'},
    {"datatype", required_argument, 0, 'd'},  {"op", required_argument, 0, 'o'},
    {"root", required_argument, 0, 'r'},      {"average", required_argument, 0, 'a'},
    {"blocking", required_argument, 0, 'z'},  {"nonblocking", required_argument, 0, OPT_NONBLOCKING},
    {"run_cycles", required_argument, 0, 'N'}, {"nthreads", required_argument, 0, 't'},
    {"ngpus", required_argument, 0, 'g'},
    {"stats", no_argument, 0, 'I'},           {"per_iter_timing", no_argument, 0, 'I'},
    {"per_iter_skip", required_argument, 0, 'K'}, {"local_register", required_argument, 0, 'R'},
    {"timeout", required_argument, 0, 'T'},   {"report_cputime", required_argument, 0, 'C'},
    {"report_timestamps", required_argument, 0, 'S'}, {"output_file", required_argument, 0, 'J'},
    {"memory", required_argument, 0, 'M'},    {"unalign", required_argument, 0, 'u'},
    {"cudagraph", required_argument, 0, 'G'}, {"stream_null", required_argument, 0, 'y'},
    {"parallel_init", required_argument, 0, 'p'}, {"cta_policy", required_argument, 0, 'x'},
    {"device_implementation", required_argument, 0, 'D'}, {"device_cta_count", required_argument, 0, 'V'},
    {"transport", required_argument, 0, OPT_TRANSPORT},
    {"algo", required_argument, 0, 'A'},      {"json", required_argument, 0, OPT_JSON},
    {"csv", required_argument, 0, OPT_CSV},   {"ranks", required_argument, 0, OPT_RANKS},
    {"host-per-rank", no_argument, 0, OPT_HOST_PER_RANK}, {"help", no_argument, 0, 'h'},
    {"rounds", required_argument, 0, OPT_ROUNDS}, {"steady", optional_argument, 0, OPT_STEADY},
    {"device", no_argument, 0, OPT_DEVICE},
    {"shared-mem", no_argument, 0, OPT_SHARED},
    {"fresh", no_argument, 0, OPT_FRESH},
    {0, 0, 0, 0},
};

/* -A's plain names: one is the run's algorithm, several are measured in
 * turn (o->algos). 0 or -1 (message printed). */
static int parse_algo_list(const char *p, const char *v, struct bench_options *o) {
    if (snprintf(o->algo_names, sizeof o->algo_names, "%s", v) >= (int)sizeof o->algo_names)
        return usage_error(p, "-A: the list is longer than %zu characters", sizeof o->algo_names - 1);
    o->nalgos = 0;
    char *save = NULL;
    for (char *tok = strtok_r(o->algo_names, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (!is_algo_name(tok))
            return usage_error(p, "-A: '%s' is not an algorithm (ring tree rd rhd bruck pairwise direct hier single_copy auto)",
                               tok);
        for (int i = 0; i < o->nalgos; i++)
            if (strcmp(o->algos[i], tok) == 0) return usage_error(p, "-A: '%s' is listed twice", tok);
        if (o->nalgos == BENCH_MAX_ALGOS) return usage_error(p, "-A: more than %d algorithms", BENCH_MAX_ALGOS);
        o->algos[o->nalgos++] = tok;
    }
    if (o->nalgos == 0) return usage_error(p, "-A: no algorithm named");
    /* one name: the whole run's, through CCL_ALGO; but auto alone is measured
     * as a list of one, so that its rows say what the planner ran */
    if (o->nalgos == 1 && strcmp(o->algos[0], "auto") != 0) {
        o->algo = o->algos[0];
        o->nalgos = 0;
    }
    return 0;
}

/* One flag; 0 or -1 (message printed). */
static int apply_flag(int c, const char *v, const struct bench_backend *be, struct bench_options *o, int *factor_set,
                      int *step_set) {
    const char *p = o->prog;
    int launch = c == OPT_TRANSPORT || c == 'A' || c == OPT_RANKS || c == OPT_HOST_PER_RANK || c == 'T';
    if (launch && !be->launch_flags)
        return usage_error(p, "this program does not take --transport, -A, --ranks, --host-per-rank or -T");
    switch (c) {
    case 'b':
    case 'e':
    case 'i': {
        size_t *dst = c == 'b' ? &o->min_bytes : c == 'e' ? &o->max_bytes : &o->step_bytes;
        if (bench_parse_size(v, dst)) return usage_error(p, "-%c: '%s' is not a size (e.g. 8, 64K, 1M, 2G)", c, v);
        if (c == 'i') *step_set = 1;
        return 0;
    }
    case 'f': {
        char *end;
        errno = 0;
        o->step_factor = strtod(v, &end);
        if (errno || end == v || *end || !(o->step_factor > 1.0) || o->step_factor > 1e6)
            return usage_error(p, "-f: '%s' is not a factor greater than 1", v);
        *factor_set = 1;
        return 0;
    }
    case 'n': return parse_int(v, 1, 1 << 30, &o->iters) ? usage_error(p, "-n: '%s' is not a count >= 1", v) : 0;
    case 'w': return parse_int(v, 0, 1 << 30, &o->warmup) ? usage_error(p, "-w: '%s' is not a count >= 0", v) : 0;
    case 'm': return parse_int(v, 1, 1 << 16, &o->agg) ? usage_error(p, "-m: '%s' is not a count >= 1", v) : 0;
    case 'N': return parse_int(v, 0, 1 << 30, &o->cycles) ? usage_error(p, "-N: '%s' is not a count >= 0", v) : 0;
    case 'c': return parse_int(v, 0, 1, &o->check) ? usage_error(p, "-c: '%s' is not 0 or 1", v) : 0;
    case 'z':
    case OPT_NONBLOCKING: {
        int b;
        if (parse_int(v, 0, 1, &b)) return usage_error(p, "%s: '%s' is not 0 or 1", c == 'z' ? "-z" : "--nonblocking", v);
        o->nonblocking = c == 'z' ? !b : b;
        return 0;
    }
    case 't':
    case 'g': {
        int one;
        if (parse_int(v, 1, 1, &one) == 0) return 0;
        if (c == 't' && (!strcmp(v, "shm") || !strcmp(v, "tcp") || !strcmp(v, "ib")))
            return usage_error(p, "-t is nccl-tests' threads per process; to choose the transport, --transport %s", v);
        return usage_error(p, "%s: libccl's benchmarks run one thread and one device per rank; for more ranks, "
                              "--ranks N or a launcher", c == 't' ? "-t (threads per process)" : "-g (GPUs per thread)");
    }
    case 'a': {
        int a;
        if (parse_int(v, 0, 3, &a)) return usage_error(p, "-a: '%s' is not 0 (rank 0), 1 (avg), 2 (min) or 3 (max)", v);
        o->combine = (enum bench_combine_mode)a;
        return 0;
    }
    case 'd':
        return parse_mask(v, CCL_NUM_DTYPES, bench_dtype_parse, &o->dtype_mask)
                   ? usage_error(p, "-d: '%s' is not a data type list (int8 uint8 int32 uint32 int64 uint64 "
                                    "float16 bfloat16 float32 float64, or all)", v)
                   : 0;
    case 'o':
        return parse_mask(v, BENCH_NUM_REDOPS, bench_redop_parse, &o->redop_mask)
                   ? usage_error(p, "-o: '%s' is not an op list (sum prod max min avg, or all)", v)
                   : 0;
    case 'r':
        if (!strcasecmp(v, "all")) {
            o->root = BENCH_ALL;
            return 0;
        }
        return parse_int(v, 0, 1 << 30, &o->root) ? usage_error(p, "-r: '%s' is not a rank or all", v) : 0;
    case 'I': o->stats = 1; return 0;
    case 'K': return parse_int(v, 0, 1 << 30, &o->stats_skip) ? usage_error(p, "-K: '%s' is not a count >= 0", v) : 0;
    case 'R': {
        int r;
        if (parse_int(v, 0, 2, &r)) return usage_error(p, "-R: '%s' is not 0, 1 (registered) or 2 (symmetric)", v);
        if (r == 1 && !be->register_buf) return usage_error(p, "-R 1: this library has no buffer registration");
        if (r == 2 && !be->shared_alloc) return usage_error(p, "-R 2: this library has no shared allocation");
        o->register_bufs = r == 1;
        if (r == 2) o->shared = 1;
        return 0;
    }
    case 'T': {
        int s;
        if (parse_int(v, 0, 1 << 24, &s)) return usage_error(p, "-T: '%s' is not a number of seconds >= 0", v);
        o->timeout_s = s;
        return 0;
    }
    case 'C': return parse_int(v, 0, 1, &o->report_cputime) ? usage_error(p, "-C: '%s' is not 0 or 1", v) : 0;
    case 'S': return parse_int(v, 0, 1, &o->timestamps) ? usage_error(p, "-S: '%s' is not 0 or 1", v) : 0;
    case 'M': return parse_int(v, 0, 1, &o->memory_report) ? usage_error(p, "-M: '%s' is not 0 or 1", v) : 0;
    case 'u': return parse_int(v, 0, 4096, &o->unalign) ? usage_error(p, "-u: '%s' is not a count from 0 to 4096", v) : 0;
    case 'J': {
        size_t n = strlen(v);
        if (n < 5 || strcasecmp(v + n - 5, ".json") != 0)
            return usage_error(p, "-J: '%s': only JSON is written, to a file named *.json", v);
        o->json_path = v;
        return 0;
    }
    case 'G':
    case 'D': {
        int g;
        if (parse_int(v, 0, 1 << 30, &g)) return usage_error(p, "-%c: '%s' is not a count", c, v);
        if (g > 0)
            return usage_error(p, "%s: libccl's calls cannot be captured in CUDA graphs or run by NCCL's device "
                                  "implementation; only 0", c == 'G' ? "-G (CUDA graph launches)" : "-D");
        return 0;
    }
    case 'y':
    case 'p':
    case 'x':
    case 'V': {
        int any;
        return parse_int(v, -1, 1 << 30, &any) ? usage_error(p, "-%c: '%s' is not a number", c, v) : 0;
    }
    case OPT_TRANSPORT:
        if (strcmp(v, "shm") && strcmp(v, "tcp") && strcmp(v, "ib"))
            return usage_error(p, "--transport: '%s' is not shm, tcp or ib", v);
        o->transport = v;
        return 0;
    case 'A':
        /* Names are checked here; a per-collective spec is the library's to check. */
        if (strchr(v, ':')) {
            o->algo = v;
            return 0;
        }
        return parse_algo_list(p, v, o);
    case OPT_JSON: o->json_path = v; return 0;
    case OPT_CSV: o->csv_path = v; return 0;
    case OPT_RANKS:
        return parse_int(v, 1, 1024, &o->ranks) ? usage_error(p, "--ranks: '%s' is not a count from 1 to 1024", v) : 0;
    case OPT_HOST_PER_RANK: o->host_per_rank = 1; return 0;
    case OPT_DEVICE:
        if (!be->device_buffers) return usage_error(p, "this program does not take --device (GPU memory)");
        o->device = 1;
        return 0;
    case OPT_SHARED:
        if (!be->shared_alloc) return usage_error(p, "this library has no shared allocation (--shared-mem)");
        o->shared = 1;
        return 0;
    case OPT_FRESH: o->fresh = 1; return 0;
    case OPT_STEADY:
        o->steady = BENCH_STEADY_FACTOR;
        if (v && (sscanf(v, "%lf", &o->steady) != 1 || !(o->steady >= 1.05 && o->steady <= 100)))
            return usage_error(p, "--steady=%s: the factor must be a number from 1.05 to 100", v);
        return 0;
    case OPT_ROUNDS:
        return parse_int(v, 1, 1000, &o->rounds) ? usage_error(p, "--rounds: '%s' is not a count from 1 to 1000", v) : 0;
    default: return usage_error(p, "unknown option");
    }
}

int bench_parse_options(int argc, char **argv, enum bench_coll coll, const struct bench_backend *be,
                        struct bench_options *o) {
    const char *slash = argc > 0 ? strrchr(argv[0], '/') : NULL;
    set_defaults(o, slash ? slash + 1 : argc > 0 ? argv[0] : bench_coll_info(coll)->prog);
    int factor_set = 0, step_set = 0, c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":b:e:f:i:n:w:m:c:d:o:r:a:z:N:It:g:A:K:R:T:C:S:J:M:u:G:D:y:p:x:V:h", long_opts,
                            NULL)) != -1) {
        if (c == 'h') {
            usage(stdout, o->prog, be);
            return 1;
        }
        if (c == ':') return usage_error(o->prog, "%s needs a value", argv[optind - 1]);
        if (c == '?') return usage_error(o->prog, "unknown option '%s'", argv[optind - 1]);
        if (apply_flag(c, optarg, be, o, &factor_set, &step_set)) return -1;
        /* -I takes nccl-tests' 0|1 after it, or nothing (libccl's spelling) */
        if (c == 'I' && optind < argc && (!strcmp(argv[optind], "0") || !strcmp(argv[optind], "1")))
            o->stats = argv[optind++][0] == '1';
    }
    if (optind < argc) return usage_error(o->prog, "unexpected argument '%s'", argv[optind]);
    if (factor_set && step_set) return usage_error(o->prog, "-f and -i exclude each other");
    if (!step_set) o->step_bytes = 0;
    else if (o->step_bytes == 0) return usage_error(o->prog, "-i: the step must be at least 1 byte");
    if (o->min_bytes == 0 && !step_set) return usage_error(o->prog, "-b: sizes must start at 1 byte or more with -f");
    if (o->min_bytes > o->max_bytes) return usage_error(o->prog, "-b %zu is larger than -e %zu", o->min_bytes, o->max_bytes);
    if (o->host_per_rank && !o->ranks) return usage_error(o->prog, "--host-per-rank needs --ranks");
    if (o->fresh && o->device) return usage_error(o->prog, "--fresh writes host buffers: not with --device");
    if (o->fresh) o->stats = 1;
    if (o->nalgos > 1 && o->stats)
        return usage_error(o->prog, "%s and several -A algorithms exclude each other", o->fresh ? "--fresh" : "-I");
    if (o->stats_skip && (!o->stats || o->stats_skip >= o->iters))
        return usage_error(o->prog, "-K %d needs -I and fewer skipped iterations than -n (%d)", o->stats_skip, o->iters);
    if (o->register_bufs && (o->shared || o->device))
        return usage_error(o->prog, "-R 1 registers host buffers: not with --shared-mem, -R 2 or --device");
    if (o->unalign && o->shared) return usage_error(o->prog, "-u: the shared allocation's buffers are its own");
    if (bench_coll_info(coll)->sequential && (o->agg > 1 || o->nonblocking))
        return usage_error(o->prog, "-m and -z 0 would overlap what a %s times one after the other",
                           bench_coll_info(coll)->name);
    return 0;
}

void bench_format_bytes(size_t bytes, char *buf, size_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = (double)bytes;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0 || v == (double)(size_t)v) snprintf(buf, n, "%.0f %s", v, units[u]);
    else snprintf(buf, n, "%.1f %s", v, units[u]);
}
