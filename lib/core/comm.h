/*
 * The communicator: what every layer shares about one group of ranks.
 * Fields are grouped by the layer that owns them; a layer reads lower
 * layers' fields and writes only its own.
 */
#ifndef CCL_COMM_H
#define CCL_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ccl.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/params.h"
#include "core/peer.h"
#include "core/wake.h"

#define CCL__COMM_MAGIC 0x43434c43u /* "CCLC" */
#define CCL__SECRET_BYTES 32
#define CCL__ERR_BYTES 512
#define CCL__MAX_OP_KINDS 16 /* room for enum ccl__op_kind (prims/prims.h) */

struct ccl__conn;
struct ccl__cost_state;
struct ccl__exec;
struct ccl__pair_chan;
struct ccl__unique_id;

/* One shared allocation of ccl_mem_alloc: this rank's memory, and where
 * every rank's allocation of the same serial lies in this process (peer
 * NULL: not mapped here; self: base). */
struct ccl__mem {
    uint64_t serial;
    void *base;
    size_t bytes;       /* as asked (its mappings are whole pages: mapped) */
    size_t mapped;
    int released;       /* this rank let go of it (ccl_mem_release; under comm->mem_lock) */
    int fd;             /* the memory's file (memfd), which peers open through /proc */
    int shared;         /* every peer's allocation is mapped here */
    uint8_t **peer;     /* [nranks] */
    struct ccl__mem *next;
};

/* comm's allocation of serial (NULL: none), and the one holding
 * [p, p + bytes) on this rank (NULL: none; bytes 0 counts as p alone). */
struct ccl__mem *ccl__mem_by_serial(const struct ccl_comm *comm, uint64_t serial);
struct ccl__mem *ccl__mem_holding(const struct ccl_comm *comm, const void *p, size_t bytes);

struct ccl_comm {
    uint32_t magic;
    int rank;
    int nranks;
    uint64_t comm_id;                   /* random, same on every rank */
    uint8_t secret[CCL__SECRET_BYTES];  /* proves membership on every connection */
    struct ccl__params params;          /* snapshot taken at init */
    struct ccl__peer_info *peers;       /* [nranks], from bootstrap */

    /* transports */
    void **tstate;                      /* [ccl__ntransports]: each transport's private state (ccl__tstate) */
    void **tknobs;                      /* [ccl__ntransports]: each transport's knobs, read at init (ccl__tknobs) */
    uint8_t *blobs;                     /* [nranks][ccl__ntransports][CCL__TRANSPORT_BLOB_BYTES] (ccl__peer_blob) */
    struct ccl__conn **conns;           /* [nranks], full duplex; NULL for self */
    uint32_t slot_kinds;                /* memory kinds of every connection's slots (bit per kind) */
    uint8_t caller_mem;                 /* some connection sends from or receives into the caller's memory */
    uint8_t cpu_adapter;                /* some connection's adapter is software on this machine's CPUs */
    struct ccl__conn **scratch_conns;   /* [nranks], for the one thread running operations */
    struct ccl__conn **staged;          /* [nranks]: connections holding committed bytes not yet sent */
    struct ccl__regcache *regcache;     /* registrations kept for reuse (prims/regcache.h); NULL until used */
    struct ccl__user_reg *user_regs;    /* ccl_comm_register's live handles (coll/register.c) */
    struct ccl__device_state *device;   /* CUDA staging and stream tickets (lib/device); NULL until used */
    int nstaged;
    /* The running collective's host buffers and the registrations its
     * steps made of them, to send from in place of slots
     * (prims/caller_mem.c); set and let go around each collective
     * (coll/batch.c). */
    struct ccl__call_buf {
        const void *buf;
        size_t bytes;
        struct ccl__reg *reg;
        uint8_t tried;
        uintptr_t reading_lo, reading_hi; /* what an adapter may still be reading of it, or 0, 0 */
    } call_bufs[2];
    uint8_t reading;                    /* some call_bufs[].reading_hi is set */

