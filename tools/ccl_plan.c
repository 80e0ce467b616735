/*
 * ccl-plan: what the planner would do for a job, without starting one.
 * For a machine (this one, an hwloc XML file or a synthetic description)
 * times a host count, it prints the link between each pair of ranks, the
 * ring and the trees, and for a sweep of sizes every algorithm's predicted
 * time with the one the planner picks marked. The figures are this
 * machine's tuning file (or another's, --tuning-file), defaults where it
 * has none.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl_plan_train.h"
#include "plan/plan.h"
#include "plan/tune.h"
#include "transports/shm/shm.h"

static const char usage[] =
    "Usage: ccl-plan [options]\n"
    "  --topo T            this (default), an hwloc XML file, or a synthetic description\n"
    "                      (\"pack:2 numa:1 core:8 pu:1\")\n"
    "  --hosts H           hosts of that machine (default 1)\n"
    "  --ranks-per-host L  ranks on each (default: one per core)\n"
    "  --net tcp|rdma      what connects the hosts (default tcp)\n"
    "  --one-machine       the hosts share one machine's cores (hosts simulated on one machine, as\n"
    "                      bench/algo-table's tcp configurations are)\n"
    "  --coll LIST         all_reduce,reduce_scatter,all_gather,broadcast,reduce,all_to_all,barrier or all\n"
    "                      (default all_reduce)\n"
    "  -b SIZE -e SIZE -f F  the sweep: from -b to -e bytes, times F (default 8, 64M, 8)\n"
    "  --tuning-file PATH  figures to use, any machine's (default: this machine's, CCL_TUNING_FILE;\n"
    "                      none: the built-in defaults)\n"
    "CCL_CHUNK_BYTES fixes every call's chunk, as it does for a job.\n"
    "ccl-plan --train ... plans a training job's data x tensor x pipeline x ZeRO split (--train --help).\n";

struct opts {
    const char *topo, *colls, *tuning;
    int kinds[16], nkinds; /* the collectives asked for, in order */
    int hosts, per_host, net;
    int one_machine; /* every host's ranks share one machine's cores */
    size_t b, e, f;
    size_t chunk; /* CCL_CHUNK_BYTES: every call's chunk (0: the model's per call) */
};

static size_t parse_size(const char *s, const char *what) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (shift) end++;
    if (end == s || *end || v > (1ull << 40)) {
        fprintf(stderr, "ccl-plan: %s '%s' is not a size (8, 64K, 16M)\n", what, s);
        exit(2);
    }
    return (size_t)(v << shift);
}

static int parse_int(const char *s, const char *what, int lo, int hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "ccl-plan: %s '%s' is not a number from %d to %d\n", what, s, lo, hi);
        exit(2);
    }
    return (int)v;
}

