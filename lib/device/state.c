/* A communicator's CUDA state, with one owner: made at its first device
 * buffer or stream, bound to one context, released on failure and freed
 * with the communicator (see device.h). */
#include <pthread.h>
#include <stdlib.h>

#include "core/log.h"
#include "device/device.h"
#include "device/gpu_direct.h"
#include "device/state.h"

ccl_status_t ccl__device_fail(struct ccl_comm *comm, CUresult res, const char *call, const char *what) {
    char buf[200];
    return ccl__set_error(comm, CCL_ERR_SYSTEM, "%s: %s", what, ccl__cuda_error(res, call, buf, sizeof buf));
}

struct ccl__device_state *ccl__device_state(struct ccl_comm *comm) {
    if (comm->device) return comm->device;
    struct ccl__device_state *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    pthread_mutex_init(&d->lock, NULL);
    /* Only the issuing thread creates it; later readers see it through the
     * executor's queue hand-off. */
    comm->device = d;
    return d;
}

/* CCL__MEM_CUDA with its context, or CCL__MEM_HOST (host, pinned host and
 * managed memory: the CPU reaches all three). */
int ccl__device_mem_kind(const struct ccl__cu *cu, const void *p, CUcontext *ctx) {
    unsigned type = 0, managed = 0;
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)p;
    if (cu->PointerGetAttribute(&type, CCL__CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a) != CCL__CUDA_SUCCESS ||
        type != CCL__CU_MEMORYTYPE_DEVICE)
        return CCL__MEM_HOST;
    if (cu->PointerGetAttribute(&managed, CCL__CU_POINTER_ATTRIBUTE_IS_MANAGED, a) == CCL__CUDA_SUCCESS && managed)
        return CCL__MEM_HOST;
    if (cu->PointerGetAttribute(ctx, CCL__CU_POINTER_ATTRIBUTE_CONTEXT, a) != CCL__CUDA_SUCCESS) *ctx = NULL;
    return CCL__MEM_CUDA;
}

/* comm's context is ctx from now on (the first device buffer or stream
 * names it); another one is an error. */
ccl_status_t ccl__device_bind(struct ccl_comm *comm, CUcontext ctx, const char *what) {
    struct ccl__device_state *d = ccl__device_state(comm);
    if (!d) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory", what);
    pthread_mutex_lock(&d->lock);
    if (!d->ctx) d->ctx = ctx;
    int same = d->ctx == ctx;
    pthread_mutex_unlock(&d->lock);
    if (!same)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED,
                              "%s: device buffers or streams of two CUDA contexts (devices) on one communicator; "
                              "make one communicator per device",
                              what);
    return CCL_OK;
}

void ccl__device_failed(struct ccl_comm *comm) { ccl__gpu_direct_release(comm); }

void ccl__device_free(struct ccl_comm *comm) {
    struct ccl__device_state *d = comm->device;
    if (!d) return;
    ccl__gpu_direct_free(comm);
    const struct ccl__cu *cu = ccl__cuda();
    if (cu && d->ctx && cu->CtxSetCurrent(d->ctx) == CCL__CUDA_SUCCESS) {
        if (d->stream) cu->StreamDestroy(d->stream);
        if (d->stage) cu->MemFreeHost(d->stage);
        if (d->ostage) cu->MemFreeHost(d->ostage);
        if (d->ostage_free) cu->EventDestroy(d->ostage_free);
        if (d->out_stream) cu->StreamDestroy(d->out_stream);
        for (int i = 0; i < CCL__PIPE_MAX_PIECES; i++)
            if (d->piece_in[i]) cu->EventDestroy(d->piece_in[i]);
        if (d->pstage) cu->MemFreeHost(d->pstage);
        for (int i = 0; i < d->nretired; i++) cu->MemFreeHost(d->retired[i]);
    }
    ccl__stream_ticket_free(d);
    pthread_mutex_destroy(&d->lock);
    free(d);
    comm->device = NULL;
}

int ccl__device_pointer(const void *p) {
    CUcontext ctx;
    return p && ccl__cuda_in_process() && ccl__device_mem_kind(ccl__cuda(), p, &ctx) == CCL__MEM_CUDA;
}

void ccl__device_adopt_current(struct ccl_comm *comm) {
    const struct ccl__cu *cu = ccl__cuda_in_process() ? ccl__cuda() : NULL;
    CUcontext ctx = NULL;
    if (cu && cu->CtxGetCurrent(&ctx) == CCL__CUDA_SUCCESS && ctx) (void)ccl__device_bind(comm, ctx, "init");
}

ccl_status_t ccl__device_ordinal(const struct ccl_comm *comm, int *device) {
    const struct ccl__cu *cu = ccl__cuda_in_process() ? ccl__cuda() : NULL;
    if (!cu) return CCL_ERR_UNSUPPORTED;
    CUcontext prev = NULL, ctx = comm->device ? comm->device->ctx : NULL;
    cu->CtxGetCurrent(&prev);
    if (ctx && ctx != prev) cu->CtxSetCurrent(ctx);
    CUdevice dev = -1;
    CUresult r = (ctx || prev) ? cu->CtxGetDevice(&dev) : 1;
    if (ctx && ctx != prev) cu->CtxSetCurrent(prev);
    if (r != CCL__CUDA_SUCCESS) return CCL_ERR_UNSUPPORTED;
    *device = dev;
    return CCL_OK;
}

int ccl__device_bound_ordinal(const struct ccl_comm *comm) {
    int dev = -1;
    if (comm->device && comm->device->ctx && ccl__device_ordinal(comm, &dev) != CCL_OK) dev = -1;
    return dev;
}
