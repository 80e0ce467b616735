/*
 * The CUDA driver, loaded at run time. libccl links no CUDA library: the
 * driver (libcuda.so.1) is opened the first time a call brings a device
 * pointer or a stream, and a process that never touches CUDA never loads
 * it. The few driver types and constants used are declared here with the
 * driver's ABI values (checked against cuda.h by test_cuda_abi where the
 * toolkit is installed).
 */
#ifndef CCL_CUDA_DRIVER_H
#define CCL_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
/* The legacy default stream, named explicitly (cuda.h's CU_STREAM_LEGACY). */
#define CCL__CU_STREAM_LEGACY ((CUstream)0x1)
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef void (*CUhostFn)(void *user);
typedef struct {
    char bytes[16];
} CCL__CUuuid;
typedef struct {
    char reserved[64];
} CCL__CUipcMemHandle;

enum {
    CCL__CUDA_SUCCESS = 0,
    CCL__CUDA_ERROR_NOT_READY = 600,
    CCL__CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    CCL__CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CCL__CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CCL__CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CCL__CU_MEMORYTYPE_HOST = 1,
    CCL__CU_MEMORYTYPE_DEVICE = 2,
    CCL__CU_MEMHOSTALLOC_PORTABLE = 1,
    CCL__CU_MEMHOSTALLOC_DEVICEMAP = 2,
    CCL__CU_STREAM_WAIT_VALUE_GEQ = 0,
    CCL__CU_EVENT_DISABLE_TIMING = 2,
    CCL__CU_STREAM_NON_BLOCKING = 1,
    CCL__CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
    CCL__CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
};

/* The driver entry points libccl uses (the versioned symbols cuda.h maps
 * the plain names to). */
struct ccl__cu {
    CUresult (*GetErrorString)(CUresult err, const char **str);
    CUresult (*Init)(unsigned flags);
    CUresult (*DriverGetVersion)(int *version);
    CUresult (*PointerGetAttribute)(void *data, int attribute, CUdeviceptr ptr);
    CUresult (*CtxGetCurrent)(CUcontext *ctx);
    CUresult (*CtxSetCurrent)(CUcontext ctx);
    CUresult (*CtxGetDevice)(CUdevice *device);
    CUresult (*StreamGetCtx)(CUstream stream, CUcontext *ctx);
    CUresult (*MemHostAlloc)(void **pp, size_t bytes, unsigned flags);
    CUresult (*MemFreeHost)(void *p);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *dptr, void *p, unsigned flags);
    CUresult (*MemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
    CUresult (*StreamCreate)(CUstream *stream, unsigned flags);
    CUresult (*StreamDestroy)(CUstream stream);
    CUresult (*StreamQuery)(CUstream stream);
    CUresult (*EventCreate)(CUevent *event, unsigned flags);
    CUresult (*EventRecord)(CUevent event, CUstream stream);
    CUresult (*EventQuery)(CUevent event); /* CUDA_SUCCESS once the work before the record is done */
    CUresult (*StreamWaitEvent)(CUstream stream, CUevent event, unsigned flags);
    CUresult (*EventDestroy)(CUevent event);
    CUresult (*StreamWaitValue32)(CUstream stream, CUdeviceptr addr, uint32_t value, unsigned flags);
    CUresult (*StreamWriteValue32)(CUstream stream, CUdeviceptr addr, uint32_t value, unsigned flags);
    CUresult (*LaunchHostFunc)(CUstream stream, CUhostFn fn, void *user);
    CUresult (*ModuleLoadData)(CUmodule *module, const void *image);
    CUresult (*ModuleGetFunction)(CUfunction *fn, CUmodule module, const char *name);
    CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared_bytes, CUstream stream, void **params, void **extra);
    /* Optional: the GPU-resident path (device/gpu_direct.c) needs them
     * all (has_ipc); NULL where the driver lacks one. */
    int has_ipc;
    CUresult (*DeviceGetUuid)(CCL__CUuuid *uuid, CUdevice device);
    CUresult (*MemGetAddressRange)(CUdeviceptr *base, size_t *bytes, CUdeviceptr p);
    CUresult (*IpcGetMemHandle)(CCL__CUipcMemHandle *handle, CUdeviceptr p);
    CUresult (*IpcOpenMemHandle)(CUdeviceptr *p, CCL__CUipcMemHandle handle, unsigned flags);
    CUresult (*IpcCloseMemHandle)(CUdeviceptr p);
    /* NULL in a driver without it (older than CUDA 10): then no stream is
     * taken to be capturing. *status: 0 none, 1 active, 2 invalidated. */
    CUresult (*StreamIsCapturing)(CUstream stream, int *status);
};

/* 1 when the process has the driver loaded (something in it uses CUDA, so
 * device pointers may exist); the table is then ready. Cheap enough for
 * every call: until the driver is there it looks (one dl_iterate_phdr
 * step, and more only when a new shared object appeared) at most once a
 * millisecond, reading a coarse clock in between. */
int ccl__cuda_in_process(void);
/* The driver, loading it if need be (a stream was given); NULL with the
 * reason in why when it cannot be loaded or initialised. */
const struct ccl__cu *ccl__cuda_load(char *why, size_t whylen);
/* The table once ccl__cuda_in_process or ccl__cuda_load succeeded. */
const struct ccl__cu *ccl__cuda(void);
/* "cuMemcpyAsync failed: CUDA_ERROR_... (<driver's text>)" into buf. */
const char *ccl__cuda_error(CUresult r, const char *call, char *buf, size_t n);

#endif