    /* planner output */
    int *ring;                          /* [nranks]: ring position -> rank */
    int ring_pos;                       /* this rank's position in ring */
    size_t ring_chunk_bytes;            /* slice size every rank uses on the ring (smallest slot on it) */
    size_t ring_zc_bytes;               /* ring blocks this large gather zero-copy (algo/ring.c); 0: never */
    int nhosts;                         /* CCL_HOST_ID groups; each is a run of ring positions */
    int *host_first;                    /* [nhosts + 1]: host h holds positions host_first[h] .. host_first[h+1]-1 */
    int host;                           /* this rank's host */
    int *across;                        /* [nhosts]: the rank at this rank's place on every host; NULL unless
                                         * every host has as many ranks */
    int *identity;                      /* [nranks]: 0, 1, 2, ... (rings whose blocks are their positions) */
    size_t chunk_bytes;                 /* the same for any pair: smallest slot of every link */
    double spin_s, yield_s;             /* how long a wait spins, then yields, before sleeping */
    int spin_unless_in_flight;          /* a wait spins only while no adapter works for it (prims/wait.c) */
    double yield_base_s, yield_max_s;   /* yield_s adapts between these (prims/wait.c); equal: it does not */
    int machine_ranks, machine_cpus;    /* ranks of this communicator on this machine, CPUs this rank may use */
    int own_core;                       /* own_core_thread runs on a core no other local rank runs on */
    pthread_t own_core_thread;          /* the thread pinned there (the one that created the communicator) */
    /* The direct path: every rank's shared window, when every rank has one
     * this process maps (one host); the same decision on every rank. */
    uint8_t **windows;                  /* [nranks], NULL when the direct path is off */
    struct ccl__cost_state *cost;       /* the planner's model of this job (plan/model.c) */
    size_t window_bytes;                /* the smallest window of any rank */
    size_t stream_bytes;                /* outputs from this size are written past the caches (direct path) */
    uint64_t direct_rounds;             /* direct rounds run so far, the same on every rank */
    uint64_t lines_calls;               /* tiny all-reduces run so far (algo/lines.c), the same on every rank */
    unsigned direct_narrow;             /* bit g % 2: only one peer read this rank's window in round g (direct.c) */
    int gpu_direct;                     /* the GPU-resident path is on (device/gpu_direct.h) */
    size_t device_piece_bytes;          /* large calls run in pieces this large (device/pipeline.h), the same on
                                         * every rank; 0: whole */
    unsigned pipelined_calls;           /* calls whose device buffers were staged piece by piece here */
    /* Every rank may read and write every other's memory through
     * cross-memory attach (core/cma.h): the single-copy algorithm can
     * run. Probed at init, the same on every rank (plan.c). */
    int single_copy;
    char single_copy_off[200];          /* why it is off, when it is */
    void *fold_scratch;                 /* folding pieces of the in-place paths, kept between calls */
    size_t fold_scratch_bytes;          /* (ccl__fold_scratch, algo/common.c) */
    double cma_call_us, cma_bytes_per_us; /* init's probe of it, the same on every rank (0: not probed) */
    /* During init only: the communicator every rank of this one comes
     * from (a split's, a shrink's), whose probes' figures hold here too;
     * NULL otherwise, the same on every rank. */
    const struct ccl_comm *parent;
    double cma_large_bytes, cma_large_bytes_per_us; /* its large point, where CCL_CMA_LARGE_PROBE asked (0: not) */
    double cma_msg_bytes, cma_msg_bytes_per_us; /* one read of a message's size (1 MiB), its call included (0: not probed) */
    /* Point-to-point messages over a kernel-copy transport (zc_by_cma) go
     * single-copy from this size (0: never): the transport's setting, or
     * the planner's verdict on it (plan/model.c), the same on every rank. */
    size_t cma_p2p_bytes;
    /* Shared allocations (ccl_mem_alloc, coll/mem.c), the same list on
     * every rank: the zero-copy path reads and writes peers' buffers
     * through them. Changed on the executor only, in call order. */
    struct ccl__mem *mems;
    int nmems;
    pthread_mutex_t mem_lock;           /* the list against ccl_mem_release's lookups from any thread */
    uint64_t mem_serial;                /* allocations made so far: an allocation's serial is the same on every rank */
    unsigned zero_copy_calls;           /* collectives that took the zero-copy path (ccl_comm_describe) */
    signed char algo_forced[CCL__MAX_OP_KINDS]; /* CCL_ALGO per collective, -1 for the planner's choice */
    signed char algo_last[CCL__MAX_OP_KINDS];   /* the algorithm of each collective's last call, -1 none */
    char algo_why[CCL__MAX_OP_KINDS][64];       /* and why it was chosen */

