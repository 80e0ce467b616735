/*
 * The GPU-resident path (gpu_direct.c): when every rank of a
 * communicator runs on one GPU (one host: the direct path's windows; one
 * PID namespace),
 * all-reduce, reduce, reduce-scatter, all-gather and broadcast on device
 * buffers run as one kernel on that GPU, reading and writing every rank's
 * buffers through CUDA IPC, instead of being staged through host memory.
 * The fold is in rank order, as the host's direct algorithm does it, so
 * its bits are that algorithm's. CCL_CUDA_DIRECT=0 turns it off.
 */
#ifndef CCL_DEVICE_GPU_DIRECT_H
#define CCL_DEVICE_GPU_DIRECT_H

#include <stdint.h>

#include "device/call.h"

/* At init, for the peer table: the GPU of the calling thread's current
 * context, and whether this process can take the path at all. */
void ccl__gpu_identity(uint8_t uuid[16], uint8_t *usable);
/* After the direct path's plan: comm->gpu_direct, the same on every rank
 * (every rank usable, one GPU, windows on). */
void ccl__gpu_direct_plan(struct ccl_comm *comm);
/* Makes the path's state, in the issuing thread, before the first try
 * (the executor then only reads it). */
ccl_status_t ccl__gpu_direct_ready(struct ccl_comm *comm);
/* Runs the collective c on the GPU when every rank's buffers allow it
 * (*done = 1), after the work before it on stream when ordered (NULL: the
 * legacy default stream); it returns with the results written. On the
 * communicator's executor only: every rank of a gpu_direct communicator
 * calls it for the same calls, and it trades one small record with the
 * engine's own all-gather (ccl__ring_gather_bytes, stamped with the
 * call's number). *done = 0: run the call as before (staged), on every
 * rank alike. */
ccl_status_t ccl__gpu_direct_try(struct ccl_comm *comm, const struct ccl__call *c, int ordered, void *stream,
                                 int *done);
/* Lets every rank waiting on comm's words go on (the communicator
 * failed); plain stores, safe from any thread. */
void ccl__gpu_direct_release(struct ccl_comm *comm);
/* The calls that ran on the GPU so far (ccl_comm_describe). */
unsigned ccl__gpu_direct_calls(const struct ccl_comm *comm);
/* comm's GPU-resident state (destroy). */
void ccl__gpu_direct_free(struct ccl_comm *comm);

#endif
