/* Local topology through hwloc: a summary of where this process runs (or
 * of what CCL_TOPO_FILE describes) for the peer table, and pinning. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <hwloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "plan/plan.h"

/* The I/O objects the summary uses (network, RDMA and GPU devices). */
static void keep_devices(hwloc_topology_t topo) {
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* The Linux backend finds PCI devices through sysfs; the libpciaccess
     * plugin adds nothing the summary uses, and leaks memory (AddressSanitizer
     * reports it at exit in every program that creates a communicator).
     * The GPU plugins would load the vendors' libraries into every such
     * program. The OpenCL one loads every installed OpenCL driver: on a
     * machine with an NVIDIA GPU that brought in the CUDA driver, so libccl
     * took CUDA to be in use, and pocl started a thread per core. The CUDA,
     * NVML, ROCm SMI, Level Zero and GL plugins work likewise. The summary
     * counts GPUs from the Linux backend's devices instead. */
    static const char *const skip[] = {"pci", "opencl", "cuda", "nvml", "rsmi", "levelzero", "gl"};
    for (size_t i = 0; i < sizeof skip / sizeof skip[0]; i++)
        hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]);
}

/* The topology CCL_TOPO_FILE names (an XML file when one is readable there,
 * else a synthetic description), or this machine's; I/O devices kept. */
static ccl_status_t open_topology(struct ccl_comm *comm, const char *file, hwloc_topology_t *topo, int *source) {
    if (hwloc_topology_init(topo) != 0)
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "init: hwloc cannot start a topology");
    keep_devices(*topo);
    *source = CCL__TOPO_MACHINE;
    if (file[0] && access(file, R_OK) == 0) {
        *source = CCL__TOPO_XML;
        if (hwloc_topology_set_xml(*topo, file) != 0) {
            hwloc_topology_destroy(*topo);
            return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "init: CCL_TOPO_FILE=%s is not an hwloc XML file",
                                  file);
        }
    } else if (file[0]) {
        *source = CCL__TOPO_SYNTHETIC;
        if (hwloc_topology_set_synthetic(*topo, file) != 0) {
            hwloc_topology_destroy(*topo);
            return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                                  "init: CCL_TOPO_FILE=%s is neither a readable file nor an hwloc synthetic topology "
                                  "(\"pack:2 numa:2 core:8 pu:1\")",
                                  file);
        }
    }
    if (hwloc_topology_load(*topo) != 0) {
        hwloc_topology_destroy(*topo);
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "init: hwloc cannot load the topology%s%s",
                              file[0] ? " of CCL_TOPO_FILE=" : "", file);
    }
    return CCL_OK;
}

static int logical_of(hwloc_topology_t topo, hwloc_obj_t obj, hwloc_obj_type_t type) {
    hwloc_obj_t a = hwloc_get_ancestor_obj_by_type(topo, type, obj);
    return a ? (int)a->logical_index : 0;
}

/* NUMA nodes hang off the tree as memory children: the one whose CPUs
 * cover the object's. */
static int numa_of(hwloc_topology_t topo, hwloc_obj_t obj) {
    hwloc_obj_t n = hwloc_get_next_obj_covering_cpuset_by_type(topo, obj->cpuset, HWLOC_OBJ_NUMANODE, NULL);
    return n ? (int)n->logical_index : 0;
}

static uint32_t cache_kib(hwloc_topology_t topo, hwloc_obj_t core, hwloc_obj_type_t type) {
    hwloc_obj_t c = hwloc_get_ancestor_obj_by_type(topo, type, core);
    return c && c->attr ? (uint32_t)(c->attr->cache.size >> 10) : 0;
}

/* The cores `cpus` may use, where each sits, and whether they share one
 * package, one NUMA node, one core. */
