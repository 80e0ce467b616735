/*
 * The cost model: a predicted time for every algorithm that can run a
 * call, from the links it uses and a few measured figures (alpha-beta per
 * link class, copy and reduction speed). It knows nothing of communicators:
 * the planner describes a job as a struct ccl__job_shape, so ccl-plan can
 * ask the same questions of a machine nobody here has.
 */
#ifndef CCL_PLAN_COST_H
#define CCL_PLAN_COST_H

#include <stddef.h>
#include <stdint.h>

/* Link classes, by what lies between two ranks: the planner's vocabulary
 * of links, not of transports. A transport says which class its
 * connections are (struct ccl__transport.link_class, one of
 * ccl__link_names: a network reached through the kernel's stack, or one
 * whose adapter moves the bytes); shared memory's class follows the two
 * ranks' places.
 * What the model does with a class is said by the properties below, never
 * by which transport it came from. */
enum ccl__link_class {
    CCL__LINK_NUMA = 0, /* shared memory, one NUMA node */
    CCL__LINK_XNUMA,    /* shared memory, two NUMA nodes of one package */
    CCL__LINK_XPACKAGE, /* shared memory, two packages (sockets) */
    CCL__LINK_TCP,
    CCL__LINK_RDMA,
    CCL__NUM_LINKS
};
extern const char *const ccl__link_names[CCL__NUM_LINKS];
/* The classes that cross a network adapter (its share, a large point). */
#define CCL__NETWORK_LINKS ((1u << CCL__LINK_TCP) | (1u << CCL__LINK_RDMA))
/* The network classes whose bytes the ranks' own cores copy (a kernel
 * network stack): ranks sharing cores slow them too. */
#define CCL__CPU_COPIED_LINKS (1u << CCL__LINK_TCP)
/* The class of a pair no transport connects: the slowest network's, so
 * the planner never counts on a link it does not have. */
#define CCL__LINK_UNCONNECTED CCL__LINK_TCP
static inline int ccl__link_is_shared_memory(int c) { return !(CCL__NETWORK_LINKS >> c & 1u); }
int ccl__link_by_name(const char *name);

/* The size of the steps a link's bandwidth is measured with. */
#define CCL__PROBE_BYTES (64u << 10)

/* One link class: alpha, the time of a step that moves nothing, and the
 * bandwidth of a step in which every rank sends and receives at once (a
 * ring step), in bytes per microsecond per rank, measured with steps of
 * CCL__PROBE_BYTES. A network link has a second point: a step of
 * large_bytes (its slot, the largest message it sends whole) at
 * large_bytes_per_us, for a step's time is not a line in its bytes there.
 * Measured, 2 ranks over loopback TCP: steps of 32 KiB took 13-19 us, of
 * 64 KiB 26-34, of 512 KiB 88-131. Past 64 KiB a byte costs a third of
 * what it did below, and the line through the small steps puts 512 KiB at
 * 200 us and the ring's two messages of 256 KiB at the price of recursive
 * doubling's one of 512 KiB, which is 10-40% faster. large_bytes 0:
 * bytes_per_us at every size. */
struct ccl__link_figure {
    double alpha_us, bytes_per_us;
    double large_bytes, large_bytes_per_us;
};

/* The time of `bytes` over link l, alpha aside: the small steps' rate up
 * to CCL__PROBE_BYTES, then the line to the large point, then whole slots
 * one after another at the large point's rate. Never falls as bytes grow,
 * nor as the rate of a byte (a large point slower per byte than the small
 * steps counts as none). */
double ccl__cost_link_bytes_us(const struct ccl__link_figure *l, double bytes);

