/*
 * ccl-plan --train: the data x tensor x pipeline x ZeRO configurations of
 * a training job that fit its GPUs, with memory per GPU by part, the
 * communication of a step by collective timed by libccl's cost model on
 * the job's links, the pipeline bubble, and a ranked recommendation
 * (docs/training-planner.md).
 *
 * Placement follows Megatron's order: tensor-parallel ranks are adjacent
 * (inside a node when they fit), then data-parallel, then pipeline
 * stages. Each group's shape (its hosts and links) is built the way the
 * planner builds a job's, and each call is priced by ccl__cost_choose as
 * a job would price it. Memory and bytes are arithmetic on the model:
 * weights, gradients and optimizer states per parameter by precision and
 * optimizer, sharded by ZeRO's stage over the data-parallel ranks; the
 * activations of a transformer layer as Korthikanti et al. (2022) count
 * them with selective recomputation: s b h (10 + 24/t) bytes at 16 bits.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl_plan_train.h"
#include "plan/plan.h"
#include "plan/tune.h"

#define MAX_LAYERS 4096
#define MAX_ENTRIES 16
#define MAX_CONFIGS 4096
#define GIB (1024.0 * 1024.0 * 1024.0)

static const char usage[] =
    "Usage: ccl-plan --train --gpus G (--params N | --preset NAME | --layer-params A,B,..) [options]\n"
    "The model:\n"
    "  --params N          parameters (13e9, 175e9)\n"
    "  --preset NAME       gpt2-1.5b, llama2-7b, llama2-13b, llama2-70b, gpt3-175b\n"
    "  --layer-params LIST each layer's parameter count (ZeRO shards and pads layer by layer)\n"
    "  --layers L --hidden H --seq S   the transformer's shape: activations, tensor- and pipeline-parallel\n"
    "                      messages need hidden and seq\n"
    "  --block B           what a layer is: transformer (default: attention and an MLP, four tensor-parallel\n"
    "                      all-reduces per micro-batch) or mlp (Megatron's MLP block alone: two)\n"
    "  --batch B           global batch in sequences (default 512)\n"
    "  --micro-batch b     sequences per micro-batch (default 1)\n"
    "The cluster:\n"
    "  --gpus G            GPUs in all\n"
    "  --gpus-per-node g   (default 8, or G when fewer)\n"
    "  --gpu-mem GIB       memory of one GPU (default 80)\n"
    "  --intra A,BW        the link inside a node: alpha in us, GB/s per rank (default: the tuning file's\n"
    "                      shared memory)\n"
    "  --inter A,BW        the link between nodes (default: the tuning file's --net figures)\n"
    "  --net tcp|rdma      which of the tuning file's network figures (default rdma)\n"
    "  --tuning-file PATH  figures to use (default this machine's; none: built-in defaults)\n"
    "  --reduce GBPS       how fast a GPU adds two inputs, GB/s of one (default: the tuning file's CPU figure)\n"
    "  --tflops T          achieved TFLOP/s per GPU, for the compute estimate (default 200)\n"
    "Conventions:\n"
    "  --precision P       mixed (default: fp16 weights and gradients, fp32 optimizer states), bf16, fp32, fp64\n"
    "  --optimizer O       adam (default: two states per parameter), sgd-momentum (one), sgd (none)\n"
    "  --master-weights    an fp32 copy of the weights too (mixed and bf16)\n"
    "  --bucket BYTES      data-parallel gradient all-reduce bucket (default 25M, as DDP)\n"
    "Choices:\n"
    "  --dp D --tp T --pp P --zero Z   fix any of the split (Z: 0..3)\n"
    "  --show N            configurations shown in full (default 1)\n"
    "  --top N             configurations listed (default 12; 0: all)\n"
    "  --json              everything as JSON\n";

struct model {
    const char *name;
    double params;
    int layers, hidden, seq;
    double layer_params[MAX_LAYERS]; /* per layer; all equal unless given */
    int given_layers;                /* --layer-params */
    int mlp;                         /* --block mlp: a layer is an MLP block, no attention */
};

static const struct model presets[] = {
    {"gpt2-1.5b", 1.5e9, 48, 1600, 1024, {0}, 0, 0},   {"llama2-7b", 6.7e9, 32, 4096, 4096, {0}, 0, 0},
    {"llama2-13b", 13.0e9, 40, 5120, 4096, {0}, 0, 0}, {"llama2-70b", 69.0e9, 80, 8192, 4096, {0}, 0, 0},
    {"gpt3-175b", 175.0e9, 96, 12288, 2048, {0}, 0, 0},
};