static void summarize_cores(hwloc_topology_t topo, hwloc_const_bitmap_t cpus, struct ccl__topo_summary *s) {
    int n = hwloc_get_nbobjs_inside_cpuset_by_type(topo, cpus, HWLOC_OBJ_CORE);
    s->ncores = (uint16_t)(n > 0 ? n : 0);
    s->npus = (uint16_t)hwloc_get_nbobjs_inside_cpuset_by_type(topo, cpus, HWLOC_OBJ_PU);
    s->package = s->numa = s->core = -1;
    for (int k = 0; k < n; k++) {
        hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(topo, cpus, HWLOC_OBJ_CORE, (unsigned)k);
        int pkg = logical_of(topo, core, HWLOC_OBJ_PACKAGE), numa = numa_of(topo, core);
        if (k < CCL__TOPO_CORES) {
            s->core_package[k] = (uint8_t)pkg;
            s->core_numa[k] = (uint8_t)numa;
            s->ncore_map = (uint8_t)(k + 1);
        }
        if (k == 0) {
            s->package = (int16_t)pkg, s->numa = (int16_t)numa, s->core = (int16_t)core->logical_index;
            s->l2_kib = cache_kib(topo, core, HWLOC_OBJ_L2CACHE);
            s->l3_kib = cache_kib(topo, core, HWLOC_OBJ_L3CACHE);
        }
        if (pkg != s->package) s->package = -1;
        if (numa != s->numa) s->numa = -1;
    }
    if (n != 1) s->core = -1;
}

/* Network adapters, RDMA devices and GPUs whose PCI bus hangs off the
 * rank's package (or anywhere, when the rank spans packages). */
static void summarize_devices(hwloc_topology_t topo, struct ccl__topo_summary *s) {
    hwloc_obj_t pkg = s->package >= 0 ? hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, (unsigned)s->package) : NULL;
    for (hwloc_obj_t d = hwloc_get_next_osdev(topo, NULL); d; d = hwloc_get_next_osdev(topo, d)) {
        hwloc_obj_t at = hwloc_get_non_io_ancestor_obj(topo, d);
        if (pkg && at && at->cpuset && !hwloc_bitmap_intersects(at->cpuset, pkg->cpuset)) continue;
        switch (d->attr->osdev.type) {
        case HWLOC_OBJ_OSDEV_NETWORK: s->nnet += s->nnet < 255; break;
        case HWLOC_OBJ_OSDEV_OPENFABRICS: s->nrdma += s->nrdma < 255; break;
        case HWLOC_OBJ_OSDEV_GPU:
        case HWLOC_OBJ_OSDEV_COPROC: s->ngpu += s->ngpu < 255; break;
        default: break;
        }
    }
}

/* How far an I/O device is from the CPUs cpus, by `at`, the CPU-side
 * object it hangs off (a package, a NUMA node, the machine): 0 when at
 * covers them all, 1 when it covers some or its place is unknown, 2 when it
 * covers none (the device is another package's). */
static int device_distance(hwloc_obj_t at, hwloc_const_bitmap_t cpus) {
    if (!at || !at->cpuset || hwloc_bitmap_iszero(cpus)) return 1;
    if (hwloc_bitmap_isincluded(cpus, at->cpuset)) return 0;
    return hwloc_bitmap_intersects(cpus, at->cpuset) ? 1 : 2;
}

/* The RDMA devices (OpenFabrics OS devices) of topo, nearest to cpus first:
 * by distance, then by the fewest CPUs at the object each hangs off (a
 * device in the rank's NUMA node before one that is only in its package or
 * attached to the whole machine), then in hwloc's order. Comma-separated
 * into out; "" when the topology lists none. */
