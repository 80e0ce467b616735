/*
 * Environment knobs, declared in one place (params.c) with their defaults.
 * Read once per process; a communicator copies what it needs at init so a
 * later setenv does not change a running communicator.
 */
#ifndef CCL_PARAMS_H
#define CCL_PARAMS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

struct ccl__params {
    double timeout_s;         /* CCL_TIMEOUT: longest wait without progress */
    char test_kill_at[16];    /* CCL_TEST_KILL_AT: a set-up phase where this process dies (fault tests) */
    char test_stall_at[16];   /* CCL_TEST_STALL_AT: a set-up phase where this process sleeps 0.2 s (fault tests) */
    double link_timeout_s;    /* CCL_LINK_TIMEOUT: longest silence of a peer's host or adapter */
    char transport[16];       /* CCL_TRANSPORT: "" (auto), "shm", "tcp", "ib" */
    char host_id[64];         /* CCL_HOST_ID or hostname + boot id */
    char machine_id[64];      /* the kernel's boot id (hostname where unreadable), whatever CCL_HOST_ID says */
    char ifname[32];          /* CCL_SOCKET_IFNAME: interface for sockets */
    size_t shm_slot_bytes;    /* CCL_SHM_SLOT_BYTES */
    size_t tcp_slot_bytes;    /* CCL_TCP_SLOT_BYTES */
    size_t tcp_socket_bytes;  /* CCL_TCP_SOCKET_BYTES: both socket buffers of a connection (0: autotuned) */
    int connect_all;          /* CCL_CONNECT=all: every pair connected at init (else only the rings' and trees') */
    size_t ib_slot_bytes;     /* CCL_IB_SLOT_BYTES */
    char ib_hca[64];          /* CCL_IB_HCA: RDMA device ("mlx5_0" or "mlx5_0:1"; "" the first active) */
    int ib_gid_index;         /* CCL_IB_GID_INDEX */
    int ib_qps;               /* CCL_IB_QPS: queue pairs a connection's slots are spread over */
    size_t ib_pull_bytes;     /* CCL_IB_PULL_BYTES: a zero-copy read's piece, at least 4096 */
    size_t ib_zcopy_bytes;    /* CCL_IB_ZCOPY_BYTES: smallest zero-copy message (0: registered buffers only) */
    int reg_cache;            /* CCL_REG_CACHE: keep automatic registrations between calls */
    size_t shm_window_bytes;  /* CCL_SHM_WINDOW_BYTES: the direct path's window per rank, 0 none */
    int slots;                /* CCL_SLOTS: slots per connection direction */
    size_t chunk_bytes;       /* CCL_CHUNK_BYTES: every call's chunk (0: the planner's per call) */
    int spin_us;              /* CCL_SPIN_US: busy-wait before yielding */
    int spin_us_set;          /* CCL_SPIN_US was given (else the planner may lower it) */
    char bind[16];            /* CCL_BIND: "none" or "core" */
    char topo_file[PATH_MAX];      /* CCL_TOPO_FILE: an hwloc XML file or a synthetic description ("" = this machine) */
    char tuning_file[PATH_MAX];    /* CCL_TUNING_FILE: cost-model figures of this machine ("none": no file) */
    int check;                /* CCL_CHECK: compare every collective's arguments across ranks first */
    char algo[160];           /* CCL_ALGO: "" (planner's choice), "tree", or "allreduce:tree,broadcast:ring" */
    size_t algo_too_long;     /* CCL_ALGO's length when it did not fit (algo then holds its start); else 0 */
    char algo_source[24];     /* what set algo, for messages: "CCL_ALGO", "config.algo" or "ccl_comm_set_algo" */
    char shm_prefix[32];      /* CCL_SHM_PREFIX: start of /dev/shm segment names */
    char trace[PATH_MAX];         /* CCL_TRACE: trace file written at destroy ("" = off) */
    char cuda_library[256];   /* CCL_CUDA_LIBRARY: the CUDA driver, opened when a call first needs it */
    int cuda_direct;          /* CCL_CUDA_DIRECT: the GPU-resident path may run (coll/device_direct.h) */
    size_t trace_max_events;  /* CCL_TRACE_MAX_EVENTS: per rank, later events are dropped */
};

/* The process-wide values (parsed once, thread-safe). */
const struct ccl__params *ccl__params_get(void);

/* CCL_TUNING_FILE's value read from the environment now, without fixing
 * the process-wide values (a tool that sets CCL_TUNING_FILE for the jobs
 * it forks needs the user's path first). */
void ccl__params_tuning_file(char *dst, size_t n);

/* Table of knobs for docs and CCL_DEBUG=INFO: name, default, meaning. */
struct ccl__param_doc {
    const char *name;
    const char *def;
    const char *help;
};
const struct ccl__param_doc *ccl__params_docs(size_t *n);

/* Where name stands in a comma-separated list ("a,b,c": b is 1); past
 * every place (1 << 20) when the list does not hold it. */
int ccl__list_place(const char *list, const char *name);

#endif