    /* waking and failure */
    struct ccl__wake_words local_wake;  /* used until shm provides shared words */
    struct ccl__wake_words *wake;       /* where peers ring us */
    int event_fd;                       /* wakes poll() waiters on local abort */
    int boot_fd;                        /* the bootstrap root's connection while set-up runs, else -1 */
    int boot_told;                      /* the root answered a set-up round early: another rank failed */
    int set_up;                         /* every rank's transports completed set-up (the last round passed) */
    _Atomic int aborted;                /* ccl_comm_abort was called */
    _Atomic int failed_status;          /* first error that failed the comm, CCL_OK while healthy */
    _Atomic int32_t culprit;            /* rank + 1 of the rank whose death or failure failed it, 0: this one */
    _Atomic int32_t culprit_cause;      /* enum ccl__culprit_cause: what was found wrong with it */
    /* Set by the API layer, the one failure hook: tells every peer we
     * failed and lets go of the GPU-resident path's waiters (core cannot
     * call up: layers point down only). */
    void (*on_fail)(struct ccl_comm *comm, ccl_status_t st);
    pthread_mutex_t err_lock;
    char last_error[CCL__ERR_BYTES];
    /* Elastic (coll/comm_shrink.c, coll/comm_grow.c). */
    uint8_t *left_out;                  /* [nranks], after a shrink of this communicator: the ranks it left out */
    int nleft_out;
    struct ccl__unique_id *grow_uid;    /* rank 0's grow id (members' copy) until its grow; NULL when none */
    struct ccl__made_ops made_ops;      /* ccl_op_create_premul_sum's (coll/ops.c) */

    /* execution (core/exec.c) */
    struct ccl__exec *exec;
    uint32_t coll_seq;                  /* collectives issued, same on every rank */
    int flight_algo;                    /* the algorithm the running collective was planned on, -1 none (batch.c) */
    uint32_t *send_seq;                 /* [nranks] p2p messages sent to each peer */
    uint32_t *recv_seq;                 /* [nranks] p2p messages received from each */

    /* bootstrap (core/bootstrap.c) */
    char boot_addr[64];                 /* address peers can reach us at */
    char rdma_near[128];                /* RDMA devices, nearest to this rank's CPUs first (plan/topo.c) */
    double clock_offset;                /* root's clock minus ours, seconds (set-up rounds) */
    int clock_shared_with_root;         /* reads the root's clock (same kernel and time namespace): offset 0 */
    double clock_rtt;                   /* last set-up round's round trip (0 before the first) */
    struct ccl__pair_chan *pairs;       /* pair messages after set-up (core/boot_pair.h) */

    /* the flight recorder (core/flight.h): NULL when off */
    struct ccl__flight *flight;
    /* the status server (core/status.h) */
    int status_on;                      /* counted in by the process's server (its generation + 1), 0: not */
    char status_file[512];              /* where this rank says where the server is ("" = nowhere) */
    _Atomic int32_t wait_peer;          /* the rank a wait past its spin is on + 2 (1: none), 0: no such wait */
    _Atomic int64_t wait_since_us;      /* and since when (ccl__now() in us) */
    _Atomic uint32_t wait_steps;        /* waits this rank completed (prims/wait.c): how far a call has got */

    /* tracing (core/trace.h): NULL when off */
    struct ccl__trace *trace;
    uint64_t trace_base;                /* bytes: where a cut call's running piece starts in the call's buffers,
                                         * added to its trace offsets (coll/batch.c), so its pieces trace as one call */
    char trace_path[256];               /* where destroy writes it ("" = nowhere) */
};

