/* The shared-memory transport's set-up, teardown and poison (see shm.h for
 * the segment layout). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/log.h"
#include "transports/shm/shm.h"

#define SHM_MAGIC 0x31306d68736c6363ull /* "cclshm01" in memory */
#define SHM_PAGE CCL__SHM_PAGE
#define SHM_RANDOM_BYTES 16
#define SHM_ORPHAN_AGE_S 60 /* an unlocked name without a header this old is an orphan */

struct shm_header {
    uint64_t magic;
    uint64_t comm_id;
    uint8_t secret[CCL__SECRET_BYTES];
    int32_t owner;
    int32_t nranks;
    uint32_t slots;
    uint32_t liveness_lock; /* 1: the owner holds the lock peers probe */
    uint64_t slot_bytes;
    uint64_t bytes; /* the whole segment */
    uint64_t window_offset; /* the direct path's window (0: none) */
    uint64_t window_bytes;
    struct ccl__wake_words wake;
    uint64_t fifo_offset[]; /* [nranks] */
};

/* A peer's segment as mapped here. `wake` is published last (release) so
 * that poison, which may run on another thread, sees a complete mapping. */
struct shm_peer_map {
    void *base;
    size_t bytes;
    int fd;
    uint8_t *send_fifo; /* our FIFO to that peer, inside its segment */
    uint8_t *window;    /* its direct-path window, NULL if none */
    size_t window_bytes;
    _Atomic(struct ccl__wake_words *) wake;
};

struct shm_state {
    char name[CCL__TRANSPORT_BLOB_BYTES];
    int fd;    /* our segment; holds the lock that tells peers we are alive */
    int named; /* our name exists in /dev/shm: unlink it at teardown */
    int unnamed; /* made with O_TMPFILE: named once complete (name_segment) */
    struct shm_header *hdr;
    size_t bytes;
    struct shm_peer_map *peers;   /* [nranks] */
    struct ccl__shm_conn **conns; /* [nranks], owned here */
};

static size_t align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

static size_t header_bytes(int nranks) {
    return align_up(sizeof(struct shm_header) + (size_t)nranks * sizeof(uint64_t), SHM_PAGE);
}

static size_t meta_area_bytes(uint32_t depth) {
    return align_up(sizeof(struct ccl__shm_fifo_ctrl) + (size_t)depth * sizeof(struct ccl__shm_meta_line), SHM_PAGE);
}

static size_t hot_stride(uint64_t slot_bytes) {
    size_t slot = ccl__shm_line_up((size_t)slot_bytes);
    return slot < CCL__SHM_HOT_BYTES ? slot : CCL__SHM_HOT_BYTES;
}

/* The data area of one FIFO (shm.h): depth hot slots, then depth + 1 slots
 * of ring; 0 if the geometry overflows. */
static size_t fifo_data_bytes(uint32_t depth, uint64_t slot_bytes) {
    size_t ring, hot = (size_t)depth * hot_stride(slot_bytes);
    if (__builtin_mul_overflow((size_t)depth + 1, ccl__shm_line_up((size_t)slot_bytes), &ring) || ring > SIZE_MAX - hot)
        return 0;
    return hot + ring;
}

/* Bytes of one FIFO, 0 if the geometry overflows. */
static size_t fifo_bytes(uint32_t depth, uint64_t slot_bytes) {
    if (slot_bytes > UINT32_MAX || depth > CCL__SHM_MAX_DEPTH) return 0;
    size_t data = fifo_data_bytes(depth, slot_bytes);
    if (data == 0) return 0;
    size_t total = meta_area_bytes(depth) + data;
    if (total < data || total > SIZE_MAX - SHM_PAGE) return 0;
    return align_up(total, SHM_PAGE);
}

