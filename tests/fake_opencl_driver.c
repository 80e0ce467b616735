/*
 * An OpenCL driver that only says it was loaded: test_plan_topo lists it
 * (OCL_ICD_VENDORS) to see whether building the topology loads the GPU
 * vendors' OpenCL drivers, as hwloc's OpenCL plugin does when left on.
 */
#include <stdlib.h>

__attribute__((constructor)) static void loaded(void) { setenv("CCL_TEST_OPENCL_DRIVER_LOADED", "1", 1); }