struct ccl__figures {
    struct ccl__link_figure link[CCL__NUM_LINKS];
    double copy_bytes_per_us;   /* memcpy */
    double reduce_bytes_per_us; /* float32 sum of two inputs, bytes of one input */
    /* Cross-memory attach (the single-copy algorithm's reads): a call's
     * own cost, and the kernel's copy speed, measured with this process's
     * memory (the same cached bytes as copy's); CCL__FIG_CMA in measured. */
    double cma_call_us, cma_bytes_per_us;
    /* And its speed on a peer buffer too large for any cache, read in the
     * single-copy algorithm's pieces while every rank reads one (the large
     * point, measured by ccl-tune: CCL__FIG_CMA_LARGE; else the default's
     * share of the probe's speed). */
    double cma_large_bytes, cma_large_bytes_per_us;
    /* And one read of a message-sized buffer (1 MiB) just written by its
     * owner, in one call, every rank reading at once: init's probe, 0 where
     * it did not run. Between the probe's point and the large one. */
    double cma_msg_bytes, cma_msg_bytes_per_us;
    unsigned measured;          /* bit per link class measured (the rest are defaults); CCL__FIG_LOCAL: copy
                                 * and reduce */
};
#define CCL__FIG_LOCAL (1u << 16)
/* A rank's tuning file holds figures given by hand ("check no"): taken as
 * they are, never checked against a probe. */
#define CCL__FIG_GIVEN (1u << 17)
#define CCL__FIG_CMA (1u << 18)
#define CCL__FIG_CMA_LARGE (1u << 19)

/* Figures of a 2-core x86 machine of 2024, for link classes nothing has
 * measured yet. */
void ccl__cost_defaults(struct ccl__figures *f);

/* What a wait costs beyond alpha when ranks share cores (oversub ranks
 * per core): one handoff of the core per extra rank. Figures are those of
 * unshared cores; a probe under oversubscription takes this off. */
#define CCL__HANDOFF_US 3.0
double ccl__cost_handoff_us(double oversub);

/* The largest power of two not above n (n >= 1): recursive doubling's
 * ranks, for the shape and the formulas alike. */
static inline int ccl__pow2_floor(int n) {
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
}

/* A core's part in one step: its ranks that receive from another core
 * (across the machine, at the link's speed) and from their own core (over
 * shared memory, copies in the cache that core holds). */
struct ccl__core_load {
    int cross, same;
};

/* A job as the model sees it. Link sets are bitmasks of link classes. */
#define CCL__COST_MAX_STEPS 32
struct ccl__job_shape {
    int n;                 /* ranks */
    int nhosts, per_host;  /* per_host: ranks on every host when all hosts have as many, else 0 */
    int windows;           /* the direct path (one host, shared windows) is on */
    int single_copy;       /* and every rank may read every other's memory (cross-memory attach) */
    double oversub;        /* >= 1: ranks per core on the busiest machine; CPU-bound terms scale by it */
    size_t ring_chunk;     /* the ring's largest chunk (bytes): the smallest slot on its links */
    size_t any_chunk;      /* other algorithms' largest chunk: the smallest slot of any pair (0: ring_chunk) */
    size_t window_area;    /* bytes the direct algorithm moves per round */
    unsigned ring_links;   /* the ring's links */
    unsigned all_links;    /* every pair's link (all-to-all, the direct algorithm) */
    unsigned dtree_links;  /* the double binary tree's edges (all-reduce) */
    unsigned btree_links;  /* the binomial tree's edges (broadcast, reduce; rooted at rank 0) */
    int dtree_depth;       /* levels below the double binary tree's roots (the deeper tree) */
    unsigned inside_links; /* pairs on one host (hier) */
    unsigned across_links; /* pairs at one place of two hosts (hier) */
    unsigned xor_links[CCL__COST_MAX_STEPS];   /* recursive doubling step k: rank r with r ^ 2^k (r, partner < p) */
    unsigned shift_links[CCL__COST_MAX_STEPS]; /* Bruck step k: rank r with r + 2^k mod n */
    /* How many ranks of one host use the network at once (the most of any
     * host): they share its adapter. */
    int xor_share[CCL__COST_MAX_STEPS], shift_share[CCL__COST_MAX_STEPS];
    int per_host_max;      /* ranks on the biggest host */
    /* Where ranks share cores and it is known where each sits (pinned),
     * the busiest core's load in a step of the ring, of recursive doubling
     * and of Bruck: how many of its ranks receive from a rank on another
     * core, and how many from one on the same core. cross 0: not known,
     * oversub stands for it. */
    struct ccl__core_load ring_core, xor_core[CCL__COST_MAX_STEPS], shift_core[CCL__COST_MAX_STEPS];
};