struct conv {
    const char *precision, *optimizer;
    int weight_b, grad_b, state_b, act_b; /* bytes per element */
    int states;                           /* optimizer states per parameter, master copy included */
    int master;                           /* an fp32 copy of the weights is one of them */
};

struct opts {
    struct model m;
    int gpus, per_node, batch, micro;
    double gpu_mem, tflops, bucket;
    int fix_dp, fix_tp, fix_pp, fix_zero;
    int show, top, json;
    const char *tuning, *intra, *inter;
    double reduce_gbps;
    int net;
    struct conv c;
};

enum group { DATA, TENSOR, PIPE };
static const char *const group_names[] = {"data", "tensor", "pipeline"};

struct entry {
    enum group group;
    const char *coll; /* the collective, as ccl-trace summary names it */
    int kind;         /* enum ccl__op_kind; -1: send/recv */
    double bytes;     /* the call's buffer (all-reduce: the buffer; reduce-scatter: the input; all-gather: the output) */
    double calls;     /* per step */
    double us;        /* one call, from the cost model */
};

struct config {
    int dp, tp, pp, zero, micro_batches;
    double weights, grads, optim, acts, total; /* bytes per GPU */
    struct entry e[MAX_ENTRIES];
    int ne;
    double bubble, compute_ms, comm_ms, step_ms;
    int fits;
};

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "ccl-plan: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}

static double parse_num(const char *s, const char *what, double lo, double hi) {
    char *end;
    double v = strtod(s, &end);
    double mult = *end == 'K' ? 1024 : *end == 'M' ? 1048576 : *end == 'G' ? GIB : 1;
    if (mult != 1) end++;
    v *= mult;
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "ccl-plan: %s '%s' is not a number from %g to %g\n", what, s, lo, hi);
        exit(2);
    }
    return v;
}

static void parse_link(const char *s, const char *what, struct ccl__link_figure *l) {
    double alpha, gbps;
    char extra;
    if (sscanf(s, "%lf,%lf%c", &alpha, &gbps, &extra) != 2 || !(alpha >= 0) || !(gbps > 0) || alpha > 1e6 ||
        gbps > 1e6) {
        fprintf(stderr, "ccl-plan: %s '%s': expected ALPHA_US,GB_PER_S (2,150)\n", what, s);
        exit(2);
    }
    *l = (struct ccl__link_figure){alpha, gbps * 1e3, 0, 0};
}

static void parse_layer_params(const char *s, struct model *m) {
    m->layers = 0;
    m->params = 0;
    for (const char *p = s; *p;) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v >= 1) || (*end && *end != ',') || m->layers == MAX_LAYERS)
            die("--layer-params '%s': a list of positive parameter counts, one per layer (at most 4096)", s);
        m->layer_params[m->layers++] = floor(v);
        m->params += floor(v);
        p = *end ? end + 1 : end;
    }
    if (!m->layers) die("--layer-params '%s' is empty", s);
    m->given_layers = 1;
}

static void set_conventions(struct conv *c, const char *precision, const char *optimizer, int master) {
    static const struct {
        const char *name;
        int w, g, s, a;
    } precs[] = {{"mixed", 2, 2, 4, 2}, {"bf16", 2, 2, 4, 2}, {"fp32", 4, 4, 4, 4}, {"fp64", 8, 8, 8, 8}};
    int found = 0;
    for (size_t i = 0; i < sizeof precs / sizeof precs[0]; i++)
        if (!strcmp(precision, precs[i].name)) {
            *c = (struct conv){precs[i].name, optimizer, precs[i].w, precs[i].g, precs[i].s, precs[i].a, 0, 0};
            found = 1;
        }
    if (!found) die("--precision %s: mixed, bf16, fp32 or fp64", precision);
    if (!strcmp(optimizer, "adam")) c->states = 2;
    else if (!strcmp(optimizer, "sgd-momentum")) c->states = 1;
    else if (!strcmp(optimizer, "sgd")) c->states = 0;
    else die("--optimizer %s: adam, sgd-momentum or sgd", optimizer);
    if (master && c->weight_b == c->state_b) die("--master-weights: the weights are %s already", precision);
    c->states += master;
    c->master = master;
}