static void end_init(struct ccl__shm_end *e, uint8_t *fifo, uint32_t depth, uint64_t slot_bytes) {
    memset(e, 0, sizeof(*e));
    e->ctrl = (struct ccl__shm_fifo_ctrl *)fifo;
    e->meta = (struct ccl__shm_meta_line *)(fifo + sizeof(struct ccl__shm_fifo_ctrl));
    e->data = fifo + meta_area_bytes(depth);
    e->data_bytes = fifo_data_bytes(depth, slot_bytes);
    e->hot_stride = hot_stride(slot_bytes);
    e->ring_at = (size_t)depth * e->hot_stride;
    e->stride = ccl__shm_line_up((size_t)slot_bytes);
    e->span = e->data_bytes - e->ring_at;
    e->depth = depth;
}

static ccl_status_t sys_error(struct ccl_comm *comm, const char *what, const char *name) {
    int err = errno;
    return ccl__set_error(comm, err == ENOMEM ? CCL_ERR_NO_MEMORY : CCL_ERR_SYSTEM, "shm: %s %s: %s", what, name,
                          strerror(err));
}

int ccl__shm_reserve(int fd, uint64_t off, uint64_t len) {
    int err = posix_fallocate(fd, (off_t)off, (off_t)len);
    return err == EINVAL ? EOPNOTSUPP : err;
}

/* Reserves [off, off + len) of our segment at set-up: a full /dev/shm
 * fails here with a message, not later with SIGBUS in a collective. */
static ccl_status_t reserve_at_setup(struct ccl_comm *comm, struct shm_state *st, size_t off, size_t len) {
    int err = ccl__shm_reserve(st->fd, off, len);
    if (err == ENOSPC)
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY,
                              "shm: /dev/shm has no room for %zu bytes of this rank's segment; enlarge /dev/shm or "
                              "lower CCL_SHM_WINDOW_BYTES", len);
    if (err != 0 && err != EOPNOTSUPP) {
        errno = err;
        return sys_error(comm, "posix_fallocate", st->name);
    }
    return CCL_OK;
}

/* What set-up reserves: the header, every FIFO's counters and metas, the
 * window. What it does not: the FIFOs' data, whose pages a sender reserves
 * when it first writes them (shm.c), so a host's /dev/shm holds what its
 * pairs move, not every pair's whole pipeline (the square of the local rank
 * count). */
static ccl_status_t reserve_fixed_parts(struct ccl_comm *comm, struct shm_state *st) {
    const struct shm_header *h = st->hdr;
    CCL_CHECK(reserve_at_setup(comm, st, 0, header_bytes(comm->nranks)));
    size_t meta = meta_area_bytes(h->slots);
    for (int p = 0; p < comm->nranks; p++)
        if (h->fifo_offset[p]) CCL_CHECK(reserve_at_setup(comm, st, (size_t)h->fifo_offset[p], meta));
    if (h->window_offset) CCL_CHECK(reserve_at_setup(comm, st, (size_t)h->window_offset, (size_t)h->window_bytes));
    return CCL_OK;
}

/* If every pair of the host's ranks streamed at once, their FIFOs' data
 * would take `worst` bytes: said once per host (by its lowest rank) when
 * that is more than /dev/shm has free. */
static void warn_if_host_may_not_fit(struct ccl_comm *comm, const struct shm_header *h, const uint8_t *use) {
    int local = 1, first = 1;
    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank || !use[p]) continue;
        local++;
        if (p < comm->rank) first = 0;
    }
    struct statvfs sv;
    double worst = (double)local * (double)(local - 1) * (double)fifo_data_bytes(h->slots, h->slot_bytes);
    if (first && statvfs("/dev/shm", &sv) == 0 && worst > (double)sv.f_bavail * (double)sv.f_frsize)
        CCL_WARN(CCL__SUB_SHM, comm->rank,
                 "shm: %d ranks on this host: if every pair of them streamed at once their FIFOs would need "
                 "%.1f MiB of /dev/shm, which has %.1f MiB free; pages are taken as pairs first use them, and a "
                 "rank that finds /dev/shm full fails with CCL_ERR_NO_MEMORY (lower CCL_SLOTS or "
                 "CCL_SHM_SLOT_BYTES, or enlarge /dev/shm)",
                 local, worst / (1 << 20), (double)sv.f_bavail * (double)sv.f_frsize / (1 << 20));
}

