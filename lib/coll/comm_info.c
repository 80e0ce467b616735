/* Read-only questions about a communicator. */
#include <stdio.h>
#include <string.h>

#include "coll/coll.h"
#include "plan/plan.h"
#include "device/device.h"
#include "device/gpu_direct.h"
#include "transports/manager.h"
#include "transports/transport.h"

CCL_API ccl_status_t ccl_comm_rank(const ccl_comm_t *comm, int *rank) {
    CCL_CHECK(ccl__check_comm(comm, "comm_rank"));
    if (!rank) return CCL_ERR_INVALID_ARGUMENT;
    *rank = comm->rank;
    return CCL_OK;
}

CCL_API ccl_status_t ccl_comm_size(const ccl_comm_t *comm, int *size) {
    CCL_CHECK(ccl__check_comm(comm, "comm_size"));
    if (!size) return CCL_ERR_INVALID_ARGUMENT;
    *size = comm->nranks;
    return CCL_OK;
}

static int count_hosts(const struct ccl_comm *comm) {
    int hosts = 0;
    for (int r = 0; r < comm->nranks; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++) seen = strcmp(comm->peers[q].host_id, comm->peers[r].host_id) == 0;
        hosts += !seen;
    }
    return hosts;
}

CCL_API ccl_status_t ccl_comm_bind_thread(ccl_comm_t *comm) {
    CCL_CHECK(ccl__check_comm(comm, "comm_bind_thread"));
    return ccl__plan_bind_thread(comm);
}

CCL_API ccl_status_t ccl_comm_describe(const ccl_comm_t *comm, char *buf, size_t n) {
    CCL_CHECK(ccl__check_comm(comm, "comm_describe"));
    if (!buf || n == 0) return CCL_ERR_INVALID_ARGUMENT;
    char tr[64] = "", ring[256] = "";
    size_t o = 0;
    for (int t = 0; t < ccl__ntransports && o < sizeof(tr); t++) {
        int per = ccl__conns_served(comm, t);
        if (per) o += (size_t)snprintf(tr + o, sizeof(tr) - o, "%s%s:%d", o ? "," : "", ccl__transports[t]->name, per);
    }
    if (!o) snprintf(tr, sizeof(tr), "none");
    o = 0;
    for (int i = 0; i < comm->nranks && o + 12 < sizeof(ring); i++)
        o += (size_t)snprintf(ring + o, sizeof(ring) - o, "%s%d", i ? "," : "", comm->ring[i]);
    if (o + 12 >= sizeof(ring)) snprintf(ring + o, sizeof(ring) - o, ",...");
    /* The algorithm of each collective's last call and why it ran. */
    char algo[640] = "";
    o = 0;
    for (int k = 1; k < CCL__NUM_OP_KINDS && o + 96 < sizeof(algo); k++)
        if (comm->algo_last[k] >= 0)
            o += (size_t)snprintf(algo + o, sizeof(algo) - o, "%s%s:%s (%s)", o ? ", " : "", ccl__op_kind_name(k),
                                  ccl__algo_names[comm->algo_last[k]], comm->algo_why[k]);
    /* the device its device buffers and streams are bound to, once bound */
    char gpu[160] = "";
    int gpu_at = 0, dev = ccl__device_bound_ordinal(comm);
    if (dev >= 0) gpu_at = snprintf(gpu, sizeof gpu, " cuda_device=%d", dev);
    if (comm->gpu_direct)
        gpu_at += snprintf(gpu + gpu_at, sizeof gpu - (size_t)gpu_at, " gpu_resident_calls=%u",
                           ccl__gpu_direct_calls(comm));
    /* large calls cut into pieces (device/pipeline.h), and how many this
     * rank staged piece by piece */
    if (comm->device_piece_bytes)
        snprintf(gpu + gpu_at, sizeof gpu - (size_t)gpu_at, " device_piece_bytes=%zu pipelined_calls=%u",
                 comm->device_piece_bytes, __atomic_load_n(&comm->pipelined_calls, __ATOMIC_RELAXED));
    char zc[120] = "";
    size_t z = 0;
    /* one host: whether the ranks may read each other's buffers (init's
     * probe), and from what size point-to-point messages do (the planner's) */
    if (comm->windows) z += (size_t)snprintf(zc, sizeof zc, " single_copy=%s", comm->single_copy ? "on" : "off");
    if (comm->windows && comm->single_copy) {
        if (comm->cma_p2p_bytes) z += (size_t)snprintf(zc + z, sizeof zc - z, " p2p_single_copy=%zu", comm->cma_p2p_bytes);
        else z += (size_t)snprintf(zc + z, sizeof zc - z, " p2p_single_copy=off");
    }
    if (comm->mem_serial) snprintf(zc + z, sizeof zc - z, " zero_copy_calls=%u", comm->zero_copy_calls);
    snprintf(buf, n,
             "rank=%d ranks=%d hosts=%d local=%d cpus=%d spin_us=%.0f own_core=%d transports=%s ring=%s%s%s algo=%s%s%s",
             comm->rank, comm->nranks, count_hosts(comm), comm->machine_ranks, comm->machine_cpus, comm->spin_s * 1e6,
             comm->own_core, tr, ring, gpu, zc, comm->params.algo[0] ? comm->params.algo : "auto", o ? " last: " : "", algo);
    return CCL_OK;
}

CCL_API int ccl_is_device_pointer(const void *p) { return ccl__device_pointer(p); }

CCL_API ccl_status_t ccl_comm_cuda_device(const ccl_comm_t *comm, int *device) {
    if (!device) return CCL_ERR_INVALID_ARGUMENT;
    CCL_CHECK(ccl__check_comm(comm, "cuda_device"));
    return ccl__device_ordinal(comm, device);
}