static void parse(int argc, char **argv, struct opts *o) {
    static const struct option longs[] = {
        {"train", 0, 0, 'X'},         {"params", 1, 0, 'p'},    {"preset", 1, 0, 'P'},   {"layer-params", 1, 0, 'Y'},
        {"layers", 1, 0, 'l'},        {"hidden", 1, 0, 'H'},    {"seq", 1, 0, 's'},      {"batch", 1, 0, 'B'},
        {"micro-batch", 1, 0, 'm'},   {"gpus", 1, 0, 'g'},      {"gpus-per-node", 1, 0, 'n'},
        {"gpu-mem", 1, 0, 'M'},       {"intra", 1, 0, 'i'},     {"inter", 1, 0, 'e'},    {"net", 1, 0, 'N'},
        {"tuning-file", 1, 0, 'T'},   {"tflops", 1, 0, 'f'},    {"precision", 1, 0, 'r'}, {"optimizer", 1, 0, 'o'},
        {"master-weights", 0, 0, 'w'}, {"bucket", 1, 0, 'k'},   {"dp", 1, 0, 'D'},       {"tp", 1, 0, 't'},
        {"pp", 1, 0, 'q'},            {"zero", 1, 0, 'z'},      {"show", 1, 0, 'S'},     {"top", 1, 0, 'O'},
        {"json", 0, 0, 'J'},          {"reduce", 1, 0, 'R'},    {"block", 1, 0, 'b'},    {"help", 0, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *precision = "mixed", *optimizer = "adam";
    int master = 0, have_model = 0, layers = 0, hidden = 0, seq = 0, mlp = 0;
    *o = (struct opts){.batch = 512, .micro = 1, .gpu_mem = 80, .tflops = 200, .bucket = 25 * 1048576.0,
                       .fix_dp = 0, .fix_tp = 0, .fix_pp = 0, .fix_zero = -1, .show = 1, .top = 12,
                       .net = CCL__LINK_RDMA};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (c) {
        case 'X': break;
        case 'p': o->m.params = floor(parse_num(optarg, "--params", 1, 1e15)), have_model |= 1; break;
        case 'P': {
            int found = 0;
            for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
                if (!strcmp(optarg, presets[i].name)) o->m = presets[i], found = 1;
            if (!found) die("--preset %s: gpt2-1.5b, llama2-7b, llama2-13b, llama2-70b or gpt3-175b", optarg);
            have_model |= 2;
            break;
        }
        case 'Y': parse_layer_params(optarg, &o->m), have_model |= 4; break;
        case 'l': layers = (int)parse_num(optarg, "--layers", 1, MAX_LAYERS); break;
        case 'H': hidden = (int)parse_num(optarg, "--hidden", 1, 1 << 20); break;
        case 's': seq = (int)parse_num(optarg, "--seq", 1, 1 << 24); break;
        case 'B': o->batch = (int)parse_num(optarg, "--batch", 1, 1 << 24); break;
        case 'm': o->micro = (int)parse_num(optarg, "--micro-batch", 1, 1 << 20); break;
        case 'g': o->gpus = (int)parse_num(optarg, "--gpus", 1, 1 << 20); break;
        case 'n': o->per_node = (int)parse_num(optarg, "--gpus-per-node", 1, 4096); break;
        case 'M': o->gpu_mem = parse_num(optarg, "--gpu-mem", 0.001, 1e6); break;
        case 'i': o->intra = optarg; break;
        case 'e': o->inter = optarg; break;
        case 'N':
            if (strcmp(optarg, "tcp") && strcmp(optarg, "rdma")) die("--net %s: tcp or rdma", optarg);
            o->net = ccl__link_by_name(optarg);
            break;
        case 'T': o->tuning = optarg; break;
        case 'f': o->tflops = parse_num(optarg, "--tflops", 0.001, 1e6); break;
        case 'r': precision = optarg; break;
        case 'o': optimizer = optarg; break;
        case 'w': master = 1; break;
        case 'k': o->bucket = parse_num(optarg, "--bucket", 1, 1e15); break;
        case 'D': o->fix_dp = (int)parse_num(optarg, "--dp", 1, 1 << 20); break;
        case 't': o->fix_tp = (int)parse_num(optarg, "--tp", 1, 1 << 20); break;
        case 'q': o->fix_pp = (int)parse_num(optarg, "--pp", 1, 1 << 20); break;
        case 'z': o->fix_zero = (int)parse_num(optarg, "--zero", 0, 3); break;
        case 'S': o->show = (int)parse_num(optarg, "--show", 0, MAX_CONFIGS); break;
        case 'O': o->top = (int)parse_num(optarg, "--top", 0, MAX_CONFIGS); break;
        case 'J': o->json = 1; break;
        case 'R': o->reduce_gbps = parse_num(optarg, "--reduce", 0.001, 1e6); break;
        case 'b':
            if (strcmp(optarg, "transformer") && strcmp(optarg, "mlp")) die("--block %s: transformer or mlp", optarg);
            mlp = !strcmp(optarg, "mlp");
            break;
        case 'h': fputs(usage, stdout); exit(0);
        default: fputs(usage, stderr); exit(2);
        }
    }
    if (optind < argc) die("--train: unexpected argument '%s'", argv[optind]);
    if (have_model != 1 && have_model != 2 && have_model != 4)
        die("--train needs %s", have_model ? "one of --params, --preset and --layer-params, not several"
                                           : "the model: --params, --preset or --layer-params");
    if (!o->gpus) die("--train needs %s", "--gpus");
    if (layers && o->m.given_layers && layers != o->m.layers) die("--layers disagrees with --layer-params%s", "");
    if (layers) o->m.layers = layers;
    if (hidden) o->m.hidden = hidden;
    if (seq) o->m.seq = seq;
    o->m.mlp = mlp;
    if (!o->m.given_layers) {
        if (!o->m.layers) o->m.layers = 1;
        for (int l = 0; l < o->m.layers; l++) o->m.layer_params[l] = o->m.params / o->m.layers;
    }
    if (!o->per_node) o->per_node = o->gpus < 8 ? o->gpus : 8;
    set_conventions(&o->c, precision, optimizer, master);
}

/* ---- group shapes and prices ---- */

struct pricing {
    struct ccl__figures f;
    int net, per_node;
};

/* The shape of a group whose members sit on these nodes (node ids of any
 * value, members of one node adjacent). */
static void group_shape(const struct pricing *pr, int n, const int *node, struct ccl__job_shape *j) {
    uint8_t *cls = malloc((size_t)n * (size_t)n);
    int *ring = malloc(sizeof(int) * (size_t)n), *host_of = malloc(sizeof(int) * (size_t)n);
    if (!cls || !ring || !host_of) exit(1);
    int hosts = 0;
    for (int i = 0; i < n; i++) {
        ring[i] = i;
        host_of[i] = i && node[i] == node[i - 1] ? host_of[i - 1] : hosts++;
        for (int k = 0; k < n; k++) cls[i * n + k] = (uint8_t)(node[i] == node[k] ? CCL__LINK_NUMA : pr->net);
    }
    ccl__cost_shape(j, n, cls, ring, host_of, NULL);
    /* GPUs' memory: no shared windows between ranks, nothing to map */
    j->windows = j->single_copy = 0;
    j->oversub = 1;
    j->ring_chunk = ccl_plan_links_slot(j->ring_links);
    j->any_chunk = ccl_plan_links_slot(j->all_links);
    j->window_area = 0;
    free(cls), free(ring), free(host_of);
}

static double price(const struct pricing *pr, const struct ccl__job_shape *j, int kind, double bytes) {
    if (j->n < 2 || bytes <= 0) return 0;
    if (kind < 0) return ccl__cost_step_us(j, &pr->f, j->ring_links, bytes);
    /* the model's piece: a block of a reduce-scatter's input, a rank's share of an all-gather's output */
    double piece = kind == CCL__K_REDUCE_SCATTER || kind == CCL__K_ALL_GATHER ? bytes / j->n : bytes;
    struct ccl__cost_pick p = ccl__cost_choose(j, &pr->f, kind, (size_t)piece, 0);
    return p.algo < 0 ? -1 : p.us;
}

/* ---- one configuration ---- */

static void add(struct config *c, enum group g, const char *coll, int kind, double bytes, double calls) {
    if (calls <= 0 || bytes <= 0) return;
    for (int i = 0; i < c->ne; i++)
        if (c->e[i].group == g && c->e[i].kind == kind && c->e[i].bytes == bytes) {
            c->e[i].calls += calls;
            return;
        }
    if (c->ne < MAX_ENTRIES) c->e[c->ne++] = (struct entry){g, coll, kind, bytes, calls, 0};
}

static void evaluate(const struct opts *o, const struct pricing *pr, struct config *c) {
    const struct model *m = &o->m;
    const struct conv *cv = &o->c;
    int d = c->dp, t = c->tp, p = c->pp, z = c->zero, K = c->micro_batches;
    int per_stage = (m->layers + p - 1) / p; /* stage 0 has the most */
    double wb = 0, gb = 0, sb = 0, grad_bytes = 0;
    /* stage 0's layers, each cut t ways, then (ZeRO) padded to a multiple of d and sharded */
    for (int l = 0; l < per_stage && l < m->layers; l++) {
        double local = ceil(m->layer_params[l] / t), shard = ceil(local / d), padded = shard * d;
        /* from stage 1 on the whole weights (and stage 1's whole gradients) sit in padded flat buffers */
        wb += (z >= 3 ? shard : z >= 1 ? padded : local) * cv->weight_b;
        gb += (z >= 2 ? shard : z == 1 ? padded : local) * cv->grad_b;
        sb += (z >= 1 ? shard : local) * (double)cv->states * cv->state_b;
        grad_bytes += local * cv->grad_b;
        if (d > 1 && z >= 1) {
            /* per layer, as ZeRO's flat buffers: gradients reduce-scattered (every micro-batch from stage 2
             * on: they are not kept whole), weights all-gathered once a step (stage 3: before each use,
             * forward and backward, every micro-batch) */
            add(c, DATA, "reduce_scatter", CCL__K_REDUCE_SCATTER, padded * cv->grad_b, z >= 2 ? K : 1);
            add(c, DATA, "all_gather", CCL__K_ALL_GATHER, padded * cv->weight_b, z >= 3 ? 2.0 * K : 1);
        }
    }
    if (d > 1 && z == 0) {
        /* DDP: the gradients in buckets, all-reduced once a step (after the micro-batches) */
        double full = floor(grad_bytes / o->bucket), rest = grad_bytes - full * o->bucket;
        add(c, DATA, "all_reduce", CCL__K_ALL_REDUCE, o->bucket, full);
        add(c, DATA, "all_reduce", CCL__K_ALL_REDUCE, rest, 1);
    }
    double act_msg = (double)m->seq * o->micro * m->hidden * cv->act_b; /* one micro-batch's activations */
    if (t > 1 && act_msg > 0) /* Megatron: attention and MLP each all-reduce once forward, once backward */
        add(c, TENSOR, "all_reduce", CCL__K_ALL_REDUCE, act_msg, (m->mlp ? 2.0 : 4.0) * per_stage * K);
    if (p > 1 && act_msg > 0) /* a middle stage: activations on, gradients back, per micro-batch */
        add(c, PIPE, "send/recv", -1, act_msg, 2.0 * K);
    c->weights = wb, c->grads = gb, c->optim = sb;
    /* 1F1B: stage 0 keeps min(K, p) micro-batches' activations; an MLP block (h -> 4h -> h) keeps its
     * input and dropout mask whole, its two 4h-wide tensors cut t ways: s b h (3 + 16/t) at 16 bits */
    double per_sbh = m->mlp ? 3.0 + 16.0 / t : 10.0 + 24.0 / t;
    c->acts = act_msg > 0 ? per_stage * (double)m->seq * o->micro * m->hidden * per_sbh * cv->act_b / 2 *
                                (K < p ? K : p)
                          : 0;
    c->total = wb + gb + sb + c->acts;
    c->fits = c->total <= o->gpu_mem * GIB;
    /* prices: each group's shape from where its members sit */
    int *node = malloc(sizeof(int) * (size_t)(d + t + 2));
    if (!node) exit(1);
    struct ccl__job_shape shapes[3];
    for (int i = 0; i < t; i++) node[i] = i / o->per_node;
    group_shape(pr, t, node, &shapes[TENSOR]);
    for (int i = 0; i < d; i++) node[i] = i * t / o->per_node;
    group_shape(pr, d, node, &shapes[DATA]);
    node[0] = 0, node[1] = d * t / o->per_node;
    group_shape(pr, 2, node, &shapes[PIPE]);
    free(node);
    c->comm_ms = 0;
    for (int i = 0; i < c->ne; i++) {
        c->e[i].us = price(pr, &shapes[c->e[i].group], c->e[i].kind, c->e[i].bytes);
        if (c->e[i].us > 0) c->comm_ms += c->e[i].us * c->e[i].calls / 1e3;
    }
    c->bubble = (double)(p - 1) / (K + p - 1);
    double tokens = (double)o->batch * (m->seq ? m->seq : 1);
    double compute_ms = 6.0 * m->params * tokens / (o->gpus * o->tflops * 1e12) * 1e3;
    c->compute_ms = compute_ms / (1 - c->bubble); /* the pipeline's idle share on top */
    c->step_ms = c->compute_ms + c->comm_ms;      /* nothing overlapped: an upper bound */
}

/* ---- enumeration and ranking ---- */

static int better(const void *a, const void *b) {
    const struct config *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (x->step_ms != y->step_ms) return x->step_ms < y->step_ms ? -1 : 1;
    return x->total < y->total ? -1 : x->total > y->total;
}

static int enumerate(const struct opts *o, const struct pricing *pr, struct config *out, int *skipped_batch) {
    int n = 0;
    *skipped_batch = 0;
    for (int t = 1; t <= o->gpus; t++) {
        if (o->gpus % t || (o->fix_tp && t != o->fix_tp)) continue;
        /* tensor parallelism stays inside a node (its all-reduces are on every layer's path) */
        if (t > o->per_node || o->per_node % t) continue;
        for (int p = 1; p <= o->gpus / t; p++) {
            if ((o->gpus / t) % p || (o->fix_pp && p != o->fix_pp) || p > o->m.layers) continue;
            int d = o->gpus / t / p;
            if (o->fix_dp && d != o->fix_dp) continue;
            if (o->batch % ((long)d * o->micro)) {
                ++*skipped_batch;
                continue;
            }
            for (int z = 0; z <= 3; z++) {
                if ((o->fix_zero >= 0 && z != o->fix_zero) || (d == 1 && z > 0) || n == MAX_CONFIGS) continue;
                struct config *c = &out[n++];
                memset(c, 0, sizeof *c);
                *c = (struct config){.dp = d, .tp = t, .pp = p, .zero = z, .micro_batches = o->batch / (d * o->micro)};
                evaluate(o, pr, c);
            }
        }
    }
    qsort(out, (size_t)n, sizeof *out, better);
    return n;
}

/* ---- output ---- */

static const char *gib(double bytes, char *buf) {
    if (bytes >= 0.1 * GIB) snprintf(buf, 16, "%.1f GiB", bytes / GIB);
    else if (bytes >= 1048576) snprintf(buf, 16, "%.1f MiB", bytes / 1048576);
    else snprintf(buf, 16, "%.0f B", bytes);
    return buf;
}

static void reason(const struct opts *o, const struct config *c, const struct config *next, char *buf, size_t n) {
    const struct entry *big = NULL;
    for (int i = 0; i < c->ne; i++)
        if (!big || c->e[i].us * c->e[i].calls > big->us * big->calls) big = &c->e[i];
    char a[16];
    int w = snprintf(buf, n, "it fits (%s of %g GiB per GPU) and has the shortest estimated step, %.1f ms: compute "
                     "%.1f ms with the pipeline's %.1f%% bubble, communication %.1f ms",
                     gib(c->total, a), o->gpu_mem, c->step_ms, c->compute_ms, 100 * c->bubble, c->comm_ms);
    if (big && w > 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, " (most of it %s in the %s group, %.1f ms)", big->coll,
                      group_names[big->group], big->us * big->calls / 1e3);
    if (next && next->fits && w > 0 && (size_t)w < n)
        snprintf(buf + w, n - (size_t)w, "; the next, dp %d x tp %d x pp %d ZeRO-%d, takes %.1f ms", next->dp,
                 next->tp, next->pp, next->zero, next->step_ms);
}

static void print_breakdown(const struct config *c) {
    printf("  memory per GPU: weights %.0f B, gradients %.0f B, optimizer states %.0f B, activations %.0f B: "
           "%.0f B\n", c->weights, c->grads, c->optim, c->acts, c->total);
    printf("  %d micro-batch%s per step; pipeline bubble (P-1)/(K+P-1) = %d/%d = %.3f\n", c->micro_batches,
           c->micro_batches == 1 ? "" : "es", c->pp - 1, c->micro_batches + c->pp - 1, c->bubble);
    if (!c->ne) printf("  no communication\n");
    for (int i = 0; i < c->ne; i++) {
        const struct entry *e = &c->e[i];
        printf("  %-8s %-14s %14.0f B x %-8g per step  %10.1f us each  %10.2f ms\n", group_names[e->group], e->coll,
               e->bytes, e->calls, e->us, e->us * e->calls / 1e3);
    }
}

static void print_text(const struct opts *o, const char *figs, const struct config *cs, int n, int skipped) {
    const struct model *m = &o->m;
    printf("ccl-plan --train: %.4g parameters in %d layer%s", m->params, m->layers, m->layers == 1 ? "" : "s");
    if (m->hidden && m->seq) printf(", hidden %d, sequence %d", m->hidden, m->seq);
    if (m->mlp) printf(" (MLP blocks)");
    printf("; global batch %d, micro-batch %d\n", o->batch, o->micro);
    printf("%d GPUs, %d per node, %g GiB each; %s\n", o->gpus, o->per_node, o->gpu_mem, figs);
    printf("%s precision: weights %d B, gradients %d B, %d optimizer state%s of %d B (%s%s) per parameter\n",
           o->c.precision, o->c.weight_b, o->c.grad_b, o->c.states, o->c.states == 1 ? "" : "s", o->c.state_b,
           o->c.optimizer, o->c.master ? " and master weights" : "");
    if (!(m->hidden && m->seq))
        printf("no --hidden and --seq: activations, tensor- and pipeline-parallel messages are not counted\n");
    printf("compute: 6 x parameters x tokens at %g TFLOP/s per GPU; communication is not overlapped with it\n\n",
           o->tflops);
    int fit = 0;
    for (int i = 0; i < n; i++) fit += cs[i].fits;
    printf("%4s %5s %4s %4s %4s %10s %10s %10s %10s %11s %10s %7s %10s\n", "#", "dp", "tp", "pp", "zero", "weights",
           "gradients", "optimizer", "activ.", "total/GPU", "comm ms", "bubble", "step ms");
    int shown = o->top ? (o->top < n ? o->top : n) : n;
    for (int i = 0; i < shown; i++) {
        const struct config *c = &cs[i];
        char a[16], b[16], d[16], e[16], f[16];
        printf("%4d %5d %4d %4d %4d %10s %10s %10s %10s %11s %10.3f %6.1f%% %10.3f%s\n", i + 1, c->dp, c->tp, c->pp,
               c->zero, gib(c->weights, a), gib(c->grads, b), gib(c->optim, d), gib(c->acts, e), gib(c->total, f),
               c->comm_ms, 100 * c->bubble, c->step_ms, c->fits ? "" : "  does not fit");
    }
    if (shown < n) printf("     ... %d more (--top 0 lists all)\n", n - shown);
    if (skipped) printf("(%d split%s left out: the global batch %d does not divide into its data-parallel ranks' "
                        "micro-batches)\n", skipped, skipped == 1 ? "" : "s", o->batch);
    if (!fit) {
        printf("\nNothing fits in %g GiB per GPU: more GPUs, a higher ZeRO stage or more pipeline stages\n",
               o->gpu_mem);
        return;
    }
    char why[600];
    reason(o, &cs[0], n > 1 ? &cs[1] : NULL, why, sizeof why);
    printf("\nRecommended: dp %d x tp %d x pp %d, ZeRO-%d: %s.\n", cs[0].dp, cs[0].tp, cs[0].pp, cs[0].zero, why);
    for (int i = 0; i < o->show && i < n && cs[i].fits; i++) {
        printf("\n#%d dp %d x tp %d x pp %d, ZeRO-%d, per GPU and step:\n", i + 1, cs[i].dp, cs[i].tp, cs[i].pp,
               cs[i].zero);
        print_breakdown(&cs[i]);
    }
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') putchar('\\');
        if ((unsigned char)*s >= 0x20) putchar(*s);
    }
    putchar('"');
}