/* The shape of n ranks: cls[i * n + j] is the link class between ranks i
 * and j, ring[] the ring order, host_of[] each rank's host (0 ..
 * nhosts - 1), core_of[] the core each is pinned to on its host (NULL, or
 * -1 for a rank: not known). */
void ccl__cost_shape(struct ccl__job_shape *out, int n, const uint8_t *cls, const int *ring, const int *host_of,
                     const int *core_of);

/* The inverse of a ring step: the link speed (bytes per us and rank) at
 * which a step of the ring moving `bytes` per rank takes `us`, on this
 * shape with these copy figures (the probe's reading of its own ring). */
double ccl__cost_ring_speed(const struct ccl__job_shape *j, const struct ccl__figures *f, double bytes, double us);

/* One step's time: `bytes` over the slowest link of `links`, alpha and
 * handoffs included, one rank of a host on its adapter. */
double ccl__cost_step_us(const struct ccl__job_shape *j, const struct ccl__figures *f, unsigned links, double bytes);

/* Predicted microseconds for algo (enum ccl__algo_id) to run a call of
 * kind (enum ccl__op_kind) whose per-rank piece is bytes (all-reduce,
 * broadcast and reduce: the buffer; reduce-scatter: a block; all-gather:
 * a rank's share; all-to-all: what one pair exchanges); negative when algo
 * does not run that call on this shape. The call is cut into chunks of
 * `chunk` bytes (at most the algorithm's largest), or with chunk 0 into
 * those the model finds cheapest: the chain of the ring's broadcast and
 * reduce trades the waits of more pieces against the sooner start of the
 * ranks down the line; elsewhere the largest chunk, which waits least. *chosen (when not NULL) gets the
 * chunk; the pipeline's depth, the pieces in flight along it, follows
 * from it (bytes / chunk pieces, CCL_SLOTS of them at most per link). */
double ccl__cost_predict_chunk(const struct ccl__job_shape *j, const struct ccl__figures *f, int kind, int algo,
                               size_t bytes, size_t chunk, size_t *chosen);
/* The same with the model's own chunk. */
double ccl__cost_predict(const struct ccl__job_shape *j, const struct ccl__figures *f, int kind, int algo,
                         size_t bytes);

/* Predicted microseconds of the zero-copy path (algo/zero_copy.c) for a
 * call whose buffers lie in shared allocations on every rank (bytes as
 * above); negative where it cannot run (no windows, a kind it does not
 * run). Not an algorithm: whether a call may take it depends on its
 * buffers, so the planner weighs it against its pick (coll/batch.c). */
double ccl__cost_zero_copy_us(const struct ccl__job_shape *j, const struct ccl__figures *f, int kind, size_t bytes);

/* The cheapest algorithm for the call (-1 if none can), its prediction in
 * *us and its chunk (chunk: the call's fixed chunk, or 0 for the model's
 * cheapest), and the runner-up (algorithm and time; -1 when there is
 * none). */
struct ccl__cost_pick {
    int algo, next;
    double us, next_us;
    size_t chunk;
};
struct ccl__cost_pick ccl__cost_choose(const struct ccl__job_shape *j, const struct ccl__figures *f, int kind,
                                       size_t bytes, size_t chunk);

/* Whether point-to-point messages may go single-copy through the kernel
 * on a machine whose kernel reads a message at read_bytes_per_us (init's
 * probe, plan/model.c says why): not where it copies at less than half
 * memcpy's speed (f's copy figure). */
int ccl__cost_kernel_read_pays(const struct ccl__figures *f, double read_bytes_per_us);

#endif
