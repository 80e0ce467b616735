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

struct ccl__peer_info {
    int32_t rank;
    int32_t pid;
    char host_id[CCL__HOST_ID_BYTES]; /* equal host_id <=> same machine */
    char hostname[64];                /* for messages only */
    char machine_id[CCL__HOST_ID_BYTES]; /* the real machine (CCL_HOST_ID may pretend otherwise): shares CPUs */
    int32_t numa_node;                /* from hwloc: where this rank's CPUs are, -1 unknown */
    int32_t ncores;                   /* CPUs this rank may use: its affinity, capped by a cgroup quota; 0 unknown */
    uint32_t transport_mask;          /* transports that initialised locally, by registry index */
    uint32_t pid_ns;                  /* inode of its /proc/self/ns/pid: pids compare only within one, 0 unknown */
    union ccl__sa pair_addr;          /* where this rank's pair channel listens (core/boot_pair.h) */
};

#endif