/* Hold a lock for as long as this process lives: a peer that finds it free
 * knows we are gone, even while we are an unreaped zombie or our pid has
 * been reused. Best effort: without it peers still have kill(pid, 0). */
static int hold_liveness_lock(struct ccl_comm *comm, int fd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return 1;
    CCL_INFO(CCL__SUB_SHM, comm->rank, "shm: no liveness lock (%s); peers rely on the pid", strerror(errno));
    return 0;
}

int ccl__shm_lock_free(int fd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    return fd >= 0 && fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK;
}

/* A name in /dev/shm lives only during set-up. One whose creator is gone
 * (its liveness lock, which the header says it took, is free) was left by
 * a job whose every rank on this host died in set-up, so nobody removed
 * it: the next set-up here removes it. Only this user's names with our
 * prefix are looked at; a live creator, in any namespace, holds its lock. */
static void sweep_orphans(struct ccl_comm *comm, const char *prefix) {
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    size_t plen = strlen(prefix);
    char name[300];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, prefix, plen) != 0 || e->d_name[plen] != '-') continue;
        snprintf(name, sizeof(name), "/%s", e->d_name);
        int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
        if (fd < 0) continue;
        struct stat sb = {0};
        struct shm_header h;
        /* Creators lock at once after creating; one that died before it
         * wrote its header is judged by age instead. */
        int header = fstat(fd, &sb) == 0 && pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.liveness_lock == 1;
        int old = time(NULL) - sb.st_ctime > SHM_ORPHAN_AGE_S;
        if (sb.st_uid == geteuid() && (header || old) && ccl__shm_lock_free(fd) && shm_unlink(name) == 0)
            CCL_INFO(CCL__SUB_SHM, comm->rank, "shm: removed %s, left by a set-up whose ranks all died", name);
        close(fd);
    }
    closedir(d);
}

ccl_status_t ccl__shm_local_init(struct ccl_comm *comm, uint8_t blob[CCL__TRANSPORT_BLOB_BYTES]) {
    const char *prefix = ccl__shm_knobs(comm)->prefix[0] ? ccl__shm_knobs(comm)->prefix : "ccl";
    if (strchr(prefix, '/'))
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "shm: CCL_SHM_PREFIX \"%s\" must not contain '/'", prefix);
    sweep_orphans(comm, prefix);

    uint8_t rnd[SHM_RANDOM_BYTES];
    size_t got = 0;
    while (got < sizeof(rnd)) {
        ssize_t n = getrandom(rnd + got, sizeof(rnd) - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return sys_error(comm, "getrandom for", "a segment name");
        got += (size_t)n;
    }

    if (*ccl__tstate(comm, &ccl__transport_shm))
        return ccl__set_error(comm, CCL_ERR_INTERNAL, "shm: local_init called twice");
    struct shm_state *st = calloc(1, sizeof(*st));
    if (!st) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "shm: out of memory");
    st->fd = -1;
    int len = snprintf(st->name, sizeof(st->name), "/%s-", prefix);
    for (size_t i = 0; i < sizeof(rnd); i++)
        len += snprintf(st->name + len, sizeof(st->name) - (size_t)len, "%02x", rnd[i]);
    *ccl__tstate(comm, &ccl__transport_shm) = st;

    memset(blob, 0, CCL__TRANSPORT_BLOB_BYTES);
    memcpy(blob, st->name, (size_t)len + 1);
    return CCL_OK;
}

/* The segment is made without a name (O_TMPFILE on /dev/shm) and named
 * only once its header is written and its liveness lock held, so a rank
 * killed while making it leaves nothing behind, and every name in /dev/shm
 * is either live (its lock held) or swept by the next set-up at once. Where
 * /dev/shm or /proc cannot do that, the name comes first, as shm_open makes
 * it, and a creator that dies before its header is swept by age. */
