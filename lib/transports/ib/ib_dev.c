/* The RDMA transport's device: which adapter and port, the protection
 * domain, the completion channel and the one completion queue every
 * connection of the communicator shares. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/log.h"
#include "transports/ib/ib.h"

_Static_assert(sizeof(struct ccl__ib_blob) <= CCL__TRANSPORT_BLOB_BYTES, "the ib blob must fit a peer blob");

/* A reason the transport is not offered: INFO normally, an error that
 * stays in ccl_comm_last_error when CCL_TRANSPORT=ib asked for it. */
static ccl_status_t unavailable(struct ccl_comm *comm, ccl_status_t st, const char *why) {
    if (strcmp(comm->params.transport, "ib") == 0) return ccl__set_error(comm, st, "ib: %s", why);
    CCL_INFO(CCL__SUB_NET, comm->rank, "ib: not offered: %s", why);
    return st;
}

/* The first active port of dev (or `want`, when not 0); 0 if none. */
static uint8_t active_port(struct ibv_context *ctx, uint8_t nports, uint8_t want, struct ibv_port_attr *pa) {
    for (uint8_t p = 1; p <= nports; p++) {
        if (want && p != want) continue;
        if (ibv_query_port(ctx, p, pa) == 0 && pa->state == IBV_PORT_ACTIVE) return p;
    }
    return 0;
}

/* A device that sysfs keeps in its virtual tree has no hardware of its
 * own: soft-RoCE (rxe) and soft-iWARP (siw) packetise, checksum and copy
 * on the CPUs the ranks run on. */
static int is_software(struct ibv_device *dev) {
    char real[PATH_MAX];
    static const char virt[] = "/sys/devices/virtual/";
    return realpath(dev->ibdev_path, real) && strncmp(real, virt, sizeof(virt) - 1) == 0;
}

/* CCL_IB_HCA is "name" or "name:port"; empty takes the device nearest to
 * the rank that has an active port: first in comm->rdma_near (the
 * planner's hwloc order), devices it does not list after, in verbs' order. */
static ccl_status_t open_device(struct ccl_comm *comm, struct ccl__ib_state *s) {
    char want[sizeof(ccl__ib_knobs(comm)->hca)];
    snprintf(want, sizeof(want), "%s", ccl__ib_knobs(comm)->hca);
    uint8_t want_port = 0;
    char *colon = strchr(want, ':');
    if (colon) {
        *colon = 0;
        want_port = (uint8_t)atoi(colon + 1);
    }
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        if (list) ibv_free_device_list(list);
        return unavailable(comm, CCL_ERR_UNSUPPORTED,
                           errno == ENOSYS ? "this kernel has no RDMA support (no uverbs)" : "no RDMA device found");
    }
    /* Nearest first (stable: verbs' order among devices alike), in a copy:
     * the list itself goes back to verbs as it came. */
    struct ibv_device *order[n];
    for (int i = 0; i < n; i++) {
        int k = i;
        for (; k > 0 && ccl__list_place(comm->rdma_near, ibv_get_device_name(order[k - 1])) >
                           ccl__list_place(comm->rdma_near, ibv_get_device_name(list[i]));
             k--)
            order[k] = order[k - 1];
        order[k] = list[i];
    }
    char why[200] = "";
    for (int i = 0; i < n && !s->ctx; i++) {
        const char *name = ibv_get_device_name(order[i]);
        if (want[0] && strcmp(name, want) != 0) continue;
        struct ibv_context *ctx = ibv_open_device(order[i]);
        if (!ctx) {
            snprintf(why, sizeof(why), "cannot open %s: %s", name, strerror(errno));
            continue;
        }
        struct ibv_device_attr da;
        struct ibv_port_attr pa;
        uint8_t port = ibv_query_device(ctx, &da) == 0 ? active_port(ctx, da.phys_port_cnt, want_port, &pa) : 0;
        if (!port) {
            snprintf(why, sizeof(why), "%s has no active port%s", name, want_port ? " by that number" : "");
            ibv_close_device(ctx);
            continue;
        }
        s->ctx = ctx;
        s->port = port;
        s->link_layer = pa.link_layer;
        s->lid = pa.lid;
        s->mtu = pa.active_mtu;
        s->max_qp_wr = (uint32_t)da.max_qp_wr;
        s->max_rd = (uint32_t)(da.max_qp_rd_atom < da.max_qp_init_rd_atom ? da.max_qp_rd_atom : da.max_qp_init_rd_atom);
        s->cq_size = da.max_cqe;
        snprintf(s->dev, sizeof(s->dev), "%s", name);
        s->software = is_software(order[i]);
    }
    ibv_free_device_list(list);
    if (s->ctx) return CCL_OK;
    if (!why[0]) snprintf(why, sizeof(why), "no RDMA device named %s (CCL_IB_HCA)", want);
    return unavailable(comm, CCL_ERR_UNSUPPORTED, why);
}

