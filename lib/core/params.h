/*
 * The library's environment knobs, with their defaults (params.c); each
 * transport reads its own (CCL_SHM_*, CCL_TCP_*, CCL_IB_*) in its folder.
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
    char timeout_source[24];  /* what set it, for messages: "CCL_TIMEOUT", "config.timeout_s", "ccl_comm_set_timeout" */
    char test_kill_at[16];    /* CCL_TEST_KILL_AT: a set-up phase where this process dies (fault tests) */
    char test_stall_at[16];   /* CCL_TEST_STALL_AT: a set-up phase where this process sleeps 0.2 s (fault tests) */
    double link_timeout_s;    /* CCL_LINK_TIMEOUT: longest silence of a peer's host or adapter */
    char transport[16];       /* CCL_TRANSPORT: "" (auto), "shm", "tcp", "ib" */
    char host_id[64];         /* CCL_HOST_ID or hostname + boot id */
    char machine_id[64];      /* the kernel's boot id (hostname where unreadable), whatever CCL_HOST_ID says */
    char ifname[32];          /* CCL_SOCKET_IFNAME: interface for sockets */
    int connect_all;          /* CCL_CONNECT=all: every pair connected at init (else only the rings' and trees') */
    int reg_cache;            /* CCL_REG_CACHE: keep automatic registrations between calls */
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
    char trace[PATH_MAX];         /* CCL_TRACE: trace file written at destroy ("" = off) */
    long flight_recorder;         /* CCL_FLIGHT_RECORDER: calls each communicator keeps (0 = off) */
    char flight_dir[400];         /* CCL_FLIGHT_DIR: where dumps go ("" = the user's own in $TMPDIR) */
    char flight_signal[16];       /* CCL_FLIGHT_SIGNAL: the signal that dumps ("0" = none) */
    int status;                   /* CCL_STATUS: the status server runs */
    char status_dir[400];         /* CCL_STATUS_DIR: where status files go ("" = the user's own in $TMPDIR) */
    char cuda_library[256];   /* CCL_CUDA_LIBRARY: the CUDA driver, opened when a call first needs it */
    int cuda_direct;          /* CCL_CUDA_DIRECT: the GPU-resident path may run (device/gpu_direct.h) */
    size_t device_piece_bytes; /* CCL_DEVICE_PIECE_BYTES: staged calls run in pieces this large, their copies
                                * overlapping the host's work (device/pipeline.c; 0: whole) */
    int single_copy;          /* CCL_SINGLE_COPY: the single-copy algorithm may read peers' buffers (algo/single_copy.c) */
    size_t cma_large_probe;   /* CCL_CMA_LARGE_PROBE: init also times cross-memory attach on peer buffers this large
                               * (bytes, 0: not), for the tuning file (plan/cma_probe.c; ccl-tune sets it) */
    int zero_copy;            /* CCL_ZERO_COPY: calls on shared allocations may run in place (algo/zero_copy.c) */
    size_t direct_window_bytes; /* CCL_DIRECT_WINDOW_BYTES: how much of each shared window the direct path's
                                 * rounds use (0: as much as fits the caches, plan.c) */
    long stream_output_bytes;   /* CCL_STREAM_OUTPUT_BYTES: outputs of this many bytes are written past the caches
                                 * (0: none; -1: the planner's figure, plan.c) */
    long zero_copy_min;       /* CCL_ZERO_COPY_MIN: from this many bytes a call (count x dtype) takes it (-1: where
                               * the cost model finds it cheaper, coll/batch.c) */
    size_t trace_max_events;  /* CCL_TRACE_MAX_EVENTS: per rank, later events are dropped */
};

/* The process-wide values (parsed once, thread-safe). */
const struct ccl__params *ccl__params_get(void);

/* CCL_TUNING_FILE's value read from the environment now, without fixing
 * the process-wide values (a tool that sets CCL_TUNING_FILE for the jobs
 * it forks needs the user's path first). */
void ccl__params_tuning_file(char *dst, size_t n);
/* Where files of this user's go that others must not read or plant
 * (flight recorder dumps, status files): `configured` (the variable
 * named) when set, else $TMPDIR/<stem>-<uid> (or /tmp's), made 0700; 0,
 * or -1 with dst "" when that directory is there but not this user's
 * alone (a warning says so). */
int ccl__params_private_dir(const char *configured, const char *variable, const char *stem, char *dst, size_t n);

/* A knob from the environment, by the rules every knob follows (params.c
 * says them): a whole number in lo..hi (a k or M suffix allowed), else def
 * with a warning naming the variable; a string that fits in n bytes (0),
 * else def (-1), with the same warning. Transports read their own knobs
 * with these. */
long ccl__env_long(const char *name, long def, long lo, long hi);
int ccl__env_str(const char *name, const char *def, char *dst, size_t n);

/* Where name stands in a comma-separated list ("a,b,c": b is 1); past
 * every place (1 << 20) when the list does not hold it. */
int ccl__list_place(const char *list, const char *name);

#endif
