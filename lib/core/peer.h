/*
 * What each rank tells every other rank at bootstrap. Fixed-size, explicit
 * widths: all ranks of a job are assumed to share one ABI (same architecture
 * and endianness), as in NCCL. Each transport's addressing (a blob per
 * registered transport) follows this info in the rank's bootstrap record,
 * so the number of transports is the registry's, not this header's.
 */
#ifndef CCL_PEER_H
#define CCL_PEER_H

#include <stdint.h>

#include "core/socket.h"

#define CCL__TRANSPORT_BLOB_BYTES 96
#define CCL__HOST_ID_BYTES 64
#define CCL__TOPO_CORES 64 /* cores of a rank's core map (a rank with more repeats the map) */

/* What hwloc says about where a rank runs (or what CCL_TOPO_FILE says).
 * Indexes are hwloc logical indexes on that rank's machine. The core map
 * lets every rank compute where CCL_BIND will pin each peer, before any
 * rank pinned itself: core k is the k-th core this rank may use. */
struct ccl__topo_summary {
    uint8_t source;         /* CCL__TOPO_NONE, _MACHINE, _XML or _SYNTHETIC */
    uint8_t npackages;      /* of the machine */
    uint8_t nnuma;          /* of the machine */
    uint8_t ncore_map;      /* entries in core_package / core_numa */
    int16_t package, numa;  /* where this rank's CPUs are; -1 when they span several or nobody knows */
    int16_t core;           /* its core when its CPUs are one core (bound by its launcher), else -1 */
    uint16_t ncores, npus;  /* cores and hardware threads it may use */
    uint16_t machine_cores; /* cores of the machine */
    uint32_t l2_kib, l3_kib; /* the caches of its first core (0: none found) */
    uint8_t nnet, nrdma, ngpu; /* PCI devices near it: in its package, or on the machine if it spans packages */
    uint8_t binds;          /* CCL_BIND=core will place it on core (its index among its machine's ranks) */
    uint8_t core_package[CCL__TOPO_CORES], core_numa[CCL__TOPO_CORES];
};
enum { CCL__TOPO_NONE, CCL__TOPO_MACHINE, CCL__TOPO_XML, CCL__TOPO_SYNTHETIC };

/* Cost-model figures a rank brings to the job: from its machine's tuning
 * file, or measured at init (copy and reduce). The planner combines every
 * rank's, so that all hold the same (plan/tune.c). */
#define CCL__TUNED_LINKS 8
struct ccl__tuned_record {
    uint32_t measured; /* bit per link class; bit 16: copy and reduce */
    float alpha_us[CCL__TUNED_LINKS], bytes_per_us[CCL__TUNED_LINKS];
    float large_bytes[CCL__TUNED_LINKS], large_bytes_per_us[CCL__TUNED_LINKS]; /* 0: no large point */
    float copy_bytes_per_us, reduce_bytes_per_us;
    float cma_call_us, cma_bytes_per_us; /* cross-memory attach (core/cma.h), bit 18 of measured */
    float cma_large_bytes, cma_large_bytes_per_us; /* and on a large buffer, bit 19 */
};

struct ccl__peer_info {
    int32_t rank;
    int32_t pid;
    char host_id[CCL__HOST_ID_BYTES]; /* equal host_id <=> same machine */
    char hostname[64];                /* for messages only */
    char machine_id[CCL__HOST_ID_BYTES]; /* the real machine (CCL_HOST_ID may pretend otherwise): shares CPUs */
    int32_t ncores;                   /* CPUs this rank may use: its affinity, capped by a cgroup quota; 0 unknown */
    uint32_t transport_mask;          /* transports that initialised locally, by registry index */
    uint32_t pid_ns;                  /* inode of its /proc/self/ns/pid: pids compare only within one, 0 unknown */
    uint64_t cma_probe;               /* where its cross-memory attach probe word lies (core/cma.h) */
    union ccl__sa pair_addr;          /* where this rank's pair channel listens (core/boot_pair.h) */
    union ccl__sa status_addr;        /* where its process's status server listens (core/status.h), zero: none */
    struct ccl__topo_summary topo;
    struct ccl__tuned_record tuned;
    uint32_t direct_window_bytes; /* its CCL_DIRECT_WINDOW_BYTES, 0 unset: the smallest set counts (plan.c) */
    uint8_t gpu_uuid[16]; /* the GPU current at init (device/gpu_direct.h) */
    uint8_t gpu_usable;   /* and this rank can take the GPU-resident path */
    uint8_t device_ctx;   /* a CUDA context was current at init: device buffers may come (device/pipeline.c) */
    uint32_t device_piece_bytes; /* then its CCL_DEVICE_PIECE_BYTES (0: whole calls) */
};

#endif