/* Record a sentence for ccl_comm_last_error and return st. Thread-safe. */
ccl_status_t ccl__set_error(struct ccl_comm *comm, ccl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ccl__set_error, replacing the sentence of a failed communicator too:
 * for calls that run on purpose after the failure (a shrink), whose own
 * outcome is what the caller must read. */
ccl_status_t ccl__replace_error(struct ccl_comm *comm, ccl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Mark the communicator failed with st (first failure wins), record the
 * message, tell every peer through the transports. Returns st. */
ccl_status_t ccl__comm_fail(struct ccl_comm *comm, ccl_status_t st);

/* A communicator creation on this thread failed with msg: what
 * ccl_comm_last_error(NULL) returns from now on. */
void ccl__note_init_failure(const char *msg);
/* An init (or id) that fails before there is a communicator to hold its
 * sentence: logged as log_prefix + the sentence, kept for
 * ccl_comm_last_error(NULL), and st returned. */
__attribute__((format(printf, 4, 5))) ccl_status_t ccl__init_failed(int rank, ccl_status_t st, const char *log_prefix,
                                                                    const char *fmt, ...);
/* `rank` (a peer that died or cannot be reached, or whose failure this
 * rank heard of) is what failed comm: the peers this rank tells name it and
 * the cause, not this rank. The first blame stays. */
/* The timeout as messages say it: "CCL_TIMEOUT=3" where the environment
 * set it, else "timeout 3 s, set by ccl_comm_set_timeout". */
static inline const char *ccl__timeout_words(const struct ccl_comm *comm, char *buf, size_t n) {
    if (strcmp(comm->params.timeout_source, "CCL_TIMEOUT") == 0)
        snprintf(buf, n, "CCL_TIMEOUT=%g", comm->params.timeout_s);
    else snprintf(buf, n, "timeout %g s, set by %s", comm->params.timeout_s, comm->params.timeout_source);
    return buf;
}

static inline void ccl__comm_blame(struct ccl_comm *comm, int rank, enum ccl__culprit_cause cause) {
    int32_t none = 0;
    if (atomic_compare_exchange_strong(&comm->culprit, &none, rank + 1)) atomic_store(&comm->culprit_cause, (int32_t)cause);
}

/* Fault tests: at a set-up phase ("joined", "setup", "segment", "connecting",
 * "connect", "connected"), dies with SIGKILL when CCL_TEST_KILL_AT names
 * it, sleeps 0.2 s when CCL_TEST_STALL_AT does (to open a race window). */
void ccl__test_fault_point(const struct ccl_comm *comm, const char *phase);

/* CCL_OK, or the status that failed/aborted the communicator. */
static inline ccl_status_t ccl__comm_health(struct ccl_comm *comm) {
    if (atomic_load_explicit(&comm->aborted, memory_order_relaxed)) return CCL_ERR_ABORTED;
    return (ccl_status_t)atomic_load_explicit(&comm->failed_status, memory_order_acquire);
}

/* Live-communicator registry: lets every entry point refuse a destroyed or
 * foreign pointer with CCL_ERR_INVALID_USAGE instead of crashing. */
ccl_status_t ccl__registry_add(struct ccl_comm *comm);
void ccl__registry_remove(struct ccl_comm *comm);
int ccl__registry_has(const struct ccl_comm *comm);
/* fn on every live communicator, under the registry's lock (none can be
 * destroyed meanwhile; fn must not call into the registry). */
void ccl__registry_each(void (*fn)(struct ccl_comm *comm, void *arg), void *arg);

/* Propagate a status from a call, logging where it failed (NCCL's NCCLCHECK). */
#define CCL_CHECK(call)                                                                         \
    do {                                                                                        \
        ccl_status_t ccl_check_st_ = (call);                                                    \
        if (ccl_check_st_ < 0) {                                                                \
            CCL_TRACE(CCL__SUB_ALL, -1, "%s:%d %s -> %s", __FILE__, __LINE__, #call,            \
                      ccl_status_string(ccl_check_st_));                                        \
            return ccl_check_st_;                                                               \
        }                                                                                       \
    } while (0)

#endif