#define NEAR_MAX 32
static void rdma_by_nearness(hwloc_topology_t topo, hwloc_const_bitmap_t cpus, char *out, size_t outlen) {
    struct {
        const char *name;
        int distance, weight;
    } dev[NEAR_MAX];
    int n = 0;
    for (hwloc_obj_t d = hwloc_get_next_osdev(topo, NULL); d && n < NEAR_MAX; d = hwloc_get_next_osdev(topo, d)) {
        if (d->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS || !d->name) continue;
        hwloc_obj_t at = hwloc_get_non_io_ancestor_obj(topo, d);
        int weight = at && at->cpuset ? hwloc_bitmap_weight(at->cpuset) : -1;
        dev[n].name = d->name;
        dev[n].distance = device_distance(at, cpus);
        dev[n].weight = weight < 0 ? 1 << 30 : weight;
        /* insertion keeps hwloc's order among equals */
        int k = n++;
        while (k > 0 && (dev[k - 1].distance > dev[k].distance ||
                         (dev[k - 1].distance == dev[k].distance && dev[k - 1].weight > dev[k].weight))) {
            __typeof__(dev[0]) t = dev[k - 1];
            dev[k - 1] = dev[k], dev[k] = t;
            k--;
        }
    }
    size_t used = 0;
    out[0] = 0;
    for (int k = 0; k < n; k++) {
        int w = snprintf(out + used, outlen - used, "%s%s", k ? "," : "", dev[k].name);
        if (w < 0 || (size_t)w >= outlen - used) {
            out[used] = 0; /* whole names only */
            break;
        }
        used += (size_t)w;
    }
}

static ccl_status_t summarized(struct ccl_comm *comm, struct ccl__peer_info *self, int remembered);

/* hwloc takes tens of milliseconds to load this machine with its devices
 * (18 ms here), and every communicator a process creates asks again: a
 * split, a shrink or a grow would wait on it in every rank, one after
 * another where ranks share cores. What it finds cannot change within a
 * process, but for where the process may run: the last summary is kept
 * with the CPUs it was found for (the calling thread's and the process's
 * first thread's), and used while they are the same. */
static struct {
    pthread_mutex_t lock;
    int valid;
    cpu_set_t thread_cpus, process_cpus;
    struct ccl__topo_summary summary;
    uint16_t ncores;
    char rdma_near[sizeof(((struct ccl_comm *)0)->rdma_near)];
} machine_seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int where_allowed(cpu_set_t *thread_cpus, cpu_set_t *process_cpus) {
    return sched_getaffinity(0, sizeof *thread_cpus, thread_cpus) == 0 &&
           sched_getaffinity(getpid(), sizeof *process_cpus, process_cpus) == 0;
}

/* 1 with self's summary and comm->rdma_near filled when this machine was
 * summarised for these CPUs already. */
static int machine_seen_before(struct ccl_comm *comm, struct ccl__peer_info *self, const cpu_set_t *thread_cpus,
                               const cpu_set_t *process_cpus) {
    pthread_mutex_lock(&machine_seen.lock);
    int hit = machine_seen.valid && CPU_EQUAL(thread_cpus, &machine_seen.thread_cpus) &&
              CPU_EQUAL(process_cpus, &machine_seen.process_cpus);
    if (hit) {
        self->topo = machine_seen.summary;
        self->ncores = machine_seen.ncores;
        memcpy(comm->rdma_near, machine_seen.rdma_near, sizeof comm->rdma_near);
    }
    pthread_mutex_unlock(&machine_seen.lock);
    return hit;
}

static void remember_machine(const struct ccl_comm *comm, const struct ccl__peer_info *self,
                             const cpu_set_t *thread_cpus, const cpu_set_t *process_cpus) {
    pthread_mutex_lock(&machine_seen.lock);
    machine_seen.thread_cpus = *thread_cpus;
    machine_seen.process_cpus = *process_cpus;
    machine_seen.summary = self->topo;
    machine_seen.ncores = (uint16_t)self->ncores;
    memcpy(machine_seen.rdma_near, comm->rdma_near, sizeof machine_seen.rdma_near);
    machine_seen.valid = 1;
    pthread_mutex_unlock(&machine_seen.lock);
}