static int open_unnamed(void) {
    if (access("/proc/self/fd", X_OK) != 0) return -1;
    return open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

static ccl_status_t name_segment(struct ccl_comm *comm, struct shm_state *st) {
    if (!st->unnamed) return CCL_OK;
    char from[48], to[sizeof st->name + 16];
    snprintf(from, sizeof from, "/proc/self/fd/%d", st->fd);
    snprintf(to, sizeof to, "/dev/shm%s", st->name);
    if (linkat(AT_FDCWD, from, AT_FDCWD, to, AT_SYMLINK_FOLLOW) != 0)
        return sys_error(comm, "cannot name segment", st->name);
    st->unnamed = 0;
    st->named = 1;
    return CCL_OK;
}

static ccl_status_t create_segment(struct ccl_comm *comm, struct shm_state *st, size_t bytes) {
    st->fd = open_unnamed();
    if (st->fd >= 0) {
        st->unnamed = 1;
    } else {
        st->fd = shm_open(st->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        if (st->fd < 0) return sys_error(comm, "cannot create segment", st->name);
        st->named = 1;
    }
    int locked = hold_liveness_lock(comm, st->fd); /* at once: a name with a free lock is an orphan */
    ccl__test_fault_point(comm, "segment");
    /* 0600 whatever the umask: only this user's processes may attach. */
    if (fchmod(st->fd, 0600) != 0) return sys_error(comm, "fchmod", st->name);
    /* The file stays sparse: shm_setup reserves the pages every pair needs
     * from the start, the FIFOs' data areas are reserved as they are used. */
    if (ftruncate(st->fd, (off_t)bytes) != 0) return sys_error(comm, "ftruncate", st->name);
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, st->fd, 0);
    if (base == MAP_FAILED) return sys_error(comm, "mmap", st->name);
    st->hdr = base;
    st->bytes = bytes;
    st->hdr->liveness_lock = (uint32_t)locked;
    return CCL_OK;
}

ccl_status_t ccl__shm_setup(struct ccl_comm *comm, const uint8_t *use) {
    struct shm_state *st = *ccl__tstate(comm, &ccl__transport_shm);
    if (!st || st->peers) return ccl__set_error(comm, CCL_ERR_INTERNAL, "shm: setup out of order");
    int n = comm->nranks;
    if (comm->params.slots < 1 || ccl__shm_knobs(comm)->slot_bytes < 1 || ccl__shm_knobs(comm)->slot_bytes > UINT32_MAX)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "shm: bad geometry: CCL_SLOTS=%d CCL_SHM_SLOT_BYTES=%zu",
                              comm->params.slots, ccl__shm_knobs(comm)->slot_bytes);
    uint32_t depth = (uint32_t)comm->params.slots;
    uint64_t slot_bytes = ccl__shm_knobs(comm)->slot_bytes;
    size_t one_fifo = fifo_bytes(depth, slot_bytes);

    st->peers = calloc((size_t)n, sizeof(*st->peers));
    st->conns = calloc((size_t)n, sizeof(*st->conns));
    if (!st->peers || !st->conns) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "shm: out of memory");
    for (int p = 0; p < n; p++) st->peers[p].fd = -1;

    size_t bytes = header_bytes(n);
    int nfifos = 0;
    for (int p = 0; p < n; p++) nfifos += p != comm->rank && use[p];
    /* Serving nobody, a rank needs no segment (nor a usable /dev/shm). */
    if (nfifos == 0) return CCL_OK;
    if (one_fifo == 0 || one_fifo > (SIZE_MAX - bytes) / (size_t)nfifos)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "shm: %d FIFOs of %u x %llu bytes do not fit in memory",
                              nfifos, depth, (unsigned long long)slot_bytes);
    bytes += (size_t)nfifos * one_fifo;
    /* The window goes last, after the FIFOs, on its own pages. */
    size_t window_offset = bytes, window = ccl__shm_knobs(comm)->window_bytes;
    if (window > SIZE_MAX - bytes)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "shm: CCL_SHM_WINDOW_BYTES=%zu does not fit in memory",
                              window);
    bytes += window;

    ccl_status_t s = create_segment(comm, st, bytes);
    if (s != CCL_OK) return s;

    struct shm_header *h = st->hdr;
    h->comm_id = comm->comm_id;
    memcpy(h->secret, comm->secret, sizeof(h->secret));
    h->owner = comm->rank;
    h->nranks = n;
    h->slots = depth;
    h->slot_bytes = slot_bytes;
    h->bytes = bytes;
    h->window_offset = window ? window_offset : 0;
    h->window_bytes = window;
    size_t off = header_bytes(n);
    for (int p = 0; p < n; p++) {
        h->fifo_offset[p] = (p != comm->rank && use[p]) ? off : 0;
        if (h->fifo_offset[p]) off += one_fifo;
    }
    h->magic = SHM_MAGIC;
    s = reserve_fixed_parts(comm, st);
    if (s != CCL_OK) return s;
    warn_if_host_may_not_fit(comm, h, use);
    s = name_segment(comm, st);
    if (s != CCL_OK) return s;
    CCL_INFO(CCL__SUB_SHM, comm->rank, "shm: segment %s, %zu bytes, %d FIFOs of %u x %llu bytes", st->name, bytes,
             nfifos, depth, (unsigned long long)slot_bytes);
    return CCL_OK;
}