ccl_status_t ccl__ib_local_init(struct ccl_comm *comm, uint8_t blob[CCL__TRANSPORT_BLOB_BYTES]) {
    if (ccl__ib_state(comm)) return ccl__set_error(comm, CCL_ERR_INTERNAL, "ib: local_init called twice");
    struct ccl__ib_state *s = calloc(1, sizeof(*s));
    if (!s) return CCL_ERR_NO_MEMORY;
    s->nranks = comm->nranks;
    s->kick_fd = -1;
    *ccl__tstate(comm, &ccl__transport_ib) = s; /* from here on teardown frees it */
    s->conns = calloc((size_t)comm->nranks, sizeof(*s->conns));
    if (!s->conns) return CCL_ERR_NO_MEMORY;
    ccl_status_t st = open_device(comm, s);
    if (st != CCL_OK) return st;

    s->gid_index = ccl__ib_knobs(comm)->gid_index;
    if (ibv_query_gid(s->ctx, s->port, s->gid_index, &s->gid) != 0) {
        char why[160];
        snprintf(why, sizeof(why), "%s port %u has no GID at index %d (CCL_IB_GID_INDEX)", s->dev, s->port,
                 s->gid_index);
        return unavailable(comm, CCL_ERR_UNSUPPORTED, why);
    }
    static const uint8_t zero[16];
    if (s->link_layer == IBV_LINK_LAYER_ETHERNET && memcmp(s->gid.raw, zero, 16) == 0) {
        char why[160];
        snprintf(why, sizeof(why), "%s port %u: GID index %d is empty (RoCE needs one: CCL_IB_GID_INDEX)", s->dev,
                 s->port, s->gid_index);
        return unavailable(comm, CCL_ERR_UNSUPPORTED, why);
    }
    s->pd = ibv_alloc_pd(s->ctx);
    s->chan = s->pd ? ibv_create_comp_channel(s->ctx) : NULL;
    s->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!s->pd || !s->chan || s->kick_fd < 0) {
        char why[160];
        snprintf(why, sizeof(why), "%s: cannot allocate a protection domain or completion channel: %s", s->dev,
                 strerror(errno));
        return unavailable(comm, CCL_ERR_SYSTEM, why);
    }
    /* The channel's descriptor is read from inside waits: never block there. */
    int fl = fcntl(s->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(s->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return unavailable(comm, CCL_ERR_SYSTEM, "cannot make the completion channel non-blocking");

    struct ccl__ib_blob b = {.magic = CCL__IB_BLOB_MAGIC, .port = s->port, .link_layer = s->link_layer, .lid = s->lid,
                             .lanes = ccl__ib_lanes(comm)};
    memcpy(b.gid, s->gid.raw, sizeof(b.gid));
    snprintf(b.dev, sizeof(b.dev), "%s", s->dev);
    memset(blob, 0, CCL__TRANSPORT_BLOB_BYTES);
    memcpy(blob, &b, sizeof(b));
    char gid[48];
    snprintf(gid, sizeof(gid), "%02x%02x:%02x%02x:...:%02x%02x:%02x%02x", s->gid.raw[0], s->gid.raw[1],
             s->gid.raw[2], s->gid.raw[3], s->gid.raw[12], s->gid.raw[13], s->gid.raw[14], s->gid.raw[15]);
    CCL_INFO(CCL__SUB_NET, comm->rank, "ib: using %s port %u (%s%s, lid %u, GID %d %s, MTU %d; %s)", s->dev,
             s->port, s->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
             s->software ? " in software, on this machine's CPUs" : "", s->lid, s->gid_index, gid, 128 << s->mtu,
             ccl__ib_knobs(comm)->hca[0] ? "CCL_IB_HCA"
             : comm->rdma_near[0]   ? "the nearest by hwloc"
                                    : "hwloc places no RDMA device: the first active one");
    return CCL_OK;
}

ccl_status_t ccl__ib_open_cq(struct ccl_comm *comm, struct ccl__ib_state *s, int nconns) {
    if (s->cq || nconns == 0) return CCL_OK;
    /* Every send and receive request a connection can have outstanding:
     * its asking queue pair's send queue and its answering one's receive
     * queue are each 2 * slots + 3 + CCL__IB_PULL_DEPTH deep and one more
     * (see conn_new), the other two queues one each; its slot lanes
     * (lanes_new) add at most 2 * slots + 4 per lane. */
    long want = (long)nconns * (6L * comm->params.slots + 8 + 2L * CCL__IB_PULL_DEPTH + 4 + 4L * CCL__IB_MAX_LANES);
    if (want > s->cq_size) want = s->cq_size;
    s->cq = ibv_create_cq(s->ctx, (int)want, NULL, s->chan, 0);
    if (!s->cq)
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "ib: cannot create a completion queue of %ld entries on %s: %s",
                              want, s->dev, strerror(errno));
    s->cq_size = (int)want;
    return CCL_OK;
}

void ccl__ib_close_dev(struct ccl__ib_state *s) {
    if (s->cq) {
        if (s->cq_events) ibv_ack_cq_events(s->cq, s->cq_events);
        ibv_destroy_cq(s->cq);
    }
    if (s->chan) ibv_destroy_comp_channel(s->chan);
    if (s->pd) ibv_dealloc_pd(s->pd);
    if (s->ctx) ibv_close_device(s->ctx);
    if (s->kick_fd >= 0) close(s->kick_fd);
    s->cq = NULL, s->chan = NULL, s->pd = NULL, s->ctx = NULL, s->kick_fd = -1;
}
