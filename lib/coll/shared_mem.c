/*
 * ccl_mem_alloc / ccl_mem_free: memory every rank of the host maps, for
 * the zero-copy path (algo/direct.c, ccl__direct_zero_copy).
 *
 * Each rank's allocation is a memfd of its own, mapped here; at the
 * allocation the ranks trade (pid, descriptor, size) and each maps every
 * peer's through /proc/<pid>/fd/<fd>, which only a process of the same
 * user in the same PID namespace may open. Nothing is named anywhere, so
 * a rank that dies leaves nothing behind; its memory lives on while a
 * peer still maps it, so a peer reading it at that moment reads memory,
 * not a hole. A rank that cannot map a peer's allocation says so in every
 * zero-copy record from then on, and every rank runs its calls as on any
 * memory.
 *
 * A release (ccl_mem_release) is one rank's alone: the allocation is
 * marked, and each allocation's trade carries every rank's oldest
 * released serials; those every rank has released go there, the one
 * whose size fits best becoming the new allocation on every rank alike.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "coll/coll.h"
#include "core/log.h"

/* What a rank tells the others about one allocation or free. */
#define RELEASES_TRADED 8 /* a rank's oldest released allocations, per trade */
struct mem_record {
    uint64_t serial; /* which allocation (a free: 0 where the pointer was not one) */
    uint64_t bytes;  /* as asked */
    int32_t pid, fd;
    uint32_t pid_ns;
    int32_t err; /* this rank could not make its memory: errno */
    uint64_t released[RELEASES_TRADED]; /* serials this rank released, oldest first (0: no more) */
};