/* Rank p's segment name from its record, or NULL when it is not one (not
 * terminated, not "/name", or with a directory in it). */
static const char *peer_segment_name(struct ccl_comm *comm, int p) {
    const char *name = (const char *)ccl__peer_blob(comm, p, &ccl__transport_shm);
    return memchr(name, '\0', CCL__TRANSPORT_BLOB_BYTES) && name[0] == '/' && !strchr(name + 1, '/') ? name : NULL;
}

/* Open and check rank p's segment; fills st->peers[p]. */
static ccl_status_t attach_peer(struct ccl_comm *comm, struct shm_state *st, int p) {
    const char *blob = peer_segment_name(comm, p);
    if (!blob) return ccl__set_error(comm, CCL_ERR_REMOTE, "shm: rank %d sent a malformed segment name", p);
    struct shm_peer_map *pm = &st->peers[p];
    pm->fd = shm_open(blob, O_RDWR | O_CLOEXEC, 0);
    if (pm->fd < 0) {
        if (errno == ENOENT)
            return ccl__set_error(comm, CCL_ERR_REMOTE,
                                  "shm: rank %d's segment %s does not exist (did its set-up fail?)", p, blob);
        return sys_error(comm, "cannot open rank's segment", blob);
    }
    struct stat sb;
    if (fstat(pm->fd, &sb) != 0) return sys_error(comm, "fstat", blob);
    size_t min = header_bytes(comm->nranks);
    if (sb.st_size < (off_t)min)
        return ccl__set_error(comm, CCL_ERR_REMOTE, "shm: rank %d's segment %s is too small (%lld bytes)", p, blob,
                              (long long)sb.st_size);
    void *base = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, pm->fd, 0);
    if (base == MAP_FAILED) return sys_error(comm, "mmap", blob);
    pm->base = base;
    pm->bytes = (size_t)sb.st_size;

    const struct shm_header *h = base;
    if (h->magic != SHM_MAGIC || h->bytes != pm->bytes || h->owner != p)
        return ccl__set_error(comm, CCL_ERR_REMOTE, "shm: %s is not rank %d's segment (bad header)", blob, p);
    if (h->comm_id != comm->comm_id || h->nranks != comm->nranks ||
        !ccl__secret_equal(h->secret, comm->secret, sizeof(h->secret)))
        return ccl__set_error(comm, CCL_ERR_REMOTE, "shm: rank %d's segment %s belongs to another communicator", p,
                              blob);
    if (h->slots != (uint32_t)comm->params.slots || h->slot_bytes != ccl__shm_knobs(comm)->slot_bytes)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "shm: rank %d uses CCL_SLOTS=%u CCL_SHM_SLOT_BYTES=%llu but rank %d uses %d and %zu; "
                              "set them alike on every rank",
                              p, h->slots, (unsigned long long)h->slot_bytes, comm->rank, comm->params.slots,
                              ccl__shm_knobs(comm)->slot_bytes);
    uint64_t off = h->fifo_offset[comm->rank];
    if (off == 0)
        return ccl__set_error(comm, CCL_ERR_INTERNAL,
                              "shm: rank %d has no FIFO for rank %d (the ranks disagree on which peers use shm)", p,
                              comm->rank);
    size_t one_fifo = fifo_bytes(h->slots, h->slot_bytes);
    if (off % SHM_PAGE || off > pm->bytes || pm->bytes - off < one_fifo)
        return ccl__set_error(comm, CCL_ERR_REMOTE, "shm: rank %d's segment %s has a corrupt FIFO table", p, blob);
    pm->send_fifo = (uint8_t *)base + off;
    if (h->window_offset) {
        if (h->window_offset % SHM_PAGE || h->window_offset > pm->bytes || pm->bytes - h->window_offset < h->window_bytes)
            return ccl__set_error(comm, CCL_ERR_REMOTE, "shm: rank %d's segment %s has a corrupt window", p, blob);
        pm->window = (uint8_t *)base + h->window_offset;
        pm->window_bytes = (size_t)h->window_bytes;
    }
    atomic_store_explicit(&pm->wake, (struct ccl__wake_words *)&((struct shm_header *)base)->wake,
                          memory_order_release);
    return CCL_OK;
}

