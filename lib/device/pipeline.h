/*
 * Pipelined staging (pipeline.c). Staged whole, a call's device inputs
 * are copied to the host, the host algorithm runs, and the results are
 * copied back, one after the other. Where a communicator may see device
 * buffers, a large all-reduce, broadcast, reduce, reduce-scatter or
 * all-gather runs instead as pieces: ranges of its elements (the same
 * range of every rank's block in a reduce-scatter's input and an
 * all-gather's output, block_stride apart), each a host collective of
 * its own, so that the copies in of later pieces and the copies out of
 * earlier ones overlap the host's work on the current piece: on the
 * staging stream and a second one for a call without a stream, on the
 * call's own stream for a stream-ordered one (stream_link.c builds that
 * order when the call is issued).
 *
 * The pieces are part of what the ranks run, so every rank cuts alike,
 * whatever its buffers: the cut is the communicator's (every rank's init
 * record says whether a CUDA context was current, and its
 * CCL_DEVICE_PIECE_BYTES), and the rule reads only the call (kind, count,
 * dtype) and the communicator's size. A rank on host buffers runs the same
 * pieces straight from its buffers; a rank whose device call cannot be
 * staged piece by piece (send and receive buffers that overlap other than
 * as the call's in-place pair) stages it whole with its batch and runs the
 * pieces on the staged copy.
 */
#ifndef CCL_DEVICE_PIPELINE_H
#define CCL_DEVICE_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "device/call.h"
#include "device/driver.h"

/* At most this many pieces a call: larger calls get larger pieces. */
#define CCL__PIPE_MAX_PIECES 64

/* For this rank's init record: whether a CUDA context is current, and
 * then its CCL_DEVICE_PIECE_BYTES. */
void ccl__pipe_wish(uint8_t *ctx, uint32_t *piece_bytes);
/* comm->device_piece_bytes from every rank's record: the smallest piece
 * of those with a context (one that asked for whole calls: whole), 0 when
 * none had one. The same on every rank. */
void ccl__pipe_plan(struct ccl_comm *comm);
/* Elements per piece of call a on comm, 0 when it runs whole: the same
 * on every rank called alike. */
size_t ccl__pipe_piece_elems(const struct ccl_comm *comm, const struct ccl__coll_args *a);
/* Whether this rank stages call c piece by piece (c has device buffers
 * and they allow it). */
int ccl__pipe_fits(const struct ccl_comm *comm, const struct ccl__call *c);

/* One call's pipelined staging. _start queues every piece's copies in
 * and gives the call's arguments on pinned host memory (_args); for each
 * piece in order, _ready waits for its inputs and _done queues its copies
 * out once the host has its results; _end waits for every copy (whatever
 * failed: they read and write the caller's buffers) and frees. */
struct ccl__pipe;
ccl_status_t ccl__pipe_start(struct ccl_comm *comm, const struct ccl__call *c, size_t piece_elems,
                             struct ccl__pipe **out);
const struct ccl__coll_args *ccl__pipe_args(const struct ccl__pipe *p);
ccl_status_t ccl__pipe_ready(struct ccl_comm *comm, struct ccl__pipe *p, size_t piece);
ccl_status_t ccl__pipe_done(struct ccl_comm *comm, struct ccl__pipe *p, size_t piece);
ccl_status_t ccl__pipe_end(struct ccl_comm *comm, struct ccl__pipe *p, int ok);

/* The stream-ordered form (stream_link.c builds the order on the stream
 * at issue; the executor's _ready and _done then wait for a piece's ready
 * word and release its ticket, and _end leaves the rest to the link):
 * _new lays c out in pieces and says how much pinned memory it needs,
 * _place points its arguments there, _copy_in and _copy_out queue one
 * piece's copies on s, _attach hands it to its link, which frees it. */
ccl_status_t ccl__pipe_new(struct ccl_comm *comm, const struct ccl__call *c, size_t piece_elems,
                           struct ccl__pipe **out, size_t *pinned_bytes);
void ccl__pipe_place(struct ccl__pipe *p, char *base);
size_t ccl__pipe_pieces(const struct ccl__pipe *p);
int ccl__pipe_copies_in(const struct ccl__pipe *p);
int ccl__pipe_copies_out(const struct ccl__pipe *p);
CUresult ccl__pipe_copy_in(const struct ccl__cu *cu, const struct ccl__pipe *p, size_t i, CUstream s);
CUresult ccl__pipe_copy_out(const struct ccl__cu *cu, const struct ccl__pipe *p, size_t i, CUstream s);
struct ccl__stream_link;
void ccl__pipe_attach(struct ccl__pipe *p, struct ccl__stream_link *l);
void ccl__pipe_free(struct ccl__pipe *p);

#endif
