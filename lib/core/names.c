/* Names and sizes behind the public enums: status strings, dtypes, ops. */
#include "ccl.h"
#include "core/ops.h"

CCL_API const char *ccl_status_string(ccl_status_t status) {
    switch (status) {
#define CCL_STATUS_CASE_(name, value, text) \
    case name:                              \
        return text;
        CCL_STATUS_LIST(CCL_STATUS_CASE_)
#undef CCL_STATUS_CASE_
    }
    return "unknown status";
}

CCL_API int ccl_version(void) { return CCL_VERSION_CODE; }

static const struct {
    const char *name;
    size_t size;
} dtypes[CCL_NUM_DTYPES] = {
    [CCL_INT8] = {"int8", 1},       [CCL_UINT8] = {"uint8", 1},       [CCL_INT32] = {"int32", 4},
    [CCL_UINT32] = {"uint32", 4},   [CCL_INT64] = {"int64", 8},       [CCL_UINT64] = {"uint64", 8},
    [CCL_FLOAT16] = {"float16", 2}, [CCL_BFLOAT16] = {"bfloat16", 2}, [CCL_FLOAT32] = {"float32", 4},
    [CCL_FLOAT64] = {"float64", 8},
};

CCL_API size_t ccl_dtype_size(ccl_dtype_t dtype) {
    return (unsigned)dtype < CCL_NUM_DTYPES ? dtypes[dtype].size : 0;
}

CCL_API const char *ccl_dtype_name(ccl_dtype_t dtype) {
    return (unsigned)dtype < CCL_NUM_DTYPES ? dtypes[dtype].name : "invalid-dtype";
}

CCL_API const char *ccl_op_name(ccl_op_t op) {
    static const char *const names[CCL_NUM_OPS] = {"sum", "prod", "max", "min", "avg", "band", "bor", "bxor"};
    if ((unsigned)op < CCL_NUM_OPS) return names[op];
    return (unsigned)op == CCL__OP_PREMUL_SUM || (unsigned)op >= CCL__OP_MADE_FIRST ? "premul_sum" : "invalid-op";
}

int ccl__op_fits(ccl_op_t op, ccl_dtype_t dtype) {
    if ((unsigned)op >= CCL_NUM_OPS || (unsigned)dtype >= CCL_NUM_DTYPES) return 0;
    int bitwise = op == CCL_BAND || op == CCL_BOR || op == CCL_BXOR;
    int is_float = dtype == CCL_FLOAT16 || dtype == CCL_BFLOAT16 || dtype == CCL_FLOAT32 || dtype == CCL_FLOAT64;
    return !(bitwise && is_float);
}