ccl_status_t ccl__shm_connect(struct ccl_comm *comm, const uint8_t *use, struct ccl__conn **conns) {
    struct shm_state *st = *ccl__tstate(comm, &ccl__transport_shm);
    if (!st || !st->peers) return ccl__set_error(comm, CCL_ERR_INTERNAL, "shm: connect before setup");
    uint32_t depth = (uint32_t)comm->params.slots;
    uint64_t slot_bytes = ccl__shm_knobs(comm)->slot_bytes;
    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank || !use[p]) continue;
        if (!st->hdr || st->hdr->fifo_offset[p] == 0)
            return ccl__set_error(comm, CCL_ERR_INTERNAL, "shm: connect to rank %d, which setup did not include", p);
        ccl_status_t s = attach_peer(comm, st, p);
        if (s != CCL_OK) return s;
        struct ccl__shm_conn *c = calloc(1, sizeof(*c));
        if (!c) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "shm: out of memory");
        st->conns[p] = c;
        struct shm_header *ph = st->peers[p].base;
        c->base.t = &ccl__transport_shm;
        c->base.comm = comm;
        c->base.peer = p;
        c->base.slot_bytes = (size_t)slot_bytes;
        end_init(&c->send, st->peers[p].send_fifo, depth, slot_bytes);
        c->send.spread = comm->own_core; /* every peer is on another core (shm.h) */
        c->send.fd = st->peers[p].fd;
        c->send.file_at = (uint64_t)(c->send.data - (uint8_t *)st->peers[p].base);
        c->send.pages_left = (c->send.data_bytes + CCL__SHM_PAGE - 1) / CCL__SHM_PAGE;
        c->send.reserved = calloc((c->send.pages_left + 63) / 64, sizeof(uint64_t));
        if (!c->send.reserved) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "shm: out of memory");
        end_init(&c->recv, (uint8_t *)st->hdr + st->hdr->fifo_offset[p], depth, slot_bytes);
        c->peer_wake = &ph->wake;
        /* Probe only a lock the owner took: a free lock must mean "gone". */
        c->peer_fd = ph->liveness_lock == 1 ? st->peers[p].fd : -1;
    }
    /* Hand out connections only once all succeeded; they stay owned here. */
    for (int p = 0; p < comm->nranks; p++)
        if (st->conns[p]) conns[p] = &st->conns[p]->base;
    return CCL_OK;
}

ccl_status_t ccl__shm_setup_done(struct ccl_comm *comm) {
    struct shm_state *st = *ccl__tstate(comm, &ccl__transport_shm);
    if (!st || !st->named) return CCL_OK;
    st->named = 0;
    if (shm_unlink(st->name) != 0) {
        if (errno == ENOENT) {
            CCL_WARN(CCL__SUB_SHM, comm->rank, "shm: segment %s was removed by someone else", st->name);
            return CCL_OK;
        }
        return sys_error(comm, "shm_unlink", st->name);
    }
    return CCL_OK;
}