static void parse(int argc, char **argv, struct opts *o) {
    static const struct option longs[] = {
        {"topo", 1, 0, 't'}, {"hosts", 1, 0, 'H'},  {"ranks-per-host", 1, 0, 'L'}, {"net", 1, 0, 'N'},
        {"coll", 1, 0, 'c'}, {"tuning-file", 1, 0, 'T'}, {"one-machine", 0, 0, 'M'},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0},
    };
    *o = (struct opts){.topo = "this", .colls = "all_reduce", .hosts = 1, .net = CCL__LINK_TCP, .b = 8,
                       .e = 64u << 20, .f = 8};
    int c;
    while ((c = getopt_long(argc, argv, "b:e:f:h", longs, NULL)) != -1) {
        switch (c) {
        case 't': o->topo = optarg; break;
        case 'H': o->hosts = parse_int(optarg, "--hosts", 1, 4096); break;
        case 'L': o->per_host = parse_int(optarg, "--ranks-per-host", 1, 4096); break;
        case 'N':
            if (strcmp(optarg, "tcp") && strcmp(optarg, "rdma")) {
                fprintf(stderr, "ccl-plan: --net %s: tcp or rdma\n", optarg);
                exit(2);
            }
            o->net = ccl__link_by_name(optarg);
            break;
        case 'c': o->colls = optarg; break;
        case 'T': o->tuning = optarg; break;
        case 'M': o->one_machine = 1; break;
        case 'b': o->b = parse_size(optarg, "-b"); break;
        case 'e': o->e = parse_size(optarg, "-e"); break;
        case 'f': o->f = (size_t)parse_int(optarg, "-f", 2, 1 << 20); break;
        case 'h': fputs(usage, stdout); exit(0);
        default: fputs(usage, stderr); exit(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ccl-plan: unexpected argument '%s'\n%s", argv[optind], usage);
        exit(2);
    }
    static const int all[] = {CCL__K_ALL_REDUCE, CCL__K_REDUCE_SCATTER, CCL__K_ALL_GATHER, CCL__K_BROADCAST,
                              CCL__K_REDUCE,     CCL__K_ALL_TO_ALL,      CCL__K_BARRIER};
    if (strcmp(o->colls, "all") == 0) {
        memcpy(o->kinds, all, sizeof all);
        o->nkinds = (int)(sizeof all / sizeof all[0]);
    } else for (const char *name = o->colls;;) {
        size_t len = strcspn(name, ",");
        int kind = ccl__plan_coll_by_name(name, len);
        if (kind < 0 || kind == CCL__K_P2P || o->nkinds == 16) {
            fprintf(stderr, "ccl-plan: --coll: '%.*s' is not a collective\n", (int)len, name);
            exit(2);
        }
        o->kinds[o->nkinds++] = kind;
        name += len;
        if (!*name) break;
        name++;
    }
    if ((size_t)o->hosts * (size_t)(o->per_host ? o->per_host : 1) > 65536) {
        fprintf(stderr, "ccl-plan: more than 65536 ranks\n");
        exit(2);
    }
}

/* The machine's summary, as a rank that may use all of it sees it. */
static void machine_summary(const char *topo, struct ccl__peer_info *me) {
    char err[256];
    if (ccl__plan_machine_summary(strcmp(topo, "this") ? topo : "", me, err, sizeof err) != CCL_OK) {
        fprintf(stderr, "ccl-plan: --topo %s: %s\n", topo, err);
        exit(2);
    }
    /* Planned as pinned one per core, as cclrun and CCL_BIND=core run it. */
    if (me->topo.ncore_map) me->topo.binds = 1;
    me->topo.package = me->topo.numa = me->topo.core = -1;
}

static int net_class;
static const struct ccl__peer_info *all_peers;

/* Another host: the network; the same host: shared memory. */
static int pair_class(void *ctx, int a, int b) {
    (void)ctx;
    return strcmp(all_peers[a].host_id, all_peers[b].host_id) ? net_class : -1;
}

static void print_links(int n, const struct ccl__place *places) {
    long count[CCL__NUM_LINKS] = {0};
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            int c = pair_class(NULL, i, j);
            count[c >= 0 ? c : ccl__plan_shm_class(&places[i], &places[j])]++;
        }
    printf("links:");
    for (int c = 0; c < CCL__NUM_LINKS; c++)
        if (count[c]) printf(" %s %ld pairs,", ccl__link_names[c], count[c]);
    printf(" (shared memory inside a host, %s between hosts)\n", ccl__link_names[net_class]);
}

static void print_ranks(const char *what, int n, const int *v) {
    printf("%s:", what);
    int shown = n > 64 ? 64 : n;
    for (int i = 0; i < shown; i++) printf(" %d", v[i]);
    printf("%s\n", shown < n ? " ..." : "");
}