static void print_json(const struct opts *o, const char *figs, const struct config *cs, int n) {
    const struct model *m = &o->m;
    printf("{\"model\": {\"params\": %.0f, \"layers\": %d, \"hidden\": %d, \"seq\": %d, \"batch\": %d, "
           "\"micro_batch\": %d, \"block\": \"%s\"},\n", m->params, m->layers, m->hidden, m->seq, o->batch, o->micro,
           m->mlp ? "mlp" : "transformer");
    printf(" \"cluster\": {\"gpus\": %d, \"gpus_per_node\": %d, \"gpu_mem_gib\": %g, \"figures\": ", o->gpus,
           o->per_node, o->gpu_mem);
    json_str(figs);
    printf("},\n \"conventions\": {\"precision\": \"%s\", \"optimizer\": \"%s\", \"weight_bytes\": %d, "
           "\"grad_bytes\": %d, \"states\": %d, \"state_bytes\": %d},\n \"configs\": [", o->c.precision,
           o->c.optimizer, o->c.weight_b, o->c.grad_b, o->c.states, o->c.state_b);
    for (int i = 0; i < n; i++) {
        const struct config *c = &cs[i];
        printf("%s\n  {\"dp\": %d, \"tp\": %d, \"pp\": %d, \"zero\": %d, \"micro_batches\": %d, \"fits\": %s, "
               "\"memory\": {\"weights\": %.0f, \"gradients\": %.0f, \"optimizer\": %.0f, \"activations\": %.0f, "
               "\"total\": %.0f}, \"bubble\": %.6f, \"compute_ms\": %.4f, \"comm_ms\": %.4f, \"step_ms\": %.4f, "
               "\"comm\": [", i ? "," : "", c->dp, c->tp, c->pp, c->zero, c->micro_batches, c->fits ? "true" : "false",
               c->weights, c->grads, c->optim, c->acts, c->total, c->bubble, c->compute_ms, c->comm_ms, c->step_ms);
        for (int k = 0; k < c->ne; k++)
            printf("%s{\"group\": \"%s\", \"collective\": \"%s\", \"bytes\": %.0f, \"calls\": %g, \"us\": %.3f}",
                   k ? ", " : "", group_names[c->e[k].group], c->e[k].coll, c->e[k].bytes, c->e[k].calls, c->e[k].us);
        printf("]}");
    }
    char why[600] = "";
    if (n && cs[0].fits) reason(o, &cs[0], n > 1 ? &cs[1] : NULL, why, sizeof why);
    printf("\n ],\n \"recommended\": %d, \"reason\": ", n && cs[0].fits ? 0 : -1);
    json_str(why);
    printf("}\n");
}