static size_t page_round(size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

static void unmap_all(const struct ccl_comm *comm, struct ccl__mem *m) {
    size_t len = m->mapped;
    for (int q = 0; m->peer && q < comm->nranks; q++)
        if (m->peer[q] && q != comm->rank) munmap(m->peer[q], len);
    if (m->base) munmap(m->base, len);
    if (m->fd >= 0) close(m->fd);
    free(m->peer);
    free(m);
}

/* Maps peer q's allocation (its record r) here; 0 or an errno. */
static int map_peer(const struct ccl_comm *comm, struct ccl__mem *m, int q, const struct mem_record *r) {
    const struct ccl__peer_info *me = &comm->peers[comm->rank], *p = &comm->peers[q];
    if (strcmp(me->host_id, p->host_id) != 0 || !me->pid_ns || me->pid_ns != r->pid_ns) return EXDEV;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)r->pid, (int)r->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return errno;
    void *at = mmap(NULL, m->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = at == MAP_FAILED ? errno : 0;
    close(fd);
    if (!err) m->peer[q] = at;
    return err;
}

/* The executor's side: the list changes in call order, between calls,
 * under the lock that ccl_mem_release's lookups take. */
static void list_add(struct ccl_comm *comm, void *arg) {
    struct ccl__mem *m = arg;
    pthread_mutex_lock(&comm->mem_lock);
    m->next = comm->mems;
    comm->mems = m;
    comm->nmems++;
    pthread_mutex_unlock(&comm->mem_lock);
}

static void list_remove(struct ccl_comm *comm, void *arg) {
    pthread_mutex_lock(&comm->mem_lock);
    for (struct ccl__mem **at = &comm->mems; *at; at = &(*at)->next)
        if (*at == arg) {
            *at = ((struct ccl__mem *)arg)->next;
            comm->nmems--;
            break;
        }
    pthread_mutex_unlock(&comm->mem_lock);
}

/* A reused allocation takes the new one's serial and size (the zero-copy
 * records name allocations by serial: changed between calls). */
struct renumber {
    struct ccl__mem *m;
    uint64_t serial;
    size_t bytes;
};

static void renumber(struct ccl_comm *comm, void *arg) {
    struct renumber *r = arg;
    pthread_mutex_lock(&comm->mem_lock);
    r->m->serial = r->serial, r->m->bytes = r->bytes, r->m->released = 0;
    pthread_mutex_unlock(&comm->mem_lock);
}

/* This rank's oldest released allocations, for its record. */
static void my_releases(struct ccl_comm *comm, uint64_t out[RELEASES_TRADED]) {
    memset(out, 0, sizeof(uint64_t) * RELEASES_TRADED);
    pthread_mutex_lock(&comm->mem_lock);
    for (const struct ccl__mem *m = comm->mems; m; m = m->next) {
        if (!m->released) continue;
        /* keep the RELEASES_TRADED smallest serials, sorted */
        uint64_t s = m->serial;
        for (int i = 0; i < RELEASES_TRADED && s; i++)
            if (!out[i] || s < out[i]) {
                uint64_t t = out[i];
                out[i] = s, s = t;
            }
    }
    pthread_mutex_unlock(&comm->mem_lock);
}

/* Released on every rank (in every record). */
static int released_everywhere(const struct mem_record *all, int n, uint64_t serial) {
    for (int q = 0; q < n; q++) {
        int found = 0;
        for (int i = 0; i < RELEASES_TRADED && !found; i++) found = all[q].released[i] == serial;
        if (!found) return 0;
    }
    return 1;
}

/* Frees what every rank released, but for the allocation reused for
 * `bytes` (returned; NULL: none fits): the smallest mapping that holds
 * them and is at most twice what they need, the oldest of equals. Every
 * rank has the same records and mappings of the same sizes, so every
 * rank reuses and frees the same ones. */
static struct ccl__mem *reclaim(struct ccl_comm *comm, const struct mem_record *all, size_t bytes) {
    int n = comm->nranks;
    size_t need = page_round(bytes);
    struct ccl__mem *reuse = NULL;
    for (int i = 0; i < RELEASES_TRADED && all[0].released[i]; i++) {
        struct ccl__mem *m = released_everywhere(all, n, all[0].released[i])
                                 ? ccl__mem_by_serial(comm, all[0].released[i])
                                 : NULL;
        if (m && m->mapped >= need && m->mapped / 2 <= need &&
            (!reuse || m->mapped < reuse->mapped || (m->mapped == reuse->mapped && m->serial < reuse->serial)))
            reuse = m;
    }
    for (int i = 0; i < RELEASES_TRADED && all[0].released[i]; i++) {
        if (!released_everywhere(all, n, all[0].released[i])) continue;
        struct ccl__mem *m = ccl__mem_by_serial(comm, all[0].released[i]);
        if (!m || m == reuse) continue;
        ccl__exec_call(comm, list_remove, m);
        unmap_all(comm, m);
    }
    return reuse;
}

/* This rank's memory: a memfd mapped here (err: why not). */
static struct ccl__mem *make_own(struct ccl_comm *comm, size_t bytes, uint64_t serial, int *err) {
    struct ccl__mem *m = calloc(1, sizeof(*m));
    if (m) m->peer = calloc((size_t)comm->nranks, sizeof(*m->peer));
    if (!m || !m->peer) {
        free(m);
        *err = ENOMEM;
        return NULL;
    }
    m->serial = serial;
    m->bytes = bytes;
    m->mapped = page_round(bytes);
    m->fd = memfd_create("ccl-mem", MFD_CLOEXEC);
    *err = m->fd < 0 ? errno : ftruncate(m->fd, (off_t)m->mapped) != 0 ? errno : 0;
    if (!*err) {
        void *at = mmap(NULL, m->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
        if (at == MAP_FAILED) *err = errno;
        else m->base = at;
    }
    if (*err) {
        unmap_all(comm, m);
        return NULL;
    }
    m->peer[comm->rank] = m->base;
    return m;
}

/* A collective API call that trades records through the executor: not
 * inside a group, whose end would be where the trade ran. */
static ccl_status_t usable(struct ccl_comm *comm, const char *what) {
    CCL_CHECK(ccl__check_comm(comm, what));
    if (ccl__group_open())
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "%s: not inside a group (it is collective, and runs at once)", what);
    return ccl__comm_health(comm);
}

CCL_API ccl_status_t ccl_mem_alloc(ccl_comm_t *comm, size_t bytes, void **ptr) {
    const char *what = "mem_alloc";
    CCL_CHECK(usable(comm, what));
    if (ptr) *ptr = NULL;
    /* Bad arguments still join the trade, saying so: every rank fails
     * alike, none waits for a rank that left. */
    int n = comm->nranks, err = !ptr || bytes == 0 || bytes > ((size_t)1 << 48) ? EINVAL : 0;
    uint64_t serial = comm->mem_serial + 1;
    struct ccl__mem *m = err ? NULL : make_own(comm, bytes, serial, &err);
    struct mem_record mine = {.serial = serial, .bytes = bytes, .pid = getpid(), .fd = m ? m->fd : -1,
                              .pid_ns = comm->peers[comm->rank].pid_ns, .err = err};
    my_releases(comm, mine.released);
    struct mem_record *all = calloc((size_t)n, sizeof(*all));
    ccl_status_t st = all ? ccl__own_all_gather(&mine, all, sizeof mine, comm, what)
                          : ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory", what);
    /* Every rank reaches the same verdict from the same records. */
    if (st == CCL_OK && err == EINVAL)
        st = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: %s", what,
                            !ptr ? "ptr is NULL" : "bytes must be 1 to 2^48");
    for (int q = 0; q < n && st == CCL_OK; q++) {
        if (all[q].bytes != all[0].bytes || all[q].serial != all[0].serial)
            st = ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                "%s: the ranks disagree: rank 0 allocates %llu bytes (its allocation #%llu), rank %d "
                                "%llu bytes (#%llu); nothing was allocated",
                                what, (unsigned long long)all[0].bytes, (unsigned long long)all[0].serial, q,
                                (unsigned long long)all[q].bytes, (unsigned long long)all[q].serial);
        else if (all[q].err == EINVAL)
            st = ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: rank %d was called with bad arguments; nothing was "
                                "allocated", what, q);
        else if (all[q].err)
            st = ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: rank %d could not make %llu bytes of shared memory (%s)",
                                what, q, (unsigned long long)all[q].bytes, strerror(all[q].err));
    }
    if (st != CCL_OK) {
        if (m) unmap_all(comm, m);
        free(all);
        return st;
    }
    comm->mem_serial = serial;
    struct ccl__mem *reused = reclaim(comm, all, bytes);
    if (reused) {
        /* every peer's is mapped here already */
        unmap_all(comm, m);
        struct renumber r = {reused, serial, bytes};
        ccl__exec_call(comm, renumber, &r);
        memset(reused->base, 0, bytes);
        free(all);
        *ptr = reused->base;
        return CCL_OK;
    }
    /* The peers' memory, where this process can reach it (one host, one
     * PID namespace; the direct path's windows say the ranks share
     * memory at all). */
    int reach = comm->windows != NULL;
    for (int q = 0; q < n && reach; q++) {
        if (q == comm->rank) continue;
        int e = map_peer(comm, m, q, &all[q]);
        if (e) {
            CCL_INFO(CCL__SUB_COLL, comm->rank,
                     "%s: rank %d's allocation cannot be mapped here (%s): calls on shared allocations of this "
                     "communicator run as on any memory",
                     what, q, e == EXDEV ? "another host or PID namespace" : strerror(e));
            reach = 0;
        }
    }
    m->shared = reach;
    free(all);
    ccl__exec_call(comm, list_add, m);
    *ptr = m->base;
    return CCL_OK;
}