static void print_structure(int n, const struct ccl__place *places, int *ring) {
    int *parent = malloc(sizeof(int) * (size_t)n);
    if (!parent) exit(1);
    ccl__plan_order(n, places, ring);
    struct ccl__crossings x;
    ccl__plan_crossings(n, places, ring, &x);
    print_ranks("ring", n, ring);
    printf("  it crosses %d host, %d package and %d NUMA boundaries\n", x.hosts, x.packages, x.numa);
    static const char *const trees[3] = {"double binary tree 0, parent of each rank",
                                         "double binary tree 1, parent of each rank",
                                         "binomial tree from rank 0, parent of each rank"};
    for (int t = 0; t < 3 && n > 1; t++) {
        for (int r = 0; r < n; r++) parent[r] = ccl__tree_parent(n, r, t);
        print_ranks(trees[t], n, parent);
    }
    free(parent);
}

static void print_sweep(const struct ccl__job_shape *j, const struct ccl__figures *f, int kind, const char *name,
                        const struct opts *o) {
    int runs[CCL__NUM_ALGOS], nruns = 0;
    size_t probe = o->b ? o->b : 1;
    for (int a = 0; a < CCL__NUM_ALGOS; a++)
        if (ccl__algos[a] && ccl__algos[a]->run[kind] && ccl__cost_predict(j, f, kind, a, probe) >= 0)
            runs[nruns++] = a;
    int barrier = kind == CCL__K_BARRIER;
    /* The zero-copy path, for buffers of ccl_mem_alloc; + where it beats
     * the planner's choice (so a call on such buffers takes it). */
    int zc = ccl__cost_zero_copy_us(j, f, kind, probe) >= 0;
    printf("\n%s: predicted time (us); * the planner's choice%s%s\n%12s", name,
           barrier ? "" : ", and the chunk it runs with",
           zc ? "; zero-copy: buffers of ccl_mem_alloc, + where a call takes it" : "", barrier ? "" : "bytes");
    for (int i = 0; i < nruns; i++) printf(" %11s", ccl__algo_names[runs[i]]);
    if (zc) printf(" %11s", "zero-copy");
    printf("%s\n", barrier ? "" : "       chunk");
    for (size_t b = o->b; b <= o->e; b = b ? b * o->f : 1) {
        struct ccl__cost_pick p = ccl__cost_choose(j, f, kind, b, o->chunk);
        printf("%12zu", b);
        for (int i = 0; i < nruns; i++)
            printf(" %10.1f%c", ccl__cost_predict_chunk(j, f, kind, runs[i], b, o->chunk, NULL),
                   runs[i] == p.algo ? '*' : ' ');
        double t = zc ? ccl__cost_zero_copy_us(j, f, kind, b) : 0;
        if (zc) printf(" %10.1f%c", t, t < p.us ? '+' : ' ');
        if (!barrier) printf(" %11zu", p.chunk);
        printf("\n");
        if (kind == CCL__K_BARRIER) break;
    }
}

/* The slot of the transport that carries link class c: the one naming
 * it, or shared memory's for the shared-memory classes; 0 where this build
 * has none (rdma without libibverbs). */
static size_t class_slot(int c) {
    for (int t = 0; t < ccl__ntransports; t++) {
        const struct ccl__transport *tr = ccl__transports[t];
        const void *knobs = ccl__transport_knobs(tr);
        int tc = tr->link_class ? ccl__link_by_name(tr->link_class) : -1;
        int shared_memory = c != CCL__LINK_TCP && c != CCL__LINK_RDMA;
        if (knobs && (tc == c || (tc < 0 && shared_memory))) return tr->slot_bytes(knobs);
    }
    return 0;
}

/* The chunk of calls over these links, as a job picks it (plan/plan.c):
 * the smallest slot among them. No links (one rank): the job copies in
 * shared memory's slots. */
