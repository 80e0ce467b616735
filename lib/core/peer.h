/*
 * What each rank tells every other rank at bootstrap. Fixed-size, explicit
 * widths: all ranks of a job are assumed to share one ABI (same architecture
 * and endianness), as in NCCL.
 */
#ifndef CCL_PEER_H
#define CCL_PEER_H

#include <stdint.h>

#define CCL__MAX_TRANSPORTS 4
#define CCL__TRANSPORT_BLOB_BYTES 96
#define CCL__HOST_ID_BYTES 64

struct ccl__peer_info {
    int32_t rank;
    int32_t pid;
    char host_id[CCL__HOST_ID_BYTES]; /* equal host_id <=> same machine */
    char hostname[64];                /* for messages only */
    char machine_id[CCL__HOST_ID_BYTES]; /* the real machine (CCL_HOST_ID may pretend otherwise): shares CPUs */
    int32_t numa_node;                /* from hwloc: where this rank's CPUs are, -1 unknown */
    int32_t ncores;                   /* hardware threads (PUs) this rank may run on, 0 unknown */
    uint32_t transport_mask;          /* transports that initialised locally */
    uint32_t reserved;
    /* per-transport addressing (a socket address, a segment name, ...) */
    uint8_t blob[CCL__MAX_TRANSPORTS][CCL__TRANSPORT_BLOB_BYTES];
};

#endif