ccl_status_t ccl__plan_local_topology(struct ccl_comm *comm, struct ccl__peer_info *self) {
    struct ccl__topo_summary *s = &self->topo;
    memset(s, 0, sizeof *s);
    s->package = s->numa = s->core = -1;
    self->ncores = 0;
    const char *file = comm->params.topo_file;
    cpu_set_t thread_cpus, process_cpus;
    int keyed = !file[0] && where_allowed(&thread_cpus, &process_cpus);
    if (keyed && machine_seen_before(comm, self, &thread_cpus, &process_cpus)) return summarized(comm, self, 1);
    hwloc_topology_t topo;
    int source = CCL__TOPO_MACHINE;
    ccl_status_t st = open_topology(comm, file, &topo, &source);
    if (st != CCL_OK && file[0]) return st;
    if (st == CCL_OK) {
        hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
        /* A described machine is not where this process runs: the rank
         * may use all of it, and CCL_BIND places it (without pinning). */
        int got = cpus && (source != CCL__TOPO_MACHINE
                               ? hwloc_bitmap_copy(cpus, hwloc_topology_get_topology_cpuset(topo)) == 0
                               : hwloc_get_cpubind(topo, cpus, HWLOC_CPUBIND_PROCESS) == 0);
        if (got) {
            s->source = (uint8_t)source;
            int np = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE), nn = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
            s->npackages = (uint8_t)(np > 0 ? (np < 255 ? np : 255) : 1);
            s->nnuma = (uint8_t)(nn > 0 ? (nn < 255 ? nn : 255) : 1);
            s->machine_cores = (uint16_t)hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
            summarize_cores(topo, cpus, s);
            summarize_devices(topo, s);
            rdma_by_nearness(topo, cpus, comm->rdma_near, sizeof comm->rdma_near);
            self->ncores = s->npus;
        }
        hwloc_bitmap_free(cpus);
        hwloc_topology_destroy(topo);
        if (keyed && got && source == CCL__TOPO_MACHINE) remember_machine(comm, self, &thread_cpus, &process_cpus);
    }
    return summarized(comm, self, 0);
}

/* What follows the summary, whether hwloc made it now or before: the CPU
 * quota (a cgroup's may change), CCL_BIND, and what the log says. */
static ccl_status_t summarized(struct ccl_comm *comm, struct ccl__peer_info *self, int remembered) {
    struct ccl__topo_summary *s = &self->topo;
    int quota = s->source == CCL__TOPO_MACHINE || s->source == CCL__TOPO_NONE ? ccl__plan_cpu_quota() : 0;
    if (quota > 0 && (self->ncores == 0 || quota < self->ncores)) self->ncores = quota;
    /* A described machine: ranks are planned as if pinned (nothing is). */
    s->binds = (strcmp(comm->params.bind, "core") == 0 || s->source > CCL__TOPO_MACHINE) && s->core < 0;
    CCL_INFO(CCL__SUB_PLAN, comm->rank,
             "topology (%s%s): %u packages, %u NUMA nodes, %u cores; this rank may use %u cores (%u threads) in package "
             "%d, NUMA node %d; L2 %u KiB, L3 %u KiB; near it %u network, %u RDMA, %u GPU devices",
             s->source == CCL__TOPO_XML ? "hwloc XML" : s->source == CCL__TOPO_SYNTHETIC ? "synthetic" : "this machine",
             remembered ? ", as this process found it before" : "",
             s->npackages, s->nnuma, s->machine_cores, s->ncores, s->npus, s->package, s->numa, s->l2_kib, s->l3_kib,
             s->nnet, s->nrdma, s->ngpu);
    if (comm->rdma_near[0])
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "RDMA devices, nearest to this rank first: %s", comm->rdma_near);
    return CCL_OK;
}

/* A communicator of one, for the parameters and the error message of the
 * entry points that plan for a machine without a job; NULL when out of
 * memory. */
static struct ccl_comm *scratch_comm(void) {
    struct ccl_comm *comm = calloc(1, sizeof(*comm));
    if (!comm) return NULL;
    comm->boot_fd = -1;
    comm->magic = CCL__COMM_MAGIC;
    comm->nranks = 1;
    pthread_mutex_init(&comm->err_lock, NULL);
    comm->params = *ccl__params_get();
    return comm;
}