struct ccl__wake_words *ccl__shm_shared_wake(struct ccl_comm *comm) {
    struct shm_state *st = *ccl__tstate(comm, &ccl__transport_shm);
    return st && st->hdr ? &st->hdr->wake : NULL;
}

void *ccl__shm_window(struct ccl_comm *comm, int rank, size_t *bytes) {
    struct shm_state *st = *ccl__tstate(comm, &ccl__transport_shm);
    if (!st || !st->peers || rank < 0 || rank >= comm->nranks) return NULL;
    if (rank == comm->rank) {
        if (!st->hdr || !st->hdr->window_offset) return NULL;
        *bytes = (size_t)st->hdr->window_bytes;
        return (uint8_t *)st->hdr + st->hdr->window_offset;
    }
    *bytes = st->peers[rank].window_bytes;
    return st->peers[rank].window;
}

void ccl__shm_poison(struct ccl_comm *comm, int status) {
    struct shm_state *st = *ccl__tstate(comm, &ccl__transport_shm);
    if (!st || !st->peers) return;
    /* The peers hear who failed first, not only that this rank did. */
    int32_t blamed = atomic_load(&comm->culprit);
    int culprit = blamed ? blamed - 1 : comm->rank;
    enum ccl__culprit_cause cause = blamed ? (enum ccl__culprit_cause)atomic_load(&comm->culprit_cause) : CCL__CULPRIT_FAILED;
    for (int p = 0; p < comm->nranks; p++) {
        struct ccl__wake_words *w = atomic_load_explicit(&st->peers[p].wake, memory_order_acquire);
        if (w) ccl__wake_fail(w, culprit, comm->rank, status, cause);
    }
}

/* Set-up failed, perhaps because a peer died between creating its segment
 * and removing its name at the end of set-up: its name would stay in
 * /dev/shm for good. Every survivor removes every peer's name it was told
 * (a name already gone is fine); the segments themselves go with their
 * last mapping. */
static void remove_peer_names(struct ccl_comm *comm, const struct shm_state *st) {
    if (!comm->blobs || !comm->peers) return;
    size_t plen = strlen(ccl__shm_knobs(comm)->prefix);
    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank) continue;
        const char *name = peer_segment_name(comm, p);
        /* Only names this transport makes: "/<prefix>-<hex>" */
        if (!name || strncmp(name + 1, ccl__shm_knobs(comm)->prefix, plen) != 0 || name[1 + plen] != '-' ||
            strcmp(name, st->name) == 0)
            continue;
        if (shm_unlink(name) == 0)
            CCL_INFO(CCL__SUB_SHM, comm->rank, "shm: removed rank %d's segment name %s after a failed set-up", p, name);
    }
}

void ccl__shm_teardown(struct ccl_comm *comm) {
    struct shm_state *st = *ccl__tstate(comm, &ccl__transport_shm);
    if (!st) return;
    if (st->peers)
        for (int p = 0; p < comm->nranks; p++) {
            struct shm_peer_map *pm = &st->peers[p];
            if (st->conns && st->conns[p]) {
                free(st->conns[p]->send.reserved);
                free(st->conns[p]);
            }
            atomic_store(&pm->wake, NULL);
            if (pm->base) munmap(pm->base, pm->bytes);
            if (pm->fd >= 0) close(pm->fd);
        }
    if (st->hdr) munmap(st->hdr, st->bytes);
    if (st->fd >= 0) close(st->fd);
    if (st->named && shm_unlink(st->name) != 0 && errno != ENOENT)
        CCL_WARN(CCL__SUB_SHM, comm->rank, "shm: cannot remove %s: %s", st->name, strerror(errno));
    if (!comm->set_up) remove_peer_names(comm, st);
    free(st->peers);
    free(st->conns);
    free(st);
    *ccl__tstate(comm, &ccl__transport_shm) = NULL;
}
