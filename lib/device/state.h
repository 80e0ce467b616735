/* A communicator's CUDA state (state.c), shared by staging.c,
 * stream_link.c (stream tickets) and gpu_direct.c; nothing outside
 * lib/device looks inside. */
#ifndef CCL_DEVICE_STATE_H
#define CCL_DEVICE_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "device/driver.h"
#include "device/pipeline.h"

struct ccl__device_state {
    pthread_mutex_t lock;
    CUcontext ctx;            /* every device buffer and stream of comm lives here */
    CUstream stream;          /* staging copies (non-blocking: follows no other stream) */
    void *stage;              /* pinned; grows to the largest batch */
    size_t stage_bytes;
    /* Stream-ordered batches stage on their stream instead (stream_link.c):
     * copies in before the batch's ready word, out after its ticket wait,
     * into this buffer, which the streams take in turn (ostage_free is
     * recorded after the last batch's copies out). */
    void *ostage;
    size_t ostage_bytes;
    CUevent ostage_free;
    /* Pipelined staging (pipeline.c): the copies out go on their own
     * stream, beside the copies in on `stream`; an event marks where each
     * piece's copies in end; pieces stage in their own pinned buffer. */
    CUstream out_stream;
    CUevent piece_in[CCL__PIPE_MAX_PIECES];
    void *pstage;
    size_t pstage_bytes;
    /* Outgrown staging buffers, freed with the communicator (grow_pinned). */
    void *retired[64];
    int nretired;
    _Atomic uint32_t *ticket; /* pinned, device-mapped word: the last stream ticket released (stream_link.c) */
    CUdeviceptr ticket_dev;   /* the word as the device sees it */
    _Atomic uint32_t issued;  /* stream tickets handed out */
    struct ccl__gpu_direct *gpu; /* the GPU-resident path's IPC handles (gpu_direct.c), made on first use */
};

/* comm's state, made on first use (NULL: out of memory). */
struct ccl__device_state *ccl__device_state(struct ccl_comm *comm);
/* Binds comm to ctx (the first device buffer or stream names it); another
 * context is CCL_ERR_UNSUPPORTED. */
ccl_status_t ccl__device_bind(struct ccl_comm *comm, CUcontext ctx, const char *what);
/* Gives comm's ticket word back (destroy, once nothing is queued). */
void ccl__stream_ticket_free(struct ccl__device_state *d);
/* CCL__MEM_CUDA with its context, or CCL__MEM_HOST (host, pinned host and
 * managed memory: the CPU reaches all three). */
int ccl__device_mem_kind(const struct ccl__cu *cu, const void *p, CUcontext *ctx);
/* At least bytes of pinned memory in *buf (which has *have): staging.c. */
ccl_status_t ccl__grow_pinned(struct ccl_comm *comm, const struct ccl__cu *cu, void **buf, size_t *have,
                              size_t bytes);
/* Waits for s to go idle, whatever fails meanwhile (staging.c). */
ccl_status_t ccl__stream_drain(struct ccl_comm *comm, CUstream s, int detached, const char *what);
/* A failed driver call as comm's last error (CCL_ERR_SYSTEM). */
ccl_status_t ccl__device_fail(struct ccl_comm *comm, CUresult res, const char *call, const char *what);

#endif