/* Its message into err (empty on success), then it is gone. */
static ccl_status_t scratch_done(struct ccl_comm *comm, ccl_status_t st, char *err, size_t errlen) {
    snprintf(err, errlen, "%s", st == CCL_OK ? "" : comm->last_error);
    pthread_mutex_destroy(&comm->err_lock);
    free(comm);
    return st;
}

ccl_status_t ccl__plan_machine_summary(const char *topo_file, struct ccl__peer_info *out, char *err, size_t errlen) {
    struct ccl_comm *comm = scratch_comm();
    if (!comm) return snprintf(err, errlen, "out of memory"), CCL_ERR_NO_MEMORY;
    snprintf(comm->params.topo_file, sizeof comm->params.topo_file, "%s", topo_file);
    snprintf(comm->params.bind, sizeof comm->params.bind, "none");
    memset(out, 0, sizeof *out);
    return scratch_done(comm, ccl__plan_local_topology(comm, out), err, errlen);
}

ccl_status_t ccl__plan_rdma_order(const char *topo_file, const char *cpulist, char *out, size_t outlen, char *err,
                                  size_t errlen) {
    struct ccl_comm *comm = scratch_comm();
    if (!comm) return snprintf(err, errlen, "out of memory"), CCL_ERR_NO_MEMORY;
    hwloc_topology_t topo;
    int source;
    ccl_status_t st = open_topology(comm, topo_file, &topo, &source);
    out[0] = 0;
    if (st == CCL_OK) {
        hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
        if (!cpus) st = CCL_ERR_NO_MEMORY;
        else if (cpulist[0] && hwloc_bitmap_list_sscanf(cpus, cpulist) != 0)
            st = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s is not a list of CPUs", cpulist);
        else if (!cpulist[0] && hwloc_get_cpubind(topo, cpus, HWLOC_CPUBIND_PROCESS) != 0)
            hwloc_bitmap_copy(cpus, hwloc_topology_get_topology_cpuset(topo));
        if (st == CCL_OK) rdma_by_nearness(topo, cpus, out, outlen);
        hwloc_bitmap_free(cpus);
        hwloc_topology_destroy(topo);
    }
    return scratch_done(comm, st, err, errlen);
}

/* The machine's topology (with its devices when `devices`) and the CPUs
 * this thread may run on; 0 on success, with both to be freed by
 * unload_topology. */
static int load_topology(hwloc_topology_t *topo, hwloc_bitmap_t *cpus, int devices) {
    *cpus = NULL;
    if (hwloc_topology_init(topo) != 0) return -1;
    if (devices) keep_devices(*topo);
    if (hwloc_topology_load(*topo) == 0 && (*cpus = hwloc_bitmap_alloc()) &&
        hwloc_get_cpubind(*topo, *cpus, HWLOC_CPUBIND_THREAD) == 0)
        return 0;
    hwloc_bitmap_free(*cpus);
    hwloc_topology_destroy(*topo);
    return -1;
}

static void unload_topology(hwloc_topology_t topo, hwloc_bitmap_t cpus) {
    hwloc_bitmap_free(cpus);
    hwloc_topology_destroy(topo);
}

/* This thread may spin without yielding: no rank of this machine shares its
 * core (prims/wait.c). */
static void own_core(struct ccl_comm *comm) {
    comm->own_core = 1;
    comm->own_core_thread = pthread_self();
}

