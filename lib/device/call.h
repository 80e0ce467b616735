/*
 * One recorded call: a collective, or a send/recv. The API layer records
 * and dispatches calls; the device layer is the lowest one that needs
 * whole calls (it stages every device buffer of a batch and orders it on
 * a stream), so the shape lives here.
 */
#ifndef CCL_DEVICE_CALL_H
#define CCL_DEVICE_CALL_H

#include "algo/algo.h"
#include "core/exec.h"
#include "prims/prims.h"

struct ccl__pipe;

/* call->device: which of a call's buffers are device memory. */
#define CCL__DEV_SEND 1
#define CCL__DEV_RECV 2

struct ccl__call {
    struct ccl_comm *comm;
    int is_p2p;
    struct ccl__coll_args coll;
    struct ccl__p2p_xfer xfer;
    struct ccl_request *req; /* the user's async request, or NULL */
    int device;              /* CCL__DEV_SEND | CCL__DEV_RECV: device buffers the batch stages (device.h) */
    int on_stream;           /* a _stream twin: ordered on stream at the group's end */
    int piped;               /* its device buffers are staged piece by piece (device/pipeline.h), not with the batch */
    struct ccl__pipe *pipe;  /* a stream-ordered call's pieces, ordered on its stream at issue (its link owns it) */
    void *stream;
    uint64_t flight;         /* its flight recorder ticket (core/flight.h), 0: not recorded */
};

#endif