int ccl_plan_train(int argc, char **argv) {
    struct opts *o = calloc(1, sizeof *o);
    struct config *cs = calloc(MAX_CONFIGS, sizeof *cs);
    struct pricing *pr = calloc(1, sizeof *pr);
    if (!o || !cs || !pr) return 1;
    parse(argc, argv, o);
    ccl__cost_defaults(&pr->f);
    pr->net = o->net;
    pr->per_node = o->per_node;
    const struct ccl__params *params = ccl__params_get();
    const char *path = o->tuning ? o->tuning : params->tuning_file;
    char key[160], why[200], figs[700];
    ccl__tune_machine_key(key, sizeof key);
    int got = strcmp(path, "none") ? ccl__tune_file_read(path, o->tuning ? NULL : key, &pr->f, why, sizeof why) : 0;
    if (got < 0) fprintf(stderr, "ccl-plan: ignoring the tuning file %s: %s\n", path, why);
    if (o->intra) parse_link(o->intra, "--intra", &pr->f.link[CCL__LINK_NUMA]);
    if (o->inter) parse_link(o->inter, "--inter", &pr->f.link[o->net]);
    if (o->reduce_gbps > 0) pr->f.reduce_bytes_per_us = o->reduce_gbps * 1e3;
    const struct ccl__link_figure *in = &pr->f.link[CCL__LINK_NUMA], *out = &pr->f.link[o->net];
    const char *from = got > 0 ? "the tuning file" : "defaults";
    snprintf(figs, sizeof figs, "links: inside a node alpha %.2f us, %.1f GB/s (%s); between nodes (%s) alpha %.2f us, "
             "%.1f GB/s (%s)", in->alpha_us, in->bytes_per_us / 1e3, o->intra ? "given" : from,
             ccl__link_names[o->net], out->alpha_us, out->bytes_per_us / 1e3, o->inter ? "given" : from);
    int skipped = 0, n = enumerate(o, pr, cs, &skipped);
    if (!n) {
        fprintf(stderr, "ccl-plan: no data x tensor x pipeline split of %d GPUs matches what was asked (%d per node, "
                "%d layers, global batch %d in micro-batches of %d%s)\n", o->gpus, o->per_node, o->m.layers, o->batch,
                o->micro, skipped ? ": the batch does not divide into the data-parallel ranks' micro-batches" : "");
        return 2;
    }
    if (o->json) print_json(o, figs, cs, n);
    else print_text(o, figs, cs, n, skipped);
    free(o), free(cs), free(pr);
    return 0;
}
