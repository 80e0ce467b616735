/* Loading and launching the embedded GPU reductions (see kernels.h). */
#include "device/kernels.h"

#include <pthread.h>
#include <stdio.h>

#ifdef CCL_HAVE_CUDA_KERNELS
/* The fatbin nvcc made from kernels.cu, placed here by the assembler. */
__asm__(".section .rodata\n"
        ".balign 64\n"
        ".globl ccl__cuda_fatbin\n"
        ".hidden ccl__cuda_fatbin\n"
        "ccl__cuda_fatbin:\n"
        ".incbin \"" CCL_CUDA_FATBIN_PATH "\"\n"
        ".globl ccl__cuda_fatbin_end\n"
        ".hidden ccl__cuda_fatbin_end\n"
        "ccl__cuda_fatbin_end:\n"
        ".previous\n");
extern const unsigned char ccl__cuda_fatbin[], ccl__cuda_fatbin_end[];
int ccl__cuda_have_kernels(void) { return &ccl__cuda_fatbin_end[0] > &ccl__cuda_fatbin[0]; }
#else
static const unsigned char ccl__cuda_fatbin[1];
int ccl__cuda_have_kernels(void) { return 0; }
#endif

static const char *const dtype_tags[CCL_NUM_DTYPES] = {
    [CCL_INT8] = "i8",     [CCL_UINT8] = "u8",     [CCL_INT32] = "i32",     [CCL_UINT32] = "u32",
    [CCL_INT64] = "i64",   [CCL_UINT64] = "u64",   [CCL_FLOAT16] = "f16",   [CCL_BFLOAT16] = "bf16",
    [CCL_FLOAT32] = "f32", [CCL_FLOAT64] = "f64",
};
/* CCL_AVG reduces as a sum; the division finishes it. */
static const char *const op_tags[CCL_NUM_OPS] = {
    [CCL_SUM] = "sum",   [CCL_PROD] = "prod", [CCL_MAX] = "max",   [CCL_MIN] = "min",
    [CCL_AVG] = "sum",   [CCL_BAND] = "band", [CCL_BOR] = "bor",   [CCL_BXOR] = "bxor",
};

/* One module per context, loaded on first use. */
#define MAX_CONTEXTS 16
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    CUmodule mod;
} loaded[MAX_CONTEXTS];

static int fail(CUresult r, const char *call, char *why, size_t whylen) {
    char buf[200];
    snprintf(why, whylen, "%s", ccl__cuda_error(r, call, buf, sizeof buf));
    return -1;
}

static int function(const char *name, CUfunction *f, char *why, size_t whylen) {
    const struct ccl__cu *cu = ccl__cuda();
    if (!cu) {
        snprintf(why, whylen, "the CUDA driver is not loaded");
        return -1;
    }
    if (!ccl__cuda_have_kernels()) {
        snprintf(why, whylen, "this libccl was built without GPU kernels (CCL_CUDA=OFF, or no nvcc at build time)");
        return -1;
    }
    CUcontext ctx = NULL;
    CUresult r = cu->CtxGetCurrent(&ctx);
    if (r != CCL__CUDA_SUCCESS) return fail(r, "cuCtxGetCurrent", why, whylen);
    if (!ctx) {
        snprintf(why, whylen, "no current CUDA context on this thread");
        return -1;
    }
    CUmodule mod = NULL;
    pthread_mutex_lock(&lock);
    int k = 0;
    while (k < MAX_CONTEXTS && loaded[k].ctx && loaded[k].ctx != ctx) k++;
    if (k < MAX_CONTEXTS && loaded[k].ctx == ctx) mod = loaded[k].mod;
    else if (k < MAX_CONTEXTS && (r = cu->ModuleLoadData(&mod, ccl__cuda_fatbin)) == CCL__CUDA_SUCCESS)
        loaded[k].ctx = ctx, loaded[k].mod = mod;
    pthread_mutex_unlock(&lock);
    if (k == MAX_CONTEXTS) {
        snprintf(why, whylen, "GPU kernels loaded in %d contexts already", MAX_CONTEXTS);
        return -1;
    }
    if (!mod) return fail(r, "cuModuleLoadData (the GPU kernels)", why, whylen);
    if ((r = cu->ModuleGetFunction(f, mod, name)) != CCL__CUDA_SUCCESS) return fail(r, name, why, whylen);
    return 0;
}

int ccl__cuda_fold(ccl_dtype_t dtype, ccl_op_t op, const struct ccl_fold_args *a, unsigned groups, CUstream stream,
                   char *why, size_t whylen) {
    if ((unsigned)dtype >= CCL_NUM_DTYPES || (unsigned)op >= CCL_NUM_OPS) {
        snprintf(why, whylen, "no GPU fold for dtype %d op %d", (int)dtype, (int)op);
        return -1;
    }
    if (!a->n || !groups) return 0;
    char name[48];
    snprintf(name, sizeof name, "ccl_fold_%s_%s", dtype_tags[dtype], op_tags[op]);
    CUfunction f;
    if (function(name, &f, why, whylen) < 0) return -1;
    /* Enough blocks to keep every multiprocessor streaming (a few per
     * SM on the largest GPUs), spread over the groups; the grid-stride
     * loop does the rest. */
    const unsigned threads = 512;
    size_t per = a->vector ? 16 / ccl_dtype_size(dtype) : 1;
    size_t blocks = (a->n / per + threads - 1) / threads;
    size_t cap = 2048 / groups ? 2048 / groups : 1;
    if (blocks > cap) blocks = cap;
    if (!blocks) blocks = 1;
    struct ccl_fold_args copy = *a;
    void *params[] = {&copy};
    CUresult r = ccl__cuda()->LaunchKernel(f, (unsigned)blocks, groups, 1, threads, 1, 1, 0, stream, params, NULL);
    return r == CCL__CUDA_SUCCESS ? 0 : fail(r, "cuLaunchKernel", why, whylen);
}
