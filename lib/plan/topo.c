/* Local topology through hwloc: where this process may run. */
#include <hwloc.h>

#include "plan/plan.h"

void ccl__plan_local_topology(struct ccl__peer_info *self) {
    self->numa_node = -1;
    self->ncores = 0;
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return;
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return;
    }
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    if (cpus && hwloc_get_cpubind(topo, cpus, HWLOC_CPUBIND_PROCESS) == 0) {
        self->ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, cpus, HWLOC_OBJ_PU);
        hwloc_obj_t numa = hwloc_get_next_obj_covering_cpuset_by_type(topo, cpus, HWLOC_OBJ_NUMANODE, NULL);
        /* Only a binding inside one NUMA node says where the rank lives. */
        if (numa && !hwloc_get_next_obj_covering_cpuset_by_type(topo, cpus, HWLOC_OBJ_NUMANODE, numa))
            self->numa_node = (int32_t)numa->os_index;
    }
    hwloc_bitmap_free(cpus);
    hwloc_topology_destroy(topo);
}
