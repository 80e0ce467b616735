/*
 * A stand-in for the CUDA driver, loaded through CCL_CUDA_LIBRARY by
 * test_stream_host: a process that holds a driver but has no current
 * context on any thread, as when a library it links (hwloc's OpenCL plugin,
 * say) loaded the driver without using it. cuInit succeeds, the current
 * context is always none, and every pointer is plain host memory (the
 * real driver's answer for memory it does not know); any other call fails,
 * so a library that reached one where it must not would say so.
 */
#include <stddef.h>

typedef int CUresult;
enum { SUCCESS = 0, INVALID_VALUE = 1, UNKNOWN = 999 };

#define EXPORT __attribute__((visibility("default")))
#define FAILS(name) EXPORT CUresult name(void); CUresult name(void) { return UNKNOWN; }

EXPORT CUresult cuInit(unsigned flags);
CUresult cuInit(unsigned flags) { return SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v);
CUresult cuDriverGetVersion(int *v) { return *v = 13000, SUCCESS; }
EXPORT CUresult cuGetErrorString(CUresult r, const char **s);
CUresult cuGetErrorString(CUresult r, const char **s) { return *s = "the stand-in driver has no such call", SUCCESS; }
EXPORT CUresult cuCtxGetCurrent(void **ctx);
CUresult cuCtxGetCurrent(void **ctx) { return *ctx = NULL, SUCCESS; }
EXPORT CUresult cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr);
CUresult cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr) { return INVALID_VALUE; }

FAILS(cuCtxSetCurrent)
FAILS(cuCtxGetDevice)
FAILS(cuStreamGetCtx)
FAILS(cuMemHostAlloc)
FAILS(cuMemFreeHost)
FAILS(cuMemHostGetDevicePointer_v2)
FAILS(cuMemcpyAsync)
FAILS(cuStreamCreate)
FAILS(cuStreamDestroy_v2)
FAILS(cuStreamQuery)
FAILS(cuEventCreate)
FAILS(cuEventRecord)
FAILS(cuEventQuery)
FAILS(cuStreamWaitEvent)
FAILS(cuEventDestroy_v2)
FAILS(cuStreamWaitValue32_v2)
FAILS(cuStreamWriteValue32_v2)
FAILS(cuLaunchHostFunc)
FAILS(cuModuleLoadData)
FAILS(cuModuleGetFunction)
FAILS(cuLaunchKernel)