CCL_API ccl_status_t ccl_mem_free(ccl_comm_t *comm, void *ptr) {
    const char *what = "mem_free";
    if (!ptr) return comm ? ccl__check_comm(comm, what) : CCL_ERR_INVALID_ARGUMENT;
    CCL_CHECK(usable(comm, what));
    pthread_mutex_lock(&comm->mem_lock);
    struct ccl__mem *m = ccl__mem_holding(comm, ptr, 0);
    if (m && (m->base != ptr || m->released)) m = NULL; /* inside an allocation, not its start; or let go of */
    pthread_mutex_unlock(&comm->mem_lock);
    /* The trade orders the free after every call issued before it (the
     * executor runs in issue order), and tells every rank which rank
     * named no allocation, or another one. */
    int n = comm->nranks;
    struct mem_record mine = {.serial = m ? m->serial : 0}, *all = calloc((size_t)n, sizeof(*all));
    ccl_status_t st = all ? ccl__own_all_gather(&mine, all, sizeof mine, comm, what)
                          : ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory", what);
    if (st == CCL_OK && !m)
        st = ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                            "%s: %p is no allocation of ccl_mem_alloc on this communicator (freed or released "
                            "already, or never allocated); nothing was freed", what, ptr);
    for (int q = 0; q < n && st == CCL_OK; q++) {
        if (!all[q].serial)
            st = ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                "%s: rank %d's pointer is no allocation of ccl_mem_alloc on this communicator (freed "
                                "already, or never allocated); nothing was freed", what, q);
        else if (all[q].serial != all[0].serial)
            st = ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                "%s: the ranks disagree: rank 0 frees its allocation #%llu, rank %d #%llu; allocations "
                                "are freed in the same order everywhere; nothing was freed",
                                what, (unsigned long long)all[0].serial, q, (unsigned long long)all[q].serial);
    }
    free(all);
    if (st != CCL_OK) return st;
    ccl__exec_call(comm, list_remove, m);
    unmap_all(comm, m);
    return CCL_OK;
}

CCL_API ccl_status_t ccl_mem_release(ccl_comm_t *comm, void *ptr) {
    const char *what = "mem_release";
    CCL_CHECK(ccl__check_comm(comm, what)); /* a failed communicator too: its memory goes at its destroy */
    if (!ptr) return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: ptr is NULL", what);
    pthread_mutex_lock(&comm->mem_lock);
    struct ccl__mem *m = ccl__mem_holding(comm, ptr, 0);
    int ok = m && m->base == ptr && !m->released;
    if (ok) m->released = 1;
    pthread_mutex_unlock(&comm->mem_lock);
    if (!ok)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "%s: %p is no allocation of ccl_mem_alloc on this communicator (%s)", what, ptr,
                              m && m->base == ptr ? "released already" : "freed already, or never allocated");
    return CCL_OK;
}

void ccl__mem_free_all(struct ccl_comm *comm) {
    while (comm->mems) {
        struct ccl__mem *m = comm->mems;
        comm->mems = m->next;
        unmap_all(comm, m);
    }
    comm->nmems = 0;
}