static void bind_to(struct ccl_comm *comm, hwloc_topology_t topo, hwloc_bitmap_t allowed, int index, int nlocal,
                    const char *who) {
    int cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, allowed, HWLOC_OBJ_CORE);
    int pus = hwloc_get_nbobjs_inside_cpuset_by_type(topo, allowed, HWLOC_OBJ_PU);
    if (pus < 1) return;
    int place, pu;
    ccl__plan_pin_slot(index, nlocal, cores, pus, &place, &pu);
    hwloc_obj_type_t type = pu ? HWLOC_OBJ_PU : HWLOC_OBJ_CORE;
    hwloc_obj_t obj = hwloc_get_obj_inside_cpuset_by_type(topo, allowed, type, (unsigned)place);
    char where[64] = "?";
    if (obj && obj->cpuset) hwloc_bitmap_list_snprintf(where, sizeof where, obj->cpuset);
    if (!obj || !obj->cpuset || hwloc_set_cpubind(topo, obj->cpuset, HWLOC_CPUBIND_THREAD) != 0) {
        CCL_WARN(CCL__SUB_PLAN, comm->rank, "%s: could not pin to cpus %s; running unpinned", who, where);
        return;
    }
    /* Every local rank takes a core of its own when there are enough. */
    if (type == HWLOC_OBJ_CORE) own_core(comm);
    /* The RDMA devices by nearness to where the rank now runs (none listed
     * when the topology was loaded without its devices: the order stays). */
    char near[sizeof comm->rdma_near];
    rdma_by_nearness(topo, obj->cpuset, near, sizeof near);
    if (near[0]) memcpy(comm->rdma_near, near, sizeof near);
    CCL_INFO(CCL__SUB_PLAN, comm->rank, "%s: local rank %d of %d pinned to %s %d of %d (cpus %s)", who, index,
             nlocal, type == HWLOC_OBJ_CORE ? "core" : "hardware thread", place,
             type == HWLOC_OBJ_CORE ? cores : pus, where);
}

/* Pins the calling thread to this rank's place among the machine's ranks
 * (bind_to); -1 when hwloc cannot tell where it may run. */
static int pin_calling_thread(struct ccl_comm *comm, const char *who) {
    int index, nlocal = ccl__plan_machine_ranks(comm, &index);
    hwloc_topology_t topo;
    hwloc_bitmap_t allowed;
    /* Several RDMA devices: which is nearest may change with the pinning. */
    if (load_topology(&topo, &allowed, strchr(comm->rdma_near, ',') != NULL) != 0) return -1;
    bind_to(comm, topo, allowed, index, nlocal, who);
    unload_topology(topo, allowed);
    return 0;
}

ccl_status_t ccl__plan_bind_thread(struct ccl_comm *comm) {
    if (comm->params.topo_file[0]) {
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "ccl_comm_bind_thread: CCL_TOPO_FILE describes another machine: nothing pinned");
        return CCL_OK;
    }
    if (pin_calling_thread(comm, "ccl_comm_bind_thread") < 0)
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "ccl_comm_bind_thread: hwloc cannot tell where this thread may run");
    return CCL_OK;
}

ccl_status_t ccl__plan_bind(struct ccl_comm *comm) {
    const char *mode = comm->params.bind;
    if (strcmp(mode, "none") != 0 && strcmp(mode, "core") != 0)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "init: CCL_BIND=%s: want none or core", mode);
    const struct ccl__topo_summary *mine = &comm->peers[comm->rank].topo;
    int launcher_bound = mine->core >= 0 && mine->source == CCL__TOPO_MACHINE;
    if (launcher_bound && ccl__plan_alone_on_core(comm->nranks, comm->peers, comm->rank)) own_core(comm);
    if (strcmp(mode, "none") == 0) return CCL_OK;
    if (comm->params.topo_file[0]) {
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "CCL_BIND=core: CCL_TOPO_FILE describes another machine: planned as "
                 "pinned, nothing pinned");
        return CCL_OK;
    }
    if (launcher_bound) {
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "CCL_BIND=core: already bound to one core (by the launcher): left as is");
        return CCL_OK;
    }
    if (pin_calling_thread(comm, "CCL_BIND=core") < 0)
        CCL_WARN(CCL__SUB_PLAN, comm->rank, "CCL_BIND=core: hwloc cannot tell where this thread may run; running unpinned");
    return CCL_OK;
}
