/*
 * The device layer (lib/device): a communicator's CUDA state with one
 * owner (bound at the first device buffer or stream, released on
 * failure, freed with the communicator), device buffers and
 * stream-ordered calls on top of the host data path, the GPU-resident
 * path (gpu_direct.h), and the CUDA driver and kernels it loads
 * (driver.h, kernels.h). The API layer above asks it; nothing below
 * knows it exists. The device compute engine (a CCL__MEM_CUDA engine for
 * the steps, behind prims/compute.h) will live here too, handed to the
 * engine layer below rather than named by it.
 *
 * A call whose buffers are device memory is staged: its executor copies
 * the device data it reads into pinned host memory, runs the operation on
 * host memory over whatever transports and algorithm the plan picks, and
 * copies the results back, on an internal stream of the buffers' context.
 * Any transport, algorithm and collective thus takes device buffers, and
 * peers on other hosts see ordinary host data (host staging over tcp and
 * ib). Where every rank shares one GPU, the GPU-resident path
^ * (gpu_direct.h) runs most collectives there instead; a device executor
 * and a CUDA IPC transport for ranks on several GPUs would plug in below
 * the engine (prims/compute.h) without changing this.
 *
 * A stream-ordered call (ccl_group_end_stream, the _stream twins) returns
 * at once: its device buffers are staged on the stream itself, its
 * operation waits for the work issued on the stream before it (a ready
 * word the stream sets), and the stream waits for the operation (a 32-bit
 * ticket in pinned memory, cuStreamWaitValue32; host functions where
 * stream memory operations are not supported), so the executor makes no
 * CUDA call for it.
 */
#ifndef CCL_DEVICE_DEVICE_H
#define CCL_DEVICE_DEVICE_H

#include "device/call.h"
#include "device/driver.h"

/* Marks the calls whose buffers are device memory (call->device); an error
 * (buffers on two devices, or on another device than this communicator's)
 * sets the comm's last error. Only when CUDA is in the process. */
ccl_status_t ccl__device_classify(struct ccl_comm *comm, struct ccl__call *calls, int n, const char *what);

/* A batch's staging of device buffers. */
struct ccl__stage;
/* Points the device calls of calls[0..n) at pinned host copies (inputs
 * copied in); *out is NULL when no call has device buffers. */
ccl_status_t ccl__stage_in(struct ccl_comm *comm, struct ccl__call *calls, int n, struct ccl__stage **out);
/* Copies the results back to the device buffers (when ok) and frees. */
ccl_status_t ccl__stage_out(struct ccl_comm *comm, struct ccl__stage *st, int ok);

/* A stream-ordered batch stages on its stream, with no copy of its own
 * while the stream waits (a copy on another stream was seen to wait then):
 * under comm's device lock, with its context current, _in points the
 * device calls of calls[0..n) at pinned copies and queues the copies in
 * on s (to come before the batch's event), _out queues the copies out (to
 * come after the stream's wait; none when !copy: the batch will not run)
 * and frees. */
ccl_status_t ccl__stage_on_stream_in(struct ccl_comm *comm, struct ccl__call *calls, int n, CUstream s,
                                     struct ccl__stage **out);
ccl_status_t ccl__stage_on_stream_out(struct ccl_comm *comm, struct ccl__stage *st, CUstream s, int copy);

/* comm's staging stream, made if need be (comm's context made current on
 * this thread): the GPU-resident path runs blocking calls on it. */
ccl_status_t ccl__device_stream(struct ccl_comm *comm, CUstream *s);

/* A stream-ordered batch's link to its stream. */
struct ccl__stream_link;
/* Orders the batch calls[0..n) of comm on stream: stages its device
 * buffers on the stream, records what the batch waits for and makes the
 * stream wait for the batch. */
ccl_status_t ccl__stream_link_new(struct ccl_comm *comm, void *stream, struct ccl__call *calls, int n,
                                  struct ccl__stream_link **out);
/* In the executor, before the batch runs: waits for the stream's earlier
 * work (an abort or failure of comm ends the wait). */
ccl_status_t ccl__stream_link_wait(struct ccl_comm *comm, struct ccl__stream_link *l);
/* After the batch, run or not: lets the stream go on, frees. */
void ccl__stream_link_release(struct ccl__stream_link *l);
/* A batch of one call staged piece by piece on its stream (pipeline.h):
 * waits for piece i's inputs (its ready word), and lets the stream copy
 * piece i's results out (its ticket). */
ccl_status_t ccl__stream_link_piece_wait(struct ccl_comm *comm, struct ccl__stream_link *l, size_t i);
void ccl__stream_link_piece_release(struct ccl__stream_link *l, size_t i);

/* 0 when a stream-ordered call can run with this stream: CUDA loads, or
 * (stream NULL) the process has no CUDA, and the calls run at once. Else
 * CCL_ERR_UNSUPPORTED with the reason in why. *ordered says whether the
 * calls are ordered on a real stream. */
ccl_status_t ccl__stream_usable(void *stream, int *ordered, char *why, size_t whylen);

/* A new communicator belongs to the calling thread's current CUDA context,
 * if the process has one (NCCL's rule: the device current at init). */
void ccl__device_adopt_current(struct ccl_comm *comm);
/* comm failed: lets every rank waiting on it go (the GPU-resident path's
 * words); plain stores, safe from any thread (the failure hook). */
void ccl__device_failed(struct ccl_comm *comm);
/* comm's CUDA resources, the GPU-resident path's included (destroy). */
void ccl__device_free(struct ccl_comm *comm);

/* 1 when p is device memory (ccl_is_device_pointer); 0 without CUDA. */
int ccl__device_pointer(const void *p);
/* The ordinal of comm's device (its bound context, else the calling
 * thread's current one): CCL_ERR_UNSUPPORTED without either. */
ccl_status_t ccl__device_ordinal(const struct ccl_comm *comm, int *device);
/* The device ordinal comm is bound to (its context), -1 while it has none. */
int ccl__device_bound_ordinal(const struct ccl_comm *comm);

#endif