size_t ccl_plan_links_slot(unsigned links) {
    size_t slot = SIZE_MAX;
    for (int c = 0; c < CCL__NUM_LINKS; c++) {
        size_t s = links >> c & 1u ? class_slot(c) : 0;
        if (s && s < slot) slot = s;
    }
    return slot == SIZE_MAX ? class_slot(CCL__LINK_NUMA) : slot;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--train")) return ccl_plan_train(argc, argv);
    struct opts o;
    parse(argc, argv, &o);
    struct ccl__peer_info machine;
    machine_summary(o.topo, &machine);
    int per = o.per_host ? o.per_host : (machine.topo.ncores ? machine.topo.ncores : 1);
    int n = o.hosts * per;
    struct ccl__peer_info *peers = calloc((size_t)n, sizeof(*peers));
    int *ring = malloc(sizeof(int) * (size_t)n);
    struct ccl__place *places = malloc(sizeof(*places) * (size_t)n);
    if (!peers || !ring || !places) return 1;
    for (int r = 0; r < n; r++) {
        peers[r] = machine;
        peers[r].rank = r;
        snprintf(peers[r].host_id, sizeof peers[r].host_id, "host%d", r / per);
        snprintf(peers[r].machine_id, sizeof peers[r].machine_id, "machine%d", o.one_machine ? 0 : r / per);
        snprintf(peers[r].hostname, sizeof peers[r].hostname, "host%d", r / per);
        peers[r].ncores = machine.topo.npus ? machine.topo.npus : 1;
        peers[r].direct_window_bytes = (uint32_t)ccl__params_get()->direct_window_bytes;
    }
    all_peers = peers;
    net_class = o.net;
    const struct ccl__topo_summary *s = &machine.topo;
    printf("ccl-plan: %d host%s x %d ranks = %d ranks; each host: %d packages, %d NUMA nodes, %d cores, %d threads "
           "(%s)\n",
           o.hosts, o.hosts > 1 ? "s" : "", per, n, s->npackages, s->nnuma, s->machine_cores, s->npus,
           strcmp(o.topo, "this") ? o.topo : "this machine");
    ccl__plan_places(n, peers, places);
    print_links(n, places);
    print_structure(n, places, ring);

    struct ccl__job_shape shape;
    if (ccl__plan_shape(n, peers, ring, pair_class, NULL, &shape) != 0) return 1;
    const struct ccl__params *params = ccl__params_get();
    const struct ccl__shm_knobs *shm = ccl__transport_knobs(&ccl__transport_shm);
    size_t window = shm ? shm->window_bytes : 0;
    shape.windows = o.hosts == 1 && n > 1 && window > 0;
    /* As if the kernel let every rank read the others (it does unless a
     * container or Yama forbids it; CCL_SINGLE_COPY=0 plans without). */
    shape.single_copy = shape.windows && params->single_copy;
    shape.ring_chunk = ccl_plan_links_slot(shape.ring_links);
    shape.any_chunk = ccl_plan_links_slot(shape.all_links);
    o.chunk = params->chunk_bytes;
    shape.window_area = shape.windows ? ccl__direct_area(ccl__plan_direct_window(n, peers, 0, window)) : 0;

    struct ccl__figures f;
    ccl__cost_defaults(&f);
    const char *path = o.tuning ? o.tuning : params->tuning_file;
    char key[160], why[200], line[600];
    ccl__tune_machine_key(key, sizeof key);
    /* A file named on purpose may be another machine's: its figures are
     * the point when planning for that machine. */
    int got = strcmp(path, "none") ? ccl__tune_file_read(path, o.tuning ? NULL : key, &f, why, sizeof why) : 0;
    if (got < 0) fprintf(stderr, "ccl-plan: ignoring the tuning file %s: %s\n", path, why);
    ccl__tune_describe(&f, shape.all_links ? shape.all_links : 1u, line, sizeof line);
    printf("figures (%s): %s\n", got > 0 ? path : "defaults", line);
    printf("%.2f ranks per CPU%s%s\n", shape.oversub, shape.windows ? "; direct path (shared windows) on" : "",
           shape.single_copy ? "; single-copy (cross-memory attach) on" : "");

    for (int k = 0; k < o.nkinds; k++) print_sweep(&shape, &f, o.kinds[k], ccl__op_kind_name(o.kinds[k]), &o);
    free(peers), free(ring), free(places);
    return 0;
}
